"""traceparse hang on real hung and crashed gloo jobs (fixtures/hangs, made by fixtures/hang.py).

Each case's truth.json is computed by the generator from the job's configuration: which group, op and
collective number the ranks diverge at, who entered, who did not, and the kind. The cases written by torch's own
dump writer (``truth["dumps"]["writer"] == "torch"``) are read from their folder exactly as torch left it
(``TORCH_FR_DUMP_TEMP_FILE`` + rank, no suffix); their NCCL variants (``fixtures.hang.nccl_variant``: the same
dumps changed only where NCCL writes otherwise) are checked against torch's own analyzer.
"""

import copy
import gzip
import json
import logging
import pickle
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixtures.hang import CASES as JOBS
from fixtures.hang import nccl_variant
from traceparse.cli import main
from traceparse.hang.forensics import hang_document
from traceparse.ingest.flight_recorder import is_dump
from traceparse.load.run import open_run

HANGS = Path(__file__).resolve().parents[1] / "fixtures" / "hangs"
RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
CASES = sorted(p.name for p in HANGS.iterdir() if (p / "truth.json").exists()) if HANGS.exists() else []
TORCH_WRITER = [c for c in CASES if json.loads((HANGS / c / "truth.json").read_text())["dumps"]["writer"] == "torch"]


def truth(case):
    return json.loads((HANGS / case / "truth.json").read_text())


_KEPT = {}  # the documents of committed cases (fixtures/hangs), by their paths: each made once per module


def hang(paths):
    """The hang document of ``paths``; a committed case's is made once and each caller gets a copy of it."""
    key = tuple(str(p) for p in paths)
    committed = all(Path(p).resolve().is_relative_to(HANGS) for p in paths)
    if committed and key in _KEPT:
        return copy.deepcopy(_KEPT[key])
    with open_run(paths, use_cache=False) as con:
        doc = hang_document(con)
    if committed:
        _KEPT[key] = copy.deepcopy(doc)
    return doc


def dumps_of(case) -> list[Path]:
    """The case's Flight Recorder dumps, found by content (torch names them without a suffix)."""
    return sorted(p for p in (HANGS / case).iterdir() if is_dump(p))


def traces_of(case) -> list[Path]:
    return sorted((HANGS / case).glob("rank*.json.gz"))


def cli(*args):
    r = CliRunner().invoke(main, ["hang", *map(str, args), "--no-cache", "--format", "json"])
    return r.exit_code, (json.loads(r.output) if r.exit_code in (0, 1) else r.output)


def essentials(d) -> dict:
    return {k: d[k] for k in ("kind", "group_ranks", "op", "seq", "entered", "missing", "mesh_dim")}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("inputs", ["dumps", "dumps+traces"])
@pytest.mark.slow
def test_divergence_equals_the_truth(case, inputs):
    t = truth(case)
    paths = dumps_of(case) if inputs == "dumps" else [HANGS / case]
    d = hang(paths)["divergence"]
    if inputs == "dumps" and "dump_op" in t:  # an op gloo renames: without its traces, the dump's op is all there is
        t = {**t, "op": t["dump_op"]}
    got = essentials(d)
    assert got == {k: t[k] for k in got}
    assert d["pg_desc"] == t["pg_desc"] and d["root"]
    if inputs == "dumps+traces" and traces_of(case):  # the strategy from the tags of the traces' operations
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


@pytest.mark.slow
def test_without_the_in_flight_records_a_gloo_deadlock_is_said_to_be_invisible_and_narrowed_down(tmp_path):
    """Torch's dumps alone (no in-flight record): nothing shows the deadlock, and the report says so, with what
    the dumps and traces do show: each rank stopped after the grad-norm all_reduce #3 (completed) and before #4, in
    no recorded collective, and the sends and receives its last traced step posted."""
    for f in (HANGS / "pp_deadlock").glob("*"):
        if not f.name.endswith(".inflight.json"):
            (tmp_path / f.name).write_bytes(f.read_bytes())
    doc = hang([tmp_path])
    assert doc["divergence"] is None
    assert doc["notes"] == [
        "every recorded collective matches; the traces show sends and receives, which this backend's Flight "
        "Recorder does not record (gloo): a point-to-point deadlock would not show here. At the dumps: rank 0: in "
        "no recorded collective, after all_reduce #3 on group [0, 1] (completed), before all_reduce #4 (its steps' "
        "next collective); its last traced step posted send to 1, recv from 1; rank 1: in no recorded collective, "
        "after all_reduce #3 on group [0, 1] (completed), before all_reduce #4 (its steps' next collective); its "
        "last traced step posted recv from 0, send to 0"]
    r = CliRunner().invoke(main, ["hang", str(tmp_path), "--no-cache"])
    assert r.exit_code == 0 and "no divergence in what was recorded" in r.output and "(read the notes)" in r.output


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
@pytest.mark.slow
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


