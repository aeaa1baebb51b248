"""``traceparse export``: one Chrome / Perfetto JSON of the whole job (traceparse/job_export.py), read back by
traceparse as its ranks' traces (traceparse/ingest/job_file.py) to the same analysis of the events it kept.

The round trip: the analyze document of the export equals the run's in every field but the files' names, where
each rank came from and how their clocks were read (an export's times are on the run's clock already: no
baseTimeNanoseconds). On a bundled gloo run (groups inferred from timing, shapes recorded) and every public GPU trace (NCCL kernels on their streams,
collective args on record_param_comms, AMD, DeepEP; where a trace named no rank, the export states it: the
warning that one was assumed, and where each rank came from, are left out of the comparison).
"""

import json
import sys
from pathlib import Path

import pytest
from conftest import committed_runs, public_trace
from test_cli import invoke
from test_clocks import moved_copy

import traceparse
from fixtures import public_traces
from traceparse.ingest.job_file import OWN, PATH_PID, STREAM_TID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from documents import differences  # noqa: E402

RUNS = committed_runs()


def exported(src, tmp_path, *options):
    out = tmp_path / "job.json"
    r = invoke("export", "--no-cache", src, "-o", out, *options)
    assert r.exit_code == 0, r.output
    return out


ASSUMED = "no rank in distributedInfo or the file name"  # the export states each rank: none is assumed again


def round_trip(src, tmp_path):
    job = exported(src, tmp_path)
    a, b = traceparse.analyze([src], use_cache=False), traceparse.analyze([job], use_cache=False)
    assert b["run"]["files"] == [str(job.resolve())] * len(a["run"]["ranks"])
    for doc in (a, b):  # where each file's clock and rank came from, and which file said what
        doc["load_issues"] = [{**i, "file": None} for i in doc["load_issues"] if not i["what"].startswith(ASSUMED)]
        for key in ("files", "rank_sources"):
            doc["run"].pop(key)
        doc["run"]["clock"].pop("methods")
    assert not differences(a, b), differences(a, b)


def test_an_export_reads_back_to_the_same_analysis(tmp_path):
    round_trip(RUNS / "dp2_tp2", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("rel", public_traces.names())
def test_every_public_trace_reads_back_to_the_same_analysis(rel, tmp_path):
    round_trip(public_trace(rel), tmp_path)


def test_an_export_is_one_process_per_rank_with_the_analysis_beside(tmp_path):
    job = exported(moved_copy("dp2_tp2", {1, 3}, 3_000_000, tmp_path / "moved"), tmp_path)
    d = json.loads(job.read_text())
    events = d["traceEvents"]
    ranks = {e["pid"] for e in events if e.get("cat") != OWN and e["ph"] == "X"}
    assert ranks == {0, 1, 2, 3}
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e.get("cat") == OWN
             and e["name"] == "process_name"}
    assert names[1] == "rank 1 (vm2)" and PATH_PID in names
    flows = [e for e in events if e["ph"] in ("s", "f")]
    assert flows and {e["ph"] for e in flows} == {"s", "f"}
    assert len({e["id"] for e in flows}) * 2 == len(flows)  # each flow a start and an end
    assert any(e["pid"] == PATH_PID and e["ph"] == "X" for e in events)  # the critical path
    assert any(e["pid"] == PATH_PID and e["ph"] == "i" and "saved_per_step_ns" in e["args"] for e in events)
    # on the aligned clock: the moved host's times came back by the estimated shift
    clock = d["traceparseExport"]["clock"]
    assert clock["applied"] and any(c["clock"] == "host vm2" for c in clock["clocks"])
    # read back: the hosts' clocks are consistent with one, nothing moves again
    again = traceparse.analyze([job], use_cache=False)["run"]["clock"]
    assert not again["applied"]


@pytest.mark.slow  # over 1.5 s: the fast tier keeps its area's other tests
def test_gpu_streams_are_threads_of_their_rank(tmp_path):
    job = exported(public_trace("hta/nccl_parser_config/nccl_data.json.gz"), tmp_path)
    events = json.loads(job.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels and all(e["tid"] == STREAM_TID + e["args"]["stream"] for e in kernels)


@pytest.mark.slow  # over 1.5 s: the fast tier keeps its area's other tests
def test_ranks_and_steps_select(tmp_path):
    job = exported(RUNS / "dp2_tp2", tmp_path, "--ranks", "0-1", "--steps", "3")
    doc = traceparse.analyze([job], use_cache=False)
    assert doc["run"]["ranks"] == [0, 1] and doc["run"]["steps"] == [3]
    assert any("missing ranks: 2, 3" in i["what"] for i in doc["load_issues"])


@pytest.mark.parametrize("options,says", [  # the two that load the run are slow: the fast tier keeps the third
    pytest.param(("--steps", "9"), "no profiled step 9 in the run (its steps: 2, 3)", marks=pytest.mark.slow),
    pytest.param(("--ranks", "7"), "no rank to export", marks=pytest.mark.slow),
    (("--ranks", "x"), "numbers and ranges"),
])
def test_a_selection_of_nothing_is_one_line(options, says, tmp_path):
    r = invoke("export", "--no-cache", RUNS / "dp2_tp2", "-o", tmp_path / "job.json", *options)
    assert r.exit_code == 2 and says in r.output
    assert not (tmp_path / "job.json").exists()


def test_a_damaged_job_file_is_one_line(tmp_path):
    job = exported(RUNS / "ddp2", tmp_path)
    lines = job.read_text().splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith('{"ph":"X"'))
    lines[i] = lines[i][: len(lines[i]) // 2]
    job.write_text("\n".join(lines) + "\n")
    r = invoke("analyze", "--no-cache", job)
    assert r.exit_code == 2
    assert f"line {i + 1} is not as traceparse writes it" in r.output and r.output.count("\n") <= 2
