"""whatif: a collective's cost per call (traceparse/whatif/calls.py; docs/whatif.md, Collectives per call).

The ring model's steps and bytes are the textbook's (Thakur, Rabenseifner and Gropp 2005), worked here by hand; the
fit is checked on costs made from a known latency and bandwidth; the calls a target's ZeRO stage issues are compared
with the calls the fixture runs of that stage really made (FSDP2 and ZeroRedundancyOptimizer jobs on gloo, read from
their traces), and the forecast's ratio with the one worked from the run's configuration.
"""

import json
import math
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceparse.cli import main
from traceparse.document import document
from traceparse.load.run import open_run
from traceparse.whatif import whatif_document
from traceparse.whatif.calls import cost_ratio, fit, group, ring, target_calls

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def test_the_ring_models_steps_and_bytes():
    # all-reduce = reduce-scatter + all-gather: 2 (g - 1) rounds, each rank sending 2 (g - 1) / g of the tensor
    assert ring("all_reduce", 4, 1000) == (6, 1500)
    assert ring("all_gather", 4, 1000) == (3, 750) and ring("reduce_scatter", 2, 1000) == (1, 500)
    assert ring("broadcast", 4, 1000) == (3, 1000)  # the root's tensor passed along the ring, whole
    assert ring("all_reduce", 1, 1000) == (0, 0)  # a group of one moves nothing


def test_the_fit_finds_a_known_latency_and_bandwidth():
    alpha, beta = 20_000.0, 0.05  # 20 us per step, 20 GB/s
    rnd = random.Random(1)
    calls = [(op, g, n) for op in ("all_reduce", "all_gather", "reduce_scatter") for g in (2, 4, 8)
             for n in (1 << 16, 1 << 20, 1 << 24)]
    transfers = [(op, g, n, (alpha * s + beta * m) * rnd.uniform(0.98, 1.02))
                 for op, g, n in calls for s, m in [ring(op, g, n)]]
    got = fit(transfers)
    assert got["shown"] == ["alpha", "beta"]
    assert got["alpha"] == pytest.approx(alpha, rel=0.02) and got["beta"] == pytest.approx(beta, rel=0.02)
    assert got["rms_error"] < 0.02


def test_a_cost_the_bytes_do_not_show_is_all_latency():
    # every call takes 3 ms whatever its size (give or take 5%): the calls show no bandwidth term
    rnd = random.Random(2)
    transfers = [("all_reduce", 2, n, 3e6 * rnd.uniform(0.95, 1.05)) for n in (1 << 18, 1 << 20, 1 << 22) * 6]
    got = fit(transfers)
    assert got["shown"] == ["alpha"] and got["beta"] == 0.0
    assert got["alpha"] == pytest.approx(1.5e6, rel=0.03)  # 2 steps a call (all-reduce over 2 ranks)


def test_one_size_cannot_tell_latency_from_bandwidth():
    """A run of one all-reduce size over 4 ranks, forecast to 3 all-gathers and 3 reduce-scatters of the same bytes:
    read as all latency the target costs 18 / 6 steps = 3x; as all bandwidth, the same bytes moved, 1x; the estimate
    is their geometric mean."""
    got = fit([("all_reduce", 4, 1 << 20, ns) for ns in (7e6, 9e6, 8e6)])
    assert got["alpha"] is None and got["shown"] == []
    run = [("all_reduce", 4, 3 << 20, 1)]
    target = [("all_gather", 4, 1 << 20, 3), ("reduce_scatter", 4, 1 << 20, 3)]
    r = cost_ratio(got, run, target)
    assert (r["latency"], r["bandwidth"]) == (pytest.approx(3.0), pytest.approx(1.0))
    assert (r["low"], r["high"], r["value"]) == (pytest.approx(1.0), pytest.approx(3.0), pytest.approx(math.sqrt(3)))