# ------------------------------------------------------------------ dumps as torch writes them
def rank_of(path: Path) -> int:
    return int(re.search(r"(\d+)(?:\.pkl)?$", path.name).group(1))


@pytest.mark.parametrize("case", TORCH_WRITER)
@pytest.mark.slow
def test_torch_named_dumps_are_read_from_the_folder_as_torch_left_it(case):
    """``TORCH_FR_DUMP_TEMP_FILE`` + rank, no suffix (``nccl_trace_rank_0``, ``rank_0``): found by content, in
    ``traceparse hang DIR`` and beside traces named on their own (``hang DIR/rank*.json.gz DIR``), never passed
    over for the traces alone (which say nothing of step 3: only the first step is profiled)."""
    t = truth(case)
    assert all(not p.suffix for p in dumps_of(case)) and len(dumps_of(case)) >= 3
    forms = [[HANGS / case]]
    if traces_of(case):
        forms += [[f"{HANGS / case}/rank*.json.gz", HANGS / case], [HANGS / case, f"{HANGS / case}/rank*.json.gz"]]
    for args in forms:
        code, doc = cli(*args)
        assert code == 1, (args, doc)
        assert doc["source"] == "flight_recorder" and doc["ranks"] == sorted(rank_of(p) for p in dumps_of(case))
        assert essentials(doc["divergence"]) == {k: t[k] for k in essentials(doc["divergence"])}


def test_dumps_in_one_folder_and_traces_named_apart(tmp_path):
    """``traceparse hang DUMPDIR TRACES/rank*.json.gz``: the folder holds nothing but torch's suffix-less dumps;
    before, it was passed over, the traces alone read, and "no divergence" said with exit 0 on a hung job."""
    dumps, traces = tmp_path / "dumps", tmp_path / "traces"
    dumps.mkdir()
    traces.mkdir()
    for f in dumps_of("torch_default_names"):
        shutil.copy(f, dumps / f.name)
    for f in traces_of("torch_default_names"):
        shutil.copy(f, traces / f.name)
    code, doc = cli(dumps, f"{traces}/rank*.json.gz")
    assert code == 1 and doc["source"] == "flight_recorder"
    assert essentials(doc["divergence"]) == {k: truth("torch_default_names")[k] for k in essentials(doc["divergence"])}


def test_a_folder_that_yields_nothing_is_said_never_passed_over(tmp_path):
    """A folder of the user's from which nothing is read (a log, a pickle that is not a dump) is a note beside
    what the other paths gave, and an error when it is all there is."""
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "rank_0.log").write_text("[rank 0] step 3\n")
    (stray / "state_0").write_bytes(pickle.dumps({"step": 3}, protocol=2))
    code, doc = cli(stray, *dumps_of("torch_default_names"))
    assert code == 1
    assert [n for n in doc["notes"] if "nothing read from this folder" in n] == [
        f"{stray}: nothing read from this folder: no trace (*.json, *.json.gz) or Flight Recorder dump (a pickle or "
        "JSON of torch's dump, whatever its name) in it"]
    r = CliRunner().invoke(main, ["hang", str(stray), "--no-cache"])
    assert r.exit_code == 2 and "no trace files" in r.output and "Flight Recorder dumps" in r.output


# ------------------------------------------------------------------ groups, dead ranks, root causes
def test_two_groups_of_the_same_ranks_are_two_groups():
    """The default group and new_group(group_desc="metrics") over the same 4 ranks: rank 2 skips gradient bucket
    all_reduce #8 of the default group and waits in metrics all_reduce #4. Before, the two groups' calls were
    merged by their ranks and reported as a size mismatch at all_reduce #4."""
    t = truth("same_members_groups")
    doc = hang(dumps_of("same_members_groups"))
    first, *rest = doc["divergences"]
    assert (first["pg_name"], first["pg_desc"]) == ("0", "default_pg")
    assert [(s["rank"], s["pg_desc"], s["seq"]) for s in first["skipped"]] == [(2, "metrics", 4)]
    assert [(d["group_ranks"], d["pg_desc"], d["seq"], d["entered"], d["missing"], d["root"]) for d in rest] == [
        (b["group_ranks"], b["pg_desc"], b["seq"], b["entered"], b["missing"], False) for b in t["blocked_downstream"]]
    assert [(e["rank"], e["pg_desc"], e["seq"]) for e in rest[0]["explained_by"]] == [
        (r, "default_pg", t["seq"]) for r in t["blocked_downstream"][0]["missing"]]
    assert all(d["kind"] == "missing_rank" for d in doc["divergences"])
    assert sorted((r["rank"], r["pg_desc"], r["seq"]) for r in doc["last_completed"]) == sorted(
        [(r, "default_pg", t["seq"] - 1) for r in range(4)] + [(r, "metrics", 3) for r in range(4)])


