"""The store's vocabulary on tiny hand-written traces, each answer worked out by hand.

Timestamps are written in µs (as Kineto writes them) and read back in ns. The tables:
main_threads, step_windows, comm_intervals, compute_intervals, window_totals,
window_strategy_comm (traceparse/vocabulary/*.sql, documented in traceparse/store/schema.py).
"""

import json

import pytest
from traces import load, rows, step, thread_name, trace, write, x

US = 1000  # ns per µs

ALLREDUCE_ARGS = {"Input Dims": [[[4]], [], [], [], [], []], "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"],
                  "Concrete Inputs": ["", "", "", "", "True", "-1"]}
GLOO_ARGS = {"Input Dims": [[4]], "Input type": ["float"], "Concrete Inputs": [""]}


@pytest.fixture
def store(tmp_path):
    def get(events, **kw):
        path = write(tmp_path / "rank0.json", trace(events, rank=0, world_size=1, **kw))
        return load(path, tmp_path / "s.duckdb")
    return get


def compute(con):
    return {(r["name"]): (r["start_ns"], r["end_ns"], r["step"], r["in_window"])
            for r in rows(con, "SELECT * FROM compute_intervals ORDER BY start_ns")}


def totals(con):
    return {r["step"]: r for r in rows(con, "SELECT * FROM window_totals ORDER BY step")}


def test_nested_ops_count_once(store):
    con = store([
        step(1, 0, 1000),
        x("aten::linear", 100, 200),
        x("aten::addmm", 150, 100),  # inside aten::linear
        x("aten::relu", 400, 50),
    ])
    assert set(compute(con)) == {"aten::linear", "aten::addmm", "aten::relu"}
    (w,) = totals(con).values()
    assert w["compute_ns"] == (200 + 50) * US
    assert w["window_ns"] == 1000 * US
    assert w["comm_ns"] == 0


def test_communication_call_inside_an_op(store):
    """A wrapper enclosing a call and the ops inside the call are not compute; an op beside the
    call inside the wrapper is. The call without execution is the communication time."""
    con = store([
        step(1, 0, 1000),
        x("aten::mm", 100, 50),
        x("RingShift", 500, 200),                    # encloses the call: not compute
        x("aten::mm", 510, 20),                      # beside the call: compute
        x("c10d::allreduce_", 550, 50, args=ALLREDUCE_ARGS),
        x("aten::empty", 560, 10),                   # inside the call: not compute
        x("_c10d_functional::wait_tensor", 650, 30),  # a wait outside any call
    ])
    got = rows(con, "SELECT name, start_ns, end_ns FROM compute_intervals ORDER BY start_ns")
    assert [(r["name"], r["start_ns"], r["end_ns"]) for r in got] == [
        ("aten::mm", 100 * US, 150 * US), ("aten::mm", 510 * US, 530 * US)]
    comm = rows(con, "SELECT part, name, start_ns, end_ns, counted FROM comm_intervals ORDER BY start_ns")
    assert [(r["part"], r["name"], r["start_ns"], r["end_ns"], r["counted"]) for r in comm] == [
        ("call", "c10d::allreduce_", 550 * US, 600 * US, True),
        ("wait", "_c10d_functional::wait_tensor", 650 * US, 680 * US, False),
    ]
    (w,) = totals(con).values()
    assert w["compute_ns"] == 70 * US
    assert w["comm_ns"] == 50 * US
    assert w["hidden_ns"] == 0


def gpu_events():
    """Two compute kernels on two streams overlapping each other and an NCCL kernel on a third."""
    def kernel(name, ts, dur, stream, corr):
        return x(name, ts, dur, cat="kernel", pid=0, tid=stream, stream=stream, correlation=corr, device=0)

    def launch(ts, corr):
        return x("cudaLaunchKernel", ts, 2, cat="cuda_runtime", correlation=corr)

    return [
        step(1, 0, 300),
        launch(1, 11), launch(4, 12), launch(7, 13),
        kernel("sgemm_a", 10, 100, 7, 11),                       # [10, 110]
        kernel("sgemm_b", 60, 100, 8, 12),                       # [60, 160]
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 90, 120, 9, 13),  # [90, 210]
    ]


