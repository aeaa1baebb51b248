"""The bubble check on the pipeline fixtures (real gloo runs) and on a GPU trace.

Expected values come from truth.json's layout and the formula of docs/parallelism.md 3.2, textbook schedule
orders are built here, and the measured bubble is recomputed from the raw trace with plain json.
"""

import json
from fractions import Fraction
from pathlib import Path

import pytest
from conftest import committed_runs, public_trace, run_check
from raw_trace import length, ns, read, union

from traceparse.analyzers import bubble
from traceparse.analyzers.base import INLINE_P2P
from traceparse.models import pipeline
from traceparse.thresholds import check_thresholds as thresholds

PIPELINES = ["pp4_gpipe_m4", "pp4_gpipe_m8", "pp4_1f1b_m4", "pp4_1f1b_m8", "pp4_interleaved_m4",
             "pp4_interleaved_m8", "pp4_1f1b_heavy_m4", "dp2_pp2_tp2"]
RUNS = committed_runs(*PIPELINES)
COMM_PREFIXES = ("c10d::", "_c10d_functional::", "gloo:", "nccl:", "record_param_comms")


@pytest.fixture(scope="module")
def check(store):
    """check(path) -> (Result, truth or None)."""
    done = {}

    def get(path):
        path = Path(path)
        if path not in done:
            truth = json.loads((path / "truth.json").read_text()) if path.is_dir() else None
            done[path] = run_check(bubble, store(path)), truth
        return done[path]

    return get


def formula(layout):
    """docs/parallelism.md 3.2: (N_PP - 1) / (m + N_PP - 1), interleaved (N_PP - 1) / (v m + N_PP - 1)."""
    n, m, v = layout["pp"], layout["microbatches"], layout["virtual_stages"]
    return Fraction(n - 1, (v if layout["pp_schedule"] == "interleaved_1f1b" else 1) * m + n - 1)


def gpipe_order(n, m, stage):  # noqa: ARG001 (the same signature as the other orders)
    return [("F", stage, i) for i in range(m)] + [("B", stage, i) for i in range(m)]


def one_f_one_b_order(n, m, stage):
    warmup = min(n - 1 - stage, m)
    order = [("F", stage, i) for i in range(warmup)]
    for i in range(m - warmup):
        order += [("F", stage, warmup + i), ("B", stage, i)]
    return order + [("B", stage, i) for i in range(m - warmup, m)]


@pytest.mark.parametrize("n,m", [(4, 4), (4, 8), (2, 4), (8, 3)])
@pytest.mark.parametrize("build", [gpipe_order, one_f_one_b_order])
def test_simulating_textbook_orders_gives_the_formula(build, n, m):
    orders = {s: build(n, m, s) for s in range(n)}
    for backward in (1, 2):
        assert set(pipeline.simulate(orders, backward).values()) == {Fraction(n - 1, m + n - 1)}


def test_simulation_refuses_an_order_that_cannot_finish():
    assert pipeline.simulate({0: [("B", 0, 0), ("F", 0, 0)], 1: [("F", 1, 0), ("B", 1, 0)]}) is None


@pytest.mark.parametrize("name", PIPELINES)
@pytest.mark.slow
def test_reconstructed_schedule_and_its_ideal_bubble_equal_the_formula(name, check):
    result, truth = check(RUNS / name)
    lay = truth["layout"]
    rec = result.numbers["reconstructed"]
    assert (rec["pp_schedule"], rec["microbatches"], rec["virtual_stages"]) == (
        lay["pp_schedule"], lay["microbatches"], lay["virtual_stages"])
    assert (result.numbers["schedule"], result.numbers["microbatches"], result.numbers["virtual_stages"]) == (
        lay["pp_schedule"], lay["microbatches"], lay["virtual_stages"])
    assert result.numbers["expected"] == float(formula(lay))
    assert result.numbers["simulated"] == float(formula(lay))
    assert result.numbers["simulated_b2f"] == float(formula(lay))
    v = lay["virtual_stages"]
    assert result.numbers["expected_megatron"] == (lay["pp"] - 1) / (v * lay["microbatches"])
    assert result.numbers["excess"] == pytest.approx(result.numbers["measured"] - float(formula(lay)))


@pytest.mark.parametrize("name,build", [("pp4_gpipe_m4", gpipe_order), ("pp4_gpipe_m8", gpipe_order),
                                        ("pp4_1f1b_m4", one_f_one_b_order), ("pp4_1f1b_m8", one_f_one_b_order),
                                        ("pp4_1f1b_heavy_m4", one_f_one_b_order),
                                        ("dp2_pp2_tp2", one_f_one_b_order)])
