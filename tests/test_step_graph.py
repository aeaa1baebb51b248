"""The step graph (traceparse/vocabulary/step_graph.py): replayed with its measured durations it reproduces every
point of every lane, so the step; a counterfactual's saving is what the replay shortens the step by."""

from __future__ import annotations

import pytest
from conftest import FIXTURE_RUNS
from traces import load, step, thread_name, trace, write, x

from traceparse.load.run import open_run
from traceparse.vocabulary.savings import hidden_cost, rank_excess, work_by_name
from traceparse.vocabulary.step_graph import by_stretch, step_graphs

US = 1000
ALLREDUCE_ARGS = {"Input Dims": [[[4]], [], [], [], [], []], "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"],
                  "Concrete Inputs": ["", "", "", "", "True", "-1"]}
GLOO_ARGS = {"Input Dims": [[4]], "Input type": ["float"], "Concrete Inputs": [""]}
EXTRA_US = 500
TRANSFER_US = 55


def rank_events(extra: bool) -> list:
    """One step of a gloo rank: a matmul, (on the slow rank) an extra op of EXTRA_US, then a blocking all-reduce
    that the group's worker thread runs, released when the last rank's worker starts it, TRANSFER_US of transfer
    after."""
    call = 300 + (EXTRA_US if extra else 0)
    done = 300 + EXTRA_US + 5 + TRANSFER_US  # both ranks complete when the slow one's transfer ends
    evs = [thread_name(1, 1, "python"), thread_name(1, 9, "pt_gloo_runloop"), step(1, 0, 1000),
           x("aten::mm", 100, 200)]
    if extra:
        evs.append(x("slow_extra", 300, EXTRA_US))
    evs += [x("c10d::allreduce_", call, done + 2 - call, args=ALLREDUCE_ARGS),
            x("gloo:all_reduce", call + 5, done - call - 5, cat="user_annotation", tid=9, args=GLOO_ARGS),
            x("aten::add", 870, 30)]
    return evs


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    d = tmp_path_factory.mktemp("two")
    paths = [write(d / f"rank{r}.json", trace(rank_events(extra=r == 1), rank=r, world_size=2, info={"backend": "gloo"}))
             for r in (0, 1)]
    con = load(paths, d / "s.duckdb")
    yield con
    con.close()


def replays_exactly(graph) -> list:
    """The points the measured replay moves (none when the graph holds every dependency)."""
    graph.replay()
    return [(lane.rank, lane.key, lane.times[k], lane.out[k]) for lane in graph.lanes.values()
            for k in range(len(lane.times)) if lane.out[k] != lane.times[k]]


def test_the_replay_of_a_hand_made_step_is_the_step(two_ranks):
    (g,) = step_graphs(two_ranks)
    assert replays_exactly(g) == []
    assert g.replay()["end_ns"] == g.end_ns() == 1000 * US
    assert g.start_ns() == 0


def test_a_slow_ranks_extra_work_costs_the_step_what_the_others_waited(two_ranks):
    """Rank 1's extra op is work rank 0 never does: without it rank 1 issues the all-reduce when rank 0 does, rank 0
    waits EXTRA_US less, and the step ends EXTRA_US sooner; rank 0 does nothing more than its peer and costs nothing."""
    (g,) = step_graphs(two_ranks)
    assert work_by_name(g, 1)[("cpu", "slow_extra")] == (EXTRA_US * US, 1)
    slow = rank_excess(g, 1, [0])
    assert slow["saved_ns"] == EXTRA_US * US and slow["share"] == EXTRA_US / 1000
    assert slow["kind"] == "work"
    assert rank_excess(g, 0, [1])["saved_ns"] == 0
    assert rank_excess(g, 0, []) is None


def test_a_replay_asks_its_scale_only_for_the_lanes_named_and_replays_the_others_as_measured(two_ranks):
    """``replay(lanes=...)``: rank 1's work halved on its lanes alone gives every point the replay of the same scale
    over every lane gives (the scale is 1 elsewhere), and the scale is never asked for rank 0's work."""
    (g,) = step_graphs(two_ranks)
    asked = set()

    def half_of_rank_1(r, *_):
        asked.add(r)
        return 0.5 if r == 1 else 1.0

    def points():
        return {(lane.rank, lane.key, k): v for lane in g.lanes.values() for k, v in enumerate(lane.out)}

    whole = g.replay(by_stretch(half_of_rank_1))
    every = points()
    asked.clear()
    assert g.replay(by_stretch(half_of_rank_1), lanes=g.lanes_of({1})) == whole and points() == every
    assert asked == {1} and whole["end_ns"] < g.end_ns()


def async_events(extra: bool) -> list:
    """One step of a gloo rank whose all-reduce is asynchronous (DDP's last bucket): the call returns at once, the
    main thread then blocks with no op recorded until the last rank has arrived and the data came back (TRANSFER_US
    after), and gloo's worker ends its annotation 50 us after the thread resumed."""
    call = 300 + (EXTRA_US if extra else 0)
    resume = 300 + EXTRA_US + 5 + TRANSFER_US
    evs = [thread_name(1, 1, "python"), thread_name(1, 9, "pt_gloo_runloop"), step(1, 0, 1000),
           x("aten::mm", 100, 200)]
    if extra:
        evs.append(x("slow_extra", 300, EXTRA_US))
    return evs + [x("c10d::allreduce_", call, 2, args=ALLREDUCE_ARGS),
                  x("gloo:all_reduce", call + 5, resume + 50 - call - 5, cat="user_annotation", tid=9, args=GLOO_ARGS),
                  x("aten::add", resume, 30)]