def test_kernel_overlapping_two_others(store):
    con = store(gpu_events())
    assert set(compute(con)) == {"sgemm_a", "sgemm_b"}
    (ex,) = rows(con, "SELECT * FROM comm_intervals WHERE part = 'exec'")
    assert (ex["start_ns"], ex["end_ns"], ex["stream"], ex["counted"]) == (90 * US, 210 * US, 9, True)
    assert ex["anchor_ns"] == 7 * US  # placed in a window by its launch
    (w,) = totals(con).values()
    assert w["compute_ns"] == (160 - 10) * US
    assert w["comm_ns"] == 120 * US
    assert w["hidden_ns"] == (160 - 90) * US
    (s,) = rows(con, "SELECT * FROM window_strategy_comm")
    assert (s["strategy"], s["comm_ns"], s["hidden_ns"]) == ("untagged", 120 * US, 70 * US)
    assert rows(con, "SELECT part FROM compute_intervals") == [{"part": "kernel"}] * 2


def test_event_crossing_a_step_boundary(store):
    """An interval belongs whole to the window its start falls in; before the first step, to none."""
    con = store([
        x("aten::zeros", 50, 10),   # before the first step: no window
        step(1, 100, 100),
        step(2, 200, 100),
        x("aten::mm", 180, 50),     # starts in step 1, ends in step 2
        x("aten::add", 250, 10),
    ])
    c = compute(con)
    assert c["aten::zeros"][2:] == (None, False)
    assert c["aten::mm"][2:] == (1, True)
    t = totals(con)
    assert t[1]["compute_ns"] == 50 * US
    assert t[2]["compute_ns"] == 10 * US
    assert [(r["step"], r["start_ns"], r["end_ns"]) for r in rows(con, "SELECT * FROM step_windows ORDER BY step")] \
        == [(1, 100 * US, 200 * US), (2, 200 * US, 300 * US)]


def test_trace_without_profiler_step(store):
    """One whole-trace window (step NULL); the main thread is the one with the most cpu_op time."""
    con = store([
        thread_name(1, 1, "loader"),
        x("aten::copy_", 0, 100, tid=1),
        x("aten::mm", 50, 300, tid=2),
        x("aten::add", 400, 20, tid=2),
    ])
    (m,) = rows(con, "SELECT * FROM main_threads")
    assert (m["tid"], m["chosen_by"]) == (2, "most cpu_op time (no ProfilerStep#N)")
    (w,) = rows(con, "SELECT * FROM step_windows")
    assert (w["step"], w["start_ns"], w["end_ns"], w["source"]) == (None, 0, 420 * US, "whole trace (no ProfilerStep#N)")
    (t,) = totals(con).values()
    assert t["step"] is None
    assert t["compute_ns"] == 320 * US  # the main thread's ops only
    assert all(r["in_window"] for r in rows(con, "SELECT in_window FROM compute_intervals"))


def test_gloo_worker_thread(store):
    """gloo: the call on the main thread, the execution on the group's worker thread; the execution is
    the communication time, and the main thread's compute while it runs is hidden communication."""
    con = store([
        thread_name(1, 1, "python"),
        thread_name(1, 9, "pt_gloo_runloop"),
        step(1, 0, 1000),
        x("c10d::allreduce_", 100, 100, args=ALLREDUCE_ARGS),
        x("gloo:all_reduce", 120, 140, cat="user_annotation", tid=9, args=GLOO_ARGS),
        x("aten::mm", 210, 100),
        x("aten::add", 500, 10, tid=9),  # not the main thread: not compute
    ], info={"backend": "gloo"})
    (m,) = rows(con, "SELECT tid, chosen_by FROM main_threads")
    assert m == {"tid": 1, "chosen_by": "ProfilerStep#N annotations"}
    comm = rows(con, "SELECT part, tid, start_ns, end_ns, counted FROM comm_intervals ORDER BY part")
    assert [(r["part"], r["tid"], r["start_ns"], r["end_ns"], r["counted"]) for r in comm] == [
        ("call", 1, 100 * US, 200 * US, False), ("exec", 9, 120 * US, 260 * US, True)]
    (w,) = totals(con).values()
    assert w["comm_ns"] == 140 * US
    assert w["compute_ns"] == 100 * US
    assert w["hidden_ns"] == (260 - 210) * US