@pytest.mark.slow
def test_reconstructed_order_is_the_textbook_one(name, build, check):
    result, truth = check(RUNS / name)
    n, m = truth["layout"]["pp"], truth["layout"]["microbatches"]
    rows = result.tables["schedule"]
    assert len(rows) == truth["world_size"] * truth["profiled_steps"]
    for row in rows:
        assert row["order"] == " ".join(f"{k}{i}" for k, _, i in build(n, m, row["stage"])), row


def _bubble_from_raw(path: Path) -> float:
    """1 - compute/step per rank and step, mean; compute = main-thread cpu_ops minus communication calls."""

    def covered(iv):
        return length(union(iv))

    fractions = []
    for f in sorted(path.glob("rank*.json.gz")):
        events = read(f)["traceEvents"]
        steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
        main = steps[0]["tid"]
        ops = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"]) for e in events
               if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e.get("tid") == main and ns(e["dur"]) > 0]
        for st in steps:
            lo, hi = ns(st["ts"]), ns(st["ts"]) + ns(st["dur"])
            clip = [(max(s, lo), min(e, hi), n) for s, e, n in ops if s < hi and e > lo]
            busy = covered([(s, e) for s, e, _ in clip]) - covered([(s, e) for s, e, n in clip if n.startswith(COMM_PREFIXES)])
            fractions.append(1 - busy / (hi - lo))
    return sum(fractions) / len(fractions)


@pytest.mark.parametrize("name", ["pp4_1f1b_m4", "pp4_interleaved_m4"])
@pytest.mark.slow
def test_measured_bubble_matches_the_raw_trace(name, check):
    result, _ = check(RUNS / name)
    assert result.numbers["measured"] == pytest.approx(_bubble_from_raw(RUNS / name), abs=1e-6)
    per = result.numbers["per_stage"]
    assert [p["rank"] for p in per] == [0, 1, 2, 3] and [p["stage"] for p in per] == [0, 1, 2, 3]
    assert all(0 < p["measured"] < 1 and 0 < p["compute_ns"] < p["step_ns"] for p in per)


@pytest.mark.slow
def test_more_microbatches_give_a_smaller_bubble(check):
    for kind in ("gpipe", "1f1b"):
        m4, _ = check(RUNS / f"pp4_{kind}_m4")
        m8, _ = check(RUNS / f"pp4_{kind}_m8")
        assert m8.numbers["expected"] < m4.numbers["expected"]
        assert m8.numbers["simulated"] < m4.numbers["simulated"]
    # measured, GPipe: 0.867 at m=4, 0.798 at m=8
    assert check(RUNS / "pp4_gpipe_m8")[0].numbers["measured"] < check(RUNS / "pp4_gpipe_m4")[0].numbers["measured"]


@pytest.mark.xfail(reason="1F1B measured on the loaded 2-core machine: 0.802 at m=4 but 0.834 at m=8; gloo "
                          "send/recv latency (ms per hop, 4 processes on 2 cores) dominates the ~0.5 ms micro-batch "
                          "compute, so waiting grows with m", strict=False)
@pytest.mark.slow  # over 2 s: the fast tier keeps its area's other tests
def test_more_microbatches_give_a_smaller_measured_bubble_1f1b(check):
    assert check(RUNS / "pp4_1f1b_m8")[0].numbers["measured"] < check(RUNS / "pp4_1f1b_m4")[0].numbers["measured"]


@pytest.mark.parametrize("m", [4, 8])
@pytest.mark.slow
def test_interleaving_gives_a_smaller_bubble(m, check):
    inter, _ = check(RUNS / f"pp4_interleaved_m{m}")
    plain, _ = check(RUNS / f"pp4_1f1b_m{m}")
    assert inter.numbers["expected"] < plain.numbers["expected"]
    # the schedule's own bubble, as reconstructed from the trace; measured (noisy here): m=4 0.891 vs 0.802 (not
    # smaller), m=8 0.802 vs 0.834
    assert inter.numbers["simulated"] < plain.numbers["simulated"]


def test_the_heavy_stage_is_the_bottleneck(check):
    result, truth = check(RUNS / "pp4_1f1b_heavy_m4")
    assert result.numbers["bottleneck_stage"] == truth["imbalance"]["heavy_stage"]
    heavy = [p for p in result.numbers["per_stage"] if p["stage"] == truth["imbalance"]["heavy_stage"]]
    assert [p["rank"] for p in heavy] == [truth["imbalance"]["heavy_rank"]]
    if result.status != "ok":
        assert any(f"stage {truth['imbalance']['heavy_stage']} has" in f and "compute floor" in f for f in result.findings)


