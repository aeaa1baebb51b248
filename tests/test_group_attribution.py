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
  ring CP x DP), where only threads, sizes, sequences and timing are left;
- lanes paired on their first few operations only (``SAMPLE`` made smaller than the runs' lanes): the
  pairs are those of the whole sequence, the cost per lane is bounded, and every collective still gets
  its group.
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


# --- a lane is paired on its first operations ------------------------------------------------------
# A lane's sequence is its first SAMPLE operations (traceparse/store/groups.py): the bundled runs have at most 32 a
# lane, so these tests make SAMPLE smaller than their lanes.

def load_with(tmp_path, monkeypatch, path, before=None, **settings):
    """A fresh store of the run at ``path``, with the groups module's ``settings`` (e.g. SAMPLE), ``before(con)``
    called just before group inference."""
    import traceparse.store.build as build
    from traceparse.load.run import connect, load_run
    from traceparse.store import groups

    for k, v in settings.items():
        monkeypatch.setattr(groups, k, v)
    if before:
        infer = build.infer_groups

        def wrapped(con):
            before(con)
            infer(con)

        monkeypatch.setattr(build, "infer_groups", wrapped)
    db = tmp_path / "store" / "s.duckdb"
    db.parent.mkdir()
    return connect(load_run([path], db=db)[0])


@pytest.mark.parametrize("name", ["dp2_tp2", "dp2_pp2_tp2", "hsdp_r2_s2"])
def test_the_first_operations_of_a_lane_pair_as_in_its_whole_sequence(tmp_path, monkeypatch, name):
    """A lane's first k operations get the partners they get in its whole sequence, from the members' operations
    up to the sample's reach (fewer than all of them), so its costs are those of its first k operations paired
    against everything; sizes and framework context are still every operation's."""
    from traceparse.store import groups as g

    k, checked = 3, []

    def check(con):
        cands = g._candidates(con)
        judged = sorted(r for r, gs in cands.items() if len(gs) > 1)
        monkeypatch.setattr(g, "SAMPLE", 10**9)
        whole = g._lanes(con, judged)
        every = g._members(con, whole, cands)
        monkeypatch.setattr(g, "SAMPLE", k)
        first = g._lanes(con, judged)
        read = g._members(con, first, cands)
        assert [(w.rank, w.thread) for w in whole] == [(f.rank, f.thread) for f in first]
        for w, f in zip(whole, first, strict=True):
            assert [o.op_id for o in f.items] == [o.op_id for o in w.items[:k]]
            assert [o.end for o in w.items] == sorted(o.end for o in w.items)
            assert (f.implied, f.wrapped, f.fsdp, f.gloo) == (w.implied, w.wrapped, w.fsdp, w.gloo)
            for group in cands[f.rank]:
                if not g._ruled_out(f, group):
                    for m in g._checked(group, f.rank):
                        assert g._match(f.items, m, read) == g._match(w.items, m, every)[:k]
            assert g._lane_costs(f, cands[f.rank], read) == g._lane_costs(f, cands[f.rank], every)
            checked.append(len(w.items))
        # the members' operations read are the first of each kind, fewer than all
        assert all(t.ends == every[key].ends[:len(t.ends)] for key, t in read.items())
        assert sum(len(t.ends) for t in read.values()) < sum(len(t.ends) for t in every.values())

    load_with(tmp_path, monkeypatch, RUNS / name, check)
    assert checked and max(checked) > 2 * k


@pytest.mark.parametrize("run, clones, strip, hashed", [v for k, v in WORST.items() if "lockstep" in k]
                         + [("dp2_pp2_tp2_delay4", None, False, False)],
                         ids=[k for k in WORST if "lockstep" in k] + ["dp2_pp2_tp2_delay4"])
def test_lanes_paired_on_a_few_operations_attribute_every_one(tmp_path, monkeypatch, run, clones, strip, hashed):
    """With SAMPLE far below the lanes' length, every pairing takes at most SAMPLE operations of a lane, and every
    collective (those past the sample too) still gets its group, in the worst cases as well."""
    from traceparse.store import groups

    k, sizes, match = 3, [], groups._match

    def counted(items, m, by_kind):
        sizes.append(len(items))
        return match(items, m, by_kind)

    monkeypatch.setattr(groups, "_match", counted)
    path = rebuild(run, tmp_path / run, clones, strip, hashed) if clones else RUNS / run
    con = load_with(tmp_path, monkeypatch, path, SAMPLE=k)
    assert_exact(con, truth_of(path))
    longest = con.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM comm_ops "
                          "WHERE group_source LIKE 'inferred: its worker thread%' GROUP BY rank, exec_stream)").fetchone()[0]
    assert sizes and max(sizes) == k < longest / 2
