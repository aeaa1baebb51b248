"""Traces written by Kineto before PyTorch 1.11 (1.8 to 1.10: what the TensorBoard plugin's samples hold) spell their
categories Operator, Runtime, Kernel, Memcpy, Memset, and the GPU activities' and runtime calls' external id in lower
case. Each test writes such a copy of a real trace (at test time: nothing derived from a public trace is kept) and
holds its analysis to the original's, every section but the files' names and one load issue saying what was read."""

import gzip
import json
from pathlib import Path

import pytest
from conftest import FIXTURE_RUNS, public_trace

from traceparse.document import analyze

OLD = {"cpu_op": "Operator", "cuda_runtime": "Runtime", "kernel": "Kernel", "gpu_memcpy": "Memcpy",
       "gpu_memset": "Memset", "ac2g": "async_gpu"}
DEVICE_SIDE = ("cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset")
ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


def old_spelling(src: Path, dst: Path) -> int:
    """Write ``src`` to ``dst`` as Kineto wrote it before PyTorch 1.11; return how many categories were renamed."""
    opened = gzip.open if src.name.endswith(".gz") else open
    with opened(src, "rt") as f:
        doc = json.load(f)
    renamed = 0
    for e in doc["traceEvents"]:
        cat = e.get("cat")
        if cat in OLD:
            e["cat"] = OLD[cat]
            renamed += cat != "ac2g"
            args = e.get("args") or {}
            if cat in DEVICE_SIDE and "External id" in args:
                args["external id"] = args.pop("External id")
    dst.write_text(json.dumps(doc))
    return renamed


def same_analysis(original: dict, rewritten: dict, renamed: int, said: str = "category names of PyTorch 1.8 to 1.10"):
    """The rewritten trace's analysis is the original's but for the files' names and the load issues, which say
    (as information, one per file) how many events were read in another spelling."""
    assert {k: v for k, v in rewritten.items() if k not in ("run", "load_issues")} == \
           {k: v for k, v in original.items() if k not in ("run", "load_issues")}
    said = [i for i in rewritten["load_issues"] if said in i["what"]]
    assert {i["severity"] for i in said} == {"info"} and sum(i["count"] for i in said) == renamed  # one per file


def test_a_gpu_trace_in_the_old_spelling_keeps_its_gpu(tmp_path):
    src = public_trace(ALEXNET)
    renamed = old_spelling(src, tmp_path / "alexnet_old.json")
    old = analyze([tmp_path / "alexnet_old.json"], use_cache=False)
    assert old["gpu"]["status"] != "not_applicable"
    same_analysis(analyze([src], use_cache=False), old, renamed)


@pytest.mark.slow  # over 1.5 s: the fast tier keeps its area's other tests
def test_a_multi_rank_run_in_the_old_spelling(tmp_path):
    run = FIXTURE_RUNS / "ddp2"
    renamed = sum(old_spelling(f, tmp_path / f.name.removesuffix(".gz")) for f in sorted(run.glob("rank*.json.gz")))
    assert renamed > 0
    same_analysis(analyze([run], use_cache=False), analyze([tmp_path], use_cache=False), renamed)
