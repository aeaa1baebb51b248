"""imbalance's straggler on 4-rank GPU runs made from a real NCCL trace (tests/gpu_straggler.py).

Each run is four copies of one rank of a real recommendation job (NCCL all-to-alls and all-reduces,
60 collectives in 6 ProfilerSteps) with a stall schedule: which rank's process is held up, and by how
much, just before each collective. What the check must say comes from the schedule (who was made
late), and the per-rank numbers (waits, last arrivals) from the NCCL kernels as the generator wrote
them, never from traceparse. HTA's get_potential_stragglers on the same runs, for comparison: with
num_candidates=1 it returns rank 2 on "straggler", and rank 1 on "rotating" and rank 0 on "balanced",
where nobody straggles; with the default 2 it returns [0, 1] on all three.
"""

import gzip
import json
import statistics
from collections import defaultdict
from itertools import pairwise

import pytest
from conftest import public_trace, run_check
from gpu_straggler import SOURCE, is_nccl_kernel, load_source, nccl_kernels, write_run

from traceparse.analyzers import imbalance

pytestmark = pytest.mark.slow

N = 4
STALL = 5000  # µs: the straggler's stall before a collective (a step is ~77 ms, with 10 collectives)
NOISE = 1250  # µs: another rank's smaller stall, where the straggler does not stall
STRAGGLER = 2
# per step of 10 collectives (7 all-to-alls, 3 all-reduces), where the straggler stalls: 6 of 10, so it is
# last at 60% of the collectives, below the 2/3 an earlier rule asked for; at the other four one of the
# other ranks, in turn, stalls a little (NOISE) and is last there
STRAGGLER_AT = (0, 3, 6, 7, 8, 9)
OTHERS = [r for r in range(N) if r != STRAGGLER]


def mostly_one_rank(n_collectives=60):
    return [{STRAGGLER: STALL} if k % 10 in STRAGGLER_AT else {OTHERS[k % len(OTHERS)]: NOISE}
            for k in range(n_collectives)]


def rotating(n_collectives=60):
    """Every rank stalls as often and as long: a balanced run with noise."""
    return [{k % N: STALL} for k in range(n_collectives)]


SCHEDULES = {"straggler": mostly_one_rank(), "balanced": [], "rotating": rotating()}


@pytest.fixture(scope="module")
def source():
    return load_source(public_trace(SOURCE))


@pytest.fixture(scope="module")
def run(tmp_path_factory, source, store):
    made = {}

    def get(name, metadata=True):
        """(paths, kernels, imbalance result) of the schedule's run, with or without process-group metadata."""
        if (name, metadata) not in made:
            paths, kernels = write_run(tmp_path_factory.mktemp(name), SCHEDULES[name], N, doc=source,
                                       metadata=metadata)
            made[(name, metadata)] = paths, kernels, run_check(imbalance, store(*paths))
        return made[(name, metadata)]
    return get


def expected_arrivals(kernels):
    """Per rank: mean wait, total wait and strict last arrivals by NCCL kernel start (as written)."""
    starts = kernels
    waits, last = defaultdict(list), defaultdict(int)
    for k in range(len(starts[0])):
        at = {r: starts[r][k][0] for r in starts}
        latest = max(at.values())
        if sum(t == latest for t in at.values()) == 1:
            last[max(at, key=at.get)] += 1
        for r, t in at.items():
            waits[r].append((latest - t) * 1000)  # µs -> ns
    return {r: {"wait_ns": round(statistics.fmean(w)), "total_wait_ns": sum(w), "last_arrivals": last[r]}
            for r, w in waits.items()}


def test_generated_runs_are_consistent(run, source):
    """Read back: no overlap on a stream, no activity before its launch, one end per collective, CPU nesting kept."""
    paths, kernels, _ = run("straggler")
    docs = [json.loads(gzip.decompress(p.read_bytes())) for p in paths]
    assert [d["distributedInfo"]["rank"] for d in docs] == list(range(N))
    assert all(d["distributedInfo"]["pg_config"][0]["ranks"] == list(range(N)) for d in docs)
    for d in docs:
        ev = d["traceEvents"]
        launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"
                  and "correlation" in e.get("args", {})}
        streams = defaultdict(list)
        for e in ev:
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                streams[(e["pid"], e["tid"])].append(e)
                assert e["ts"] >= launch[e["args"]["correlation"]], e["name"]
        for acts in streams.values():
            acts.sort(key=lambda e: e["ts"])
            assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in pairwise(acts))
        assert partial_overlaps(ev) == partial_overlaps(source["traceEvents"])
        assert len([e for e in ev if is_nccl_kernel(e)]) == 60
    assert {r: nccl_kernels(d) for r, d in enumerate(docs)} == kernels
    for k in range(60):  # every collective's kernels end together
        assert len({kernels[r][k][1] for r in kernels}) == 1, k