def test_a_dead_rank_with_two_buckets_in_flight():
    """Rank 3 dies in the forward of step 3 (no dump); the others enqueued both gradient buckets (#7, #8) before
    either completed, and both ended in failure: gloo marks them retired as it does a completed call. The first
    divergence is #7, the earliest call rank 3 never entered; #6 is the last known completed; #7 and #8 are said to
    have ended, not to have completed. Before: #8 first, and #7 "completed"."""
    t = truth("dead_rank_two_buckets")
    doc = hang([HANGS / "dead_rank_two_buckets"])
    d = doc["divergence"]
    assert (d["kind"], d["seq"], d["entered"], d["missing"]) == (t["kind"], t["seq"], t["entered"], t["missing"])
    assert {c["outcome"] for c in d["calls"].values()} == {"ended"}
    assert [(r["rank"], r["seq"], [(a["seq"], a["outcome"]) for a in r["after"]]) for r in doc["last_completed"]] == [
        (r, t["last_completed"], [(s, "ended") for s in t["ended_not_completed"]]) for r in t["entered"]]
    r = CliRunner().invoke(main, ["hang", str(HANGS / "dead_rank_two_buckets"), "--no-cache"])
    assert r.exit_code == 1
    assert "rank_died: all_reduce #7" in r.output and "ended: completed or failed (gloo marks both retired)" in r.output
    assert re.search(r"all_reduce +6 +#7 ended, #8 ended", r.output)


def test_the_root_cause_comes_first_when_its_consequence_came_first_in_time():
    """dp2 x tp2, ranks 2 and 3 on a slower host: ranks 0 and 1 enter their dp all_reduces before rank 2 enters the
    tp all_reduce rank 3 never calls. Rank 2 is missing from dp [0, 2] because its own dump holds it blocked in tp
    #7, which its earlier steps issue first; rank 3 is missing from dp [1, 3] because it never reached tp #7."""
    t = truth("mesh_slow_tp_hang")
    doc = hang([HANGS / "mesh_slow_tp_hang"])
    by_time = min(doc["divergences"], key=lambda d: d["time_ns"])
    assert by_time["pg_desc"] == "mesh_dp"  # the case's premise: a consequence was issued first
    first, *rest = doc["divergences"]
    assert essentials(first) == {k: t[k] for k in essentials(first)} and first["root"]
    assert sorted((d["group_ranks"], d["entered"], d["missing"], d["root"]) for d in rest) == sorted(
        (b["group_ranks"], b["entered"], b["missing"], False) for b in t["blocked_downstream"])
    why = {tuple(d["group_ranks"]): d for d in rest}
    assert [(e["rank"], e["group_ranks"], e["seq"]) for e in why[(0, 2)]["explained_by"]] == [(2, [2, 3], 7)]
    assert [(e["rank"], e["group_ranks"], e["seq"]) for e in why[(1, 3)]["never_reached"]] == [(3, [2, 3], 7)]


def linked(doc, d) -> list[tuple]:
    """The root causes ``d`` follows from, as (group, seq)."""
    return [(doc["divergences"][i]["group_ranks"], doc["divergences"][i]["seq"]) for i in d["roots"]]


def test_a_rank_that_skipped_a_call_and_went_on_is_the_root_cause():
    """dp2 x tp2 with a loss all_reduce on the default group: rank 3 skips tp [2, 3] #8, the last tp all_reduce of
    its backward, and goes on (dp [1, 3] #4 completes with rank 1, and both wait in the default group's #4). Rank 3
    never entered tp #8 while its own later calls exist: the root; dp [0, 2] #4 (rank 2 blocked in tp #8) and the
    default group's #4 (rank 0 blocked in dp #4, rank 2 in tp #8) follow from it. Before, tp #8 was "explained" by
    rank 3 waiting in the default group's #4, which waits on rank 2 in tp #8: a cycle, and all three were roots."""
    t = truth("tp_skip_backward")
    doc = hang([HANGS / "tp_skip_backward"])
    first, *rest = doc["divergences"]
    assert essentials(first) == {k: t[k] for k in essentials(first)} and first["root"] and first["links"] == []
    went = t["went_on"]["to"][-1]  # the call the rank that skipped it is in at the dump
    assert [(s["rank"], s["group_ranks"], s["pg_desc"], s["seq"], s["outcome"]) for s in first["skipped"]] == [
        (t["went_on"]["rank"], went["group_ranks"], went["pg_desc"], went["seq"], went["outcome"])]
    assert [(d["kind"], d["group_ranks"], d["pg_desc"], d["op"], d["seq"], d["entered"], d["missing"], d["root"],
             linked(doc, d)) for d in rest] == [
        (c["kind"], c["group_ranks"], c["pg_desc"], c["op"], c["seq"], c["entered"], c["missing"], False,
         [(c["root"]["group_ranks"], c["root"]["seq"])]) for c in t["consequences"]]
    dp, world = rest
    assert [(e["rank"], e["group_ranks"], e["seq"]) for e in dp["explained_by"]] == [(2, t["group_ranks"], t["seq"])]
    assert [(e["rank"], e["group_ranks"], e["seq"]) for e in world["explained_by"]] == [
        (0, dp["group_ranks"], dp["seq"]), (2, t["group_ranks"], t["seq"])]
    assert world["links"] == [0, 1]  # rank 2's tp #8 (the root) and rank 0's dp #4 (itself its consequence)


