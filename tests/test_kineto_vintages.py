"""Every Kineto vintage and vendor: categories matched in any letter case, and device events of kinds traceparse does
not analyze said in load_issues with their counts, never taken for a CPU-only run (docs/loading.md, Category names).
Each trace is written at test time: tiny hand-made ones, and copies of a bundled run and of a public trace rewritten
to another spelling or with their device activities deleted (nothing derived from a public trace is kept)."""

import gzip
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import FIXTURE_RUNS, public_trace
from test_old_formats import ALEXNET, same_analysis
from traces import step, thread_name, trace, write, x

from traceparse.document import analyze
from traceparse.ingest.categories import LAUNCH_NAMES
from traceparse.ingest.columns import CASE_READ, OLD_CATEGORIES_READ, _categories

CASE = "in another letter case"
CPU_ONLY = "no GPU kernel, memcpy or memset in the traces (a CPU-only run)"
MIXED = {"cpu_op": "CPU_OP", "user_annotation": "User_Annotation", "gpu_user_annotation": "gpu_user_Annotation",
         "cuda_runtime": "Cuda_Runtime", "cuda_driver": "CUDA_DRIVER", "kernel": "KERNEL", "gpu_memcpy": "GPU_Memcpy",
         "gpu_memset": "Gpu_Memset", "python_function": "Python_Function", "cuda_sync": "CUDA_SYNC", "Trace": "TRACE"}
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


def _events(src: Path) -> dict:
    opened = gzip.open if src.name.endswith(".gz") else open
    with opened(src, "rt") as f:
        return json.load(f)


def mixed_case(src: Path, dst: Path) -> int:
    """Write ``src`` to ``dst`` with its categories in other letter cases (``MIXED``); return how many changed."""
    doc = _events(src)
    changed = 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in MIXED:
            e["cat"] = MIXED[e["cat"]]
            changed += 1
    dst.write_text(json.dumps(doc))
    return changed


def runtime_only(src: Path, dst: Path) -> tuple[int, int]:
    """Write ``src`` to ``dst`` without its device activities (as a trace whose CUPTI activities were lost); return its
    cuda_runtime calls and how many of them launch device work."""
    doc = _events(src)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in DEVICE]
    calls = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"]
    dst.write_text(json.dumps(doc))
    return len(calls), sum(1 for e in calls if re.search(LAUNCH_NAMES, e["name"]))


def _issues(doc, words) -> list[dict]:
    return [i for i in doc["load_issues"] if words in i["what"]]


def test_categories_match_in_any_case():
    problems = {OLD_CATEGORIES_READ: 0, CASE_READ: 0}
    cats = pa.array(["KERNEL", "Kernel", "kernel", "Operator", "OPERATOR", "trace", "Trace", "gpu_user_Annotation",
                     "my_own_category", "MY_OWN", None])
    got = _categories(cats, problems).to_pylist()
    assert got == ["kernel", "kernel", "kernel", "cpu_op", "cpu_op", "Trace", "Trace", "gpu_user_annotation",
                   "my_own_category", "MY_OWN", None]  # a category Kineto does not write is kept as written
    assert problems == {OLD_CATEGORIES_READ: 2, CASE_READ: 4}  # Kernel, Operator; KERNEL, OPERATOR, trace, gpu_user_A.


@pytest.mark.slow
def test_a_run_in_other_letter_cases_analyzes_the_same(tmp_path):
    run = FIXTURE_RUNS / "ddp2"
    changed = sum(mixed_case(f, tmp_path / f.name.removesuffix(".gz")) for f in sorted(run.glob("rank*.json.gz")))
    assert changed > 0
    same_analysis(analyze([run], use_cache=False), analyze([tmp_path], use_cache=False), changed, CASE)


def test_a_gpu_trace_in_other_letter_cases_keeps_its_gpu(tmp_path):
    src = public_trace(ALEXNET)
    changed = mixed_case(src, tmp_path / "alexnet_mixed.json")
    new = analyze([tmp_path / "alexnet_mixed.json"], use_cache=False)
    assert new["gpu"]["status"] != "not_applicable"
    same_analysis(analyze([src], use_cache=False), new, changed, CASE)