def test_a_gap_in_which_the_last_peer_arrived_is_a_wait_for_it(tmp_path):
    """Rank 0's main thread records no op from its asynchronous all-reduce's call until it resumes, and the operation
    completes (gloo's annotation ends) only after that: neither a completion nor another thread's op ends in the gap,
    but the last rank's arrival does. The gap is a wait for that release, so rank 1's extra op costs the step what
    rank 0 waited: EXTRA_US (read as rank 0's time in no op, it would cost nothing)."""
    paths = [write(tmp_path / f"rank{r}.json", trace(async_events(extra=r == 1), rank=r, world_size=2,
                                                     info={"backend": "gloo"})) for r in (0, 1)]
    con = load(paths, tmp_path / "s.duckdb")
    (g,) = step_graphs(con)
    con.close()
    main = g.lanes[(0, "cpu", 1)]
    k = main.times.index((300 + EXTRA_US + 5 + TRANSFER_US) * US)
    (op,) = {d["op_id"] for d in g.ctx["done"][0]}
    assert (main.kinds[k], main.deps[k]) == ("wait", ("release", 0, op))
    assert replays_exactly(g) == []
    assert rank_excess(g, 1, [0])["saved_ns"] == EXTRA_US * US


def paced_events(pace: float, gap: int, latest_call: int) -> list:
    """One step of a gloo rank that spends much of it in Python: a matmul of 200 us times ``pace``, ``gap`` us in no
    op, the blocking all-reduce (released at ``latest_call``, the later rank's; TRANSFER_US of transfer), 108 us in no
    op, an add of 30 us and 100 us in no op to the step's end."""
    call = 100 + round(200 * pace) + gap
    done = latest_call + 5 + TRANSFER_US
    return [thread_name(1, 1, "python"), thread_name(1, 9, "pt_gloo_runloop"), step(1, 0, done + 2 + 108 + 30 + 100),
            x("aten::mm", 100, round(200 * pace)),
            x("c10d::allreduce_", call, done + 2 - call, args=ALLREDUCE_ARGS),
            x("gloo:all_reduce", call + 5, done - call - 5, cat="user_annotation", tid=9, args=GLOO_ARGS),
            x("aten::add", done + 2 + 108, 30)]


@pytest.mark.parametrize("pace, gap, kind", [(1.5, 450, "slower"), (1.0, 550, "stall")])
def test_time_in_no_op_is_a_stall_only_beyond_what_its_host_stretched(tmp_path, pace, gap, kind):
    """Rank 1 reaches the all-reduce 250 us after rank 0 (whose matmul takes 200 us and its gap 300 us). On a busy
    host a preempted thread loses time inside its ops and between them alike: a rank whose matmul ran 1.5x its
    floor, with its time between ops stretched as much, is its host's (slower), though more of its excess lies
    between ops than in them; one with its ops at their floor and 250 us more in no op stalled (a sleep, a
    collection). The replay runs rank 1's matmul at rank 0's and its time in no op scaled to rank 0's total (the
    ByteDance method, per op name): 100 us before the matmul, ``gap``, 208 us after the all-reduce, against 608."""
    late = 100 + round(200 * pace) + gap
    paths = [write(tmp_path / f"rank{r}.json", trace(paced_events(*((pace, gap) if r else (1.0, 300)), late),
                                                     rank=r, world_size=2, info={"backend": "gloo"})) for r in (0, 1)]
    con = load(paths, tmp_path / "s.duckdb")
    (g,) = step_graphs(con)
    con.close()
    floor = {(r, g.step): 230 * US for r in (0, 1)}  # the matmul and the add at their fastest, on both ranks
    got = rank_excess(g, 1, [0], floor)
    assert got["kind"] == kind
    replayed_call = max(600, (100 + gap) * 608 / (100 + gap + 208) + 200)
    assert got["saved_ns"] == pytest.approx((late - replayed_call) * US, abs=US)


def test_hiding_a_strategys_communication_saves_its_transfer_on_the_path(two_ranks):
    """Both ranks wait on the all-reduce's transfer after the slow rank arrives, then run the rest of the step: were
    the transfer hidden, the step would end TRANSFER_US sooner; the wait for the slow rank stays (imbalance's)."""
    (g,) = step_graphs(two_ranks)
    (strategy,) = {d["strategy"] for d in g.ctx["by_op"].values()}
    assert hidden_cost(g, strategy) == {"saved_ns": TRANSFER_US * US, "share": TRANSFER_US / 1000}
    assert hidden_cost(g, "no such strategy")["saved_ns"] == 0
    assert replays_exactly(g) == []  # a counterfactual leaves the measured replay as it was


def test_the_measured_replay_of_a_bundled_run_reproduces_every_point():
    """ddp2 here; every bundled run and public GPU trace in tests/test_critical_path.py
    (test_the_path_is_the_measured_step), which loads each once."""
    with open_run([str(FIXTURE_RUNS / "ddp2")]) as con:
        graphs = step_graphs(con)
        assert [g.step for g in graphs] == [2, 3]
        for g in graphs:
            assert replays_exactly(g) == []