def test_a_mismatch_stays_the_root_when_a_member_died_of_it():
    """Rank 1 sends 40 rows to rank 0 in an even all_to_all (input [136, 32] where the others pass [128, 32]); gloo
    aborts rank 0, which leaves no dump. The size mismatch the survivors recorded is the root (the all_to_all's
    earlier calls show even splits: one size, in and out, on every rank), and rank 0's death its consequence, at the
    same call. Before: rank_died at #7, the sizes shown but not compared."""
    t = truth("a2a_size_kills_rank")
    doc = hang([HANGS / "a2a_size_kills_rank"])
    first, *rest = doc["divergences"]
    assert essentials(first) == {k: t[k] for k in essentials(first)} and first["root"]
    assert {r: (json.loads(c["input_sizes"]), json.loads(c["output_sizes"])) for r, c in first["calls"].items()} == {
        r: (t["input_sizes"][r], t["output_sizes"][r]) for r in map(str, t["entered"])}
    assert [(d["kind"], d["group_ranks"], d["pg_desc"], d["op"], d["seq"], d["entered"], d["missing"], d["root"],
             linked(doc, d)) for d in rest] == [
        (c["kind"], c["group_ranks"], c["pg_desc"], c["op"], c["seq"], c["entered"], c["missing"], False,
         [(c["root"]["group_ranks"], c["root"]["seq"])]) for c in t["consequences"]]
    assert [(e["rank"], e["kind"], e["seq"]) for e in rest[0]["died_of"]] == [(t["died"]["rank"], t["kind"], t["seq"])]
    r = CliRunner().invoke(main, ["hang", str(HANGS / "a2a_size_kills_rank"), "--no-cache"])
    assert r.exit_code == 1 and r.output.splitlines()[2].startswith("  size_mismatch: all_to_all #7 on group [0, 1, 2, 3]")
    assert "explained: rank 0 died of the size_mismatch of all_to_all #7" in r.output


def test_a_coalesced_block_is_one_call_its_tensors_compared_one_by_one():
    """A _coalescing_manager block of two all_reduces (weight [32, 32], bias [32]): gloo's Flight Recorder records
    one entry of both tensors under one sequence number; rank 1 passes 24 bias gradients at step 3. The size mismatch
    names the tensor that differs (the second), with each rank's size of it. Before: the sizes shown, no tensor named."""
    t = truth("coalesced_size_mismatch")
    doc = hang([HANGS / "coalesced_size_mismatch"])
    d = doc["divergence"]
    assert essentials(d) == {k: t[k] for k in essentials(d)} and d["root"] and len(doc["divergences"]) == 1
    assert {r: json.loads(c["input_sizes"]) for r, c in d["calls"].items()} == t["input_sizes"]
    assert d["coalesced"] == {"tensors": t["coalesced"]["tensors"], "differ": [t["tensor"]["index"] + 1]}
    said = ", ".join(f"rank {r} {v}" for r, v in sorted(t["tensor"]["sizes"].items()))
    assert f"tensor {t['tensor']['index'] + 1}: {said}" in d["why"]
    assert all("contextlib" not in (c["frame"] or "") for c in d["calls"].values())  # the training code's line


def test_an_uneven_all_to_all_is_compared_in_total_and_says_which_pair_is_not_recorded():
    """Uneven per-peer splits (rank i sends 8 (1 + i) + 4 j rows to rank j); at step 3 rank 1 sends 8 more rows to
    rank 0 than rank 0 expects. gloo aborts rank 0 (the plugin dumps it), ranks 1 and 2 go on to the gradient
    all_reduce. The dumps hold each rank's total rows: the members send more than they receive, a size_mismatch at
    the all_to_all, the root (before: missing_rank at all_reduce #8, the all_to_all's sizes never compared). Which
    pair disagrees is not in the dumps, and the report says so."""
    t = truth("a2a_uneven_splits")
    for paths in ([HANGS / "a2a_uneven_splits"], dumps_of("a2a_uneven_splits")):
        doc = hang(paths)
        d = doc["divergence"]
        assert essentials(d) == {k: t[k] for k in essentials(d)} and d["root"]
        assert {r: (json.loads(c["input_sizes"]), json.loads(c["output_sizes"])) for r, c in d["calls"].items()} == {
            r: (t["input_sizes"][r], t["output_sizes"][r]) for r in map(str, t["entered"])}
        width = t["input_sizes"]["0"][0][1]
        assert d["a2a_totals"] == {"sent": t["rows"]["sent"] * width, "received": t["rows"]["received"] * width}
        assert "which pair disagrees is not recorded" in d["why"]
        assert_acyclic(doc)