def test_runtime_calls_without_device_activity_are_not_a_cpu_only_run(tmp_path):
    calls, launches = runtime_only(public_trace(ALEXNET), tmp_path / "alexnet_runtime_only.json")
    assert launches > 0
    doc = analyze([tmp_path / "alexnet_runtime_only.json"], use_cache=False)
    said = _issues(doc, "but no kernel, memcpy or memset recorded")
    assert [(i["severity"], i["count"]) for i in said] == [("warning", calls)]
    assert said[0]["what"].startswith(f"{calls} cuda_runtime call(s) ({launches} of them kernel launches")
    assert "the device activities were not collected" in said[0]["what"]
    assert doc["gpu"]["status"] == "not_applicable"
    assert doc["gpu"]["reason"].startswith(f"no device activity recorded though the host launched {launches:,} ")
    assert "CPU-only" not in doc["gpu"]["reason"]


def _host(cat, names, device=None):
    """One rank, two steps, a cpu op per launch, each launch a call of ``cat`` (named from ``names`` in turn) and,
    with ``device``, one device event of that category on stream 7."""
    ev = [thread_name(1, 1, "main"), step(1, 0, 1000), step(2, 1000, 1000)]
    for s in (0, 1000):
        for i in range(3):
            t, corr = s + 100 + 200 * i, s + i
            ev.append(x("aten::mm", t, 150))
            ev.append(x(names[i % len(names)], t + 10, 20, cat=cat, correlation=corr))
            if device:
                ev.append(x(f"work_{i}", t + 40, 100, cat=device, pid=0, tid=7, stream=7, device=0, correlation=corr))
    return trace(ev, rank=0, world_size=1)


def test_a_tiny_runtime_only_trace(tmp_path):
    path = write(tmp_path / "rank0.json", _host("cuda_runtime", ["cudaLaunchKernel", "cudaGetDevice"]))
    doc = analyze([path], use_cache=False)
    assert [(i["severity"], i["what"].split(" but ")[0], i["count"]) for i in _issues(doc, "no kernel, memcpy")] == \
           [("warning", "6 cuda_runtime call(s) (4 of them kernel launches, copies or memsets)", 6)]
    assert doc["gpu"]["reason"].startswith("no device activity recorded though the host launched 4 kernels")


def test_runtime_queries_alone_are_a_cpu_only_run(tmp_path):
    path = write(tmp_path / "rank0.json", _host("cuda_runtime", ["cudaGetDevice", "cudaGetDeviceCount"]))
    doc = analyze([path], use_cache=False)
    assert doc["gpu"]["reason"] == CPU_ONLY and not _issues(doc, "cuda_runtime")


def test_mtia_device_work_is_said_not_called_cpu(tmp_path):
    path = write(tmp_path / "rank0.json", _host("mtia_runtime", ["runFunction - job_prep_and_submit_for_execution"],
                                               device="mtia_ccp_events"))
    doc = analyze([path], use_cache=False)
    said = _issues(doc, "mtia_ccp_events")
    assert [(i["severity"], i["count"]) for i in said] == [("warning", 6)]
    assert said[0]["what"] == ("6 mtia_ccp_events event(s): device work of an MTIA accelerator, which traceparse does "
                               "not analyze (no GPU section, no device time in the checks)")
    assert doc["gpu"] == {"status": "not_applicable", "findings": [],
                          "reason": "device work of an accelerator traceparse does not analyze: MTIA, "
                                    "6 mtia_ccp_events events"}


def test_mtia_runtime_without_its_device_work(tmp_path):
    path = write(tmp_path / "rank0.json", _host("MTIA_Runtime", ["runFunction - job_prep_and_submit_for_execution"]))
    doc = analyze([path], use_cache=False)
    assert [(i["severity"], i["count"]) for i in _issues(doc, "no mtia_ccp_events recorded")] == [("warning", 6)]


def test_xpu_kernels_are_analyzed_and_their_runtime_calls_said(tmp_path):
    path = write(tmp_path / "rank0.json", _host("xpu_runtime", ["urEnqueueKernelLaunch"], device="kernel"))
    doc = analyze([path], use_cache=False)
    assert doc["gpu"]["status"] != "not_applicable"
    said = _issues(doc, "xpu_runtime call(s)")
    assert [(i["severity"], i["count"]) for i in said] == [("info", 6)]
    assert "not linked to the kernels they launch" in said[0]["what"]