def test_status_follows_what_the_excess_costs(check):
    """The excess over the schedule is priced by replay (the pp transfers free, the bottleneck stage at the mean) and
    that share grades the check; on gloo the ranks run send/recv inline, so it is reported, not graded."""
    result, _ = check(RUNS / "pp4_gpipe_m4")
    n = result.numbers
    assert n["cannot_fix"] == INLINE_P2P  # CPU ranks: gloo
    assert result.status == "ok"
    (finding,) = [f for f in result.findings if f.startswith("The measured bubble")]
    assert f"({n['cost']['share']:.0%}) shorter" in finding and finding.endswith("(reported, not graded).")
    limits = thresholds()["bubble"]
    for share, want in ((0.049, "ok"), (limits["warn_saving_share"], "warn"), (limits["fail_saving_share"], "fail")):
        assert bubble._status(limits, 0.3, {"share": share}, None) == want
        assert bubble._status(limits, 0.3, {"share": share}, INLINE_P2P) == "ok"
    excess = n["excess"]  # without a replay, the excess grades it
    want = "fail" if excess >= limits["fail_excess"] else "warn" if excess >= limits["warn_excess"] else "ok"
    assert bubble._status(limits, excess, None, None) == want
    assert bubble._status(limits, None, None, None) == "ok"  # no expected bubble: nothing to grade


def test_the_pipeline_cost_is_at_least_its_transfers(store):
    """Replaying with fewer or shorter durations never ends a step later (the graph is max-plus), so freeing the pp
    transfers and balancing the heavy stage saves at least what freeing the transfers alone does."""
    from traceparse.vocabulary import savings
    from traceparse.vocabulary.step_graph import step_graphs

    con = store(RUNS / "pp4_1f1b_heavy_m4")
    graphs = step_graphs(con)
    both = savings.pipeline_cost(graphs, {2}, 1 / 1.5)
    transfers = savings.over_steps(graphs, lambda g: savings.hidden_cost(g, "pp"))
    assert all(b["saved_ns"] >= t["saved_ns"] for b, t in zip(both["per_step"], transfers["per_step"], strict=True))
    assert both["saved_per_step_ns"] > transfers["saved_per_step_ns"] > 0


def test_not_applicable_without_a_pipeline(check):
    result, _ = check(RUNS / "ddp4")
    assert result.status == "not_applicable" and result.reason


@pytest.mark.slow
def test_not_applicable_on_a_gpu_trace(check):
    result, _ = check(public_trace("tracelens/mi300_resnet_ddp_rank0.json.gz"))
    assert result.status == "not_applicable" and result.reason


# ---------------------------------------------------------------- zero-bubble schedules (backward split into I and W)
ZERO_BUBBLE_RUNS = {"pp4_interleaved_zb_m4": "ScheduleInterleavedZeroBubble", "pp4_zbv_m8": "ScheduleZBVZeroBubble",
                    "pp4_dualpipev_m8": "ScheduleDualPipeV"}


def ramp(n, m, v, backward):
    """By hand: the rank holding stage N_PP - 1 (looped or V-shaped) gets its first input after N_PP - 1 forwards
    (F = 1) and then has v m (F + B) of work, B = I + W = ``backward``; every rank has that much, so the makespan is
    at least (N_PP - 1) + v m (1 + B), and an order that leaves no other gap idles (N_PP - 1) / that on every rank."""
    return Fraction(n - 1, 1) / (n - 1 + v * m * (1 + backward))