def assert_acyclic(doc) -> None:
    """Root causes first; every other divergence linked only to divergences before it (so the links form no cycle),
    its root causes among the roots, and each of its per-rank explanations pointing at one of its links."""
    ds = doc["divergences"]
    roots = [i for i, d in enumerate(ds) if d["root"]]
    assert roots == list(range(len(roots))) and (not ds or roots)
    for i, d in enumerate(ds):
        assert d["root"] == (not d["links"]) == (not d["roots"]), d
        assert all(j < i for j in d["links"]) and set(d["roots"]) <= set(roots), d
        to = [ds[j] for j in d["links"]]
        for key, role in (("explained_by", "entered"), ("never_reached", "missing"), ("died_of", "entered")):
            for e in d[key]:
                assert any((x["pg_name"], x["group_ranks"], x["seq"]) == (e["pg_name"], e["group_ranks"], e["seq"])
                           and (e["rank"] in x[role] if key != "died_of" else x["kind"] == e["kind"]) for x in to), e
        assert sorted({j for e in d["explained_by"] + d["never_reached"] + d["died_of"] for j in d["links"]
                       if ds[j]["seq"] == e["seq"] and ds[j]["group_ranks"] == e["group_ranks"]}) == d["links"], d


@pytest.mark.parametrize("case", CASES)
@pytest.mark.slow
def test_the_explanation_graph_is_acyclic(case, tmp_path):
    """On every bundled hang, and on the NCCL variants of the torch-written ones (and the pipeline's)."""
    assert_acyclic(hang([HANGS / case]))
    if case in [*TORCH_WRITER, "pp_deadlock"]:
        assert_acyclic(hang([nccl_folder(case, tmp_path / "nccl")]))


def test_divergences_that_wait_only_on_each_other_are_not_a_cycle():
    """Rank 0 waits in group B's #1 and is missing from group A's #1; rank 1 waits in A's #1 and is missing from
    B's #1; no program orders them (one call each). Each would explain the other: the first issued is taken as the
    root, saying so, and the other is linked to it, not the reverse."""
    from traceparse.hang.forensics import _divergence, _root_causes

    def call(rank, group, t):
        return {"rank": rank, "group": (group, (0, 1)), "group_ranks": [0, 1], "pg_name": group, "pg_desc": group,
                "op": "all_reduce", "seq": 1, "peer": None, "input_sizes": "[[4]]", "output_sizes": "[[4]]",
                "input_dtypes": '["Float"]', "state": "scheduled", "outcome": "in_flight", "frames": [], "ord": 0,
                "time_ns": t}

    a, b = call(1, "A", 10), call(0, "B", 20)
    found = [_divergence([0, 1], "missing_rank", [b], [0], [1], 1), _divergence([0, 1], "missing_rank", [a], [1], [0], 1)]
    doc = {"divergences": _root_causes(found, {0: [b], 1: [a]}, {})}
    assert [(d["pg_name"], d["root"], d["links"]) for d in doc["divergences"]] == [("A", True, []), ("B", False, [0])]
    assert "taken as a root cause" in doc["divergences"][0]["why"]
    for d in doc["divergences"]:
        d.pop("_group"), d.pop("_p2p")
    assert_acyclic(doc)


# ------------------------------------------------------------------ NCCL: the same dumps as NCCL writes them
def nccl_folder(case, out: Path) -> Path:
    """The case's dumps as ``nccl_variant`` makes them, named as NCCL's watchdog names its dumps."""
    out.mkdir()
    for f in dumps_of(case):
        if f.suffix == ".json":
            continue  # the plugin's JSON twin of a pickle
        r = rank_of(f)
        (out / f"nccl_trace_rank_{r}").write_bytes(
            pickle.dumps(nccl_variant(pickle.loads(f.read_bytes()), r, JOBS[case]), protocol=2))
    return out


