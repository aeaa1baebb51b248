"""Committed fixture runs: the communication in the traces equals truth.json.

The traces are parsed here with plain gzip + json (independent of traceparse's
loader): every `c10d::*` CPU op inside a `ProfilerStep#N` window is one call.
"""
from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "runs"

# c10d op -> (op, how to read in/out sizes)
C10D_OPS = {
    "c10d::allreduce_": "all_reduce",
    "c10d::allreduce_coalesced_": "all_reduce",
    "c10d::broadcast_": "broadcast",
    "c10d::_allgather_base_": "all_gather",
    "c10d::allgather_": "all_gather",
    "c10d::allgather_into_tensor_coalesced_": "all_gather",
    "c10d::_reduce_scatter_base_": "reduce_scatter",
    "c10d::reduce_scatter_": "reduce_scatter",
    "c10d::reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "c10d::alltoall_base_": "all_to_all",
    "c10d::alltoall_": "all_to_all",
    "c10d::send": "send",
    "c10d::recv_": "recv",
    "c10d::barrier": "barrier",
}
DTYPE_BYTES = {"float": 4, "double": 8, "long int": 8, "int": 4, "c10::Half": 2,
               "c10::BFloat16": 2, "unsigned char": 1, "signed char": 1, "bool": 1,
               "short int": 2}
# gloo c10d ops taking a TensorList record "TensorList" as the type, without the
# element dtype; every TensorList collective in these fixtures is fp32.
TENSORLIST_DTYPE_BYTES = 4


def _numel(dims):
    n = 1
    for x in dims:
        n *= x
    return n


def _nbytes(dims, typ):
    """Bytes of a Tensor (dims = [..]) or TensorList (dims = [[..], ..]) argument."""
    if typ == "TensorList" or (dims and isinstance(dims[0], list)):
        return sum(_numel(d) for d in dims) * TENSORLIST_DTYPE_BYTES
    return _numel(dims) * DTYPE_BYTES[typ]


def call_of(ev):
    """(op, peer_in_group, bytes_in, bytes_out) of one c10d op event."""
    name, a = ev["name"], ev["args"]
    op = C10D_OPS[name]
    dims, types, conc = a["Input Dims"], a["Input type"], a.get("Concrete Inputs", [])
    peer = None
    if name in ("c10d::allreduce_", "c10d::allreduce_coalesced_", "c10d::broadcast_",
                "c10d::barrier"):
        b_in = b_out = _nbytes(dims[0], types[0])
    elif name in ("c10d::send", "c10d::recv_"):
        b_in = b_out = _nbytes(dims[0], types[0])
        peer = int(conc[2])
    else:  # (output, input, ...) ops
        b_out, b_in = _nbytes(dims[0], types[0]), _nbytes(dims[1], types[1])
    return op, peer, b_in, b_out


def load_calls(path: Path):
    """{step_name: Counter((op, peer_in_group, bytes_in, bytes_out))}, distributedInfo."""
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    evs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in evs if e["name"].startswith("ProfilerStep#")]
    out = {}
    for s in steps:
        t0, t1 = s["ts"], s["ts"] + s["dur"]
        c = Counter(call_of(e) for e in evs
                    if e.get("cat") == "cpu_op" and e["name"] in C10D_OPS
                    and t0 <= e["ts"] <= t1)
        out[s["name"]] = c
    return out, trace.get("distributedInfo", {})


def expected_calls(truth, rank):
    c = Counter()
    for r in truth["comm"]:
        if r["rank"] != rank:
            continue
        peer = None if r["peer"] is None else r["group_ranks"].index(r["peer"])
        c[(r["op"], peer, r["bytes_in"], r["bytes_out"])] += r["count"]
    return c


def check_run(run_dir: Path):
    """Every window's traces (one window, rank<r>.json.gz, unless truth.json lists several: a repeating
    profiler schedule, rank<r>.step<k>.json.gz) against truth.json."""
    truth = json.loads((run_dir / "truth.json").read_text())
    ws = truth["world_size"]
    windows = truth.get("windows") or [{"steps": None, "files": [f"rank{r}.json.gz" for r in range(ws)]}]
    assert sorted(p.name for p in run_dir.glob("rank*.json.gz")) == sorted(f for w in windows for f in w["files"])
    for w in windows:
        check_window(run_dir, truth, w)


