"""Each host's clock against the first rank's, from the traces themselves (traceparse/load/clocks.py).

Copies of bundled runs (one host) are made here, at test time: the ranks of a second "host" renamed and their
times moved by a few ms either way (their baseTimeNanoseconds). The truth is the shift applied: the clock the
estimate moves must come back by minus that shift, within the bounds it states, and every verdict of the run
(the checks' statuses, the straggler, the causes and the critical path's end rank and shares) must be the unmoved
run's. The same copy analyzed with the correction turned off gets some verdict wrong: the correction does the work.
Three layouts: data parallel (FSDP, dp = 4), dp x tp (gloo groups inferred from ends being together, which the
offset breaks: the coarse estimate, then the bounds), a pipeline (point-to-point transfers only).
"""

import gzip
import re

import pytest
from conftest import committed_runs
from test_cli import invoke

import traceparse
from traceparse.load import clocks

RUNS = committed_runs()
SHARE = 0.03  # shares may move by the estimate's error (under 0.4 ms here) over steps of tens of ms: a few hundredths


def moved_copy(run: str, ranks: set, shift_ns: int, dest, hosts: bool = True):
    """``run``'s files with ``ranks`` on host 'vm2', their times moved by ``shift_ns``; ``hosts`` False: no file
    names its host (each rank is then a clock of its own)."""
    dest.mkdir()
    for f in sorted((RUNS / run).glob("rank*.json.gz")):
        text = gzip.open(f, "rt").read()
        if int(re.search(r"rank(\d+)", f.name).group(1)) in ranks:
            text = re.sub(r'"baseTimeNanoseconds": *(\d+)',
                          lambda m: f'"baseTimeNanoseconds": {int(m.group(1)) + shift_ns}', text, count=1)
            text = re.sub(r'"host_name": *"[^"]*"', '"host_name": "vm2"', text, count=1)
        if not hosts:
            text = re.sub(r'"host_name": *"[^"]*",?', "", text, count=1)
        with gzip.open(dest / f.name, "wt") as out:
            out.write(text)
    return dest


def verdicts(doc) -> dict:
    imb, cp = doc["checks"]["imbalance"], doc["critical_path"]
    return {"status": {k: c["status"] for k, c in doc["checks"].items()},
            "straggler": (imb.get("straggler_rank"), imb.get("straggler_verdict")),
            "causes": [(c["check"], c["cause"], c["share"] or 0) for c in doc["causes"]],
            "path": [(s["step"], s["end_rank"], {k: v / s["length_ns"] for k, v in s["by_cause"].items()})
                     for s in cp.get("steps", [])]}


def same(a: dict, b: dict) -> bool:
    """The same verdicts: statuses, straggler, causes and the path's end ranks exactly, shares within SHARE."""
    if a["status"] != b["status"] or a["straggler"] != b["straggler"] or len(a["causes"]) != len(b["causes"]):
        return False
    for (c1, n1, s1), (c2, n2, s2) in zip(a["causes"], b["causes"], strict=True):
        if (c1, n1) != (c2, n2) or abs(s1 - s2) > SHARE:
            return False
    if [(s, r, sorted(x)) for s, r, x in a["path"]] != [(s, r, sorted(x)) for s, r, x in b["path"]]:
        return False
    return all(abs(x[k] - y[k]) <= SHARE for (_, _, x), (_, _, y) in zip(a["path"], b["path"], strict=True)
               for k in x)


def analyzed(path, correct=True, monkeypatch=None):
    if not correct:
        monkeypatch.setattr(clocks, "settle", lambda *_, **__: None)
    try:
        return traceparse.analyze([path], use_cache=False)
    finally:
        if not correct:
            monkeypatch.undo()