def torch_analyzer(folder: Path) -> list[tuple]:
    """What torch's Flight Recorder analyzer (``torchfrtrace``'s ``build_db``) logs about each collective it finds
    wrong: (group "name:desc", sequence number, missing ranks or culprits, what)."""
    import argparse

    from torch.distributed.flight_recorder.components.builder import build_db

    said = []
    handler = logging.Handler()
    handler.emit = lambda rec: said.append(rec.getMessage())
    log = logging.getLogger("Flight Recorder")
    log.addHandler(handler)
    try:
        details = {f.name: {"rank": rank_of(f), **pickle.loads(f.read_bytes())} for f in sorted(folder.iterdir())}
        build_db(details, argparse.Namespace(verbose=False, just_print_entries=False, allow_incomplete_ranks=True,
                                             mismatch_cap=10, selected_ranks=None, pg_filters=None,
                                             print_stack_trace=False), "2.10")
    finally:
        log.removeHandler(handler)
    out, cur = [], None
    for m in said:
        if (g := re.match(r"(Not all ranks joining collective,|Collective) sequence number: (\d+)", m)):
            cur = {"seq": int(g[2]), "what": "missing" if g[1].startswith("Not") else "error"}
            out.append(cur)
        elif cur is not None and (g := re.match(r"(group info|missing ranks|error msg|collective): (.*)", m)):
            cur[g[1]] = g[2]
        elif m.startswith("We cannot decide"):
            out.append({"what": "undecided"})
    return out


@pytest.mark.parametrize("case", [*TORCH_WRITER, "pp_deadlock"])
@pytest.mark.slow
def test_nccl_variants_give_the_same_answer_and_agree_with_torchs_analyzer(case, tmp_path):
    """NCCL's states (completed, started) and its send and receive entries: the same divergence as the truth; the
    divergences torch's analyzer logs are the ones traceparse finds (it lists them in its own order, a consequence
    first where it meets it first; it cannot decide anything when a rank left no dump)."""
    t = truth(case)
    folder = nccl_folder(case, tmp_path / "nccl")
    doc = hang([folder])
    d = doc["divergence"]
    assert essentials(d) == {k: t[k] for k in essentials(d)} and d["root"]
    torch_says = torch_analyzer(folder)
    if case == "dead_rank_two_buckets":
        assert torch_says and {s["what"] for s in torch_says} == {"undecided"}
        assert {c["outcome"] for c in d["calls"].values()} == {"in_flight"}
        assert {(r["seq"], tuple(a["seq"] for a in r["after"])) for r in doc["last_completed"]} == {
            (t["last_completed"], tuple(t["ended_not_completed"]))}
    elif case == "a2a_size_kills_rank":  # a rank left no dump: torch's analyzer decides nothing
        assert torch_says and {s["what"] for s in torch_says} == {"undecided"}
        assert [(x["kind"], x["seq"], x["missing"], x["links"]) for x in doc["divergences"]] == [
            (t["kind"], t["seq"], [], [])] + [(c["kind"], c["seq"], c["missing"], [0]) for c in t["consequences"]]
    elif case == "pp_deadlock":
        assert [(s["what"], s["collective"], s["error msg"].split(";")[0]) for s in torch_says] == [
            ("error", "nccl:recv 0<-1", "Culprit rank 1")]
        assert sorted((c["rank"], c["op"], c["peer"]) for c in d["p2p"]) == [(0, "recv", 1), (1, "recv", 0)]
    else:
        ours = {(f"{x['pg_name']}:{x['pg_desc']}", x["seq"], frozenset(x["missing"])) for x in doc["divergences"]}
        theirs = {(s["group info"], s["seq"], frozenset(int(r) for r in re.findall(r"\d+", s["missing ranks"])))
                  for s in torch_says}
        assert theirs == ours


# ------------------------------------------------------------------ dumps that contradict each other
def as_is(_rank, dump):
    return dump


def rewritten(case, out: Path, change) -> Path:
    """The case's dumps copied to ``out``, each passed through ``change(rank, dump)`` (None: left out)."""
    out.mkdir()
    for f in dumps_of(case):
        d = change(rank_of(f), pickle.loads(f.read_bytes()))
        if d is not None:
            (out / f.name).write_bytes(pickle.dumps(d, protocol=2))
    return out


def test_two_different_dumps_of_one_rank_are_refused(tmp_path):
    folder = rewritten("same_members_groups", tmp_path / "d", as_is)
    shutil.copy(HANGS / "same_members_groups" / "rank_2", folder / "other_1")  # rank 2's buffer under rank 1's name
    r = CliRunner().invoke(main, ["hang", str(folder), "--no-cache"])
    assert r.exit_code == 2
    assert "a second Flight Recorder dump of rank 1 that is not the same rank's buffer" in r.output
    assert "record 10 is all_reduce #" in r.output