def test_a_group_spans_what_it_spanned():
    """The target's group of a run's call: its axis grown as N_k; a gradient all-reduce over the data-parallel and
    context-parallel ranks together (Megatron's dp x cp group) stays over both; an expert's over N_DP / N_EP."""
    one = dict.fromkeys(("dp", "tp", "pp", "cp", "sp", "ep"), 1)
    ring_cp4, to_cp2 = {**one, "cp": 4}, {**one, "dp": 2, "cp": 2}
    assert group(4, "dp", ring_cp4, to_cp2) == 4 and group(4, "cp", ring_cp4, to_cp2) == 2
    dp4_ep2, to_ep4 = {**one, "dp": 4, "ep": 2}, {**one, "dp": 4, "ep": 4}
    assert group(2, "dp", dp4_ep2, to_ep4) == 1 and group(4, "dp", dp4_ep2, to_ep4) == 4
    assert group(2, "tp", {**one, "tp": 2}, {**one, "tp": 4}) == 4


def test_a_zero_stage_shards_over_the_gradients_group():
    """Another ZeRO stage's calls span the ranks the gradients are reduced over, N_DP N_CP N_SP (FSDP2 over its
    dp_shard x cp mesh, Megatron's distributed optimizer over dp x cp, DeepSpeed's over its sequence-data-parallel
    group): a ZeRO-3 target of dp = 2, cp = 2 gathers over 4 ranks, ZeRO-1's broadcasts too."""
    one = dict.fromkeys(("dp", "tp", "pp", "cp", "sp", "ep"), 1)
    run_layout, target = {**one, "dp": 2, "cp": 2}, {**one, "dp": 2, "cp": 2}
    facts = {"layout": run_layout, "run_zero": 0, "units": 3, "m": 1, "Phi_bytes": 3e6, "phi": 1.0, "volume": 1.0,
             "per_call": 1.0}
    calls, _ = target_calls([("all_reduce", 4, 3e6, 1)], "dp", {**target, "zero_stage": 3}, facts)
    assert {(op, g) for op, g, *_ in calls} == {("all_gather", 4), ("reduce_scatter", 4)}
    calls, _ = target_calls([("all_reduce", 4, 3e6, 1)], "dp", {**target, "zero_stage": 1}, facts)
    assert ("broadcast", 4, 3e6 / 4, 4) in calls and ("all_reduce", 4, 3e6, 1) in calls
    calls, _ = target_calls([], "dp", {**one, "dp": 2, "sp": 2, "zero_stage": 1}, {**facts, "run_zero": 2})
    assert {(op, g) for op, g, *_ in calls} == {("all_reduce", 4), ("broadcast", 4)}


@pytest.fixture(scope="module")
def docs():
    got = {}

    def make(run, zero):  # each forecast made once per module
        if (run, zero) not in got:
            with open_run([RUNS / run]) as con:
                got[run, zero] = whatif_document(con, document(con, 10, {}), {"zero_stage": zero})
        return got[run, zero]
    return make


def made_calls(run) -> dict:
    """{op: calls per rank per profiled step} of the run's data-parallel collectives, read from its trace."""
    with open_run([RUNS / run]) as con:
        return {op: n for op, n in con.execute(
            "SELECT op, count(*) / count(DISTINCT (rank, step)) FROM comm_ops "
            "WHERE step IS NOT NULL AND strategy = 'dp' GROUP BY op").fetchall()}


@pytest.mark.slow
@pytest.mark.parametrize("run,zero,target_run", [
    ("ddp4", 1, "zero1_dp4"), ("ddp4", 2, "fsdp2_zero2_dp4"), ("ddp4", 3, "fsdp2_zero3_dp4"),
    ("quiet_ddp2", 1, "quiet_zero1_dp2"), ("quiet_ddp2", 2, "quiet_fsdp2_zero2_dp2"),
    ("quiet_ddp2", 3, "quiet_fsdp2_zero3_dp2"), ("quiet_fsdp2_zero2_dp2", 3, "quiet_fsdp2_zero3_dp2"),
    ("quiet_fsdp2_zero3_dp2", 2, "quiet_fsdp2_zero2_dp2"), ("zero1_dp4", 0, "ddp4"), ("quiet_zero1_dp2", 0, "quiet_ddp2")])
def test_the_targets_calls_are_the_ones_its_implementation_made(docs, run, zero, target_run):
    """The calls a ZeRO stage's forecast costs, per op, are the calls the run of that stage made a step."""
    calls = docs(run, zero)["how"]["calls"]["dp"]["per_step"]
    forecast = {}
    for c in calls:
        forecast[c["op"]] = forecast.get(c["op"], 0) + c["per_step"]
    assert forecast == pytest.approx(made_calls(target_run))


