"""traceparse hang on real hung and crashed gloo jobs (fixtures/hangs, made by fixtures/hang.py).

Each case's truth.json is computed by the generator from the job's configuration: which group, op and
collective number the ranks diverge at, who entered, who did not, and the kind.
"""

import gzip
import json
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceparse.cli import main
from traceparse.document.hang import hang_document
from traceparse.load import open_run

HANGS = Path(__file__).resolve().parents[1] / "fixtures" / "hangs"
RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
CASES = sorted(p.name for p in HANGS.iterdir() if (p / "truth.json").exists()) if HANGS.exists() else []


def truth(case):
    return json.loads((HANGS / case / "truth.json").read_text())


def hang(paths):
    with open_run(paths, use_cache=False) as con:
        return hang_document(con)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("inputs", ["dumps", "dumps+traces"])
def test_divergence_equals_the_truth(case, inputs):
    t = truth(case)
    paths = sorted(map(str, (HANGS / case).glob("fr_rank*.pkl"))) if inputs == "dumps" else [HANGS / case]
    d = hang(paths)["divergence"]
    got = {k: d[k] for k in ("kind", "group_ranks", "op", "seq", "entered", "missing", "mesh_dim")}
    assert got == {k: t[k] for k in got}
    if inputs == "dumps+traces":  # the strategy from the tags of the traces' operations on that group
        assert d["strategy"] == t["strategy"]


def test_the_tp_hang_names_the_tp_group_not_the_world():
    doc = hang([HANGS / "tp_hang_in_dp_tp"])
    t = truth("tp_hang_in_dp_tp")
    assert doc["divergence"]["group_ranks"] == t["group_ranks"] and doc["divergence"]["pg_desc"] == "mesh_tp"
    # the data-parallel groups stall after it: reported later, as its consequence
    later = [(d["group_ranks"], d["entered"], d["missing"]) for d in doc["divergences"][1:]]
    assert sorted(later) == sorted((b["group_ranks"], b["entered"], b["missing"]) for b in t["blocked_downstream"])


def test_the_point_to_point_deadlock_comes_from_the_calls_the_ranks_were_blocked_in():
    """gloo's Flight Recorder holds only the grad-norm all_reduces (op_id 3, 6, 9: two p2p ops, then one
    collective, per step); the in-flight records say both ranks wait in a receive from the other, op_id 10: the
    7th p2p op of each (10 - 3 collectives before it)."""
    d = hang([HANGS / "pp_deadlock"])["divergence"]
    assert sorted((c["rank"], c["op"], c["peer"]) for c in d["p2p"]) == [(0, "recv", 1), (1, "recv", 0)]
    assert {c["state"] for c in d["calls"].values()} == {"in flight at the dump"}


def test_without_the_in_flight_records_a_gloo_deadlock_is_said_to_be_invisible(tmp_path):
    for f in (HANGS / "pp_deadlock").glob("*"):
        if not f.name.endswith(".inflight.json"):
            (tmp_path / f.name).write_bytes(f.read_bytes())
    doc = hang([tmp_path])
    assert doc["divergence"] is None
    assert doc["notes"] == ["every recorded collective matches; the traces show sends and receives, which this "
                            "backend's Flight Recorder does not record (gloo): a point-to-point deadlock would not "
                            "show here"]


def test_a_missing_rank_is_shown_where_it_was_stuck():
    """skip_allreduce: rank 1 sleeps in fixtures/hang.py's stall() instead of the all_reduce."""
    at = hang([HANGS / "skip_allreduce"])["divergence"]["instead"]["1"]["at_dump"]
    assert at["op"] is None and at["frame"].startswith("stall (") and at["why"].startswith("watchdog")