@pytest.mark.slow
def test_the_same_dump_twice_is_read_once(tmp_path):
    folder = rewritten("same_members_groups", tmp_path / "d", as_is)
    shutil.copy(HANGS / "same_members_groups" / "rank_1", folder / "copy_of_rank_1")
    with open_run([folder], use_cache=False) as con:
        assert con.execute("SELECT count(*) FROM fr_dumps WHERE rank = 1").fetchone()[0] == 1
        assert con.execute("SELECT count(*) FROM load_issues WHERE what LIKE 'skipped: another dump of rank 1%'"
                           ).fetchone()[0] == 1
    assert essentials(hang([folder])["divergence"]) == essentials(hang(dumps_of("same_members_groups"))["divergence"])


def declare(rank, ranks):
    """A change giving ``rank``'s dump a pg_config entry for group '1' (metrics) listing ``ranks``."""
    def change(r, d):
        if r == rank:
            d["pg_config"] = {"1": {"name": "1", "desc": "metrics", "ranks": str(ranks)}}
        return d
    return change


def test_dumps_listing_different_ranks_for_one_group_are_a_finding(tmp_path):
    folder = rewritten("same_members_groups", tmp_path / "d", lambda r, d: declare(
        r, [0, 1, 2, 3] if r == 0 else [1, 5, 6])(r, d) if r in (0, 1) else d)
    code, doc = cli(folder)
    assert code == 1
    assert [(c["what"], c["pg_name"], c["declared"]) for c in doc["contradictions"]] == [
        ("dumps list different ranks for one group", "1", {"ranks [0]": [0, 1, 2, 3], "ranks [1]": [1, 5, 6]})]


def test_ranks_calling_on_a_group_another_dump_lists_without_them_are_a_finding(tmp_path):
    """Rank 3's pg_config says metrics is [3, 5, 6]; ranks 0, 1 and 2 (whose gloo dumps list no members) call on
    it: said, not dropped, even where the calls themselves would match."""
    folder = rewritten("same_members_groups", tmp_path / "d", declare(3, [3, 5, 6]))
    code, doc = cli(folder)
    assert code == 1
    assert [(c["pg_name"], c["callers"], c["declared"]) for c in doc["contradictions"]] == [
        ("1", [0, 1, 2], {"ranks [3]": [3, 5, 6]})]
    r = CliRunner().invoke(main, ["hang", str(folder), "--no-cache"])
    assert "contradiction: ranks [0, 1, 2] call on a group whose members rank 3's dump lists without them" in r.output


@pytest.mark.slow
def test_the_plugins_dump_and_torchs_own_of_one_rank_are_read_once_with_the_in_flight_record(tmp_path):
    """With ``profiler.flight_recorder.enable(run_dir)`` NCCL's watchdog writes ``fr_rank<r>`` (torch's name) beside
    the plugin's ``fr_rank<r>.pkl``: two snapshots of one buffer, read once, the in-flight record kept."""
    for f in (HANGS / "skip_allreduce").iterdir():
        shutil.copy(f, tmp_path / f.name)
        if f.suffix == ".pkl":
            shutil.copy(f, tmp_path / f.stem)
    doc = hang([tmp_path])
    assert essentials(doc["divergence"]) == essentials(hang([HANGS / "skip_allreduce"])["divergence"])
    assert doc["divergence"]["instead"]["1"]["at_dump"]["frame"].startswith("stall (")


def test_a_refused_dump_in_a_folder_is_an_error_not_a_missing_rank(tmp_path):
    """A dump found by its content in a folder that holds impossible values (rank 1's dump numbering one collective
    twice) stops the command naming it: skipping it would report rank 1 as dead."""
    case = tmp_path / "run"
    shutil.copytree(HANGS / "torch_default_names", case)
    bad = case / "nccl_trace_rank_1"
    dump = pickle.loads(bad.read_bytes())
    colls = [e for e in dump["entries"] if e.get("collective_seq_id")]
    colls[-1]["collective_seq_id"] = colls[-2]["collective_seq_id"]
    colls[-1]["process_group"] = colls[-2]["process_group"]
    bad.write_bytes(pickle.dumps(dump, protocol=2))
    code, out = cli(case)
    assert code == 2 and "nccl_trace_rank_1" in out and "rank_died" not in out, out