@pytest.mark.slow
@pytest.mark.parametrize("zero,target_run", [(2, "fsdp2_zero2_accum_dp4"), (3, "fsdp2_zero3_accum_dp4")])
def test_with_micro_batches_fsdp2_gathers_again_each_one(docs, zero, target_run):
    """With gradient accumulation (ddp2_accum_m4: m = 4, 2 layers), FSDP2 all-gathers each unit for every
    micro-batch (ZeRO-2's parameters are resharded after each backward; ZeRO-3 gathers again in backward but the
    root), as the accumulating FSDP2 runs did; their reduce-scatters, buffered to the last micro-batch
    (set_requires_gradient_sync), are the notes' round per micro-batch in the forecast (12, not the runs' 3)."""
    calls = {c["op"]: c["per_step"] for c in docs("ddp2_accum_m4", zero)["how"]["calls"]["dp"]["per_step"]}
    assert calls["all_gather"] == made_calls(target_run)["all_gather"]
    assert (calls["reduce_scatter"], made_calls(target_run)["reduce_scatter"]) == (12, 3)


@pytest.mark.slow
def test_zero3_from_ddp_costs_its_calls_between_latency_and_bandwidth(docs):
    """quiet_ddp2 (4 layers, 821,504 parameters, fp32): DDP's two buckets a step, all-reduced over 2 ranks (2 steps
    each, together the 4 B x 821,504 gradient bytes moved once); FSDP2 over 5 units (4 layers and the root): 9
    all-gathers and 5 reduce-scatters (1 step each), each moving half of a unit's Phi / 5. Read as all latency the
    target costs 14 / 4 = 3.5x the run's calls; as all bandwidth (9 + 5) / 10 = 1.4x; the run's calls (two sizes,
    scattered) show neither, so its exposed time is x sqrt(3.5 x 1.4)."""
    doc = docs("quiet_ddp2", 3)
    fitted = doc["measured"]["call_fit"]["dp"]["value"]
    assert fitted["shown"] == [] and fitted["alpha"] is None
    measured = doc["measured"]["exposed_comm_ns"]["dp"]["value"]
    assert doc["prediction"]["exposed_comm_ns"]["dp"] == pytest.approx(measured * math.sqrt(3.5 * 1.4))
    calls = doc["how"]["calls"]["dp"]
    assert (calls["low_ns"], calls["high_ns"]) == (pytest.approx(measured * 1.4), pytest.approx(measured * 3.5))


@pytest.mark.slow
def test_the_range_holds_both_readings_of_the_calls(docs):
    """Where the run's calls cannot tell latency from bandwidth, the forecast's range reaches the step with each
    strategy's calls read as all latency and as all bandwidth (beyond the profiled steps' own variation)."""
    doc = docs("quiet_ddp2", 3)
    p, calls = doc["prediction"], doc["how"]["calls"]["dp"]
    r = p["step_time_range_ns"]
    assert r["readings"] and r["steps"] == 4
    exposed = p["exposed_comm_ns"]["dp"]
    assert r["low_ns"] <= p["step_time_ns"] - (exposed - calls["low_ns"]) + 1
    assert r["high_ns"] >= p["step_time_ns"] + (calls["high_ns"] - exposed) - 1


@pytest.mark.slow
def test_a_strategy_the_run_lacks_is_said_to_be_unmeasured():
    """ddp4 has no tensor-parallel collective: a tp2 target's tp calls have no cost per call of their own, which the
    forecast says (JSON unmeasured, and a line under its kind); tp2 to tp4 has its own calls to cost."""
    def run(name, layout, fmt="json"):
        got = CliRunner().invoke(main, ["whatif", str(RUNS / name), "--layout", layout, "--format", fmt])
        assert got.exit_code == 0, got.output
        return got.stdout

    assert json.loads(run("ddp4", "dp=2,tp=2"))["unmeasured"] == ["tp"]
    assert "not measured: the run has no tp communication" in run("ddp4", "dp=2,tp=2", "text")
    assert json.loads(run("tp2", "dp=1,tp=4"))["unmeasured"] == []