def test_a_damaged_in_flight_record_is_a_load_issue_not_a_failure(tmp_path):
    for f in (HANGS / "pp_deadlock").glob("fr_rank*"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    cut = '{"traceparse_inflight": 1, "call": ['  # the JSON ends where a value should start
    (tmp_path / "fr_rank1.inflight.json").write_text(cut)
    with open_run([tmp_path], use_cache=False) as con:
        issues = con.execute("SELECT file, what FROM load_issues WHERE severity = 'warning'").fetchall()
        assert con.execute("SELECT list(rank ORDER BY rank) FROM fr_inflight").fetchone()[0] == [0]
    assert issues == [(str(tmp_path / "fr_rank1.inflight.json"), "in-flight record not read: Expecting value: "
                                                                  f"line 1 column {len(cut) + 1} (char {len(cut)})")]


@pytest.mark.parametrize("case", ["skip_allreduce", "pp_deadlock"])
def test_cli_exit_code_and_json(case):
    r = CliRunner().invoke(main, ["hang", str(HANGS / case), "--no-cache", "--format", "json"])
    doc = json.loads(r.output)
    assert r.exit_code == 1
    assert doc["version"] == 1 and set(doc) >= {"divergence", "last_completed"}
    if doc["divergence"]:
        assert doc["divergence"]["kind"] == truth(case)["kind"]


def test_last_completed_per_rank_and_group():
    """skip_allreduce: every rank completed collective 6 of the world group (2 per step, steps 0-2); rank 1 then
    skipped the 7th, which ranks 0 and 2 issued and never completed."""
    rows = hang([HANGS / "skip_allreduce"])["last_completed"]
    assert [(r["rank"], r["group_ranks"], r["seq"]) for r in rows] == [(0, [0, 1, 2], 6), (1, [0, 1, 2], 6),
                                                                      (2, [0, 1, 2], 6)]


def test_dumps_are_in_the_store():
    r = CliRunner().invoke(main, ["sql", "SELECT count(DISTINCT rank), max(seq) FROM fr_entries", "--no-cache",
                                  "--format", "csv", str(HANGS / "size_mismatch")])
    assert r.exit_code == 0 and r.output.splitlines()[1] == f"{truth('size_mismatch')['world_size']},7"


class _Boom:
    def __reduce__(self):
        import os

        return (os.system, ("touch BOOM",))


def test_a_crafted_pickle_runs_no_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fr_rank0.pkl").write_bytes(pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [_Boom()]}))
    r = CliRunner().invoke(main, ["hang", str(tmp_path / "fr_rank0.pkl"), "--no-cache"])
    assert r.exit_code == 2 and not (tmp_path / "BOOM").exists()
    assert r.output.strip().splitlines() == [
        f"traceparse: error: {tmp_path / 'fr_rank0.pkl'}: not a Flight Recorder dump: it asks for the Python object "
        "posix.system; a Flight Recorder dump holds only containers and scalars, so it is not loaded (no code from "
        "it is run)"]


def test_from_traces_alone_a_cut_off_rank_is_the_one_that_died(tmp_path):
    """ddp2 (one gradient all-reduce per step), rank 1's trace cut before its last all-reduce: rank 0 issued it,
    rank 1's trace ends first. Sequence numbers: the n-th collective a rank issued on the group."""
    full = gzip.open(RUNS / "ddp2" / "rank1.json.gz").read()
    at = full.rfind(b'"name": "c10d::allreduce_"')
    (tmp_path / "rank1.json").write_bytes(full[:at])
    (tmp_path / "rank0.json.gz").write_bytes((RUNS / "ddp2" / "rank0.json.gz").read_bytes())
    n = full.count(b'"name": "c10d::allreduce_"')  # rank 0's all-reduces; rank 1 kept all but the last
    doc = hang([tmp_path])
    d = doc["divergence"]
    assert doc["source"] == "traces"
    assert (d["kind"], d["group_ranks"], d["op"], d["seq"], d["entered"], d["missing"]) == \
        ("rank_died", [0, 1], "all_reduce", n, [0], [1])


def test_from_traces_alone_a_pipeline_stage_cut_off_leaves_its_neighbours_receiving(tmp_path):
    """pp4_gpipe_m4 with stage 1's trace cut at 60%: the first receive whose send is lost waits on rank 1."""
    for r in (0, 2, 3):
        (tmp_path / f"rank{r}.json.gz").write_bytes((RUNS / "pp4_gpipe_m4" / f"rank{r}.json.gz").read_bytes())
    full = gzip.open(RUNS / "pp4_gpipe_m4" / "rank1.json.gz").read()
    (tmp_path / "rank1.json").write_bytes(full[:int(len(full) * 0.6)])
    d = hang([tmp_path])["divergence"]
    (rank, call), = d["calls"].items()
    assert (d["kind"], d["op"], d["missing"], call["peer"]) == ("rank_died", "recv", [1], 1)
    assert d["entered"] == [int(rank)] and int(rank) in (0, 2)  # a neighbouring stage
