"""The process group of gloo collectives on multi-axis meshes (traceparse/store/groups.py).

gloo's c10d ops name no group; the loader infers it. The data-parallel replicas of a mesh run the
same tensor-parallel all-reduces, of the same size, at about the same moment, so timing alone can
mistake a TP all-reduce for a DP one (or the reverse). These tests hold the inference to the
configuration (truth.json, computed by the generator, never read from the traces) on:

- every committed run of the two shapes, each generated several times with different timings
  (repeat runs, a rank sleeping a random 0-2 x delay_ms before every block's forward);
- worst cases built from those runs: the second data-parallel replica replaced by a copy of the
  first (same events, same clock), so every DP peer ends every TP all-reduce at exactly the same
  nanosecond as its replica; with and without the mesh's group descriptions;
- the other multi-axis runs with their group descriptions removed (HSDP, EP x DP, TP + SP x DP,
  ring CP x DP), where only threads, sizes, sequences and timing are left.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import committed_runs

pytestmark = pytest.mark.slow

SHAPES = {
    "dp2_tp2": ["dp2_tp2", "dp2_tp2_rep2", "dp2_tp2_delay1", "dp2_tp2_delay2", "straggler_dp2_tp2"],
    "dp2_pp2_tp2": ["dp2_pp2_tp2", "dp2_pp2_tp2_rep2", "dp2_pp2_tp2_delay4", "dp2_pp2_tp2_delay1"],
}
RUNS = committed_runs(*(n for ns in SHAPES.values() for n in ns))


def truth_of(run_dir):
    return json.loads((Path(run_dir) / "truth.json").read_text())


def by_group(con, truth):
    """(got, expected): Counters of (rank, op, group, bytes_in, strategy) per profiled step."""
    got = Counter()
    for rank, op, group, b_in, strategy, n in con.execute(
        "SELECT rank, op, group_ranks, bytes_in, strategy, count(*) FROM comm_ops WHERE step IS NOT NULL "
        "AND op NOT IN ('send', 'recv') GROUP BY ALL"
    ).fetchall():
        got[(rank, op, tuple(group or ()), b_in, strategy)] += n / truth["profiled_steps"]
    exp = Counter()
    for r in truth["comm"]:
        if r["op"] not in ("send", "recv"):
            exp[(r["rank"], r["op"], tuple(r["group_ranks"]), r["bytes_in"], r["strategy"])] += r["count"]
    return got, exp


def per_rank_step(con, truth):
    """{strategy: all_reduce operations per rank per profiled step}."""
    n = truth["world_size"] * truth["profiled_steps"]
    return {s: c / n for s, c in con.execute(
        "SELECT coalesce(strategy, 'untagged'), count(*) FROM comm_ops WHERE step IS NOT NULL AND op = 'all_reduce' "
        "GROUP BY ALL").fetchall()}


def expected_per_rank_step(truth):
    out = Counter()
    for r in truth["comm"]:
        if r["op"] == "all_reduce":
            out[r["strategy"]] += r["count"] / truth["world_size"]
    return dict(out)


def assert_exact(con, truth):
    got, exp = by_group(con, truth)
    assert got == exp, f"missing {dict(exp - got)}, unexpected {dict(got - exp)}"
    layout = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM layout").fetchall()}
    assert {k: layout[k] for k in truth["layout"]} == truth["layout"]


@pytest.mark.parametrize("name", [n for ns in SHAPES.values() for n in ns])
def test_repeat_runs_attribute_every_collective_to_its_group(name, store):
    con, truth = store(RUNS / name), truth_of(RUNS / name)
    assert_exact(con, truth)
    assert per_rank_step(con, truth) == expected_per_rank_step(truth)
    # the mesh's collectives name no group in the trace: every one was inferred
    sources = {s for (s,) in con.execute(
        "SELECT DISTINCT group_source FROM comm_ops WHERE op NOT IN ('send', 'recv') AND step IS NOT NULL").fetchall()}
    assert sources and all(s.startswith("inferred: its worker thread") for s in sources), sources


def test_the_repeat_runs_differ_in_timing(store):
    """The repeats are not copies: how far apart rank 0 and its DP replica end their k-th TP all-reduce
    differs from run to run."""
    for names in SHAPES.values():
        medians = set()
        for name in names[:3]:
            truth = truth_of(RUNS / name)
            replica = truth["world_size"] // truth["layout"]["dp"]
            (med,) = store(RUNS / name).execute(
                """WITH a AS (SELECT rank, exec_ts_ns + exec_dur_ns AS e,
                                     row_number() OVER (PARTITION BY rank ORDER BY host_ts_ns) AS k
                              FROM comm_ops WHERE strategy = 'tp' AND step IS NOT NULL)
                   SELECT median(abs(a.e - b.e)) FROM a JOIN a b ON b.k = a.k WHERE a.rank = 0 AND b.rank = ?""",
                [replica]).fetchone()
            medians.add(med)
        assert len(medians) == 3


# --- worst cases built from the committed runs ------------------------------------------------------

def rebuild(run, out, clones=None, strip_names=False, hashed_names=False):
    """A copy of fixtures/runs/<run> in ``out``: rank r's events replaced by those of rank clones[r] (same
    clock: the replicas end every operation at the same nanosecond); group descriptions removed, or
    group names made non-numeric (no creation order), if asked. Headers (rank, groups, trace id) stay."""
    out.mkdir(parents=True)
    truth = truth_of(RUNS / run)
    docs = {}
    for r in range(truth["world_size"]):
        with gzip.open(RUNS / run / f"rank{r}.json.gz", "rt") as f:
            docs[r] = json.load(f)
    for r, doc in docs.items():
        doc = dict(doc)
        src = (clones or {}).get(r)
        if src is not None:
            doc["traceEvents"] = docs[src]["traceEvents"]
            doc["baseTimeNanoseconds"] = docs[src]["baseTimeNanoseconds"]
        info = dict(doc["distributedInfo"])
        groups = [dict(g) for g in info["pg_config"]]
        for g in groups:
            if strip_names:
                g["pg_desc"] = "undefined"
            if hashed_names:
                g["pg_name"] = f"pg{g['pg_name']}x"
        info["pg_config"] = groups
        doc["distributedInfo"] = info
        with gzip.open(out / f"rank{r}.json.gz", "wt") as f:
            json.dump(doc, f)
    (out / "truth.json").write_text(json.dumps(truth))
    return out


LOCKSTEP = {
    "dp2_tp2": {2: 0, 3: 1},                          # mesh (dp, tp): replica 1 = copy of replica 0
    "dp2_pp2_tp2": {4: 0, 5: 1, 6: 2, 7: 3},          # mesh (dp, pp, tp)
}
WORST = {
    "lockstep dp2_tp2": ("dp2_tp2", LOCKSTEP["dp2_tp2"], False, False),
    "lockstep dp2_tp2, no descriptions": ("dp2_tp2", LOCKSTEP["dp2_tp2"], True, False),
    "lockstep dp2_tp2, names not numbered": ("dp2_tp2", LOCKSTEP["dp2_tp2"], False, True),
    "lockstep dp2_pp2_tp2, no descriptions": ("dp2_pp2_tp2", LOCKSTEP["dp2_pp2_tp2"], True, False),
    "hsdp, no descriptions": ("hsdp_r2_s2", None, True, False),
    "ep x dp, no descriptions": ("dp4_ep2", None, True, False),
    "tp+sp x dp, no descriptions": ("dp2_tp2_sp", None, True, False),
    "ring cp x dp, no descriptions": ("dp2_cp2_ring", None, True, False),
}


@pytest.mark.parametrize("run, clones, strip, hashed", WORST.values(), ids=WORST.keys())
def test_worst_cases_attribute_every_collective_to_its_group(tmp_path, store, run, clones, strip, hashed):
    path = rebuild(run, tmp_path / run, clones, strip, hashed)
    con, truth = store(path), truth_of(path)
    if clones:
        # the construction: a DP replica ends every TP all-reduce exactly when its copy does
        ends = dict(con.execute(
            """SELECT rank, list(exec_ts_ns + exec_dur_ns ORDER BY exec_ts_ns) FROM comm_ops
               WHERE op = 'all_reduce' AND step IS NOT NULL GROUP BY rank""").fetchall())
        assert all(ends[r] == ends[src] for r, src in clones.items())
    assert_exact(con, truth)
    cols = ["strategy", "variant"]
    got = Counter()
    for row in con.execute(f"SELECT rank, op, bytes_in, {', '.join(cols)} FROM comm_ops WHERE step IS NOT NULL").fetchall():
        got[row] += 1 / truth["profiled_steps"]
    exp = Counter()
    for r in truth["comm"]:
        exp[(r["rank"], r["op"], r["bytes_in"], r["strategy"], r["variant"])] += r["count"]
    assert got == exp


def test_point_to_point_in_the_smallest_group_naming_the_same_peer(store):
    """dp2_cp2_ring: ranks 0 and 1 are ranks 0 and 1 of the world group as well as of their cp group, so
    both groups name the same peer; the ring is the cp group's (ranks 2 and 3 have no such twin)."""
    con = store(RUNS / "dp2_cp2_ring")
    got = set(con.execute(
        "SELECT rank, list_sort(group_ranks)::VARCHAR, group_source FROM comm_ops WHERE op IN ('send', 'recv')"
    ).fetchall())
    assert {(r, g) for r, g, _ in got} == {(0, "[0, 1]"), (1, "[0, 1]"), (2, "[2, 3]"), (3, "[2, 3]")}
    assert all("smallest" in how for r, _, how in got if r < 2)