def test_macros_union_and_intersect(store):
    con = store([step(1, 0, 10)])
    u = rows(con, """SELECT k, s, e FROM interval_union(
        'SELECT k, s, e FROM (VALUES (1, 0, 10), (1, 5, 20), (1, 20, 25), (1, 30, 40), (2, 0, 5)) v(k, s, e)')
        ORDER BY k, s""")
    assert [(r["k"], r["s"], r["e"]) for r in u] == [(1, 0, 25), (1, 30, 40), (2, 0, 5)]
    i = rows(con, """SELECT k, s, e FROM interval_intersect(
        'SELECT k, k AS g, s, e FROM (VALUES (1, 0, 10), (1, 5, 20), (1, 30, 40)) v(k, s, e)',
        'SELECT k, s, e FROM (VALUES (1, 8, 35), (1, 12, 14)) v(k, s, e)') ORDER BY s""")
    assert [(r["s"], r["e"]) for r in i] == [(8, 20), (30, 35)]


def _covered(intervals):
    """The set of unit slots [t, t + 1) the integer intervals cover: the union, counted by brute force."""
    return {t for s, e in intervals for t in range(s, e)}


def test_macros_agree_with_brute_force_on_random_intervals(store):
    """interval_union_ns (one pass) and interval_intersect (ASOF joins) against unit-slot counting, on seeded
    random intervals: nested, overlapping, touching, zero-length, several keys."""
    import random

    con = store([step(1, 0, 10)])
    rnd = random.Random(7)
    for _ in range(30):
        a = [(rnd.randrange(3), s, s + rnd.choice([0, 1, 2, 5, 13])) for s in rnd.sample(range(200), 25)]
        b = [(rnd.randrange(3), s, s + rnd.choice([0, 1, 3, 8, 21])) for s in rnd.sample(range(200), 25)]
        qa = "SELECT * FROM (VALUES " + ", ".join(f"({k}, {s}, {e})" for k, s, e in a) + ") v(k, s, e)"
        qb = "SELECT * FROM (VALUES " + ", ".join(f"({k}, {s}, {e})" for k, s, e in b) + ") v(k, s, e)"
        ns = {r["k"]: r["ns"] for r in rows(con, f"SELECT k, ns FROM interval_union_ns('{qa}')")}
        assert ns == {k: len(_covered([(s, e) for kk, s, e in a if kk == k])) for k in {k for k, _, _ in a}}
        got = rows(con, f"SELECT k, sum(e - s) AS ns FROM interval_intersect("
                        f"'SELECT k, k AS g, s, e FROM ({qa})', '{qb}') GROUP BY k")
        want = {k: len(_covered([(s, e) for kk, s, e in a if kk == k]) & _covered([(s, e) for kk, s, e in b if kk == k]))
                for k in {k for k, _, _ in a}}
        assert {r["k"]: r["ns"] for r in got if r["ns"]} == {k: n for k, n in want.items() if n}