def partial_overlaps(events) -> int:
    """CPU events on one thread that overlap without nesting (a time warp keeps this count)."""
    by_thread = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime"):
            by_thread[(e["pid"], e["tid"])].append((e["ts"], -(e["ts"] + e["dur"])))
    n = 0
    for spans in by_thread.values():
        open_ends = []
        for ts, neg_end in sorted(spans):
            while open_ends and open_ends[-1] <= ts:
                open_ends.pop()
            if open_ends and -neg_end > open_ends[-1]:
                n += 1
            open_ends.append(-neg_end)
    return n


def test_stalled_rank_is_last_where_it_stalls(run):
    """The run is what the schedule says: at each collective the rank that stalled starts its kernel last,
    and its kernel is the shortest (the others wait inside theirs)."""
    _, kernels, _ = run("straggler")
    for k, stalls in enumerate(SCHEDULES["straggler"]):
        (stalled,) = stalls
        at = {r: kernels[r][k][0] for r in kernels}
        length = {r: kernels[r][k][1] - kernels[r][k][0] for r in kernels}
        assert [r for r in at if at[r] == max(at.values())] == [stalled], k
        assert [r for r in at if length[r] == min(length.values())] == [stalled], k


def test_straggler_named_on_gpu(run):
    _, kernels, res = run("straggler")
    n = res.numbers
    assert n["straggler_rank"] == STRAGGLER
    assert n["matched_collectives"] == 60 and n["unmatched_collectives"] == 0
    e = n["straggler"]
    assert e["arrival"] == {"execution": 60}  # NCCL kernel starts
    # last at 6 of every 10 collectives: a clear majority, yet below 2/3
    assert e["last_fraction"] == len(STRAGGLER_AT) / 10 < 2 / 3
    assert e["chance_fraction"] == 1 / N
    expected = expected_arrivals(kernels)
    for row in n["per_rank"]:
        assert {k: row[k] for k in ("wait_ns", "total_wait_ns", "last_arrivals")} == expected[row["rank"]]
    others = statistics.median(expected[r]["wait_ns"] for r in OTHERS)
    assert e["own_mean_wait_ns"] == expected[STRAGGLER]["wait_ns"] == min(x["wait_ns"] for x in expected.values())
    assert e["others_median_wait_ns"] == others
    # named on the arrivals alone (every rank does the same work), consistently over the 6 steps
    assert e["by_arrivals"] and e["p"] <= 0.01 and e["steps"] == 6 and e["latest_in_steps"] == 6
    # what it costs: at each collective it is last at, its kernel start minus the next latest one's, per step
    leads = []
    for k in range(len(kernels[STRAGGLER])):
        starts = sorted(kernels[r][k][0] for r in range(N))
        if kernels[STRAGGLER][k][0] == starts[-1] > starts[-2]:
            leads.append(starts[-1] - starts[-2])
    # (within a microsecond a step: after the clocks are aligned, a member's next kernel may start a few hundred
    # nanoseconds before the straggler's last one, which the cost counts once)
    assert e["lost_per_step_ns"] == pytest.approx(sum(leads) * 1000 / 6, abs=1e3)
    assert res.status in ("warn", "fail") and any(f"Rank {STRAGGLER}" in f and "straggler" in f for f in res.findings)


@pytest.mark.parametrize("name", ["balanced", "rotating"])
def test_no_straggler_in_balanced_gpu_runs(run, name):
    _, kernels, res = run(name)
    n = res.numbers
    assert n["straggler_rank"] is None and not any("straggler" in f for f in res.findings)
    assert n["matched_collectives"] == 60
    expected = expected_arrivals(kernels)
    for row in n["per_rank"]:
        assert {k: row[k] for k in ("wait_ns", "total_wait_ns", "last_arrivals")} == expected[row["rank"]]
    if name == "balanced":  # identical copies: every kernel starts with the others', nobody is last
        assert all(x == {"wait_ns": 0, "total_wait_ns": 0, "last_arrivals": 0} for x in expected.values())
    else:  # each rank last equally often
        assert len({x["last_arrivals"] for x in expected.values()}) == 1


