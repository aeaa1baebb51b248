"""The document's timeline section: one step, chosen from the raw trace's ProfilerStep#N annotations,
its bars the vocabulary's intervals (their union lengths are window_totals'), merged past the bound."""

import gzip
import json
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import public_trace

from traceparse.cli import main
from traceparse.document.timeline import timeline

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def median_step(paths) -> int:
    """From the raw JSON: among the steps every file has, the one whose mean ProfilerStep#N duration (the
    CPU annotation; GPU traces repeat it on the device) is the (lower) median."""
    durs = []
    for p in paths:
        events = json.load(gzip.open(p) if p.name.endswith(".gz") else open(p))["traceEvents"]
        durs.append({int(e["name"].split("#")[1]): e["dur"] for e in events
                     if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                     and e.get("name", "").startswith("ProfilerStep#")})
    common = set.intersection(*(set(d) for d in durs))
    ranked = sorted(common, key=lambda s: (statistics.fmean(d[s] for d in durs), s))
    return ranked[(len(ranked) - 1) // 2]


CASES = [sorted((RUNS / "pp4_1f1b_m4").glob("rank*.json.gz")), sorted((RUNS / "dp2_tp2").glob("rank*.json.gz"))]


@pytest.mark.parametrize("paths", [pytest.param(CASES[0], id="pp4_1f1b_m4", marks=pytest.mark.slow),  # the fast
                                   pytest.param(CASES[1], id="dp2_tp2")])  # tier keeps one
def test_bars_are_the_vocabulary_intervals_of_the_median_step(store, paths):
    con = store(*paths)
    t = timeline(con)
    assert t["step"] == median_step(paths)
    assert not t["aggregated"] and t["bars"] == t["pieces"] == len(t["rows"]) and t["merged"] == 0
    assert min(w["start_ns"] for w in t["windows"]) == 0
    assert {w["rank"] for w in t["windows"]} == {r["rank"] for r in t["rows"]} == set(range(len(paths)))
    window = {w["rank"]: w for w in t["windows"]}
    totals = {(r, kind): ns for r, kind, ns in con.execute(
        "SELECT rank, 'compute', compute_ns FROM window_totals WHERE step = ? UNION ALL "
        "SELECT rank, 'comm', comm_ns FROM window_totals WHERE step = ?", [t["step"], t["step"]]).fetchall()}
    for (rank, kind), ns in totals.items():
        bars = sorted((r for r in t["rows"] if (r["rank"], r["kind"]) == (rank, kind)), key=lambda r: r["start_ns"])
        assert all(r["start_ns"] >= window[rank]["start_ns"] for r in bars)  # anchored in the window
        if kind == "compute":  # one union: its length is the window's compute
            assert sum(r["dur_ns"] for r in bars) == ns
            assert all(a["start_ns"] + a["dur_ns"] < b["start_ns"] for a, b in zip(bars, bars[1:], strict=False))
    assert t["intervals"] == con.execute(
        "SELECT (SELECT count(*) FROM compute_intervals WHERE in_window AND step = $1) + "
        "(SELECT count(*) FROM comm_intervals WHERE in_window AND counted AND step = $1)", [t["step"]]).fetchone()[0]


def test_past_the_bound_close_bars_are_merged_and_said_so(store):
    con = store(*CASES[0])
    whole, small = timeline(con), timeline(con, max_bars=60)
    assert small["aggregated"] and small["bars"] == len(small["rows"]) <= 60
    assert small["merged"] == whole["bars"] - small["bars"] > 0
    assert small["intervals"] == whole["intervals"] == sum(r["intervals"] for r in small["rows"])
    key = lambda r: (r["rank"], r["kind"], r["strategy"])  # noqa: E731
    for bar in whole["rows"]:  # every bar lies inside one merged bar of its rank, kind and strategy
        assert any(key(m) == key(bar) and m["start_ns"] <= bar["start_ns"]
                   and bar["start_ns"] + bar["dur_ns"] <= m["start_ns"] + m["dur_ns"] for m in small["rows"])
    gaps = [b["start_ns"] - a["start_ns"] - a["dur_ns"] for a, b in zip(small["rows"], small["rows"][1:], strict=False)
            if key(a) == key(b)]
    assert all(g > small["merge_gap_ns"] for g in gaps)  # what stays apart is farther than the gap


@pytest.mark.slow
def test_a_gpu_trace_names_bars_by_kernel(store):
    path = public_trace("tracelens/mi300_resnet_ddp_rank0.json.gz")
    t = timeline(store(path))
    assert t["step"] == median_step([path])
    kernels = {e["name"] for e in json.load(gzip.open(path))["traceEvents"] if e.get("cat") == "kernel"}
    assert {r["name"] for r in t["rows"]} <= kernels
    assert {r["strategy"] for r in t["rows"] if r["kind"] == "comm"} >= {"dp"}


def test_explain_prints_the_timeline_definition():
    r = CliRunner().invoke(main, ["explain", "timeline"])
    assert r.exit_code == 0 and "median" in r.output and "compute_intervals" in r.output