def torch_order(cls_name, n, m):
    """The order torch's zero-bubble schedule class gives every rank, [(kind, stage, mb)], fused pairs flattened."""
    import types

    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    cls = getattr(schedules, cls_name)
    o = types.SimpleNamespace(pp_group_size=n, _n_microbatches=m, num_stages=2 * n, n_local_stages=2)
    if cls_name == "ScheduleInterleavedZeroBubble":
        o.number_of_rounds = max(1, m // n)
        o.microbatches_per_round = m // o.number_of_rounds
        o.pipeline_order = {r: cls._calculate_single_rank_operations(o, r) for r in range(n)}
        order = cls._add_bubbles_to_actions(o, 2 * n)
    else:
        order = {r: cls._calculate_single_rank_operations(o, r) for r in range(n)}
    return {r: [(a.computation_type.value, a.stage_index, a.microbatch_index)
                for act in acts if act is not None for a in (act.sub_actions or (act,))] for r, acts in order.items()}


def test_simulating_split_backwards_by_hand():
    # 2 ranks, one stage each, m = 2, F = I = W = 1: rank 1 runs F0 [1,2] I0 [2,3] F1 [3,4] I1 [4,5] W0 [5,6] W1
    # [6,7]; rank 0 runs F0 [0,1] F1 [1,2], waits for I(1,0), I0 [3,4] W0 [4,5] (before W(1,0): a W waits only for its
    # own stage's I), I1 [5,6] W1 [6,7]: makespan 7, 6 busy, 1 idle on each rank = the ramp
    orders = {0: [("F", 0, 0), ("F", 0, 1), ("I", 0, 0), ("W", 0, 0), ("I", 0, 1), ("W", 0, 1)],
              1: [("F", 1, 0), ("I", 1, 0), ("F", 1, 1), ("I", 1, 1), ("W", 1, 0), ("W", 1, 1)]}
    assert pipeline.simulate(orders, 2) == {0: Fraction(1, 7), 1: Fraction(1, 7)} == {r: ramp(2, 2, 1, 2) for r in orders}
    # F = B = 1, I = W = 1/2: rank 1 F0 [1,2] I0 [2,2.5] F1 [2.5,3.5] I1 [3.5,4] W0 W1 [4,5]; rank 0 F0 F1 [0,2], I0
    # [2.5,3] W0 [3,3.5], I1 [4,4.5] W1 [4.5,5]: makespan 5, 4 busy, 1 idle = the ramp again
    assert set(pipeline.simulate(orders, 1).values()) == {Fraction(1, 5)} == {ramp(2, 2, 1, 1)}
    # a W cannot run before its own I; an I of stage 0 not before the I of stage 1
    assert pipeline.simulate({0: [("F", 0, 0), ("W", 0, 0), ("I", 0, 0)], 1: [("F", 1, 0), ("I", 1, 0), ("W", 1, 0)]}) is None
    assert pipeline.simulate({0: [("F", 0, 0), ("I", 0, 0), ("W", 0, 0)], 1: [("F", 1, 0), ("W", 1, 0), ("I", 1, 0)]}) is None


@pytest.mark.parametrize("cls_name,n,m", [
    ("ScheduleInterleavedZeroBubble", 4, 4), ("ScheduleInterleavedZeroBubble", 4, 8), ("ScheduleInterleavedZeroBubble", 2, 4),
    ("ScheduleZBVZeroBubble", 4, 8), ("ScheduleZBVZeroBubble", 4, 7), ("ScheduleZBVZeroBubble", 3, 6),
    ("ScheduleDualPipeV", 4, 8), ("ScheduleDualPipeV", 4, 12), ("ScheduleDualPipeV", 3, 6)])
@pytest.mark.slow
def test_torch_zero_bubble_orders_idle_only_the_ramp(cls_name, n, m):
    orders = torch_order(cls_name, n, m)
    # F = I = W (the cost model the zero-bubble schedules are built for): nothing but the ramp, on every rank
    assert set(pipeline.simulate(orders, 2).values()) == {ramp(n, m, 2, 2)} == {pipeline.ramp_floor(n, m, 2)}
    # F = B, I = W = B/2: interleaved zero bubble and DualPipeV still reach the ramp; ZB-V (tuned for F = I = W) does not
    at_equal_fb = set(pipeline.simulate(orders, 1).values())
    if cls_name == "ScheduleZBVZeroBubble":
        assert len(at_equal_fb) == 1 and at_equal_fb.pop() > ramp(n, m, 2, 1)
    else:
        assert at_equal_fb == {ramp(n, m, 2, 1)}


@pytest.mark.slow
def test_zbv_below_2n_minus_1_microbatches_idles_more_than_the_ramp():
    orders = torch_order("ScheduleZBVZeroBubble", 4, 4)  # torch pads ZB-V to 2 N_PP - 1 = 7 micro-batches
    assert set(pipeline.simulate(orders, 2).values()) == {Fraction(1, 5)} and Fraction(1, 5) > ramp(4, 4, 2, 2)


@pytest.mark.parametrize("name", ZERO_BUBBLE_RUNS)
@pytest.mark.slow
def test_zero_bubble_runs_reconstructed_and_replayed(name, check):
    result, truth = check(RUNS / name)
    lay = truth["layout"]
    n, m, v = lay["pp"], lay["microbatches"], lay["virtual_stages"]
    rec = result.numbers["reconstructed"]
    assert rec["from"] == "PP:<stage><action><mb> annotations"
    want = (lay["pp_schedule"], m, v)
    assert (rec["pp_schedule"], rec["microbatches"], rec["virtual_stages"]) == want
    assert (result.numbers["schedule"], result.numbers["microbatches"], result.numbers["virtual_stages"]) == want
    # replay with F = I = W: the ramp, derived by hand (pp4 v2: m=4 -> 3/27 = 1/9, m=8 -> 3/51 = 1/17)
    assert result.numbers["simulated_b2f"] == float(ramp(n, m, v, 2)) == result.numbers["ramp_floor"]
    # replay with F = B (I = W = B/2): the ramp for interleaved ZB (3/19) and DualPipeV (3/35); ZB-V's order idles
    # N_PP = 4 units instead of 3 (1/9, the replay of torch's own order below)
    if lay["pp_schedule"] == "zbv_zero_bubble":
        assert result.numbers["simulated"] == float(Fraction(n, 2 * v * m + n)) == 1 / 9
    else:
        assert result.numbers["simulated"] == float(ramp(n, m, v, 1))
    # expected (docs/parallelism.md 3.2): zero bubble "~0 in the ideal"; DualPipeV is not in the notes: the replay
    if lay["pp_schedule"] == "dualpipe_v":
        assert result.numbers["expected"] == result.numbers["simulated"]
        assert result.numbers["expected_formula"].startswith("none in docs/parallelism.md 3.2")
    else:
        assert result.numbers["expected"] == 0.0 and result.numbers["expected_megatron"] == 0.0
    # the measured bubble is reported, graded against the expectation
    measured = result.numbers["measured"]
    assert 0 < measured < 1
    assert result.numbers["excess"] == pytest.approx(measured - result.numbers["expected"])
    assert [p["stage"] for p in result.numbers["per_stage"]] == list(range(n))
    assert any(f"measured bubble {measured:.1%}" in f for f in result.findings) or result.status == "ok"
    assert not any("could not be reconstructed" in f or "W does not fill" in f for f in result.findings)


@pytest.mark.parametrize("name", ZERO_BUBBLE_RUNS)
@pytest.mark.slow
def test_zero_bubble_runs_reconstruct_torchs_order(name, check):
    result, truth = check(RUNS / name)
    orders = torch_order(ZERO_BUBBLE_RUNS[name], truth["layout"]["pp"], truth["layout"]["microbatches"])
    rows = result.tables["schedule"]
    assert len(rows) == truth["world_size"] * truth["profiled_steps"]
    for row in rows:
        assert row["order"] == " ".join(f"{k}{i}@{s}" for k, s, i in orders[row["rank"]]), row


@pytest.mark.parametrize("name", ZERO_BUBBLE_RUNS)
@pytest.mark.slow
def test_zero_bubble_measured_bubble_matches_the_raw_trace(name, check):
    result, _ = check(RUNS / name)
    assert result.numbers["measured"] == pytest.approx(_bubble_from_raw(RUNS / name), abs=1e-6)


@pytest.mark.parametrize("zb,plain", [("pp4_interleaved_zb_m4", "pp4_interleaved_m4"), ("pp4_zbv_m8", "pp4_interleaved_m8"),
                                      ("pp4_dualpipev_m8", "pp4_interleaved_m8")])
@pytest.mark.slow
def test_zero_bubble_replays_below_interleaved_1f1b(zb, plain, check):
    # same N_PP, m and v: W fills what interleaved 1F1B leaves idle
    assert check(RUNS / zb)[0].numbers["simulated"] < check(RUNS / plain)[0].numbers["simulated"]
    assert check(RUNS / zb)[0].numbers["simulated_b2f"] < check(RUNS / plain)[0].numbers["simulated_b2f"]


@pytest.mark.parametrize("n,m", [(4, 4), (4, 8), (2, 4)])
@pytest.mark.parametrize("schedule,build", [("gpipe", gpipe_order), ("1f1b", one_f_one_b_order)])
def test_textbook_orders_are_the_schedules(schedule, build, n, m):
    assert pipeline.textbook_orders(schedule, n, m) == {s: build(n, m, s) for s in range(n)}


def test_a_stage_twice_as_slow_sets_the_pace():
    """GPipe, 2 stages, 2 micro-batches, F = B = 1 on stage 0 and 2 on stage 1: stage 1 runs F0 F1 B0 B1 at
    [1,3] [3,5] [5,7] [7,9]; stage 0's backwards wait for them: B0 at [7,8], B1 at [9,10]. Makespan 10; stage 0
    computes 4 of it, stage 1 8."""
    span, busy = pipeline.replay(pipeline.textbook_orders("gpipe", 2, 2), lambda _, stage: Fraction((1, 2)[stage]))
    assert {r: 1 - busy[r] / span for r in busy} == {0: Fraction(6, 10), 1: Fraction(2, 10)}