CASES = [  # (run, the second host's ranks, shift, whether the files name their hosts): a few ms either way
    ("dp2_tp2", {1, 3}, 3_000_000, True),
    pytest.param("dp2_tp2", {2, 3}, -4_000_000, True, marks=pytest.mark.slow),
    pytest.param("dp2_tp2", {1, 3}, 3_000_000, False, marks=pytest.mark.slow),
    pytest.param("fsdp2_zero2_dp4", {2, 3}, 3_000_000, True, marks=pytest.mark.slow),
    pytest.param("fsdp2_zero2_dp4", {2, 3}, -4_000_000, True, marks=pytest.mark.slow),
    pytest.param("fsdp2_zero2_dp4", {2, 3}, 3_000_000, False, marks=pytest.mark.slow),
    pytest.param("pp4_1f1b_m4", {2, 3}, 3_000_000, True, marks=pytest.mark.slow),
    pytest.param("pp4_1f1b_m4", {2, 3}, -4_000_000, True, marks=pytest.mark.slow),
    pytest.param("pp4_1f1b_m4", {2, 3}, 3_000_000, False, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("run,ranks,shift,hosts", CASES)
def test_a_moved_host_is_found_and_every_verdict_kept(run, ranks, shift, hosts, tmp_path, monkeypatch):
    base = verdicts(analyzed(RUNS / run))
    copy = moved_copy(run, ranks, shift, tmp_path / "moved", hosts)
    doc = analyzed(copy)
    clock = doc["run"]["clock"]
    assert clock["by"] == ("host" if hosts else "rank") and clock["applied"]
    for c in clock["clocks"]:  # each clock's truth (-shift for the moved ranks, else 0) within its stated bounds
        truth = -shift if set(c["ranks"]) <= ranks else 0
        assert set(c["ranks"]) <= ranks or not set(c["ranks"]) & ranks
        assert c["low_ns"] <= truth <= c["high_ns"], c
        assert abs(c["shift_ns"] - truth) <= c["high_ns"] - c["low_ns"], c
    assert any("differs from the first rank's" in i["what"] for i in doc["load_issues"])
    assert same(verdicts(doc), base), (verdicts(doc), base)
    uncorrected = verdicts(analyzed(copy, correct=False, monkeypatch=monkeypatch))
    assert not same(uncorrected, base)  # as written, the offset changes some verdict


@pytest.mark.slow  # over 1.5 s: the fast tier keeps its area's other tests
def test_hosts_that_share_a_clock_move_nothing(tmp_path):
    """Renamed hosts with times as they were: the bounds hold 0, nothing moves, the document is the run's."""
    doc = analyzed(moved_copy("dp2_tp2", {1, 3}, 0, tmp_path / "renamed"))
    clock = doc["run"]["clock"]
    assert not clock["applied"] and all(c["shift_ns"] == 0 for c in clock["clocks"])
    assert all(c["low_ns"] <= 0 <= c["high_ns"] for c in clock["clocks"])
    assert not any("clock of" in i["what"] for i in doc["load_issues"])
    assert verdicts(doc) == verdicts(analyzed(RUNS / "dp2_tp2"))


def test_one_host_is_one_clock():
    clock = analyzed(RUNS / "ddp2")["run"]["clock"]
    assert clock == {"methods": ["baseTimeNanoseconds + ts"], "by": None, "applied": False, "clocks": []}


@pytest.mark.slow
def test_compare_of_the_moved_copy_with_its_run_passes(tmp_path):
    copy = moved_copy("dp2_tp2", {1, 3}, 3_000_000, tmp_path / "moved")
    r = invoke("compare", "--no-cache", RUNS / "dp2_tp2", copy)
    assert r.exit_code == 0, r.output


def test_every_moment_of_a_rank_table_moves_with_its_clock():
    """Each column of a per-rank table that is a moment (a start, an end, a timestamp) is in parts.MOMENTS, so a
    clock's shift moves all of them (a duration does not move)."""
    from traceparse.store.parts import COPIED, MOMENTS, VIEWS, columns

    moments = ("ts_ns", "start_ns", "end_ns", "launch_ns", "anchor_ns")
    for table in VIEWS + COPIED:
        found = {c for c in columns(table) if c.endswith(moments)}
        assert found == set(MOMENTS.get(table, ())), table


@pytest.mark.slow
@pytest.mark.parametrize("run", ["ring_cp4", "ulysses4", "ep4", "dp4_ep2", "dp2_pp2_tp2", "pp4_zbv_m8", "hsdp_r2_s2",
                                 "fsdp2_zero3_dp4", "straggler_ddp4", "tp4"])
def test_ranks_of_one_host_that_name_none_move_nothing(run, tmp_path):
    """Each rank a clock (no host named), all on one machine: the traces are consistent with one clock, nothing
    moves and nothing is contradicted (every bundled run so checked, docs/loading.md; these ten in the suite)."""
    clock = analyzed(moved_copy(run, set(), 0, tmp_path / "copy", hosts=False))["run"]["clock"]
    assert clock["by"] == "rank" and not clock["applied"]
    assert all(c["shift_ns"] == 0 and c["low_ns"] <= 0 <= c["high_ns"] for c in clock["clocks"]), clock