def test_recorded_inputs_are_the_ops_whose_inputs_were_recorded(store):
    """recorded_inputs (traceparse/vocabulary/recorded_inputs.sql): an op with record_shapes' args, its step and
    what was recorded; an op without them is not a row."""
    from traceparse.store.query import define

    con = store([
        step(1, 0, 1000),
        x("aten::linear", 100, 200, args={"Input Dims": [[2, 8], [4, 8]], "Input type": ["float", "float"],
                                          "Concrete Inputs": ["", ""]}),
        x("aten::topk", 400, 20, args={"Input Dims": [[2, 4], []], "Input type": ["float", "Scalar"],
                                       "Concrete Inputs": ["", "2"]}),
        x("aten::relu", 500, 50),  # no args: nothing recorded
    ])
    define(con, "traceparse.vocabulary", "recorded_inputs.sql")
    got = rows(con, "SELECT name, step, input_dims, json_extract_string(concrete_inputs, '$[1]') AS k "
                    "FROM recorded_inputs ORDER BY name")
    assert [(r["name"], r["step"], r["k"]) for r in got] == [("aten::linear", 1, ""), ("aten::topk", 1, "2")]
    assert [json.loads(r["input_dims"]) for r in got] == [[[2, 8], [4, 8]], [[2, 4], []]]


def test_name_totals_count_and_time_what_ran_by_name_and_step(store):
    """name_totals (traceparse/vocabulary/name_totals.sql): per rank, category, name and step, the events and their
    total duration."""
    from traceparse.store.query import define

    con = store([
        x("aten::mm", 10, 30),  # before the first step: not in one
        step(1, 100, 1000),
        x("aten::mm", 200, 50),
        x("aten::mm", 300, 70),
        x("aten::relu", 400, 5),
    ])
    define(con, "traceparse.vocabulary", "name_totals.sql")
    got = {(r["name"], r["step"]): (r["calls"], r["total_ns"])
           for r in rows(con, "SELECT * FROM name_totals WHERE cat = 'cpu_op'")}
    assert got == {("aten::mm", None): (1, 30 * US), ("aten::mm", 1): (2, 120 * US), ("aten::relu", 1): (1, 5 * US)}


def test_host_ops_are_the_cpu_ops_and_annotations_of_every_thread_and_threads_keep_their_names(store):
    """host_ops and thread_names (traceparse/vocabulary/host_ops.sql)."""
    from traceparse.store.query import define

    con = store([
        thread_name(1, 1, "MainThread"),
        thread_name(1, 7, "pt_autograd_0"),
        step(1, 0, 1000),
        x("aten::mm", 100, 50),
        x("## forward ##", 90, 300, cat="user_annotation"),
        x("autograd::engine::evaluate_function: MmBackward0", 500, 80, tid=7),
        x("cudaLaunchKernel", 120, 5, cat="cuda_runtime"),  # a runtime call: not a host op
    ])
    define(con, "traceparse.vocabulary", "host_ops.sql")
    got = {(r["tid"], r["name"]): (r["ts_ns"], r["end_ns"], r["step"])
           for r in rows(con, "SELECT * FROM host_ops")}
    assert got == {(1, "ProfilerStep#1"): (0, 1000 * US, 1),  # an annotation too
                   (1, "aten::mm"): (100 * US, 150 * US, 1), (1, "## forward ##"): (90 * US, 390 * US, 1),
                   (7, "autograd::engine::evaluate_function: MmBackward0"): (500 * US, 580 * US, 1)}
    names = {r["tid"]: r["thread_name"] for r in rows(con, "SELECT * FROM thread_names")}
    assert names == {1: "MainThread", 7: "pt_autograd_0"}


def test_row_groups_streams_groups_across_chunks():
    """store.query.row_groups: consecutive rows with equal keys as one group each, whatever the chunks cut (a chunk of
    2 rows here), in the query's order, every row once."""
    import duckdb

    from traceparse.store.query import row_groups

    con = duckdb.connect()
    got = [(k, [r["v"] for r in g]) for k, g in row_groups(
        con, "SELECT * FROM (VALUES (0, 1, 'a'), (0, 1, 'b'), (0, 1, 'c'), (0, 2, 'd'), (1, 1, 'e'), (1, 1, 'f')) "
             "t(rank, step, v) ORDER BY rank, step, v", ("rank", "step"), chunk=2)]
    assert got == [((0, 1), ["a", "b", "c"]), ((0, 2), ["d"]), ((1, 1), ["e", "f"])]
    assert list(row_groups(con, "SELECT 1 AS rank WHERE false", ("rank",))) == []