# --- the joint assignment of a rank's threads ------------------------------------------------------

def test_threads_follow_group_creation_order_and_fill_at_most_two_per_group():
    from traceparse.store.groups import Group, _assign

    dp, tp, world = Group("1", "d", (0, 2), None), Group("3", "t", (0, 1), None), Group("0", "w", (0, 1, 2, 3), None)
    # timing cannot tell dp from tp for any thread (equal costs), the world fits the TP threads best
    costs = {
        10: {world: (100.0, ""), dp: (0.0, ""), tp: (0.0, "")},   # FSDP threads: gathers of 2 ranks
        11: {world: (100.0, ""), dp: (0.0, ""), tp: (0.0, "")},
        20: {world: (0.0, ""), dp: (1.0, ""), tp: (1.0, "")},     # TP threads
        21: {world: (0.0, ""), dp: (1.0, ""), tp: (1.0, "")},
    }
    got = {t: g.name for t, (g, _) in _assign(costs, [world, dp, tp]).items()}
    # lower thread ids were created with an earlier group, and a group has two threads
    assert got == {10: "1", 11: "1", 20: "3", 21: "3"}
    # creation order unknown (names not numbered): thread by thread
    named = [Group(f"g{g.name}", g.desc, g.members, None) for g in (world, dp, tp)]
    by_name = {g.name: n for g, n in zip((world, dp, tp), named, strict=True)}
    costs = {t: {by_name[g.name]: c for g, c in cs.items()} for t, cs in costs.items()}
    got = {t: g.name for t, (g, _) in _assign(costs, named).items()}
    assert got[20] == got[21] == "g0"