# ------------------------------------------------------------------ the op from the best evidence
def test_an_op_gloo_renames_is_named_by_the_trace():
    """FSDP2's reduce-scatter on gloo: its Flight Recorder says all_reduce (of the full buffer), the traces of step 0
    say c10d::_reduce_scatter_base_; the hung call of step 3 is named by the trace, and says so."""
    t = truth("fsdp_reduce_scatter_hang")
    code, doc = cli(HANGS / "fsdp_reduce_scatter_hang")
    d = doc["divergence"]
    assert code == 1 and essentials(d) == {k: t[k] for k in essentials(d)} and d["op"] == "reduce_scatter"
    assert (d["op_named_by"], d["op_recorded"]) == (f"the trace's {t['trace_op']}", t["dump_op"])
    assert {c["input_sizes"] for c in d["calls"].values()} == {f"[[{t['numel']['input']}]]"}
    assert {r["op"] for r in doc["last_completed"]} == {"all_gather"}  # #7; #8, in flight, named as the root
    assert {a["op"] for r in doc["last_completed"] for a in r["after"]} == {"reduce_scatter"}
    text = CliRunner().invoke(main, ["hang", str(HANGS / "fsdp_reduce_scatter_hang"), "--no-cache"]).output
    assert "op: reduce_scatter (named by the trace's c10d::_reduce_scatter_base_; the dump says all_reduce)" in text
    alone = hang(dumps_of("fsdp_reduce_scatter_hang"))["divergence"]  # the dumps alone: nothing to name it otherwise
    assert (alone["op"], alone["op_named_by"]) == (t["dump_op"], None)


def test_without_traces_an_all_reduce_whose_input_is_the_group_times_its_output_is_a_reduce_scatter(tmp_path):
    """The same dumps with the shard as the all-reduce's output (as a dump recording the reduce-scatter's own tensors
    holds it): named by the sizes; an all-reduce of equal sizes stays one."""
    t = truth("fsdp_reduce_scatter_hang")

    def shard_out(_r, d):
        for e in d["entries"]:
            if e["profiling_name"].endswith("all_reduce"):
                e["output_sizes"] = [[t["numel"]["output"]]]
        return d

    d = hang([rewritten("fsdp_reduce_scatter_hang", tmp_path / "d", shard_out)])["divergence"]
    assert essentials(d) == {k: t[k] for k in essentials(d)}
    assert d["op_named_by"] == "the sizes: input 20,800 elements, output 5,200, on a group of 4"
    assert hang(dumps_of("skip_allreduce"))["divergence"]["op_named_by"] is None


# ------------------------------------------------------------------ membership checked before anything is concluded
def test_one_ranks_trace_of_a_300_rank_job_is_an_incomplete_comparison_not_no_divergence():
    from conftest import public_trace

    trace = public_trace("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    code, doc = cli(trace)
    assert code == 1 and doc["verdict"] == "incomplete" and doc["divergence"] is None
    assert len(doc["incomplete"]) == 11  # the 11 process groups its header lists, each of the 300 ranks
    assert {(g["members"], tuple(g["unseen"])) for g in doc["incomplete"]} == {
        (300, tuple(r for r in range(300) if r != 34))}
    text = CliRunner().invoke(main, ["hang", str(trace), "--no-cache"]).output
    assert "cannot be judged (11 groups: members left no evidence):" in text
    assert "299 of its 300 members left no trace: ranks 0-33, 35-299" in text and "and 6 more groups" in text


def test_from_traces_alone_a_rank_without_a_trace_is_not_concluded_dead(tmp_path):
    """ddp2 with rank 1's trace left out: nothing says rank 1 stopped (rank 0's trace ends where the profiler
    stopped); the group cannot be judged."""
    (tmp_path / "rank0.json.gz").write_bytes((RUNS / "ddp2" / "rank0.json.gz").read_bytes())
    code, doc = cli(tmp_path)
    assert code == 1 and doc["verdict"] == "incomplete" and doc["divergences"] == []
    assert [(g["group_ranks"], g["unseen"]) for g in doc["incomplete"]] == [([0, 1], [1])]


@pytest.mark.parametrize("case", ["torch_default_names"])  # its pg_config lists the members
def test_dropping_the_dumps_of_ranks_that_did_not_cause_it_keeps_the_root_and_says_what_is_unknown(case, tmp_path):
    """A partial world: the dumps of one member of the root's group that did enter it are left out. The rank that
    never entered is still the finding; the one left out is not known either way, and its groups are incomplete."""
    t = truth(case)
    gone = t["entered"][-1]
    doc = hang([rewritten(case, tmp_path / "d", lambda r, d: None if r == gone else d)])
    d = doc["divergence"]
    assert (d["kind"], d["group_ranks"], d["seq"], d["missing"], d["unseen"]) == (
        t["kind"], t["group_ranks"], t["seq"], t["missing"], [gone])
    assert doc["verdict"] == "divergence" and t["group_ranks"] in [g["group_ranks"] for g in doc["incomplete"]]
    assert all(gone in g["unseen"] for g in doc["incomplete"])


@pytest.mark.slow
def test_every_bundled_hang_is_judged_whole():
    """Every member of every group left a dump or is the dead rank named: none is incomplete."""
    for case in CASES:
        doc = hang([HANGS / case])
        assert doc["incomplete"] == [] and doc["verdict"] == ("divergence" if doc["divergence"] else "no_divergence")