# ------------------------------------------------------------------ no process-group metadata
# Traces of PyTorch 2.0 and older: no pg_config, no Seq / Process Group args; only the world size. The
# collectives' group is the default group the world size states, found by matching each NCCL stream's
# whole sequence on every member (traceparse/store/groups.py); the result must be the metadata's.
ARRIVALS = ("rank", "wait_ns", "total_wait_ns", "last_arrivals")


def nccl_group_sources(con):
    return con.execute("SELECT group_source, group_ranks, count(*) FROM comm_ops "
                       "WHERE kernel LIKE 'ncclKernel%' GROUP BY ALL ORDER BY ALL").fetchall()


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_matching_without_group_metadata(run, store, name):
    *_, full = run(name)
    paths, _, bare = run(name, metadata=False)
    ((how, members, n),) = nccl_group_sources(store(*paths))
    assert how.startswith("inferred: default group") and "NCCL stream" in how
    assert members == list(range(N)) and n == 60 * N
    for key in ("matched_collectives", "unmatched_collectives", "straggler_rank"):
        assert bare.numbers[key] == full.numbers[key], key
    assert bare.numbers["matched_collectives"] == 60
    assert ([{k: row[k] for k in ARRIVALS} for row in bare.numbers["per_rank"]]
            == [{k: row[k] for k in ARRIVALS} for row in full.numbers["per_rank"]])


def rewrite(paths, edit):
    """Apply ``edit(rank, doc)`` to each written rank document."""
    for r, p in enumerate(paths):
        d = json.loads(gzip.decompress(p.read_bytes()))
        edit(r, d)
        p.write_bytes(gzip.compress(json.dumps(d).encode(), compresslevel=1))


def all_reduce_on_own_stream(_rank, doc, stream=99):
    """Move the rank's all-reduce kernels to a CUDA stream of their own (a second communicator)."""
    for e in doc["traceEvents"]:
        if is_nccl_kernel(e) and "AllReduce" in e["name"]:
            e["tid"] = e["args"]["stream"] = stream


def test_nothing_matched_without_every_member(run, store):
    """3 of the 4 ranks loaded (world_size 4): the default group cannot be judged, nothing is resolved."""
    paths, _, _ = run("straggler", metadata=False)
    con = store(*paths[:3])
    assert [(how, members) for how, members, _ in nccl_group_sources(con)] == [(None, None)]
    n = run_check(imbalance, con).numbers
    assert n["matched_collectives"] == 0 and n["straggler_rank"] is None


def test_default_group_not_guessed(tmp_path, source, store):
    """Only a stream whose whole sequence matches on every member is the default group's. Rank 3's
    all-reduces (on a second stream) have other sizes: that stream is no world collective, stays
    unresolved on every rank, the all-to-all stream is matched. Where both streams match the whole
    world, which of the two communicators is the default group is unknown: neither is resolved."""
    odd, same = tmp_path / "odd", tmp_path / "same"
    paths, _ = write_run(odd, SCHEDULES["straggler"], N, doc=source, metadata=False)

    def odd_sizes(r, doc):
        all_reduce_on_own_stream(r, doc)
        for e in doc["traceEvents"]:
            if r == 3 and e.get("name") == "nccl:all_reduce":
                e["args"]["Input Dims"] = [[2 * e["args"]["Input Dims"][0][0]]]
    rewrite(paths, odd_sizes)
    got = {(how is not None, members is not None) for how, members, _ in nccl_group_sources(store(*paths))}
    assert got == {(True, True), (False, False)}
    con = store(*paths)
    assert con.execute("SELECT DISTINCT op, group_ranks IS NULL FROM comm_ops WHERE kernel LIKE 'ncclKernel%' "
                       "ORDER BY 1").fetchall() == [("all_reduce", True), ("all_to_all", False)]
    assert run_check(imbalance, con).numbers["matched_collectives"] == 42

    paths, _ = write_run(same, SCHEDULES["straggler"], N, doc=source, metadata=False)
    rewrite(paths, all_reduce_on_own_stream)
    assert [(how, members) for how, members, _ in nccl_group_sources(store(*paths))] == [(None, None)]