def check_window(run_dir: Path, truth: dict, window: dict):
    ws = truth["world_size"]
    for rank, name in enumerate(window["files"]):
        steps, info = load_calls(run_dir / name)
        assert len(steps) == truth["profiled_steps"], (rank, list(steps))
        if window["steps"] is not None:
            assert sorted(steps) == sorted(f"ProfilerStep#{n}" for n in window["steps"]), (name, list(steps))
        assert info.get("rank") == rank and info.get("world_size") == ws
        exp = expected_calls(truth, rank)
        for step, got in steps.items():
            assert got == exp, (
                f"{run_dir.name} rank {rank} {step}: missing {dict(exp - got)}, "
                f"unexpected {dict(got - exp)}")
        # every group named in truth is a group this rank belongs to in the trace
        groups = {tuple(g["ranks"]) for g in info.get("pg_config", [])}
        for r in truth["comm"]:
            if r["rank"] == rank:
                assert rank in r["group_ranks"]
                assert tuple(r["group_ranks"]) in groups, (rank, r["group_ranks"], groups)


def _runs():
    return sorted(p.parent for p in RUNS.glob("*/truth.json")) if RUNS.exists() else []


@pytest.mark.parametrize("run_dir", _runs() or [None], ids=lambda p: p.name if p else "none")
@pytest.mark.slow
def test_committed_run_matches_truth(run_dir):
    if run_dir is None:
        pytest.skip("no runs in fixtures/runs")
    check_run(run_dir)


def test_truth_schema():
    runs = _runs()
    if not runs:
        pytest.skip("no runs in fixtures/runs")
    for run_dir in runs:
        t = json.loads((run_dir / "truth.json").read_text())
        assert {"name", "world_size", "layout", "model", "optimizer", "profiled_steps",
                "comm", "imbalance"} <= set(t)
        lay = t["layout"]
        assert set("dp tp pp cp sp ep dp_replicate dp_shard microbatches".split()) <= set(lay)
        # Megatron-Core / torchtitan: the world is dp x tp x pp x cp x sp; ep is carved out of dp x cp x sp
        assert t["world_size"] == lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"] * lay["sp"], run_dir.name
        assert (lay["dp"] * lay["cp"] * lay["sp"]) % lay["ep"] == 0, run_dir.name
        assert lay["dp_replicate"] * lay["dp_shard"] == lay["dp"], run_dir.name
        for r in t["comm"]:
            assert r["op"] in {"all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                               "broadcast", "send", "recv", "barrier"}
            assert r["strategy"] in {"dp", "tp", "pp", "cp", "sp", "ep", "other"}
            assert (r["peer"] is None) == (r["op"] not in ("send", "recv"))


@pytest.mark.slow  # over 2 s: the fast tier keeps its area's other tests
def test_truth_only_rewrites_the_truth_and_keeps_the_traces(tmp_path):
    """--truth-only: truth.json from fixtures/truth.py for an existing run, its traces untouched."""
    pytest.importorskip("torch")
    import shutil

    from fixtures.generate import main

    runs = _runs()
    if not runs:
        pytest.skip("no runs in fixtures/runs")
    src = runs[0]
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    (dst / "truth.json").write_text("{}")
    traces = {p.name: p.read_bytes() for p in dst.glob("rank*.json.gz")}
    assert main(["--config", src.name, "--truth-only", "--out", str(tmp_path)]) == 0
    assert json.loads((dst / "truth.json").read_text()) == json.loads((src / "truth.json").read_text())
    assert {p.name: p.read_bytes() for p in dst.glob("rank*.json.gz")} == traces
    with pytest.raises(FileNotFoundError):
        main(["--config", src.name, "--truth-only", "--out", str(tmp_path / "empty")])


@pytest.mark.slow
def test_regenerate_smallest(tmp_path):
    pytest.importorskip("torch")
    from fixtures.generate import generate

    run_dir = generate("ddp2", tmp_path)
    check_run(run_dir)
    # recorded through the profiler plugin: analyzed with no flags, the metadata gives layout, volume and memory
    from test_profiler_plugin import check_plugin_run

    import traceparse

    check_plugin_run(traceparse.analyze([run_dir], use_cache=False), json.loads((run_dir / "truth.json").read_text()))
