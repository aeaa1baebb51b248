"""The ZeRO stage under gradient accumulation: ZeRO-3 re-gathers parameters inside backward (between a forward
and the end of its own backward); ZeRO-2 gathers only before forward. With m micro-batches per optimizer step
FSDP2 reshards after every backward (also on the no-sync micro-batches), so ZeRO-2 gathers again before each
micro-batch's forward: those gathers lie between one pass's backward and the next pass's forward and must not
read as backward re-gathers (docs/parallelism.md 3.1).

Synthetic traces (tests/rule_traces: the step is ProfilerStep#1 at 0-1000 µs on the main thread) check the
phase of each call; the real runs fsdp2_zero{2,3}_accum_dp4 check the stage against their configuration.
"""

from __future__ import annotations

import json

import pytest
from conftest import committed_runs
from rule_traces import autograd, cpu, gloo, optimizer, same_on_2
from traces import rows

ACCUM_RUNS = ("fsdp2_zero2_accum_dp4", "fsdp2_zero3_accum_dp4")
RUNS = committed_runs(*ACCUM_RUNS)


def phases_and_variants(con):
    """{start µs of rank 0's call: (op, phase, variant)}"""
    got = rows(con, "SELECT c.host_ts_ns // 1000 AS t, c.op, f.phase, c.variant FROM comm_ops c "
                    "JOIN comm_features f USING (rank, op_id) WHERE c.rank = 0")
    return {r["t"]: (r["op"], r["phase"], r["variant"]) for r in got}


def two_micro_batches(zero3):
    """Two forward/backward passes, then the optimizer, without framework annotations (DeepSpeed-like):
    pass 1 gathers at 10, computes forward at 40 and runs backward at 100-200; pass 2 gathers again at 250
    (between the passes), computes forward at 300 and runs backward at 400-500, reduce-scattering the
    gradients at 470. ZeRO-3 also re-gathers inside each backward: at 110 (in no autograd frame, but
    between the frames of pass 1) and at 410."""
    evs = [*gloo("all_gather", 10, 32), cpu("aten::linear", 40, 20),
           autograd(100, 5, "NllLossBackward0"), autograd(130, 70, "AddmmBackward0"),
           *gloo("all_gather", 250, 32), cpu("aten::linear", 300, 20),
           autograd(400, 100, "AddmmBackward0"), *gloo("reduce_scatter", 470, 64),
           optimizer(850, 50, "Adam")]
    if zero3:
        evs += [*gloo("all_gather", 110, 32), *gloo("all_gather", 410, 32)]
    return same_on_2(*evs)


def test_zero2_gathers_before_every_micro_batch_are_forward(tmp_path):
    # the step's first autograd frame starts at 100 and its last ends at 500: the gather at 250 lies inside
    # that span, but between pass 1's backward and pass 2's forward compute (300)
    got = phases_and_variants(two_micro_batches(zero3=False).load(tmp_path))
    assert got == {10: ("all_gather", "forward", "zero2"), 250: ("all_gather", "forward", "zero2"),
                   470: ("reduce_scatter", "backward", "zero2")}


def test_zero3_regathers_inside_each_backward(tmp_path):
    got = phases_and_variants(two_micro_batches(zero3=True).load(tmp_path))
    assert got == {10: ("all_gather", "forward", "zero3"), 110: ("all_gather", "backward", "zero3"),
                   250: ("all_gather", "forward", "zero3"), 410: ("all_gather", "backward", "zero3"),
                   470: ("reduce_scatter", "backward", "zero3")}


def test_forward_compute_inside_backward_does_not_split_the_pass(tmp_path):
    # activation recomputation: forward ops inside an autograd frame (420) are backward compute, and a
    # forward op on another thread (the autograd engine's, 515) is no forward pass of the step either; the
    # gather at 505 between two frames of the one pass is a backward re-gather
    run = same_on_2(*gloo("all_gather", 10, 32), cpu("aten::linear", 40, 20),
                    autograd(400, 100, "CheckpointFunctionBackward"), cpu("aten::linear", 420, 20),
                    cpu("aten::mm", 515, 5, tid=3), *gloo("all_gather", 505, 32),
                    autograd(530, 40, "AddmmBackward0"), *gloo("reduce_scatter", 540, 64))
    got = phases_and_variants(run.load(tmp_path))
    assert got[505] == ("all_gather", "backward", "zero3")


def test_without_forward_compute_the_step_is_one_pass(tmp_path):
    # no recognizable forward op: the step's backward span is one pass, as before (a gather inside it is
    # a backward gather)
    run = same_on_2(*gloo("all_gather", 10, 32), autograd(100, 50), *gloo("all_gather", 250, 32),
                    autograd(400, 100), *gloo("reduce_scatter", 470, 64))
    got = phases_and_variants(run.load(tmp_path))
    assert got[250] == ("all_gather", "backward", "zero3")


# --- the real runs --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ACCUM_RUNS)
@pytest.mark.slow
def test_fsdp2_accumulation_runs_keep_their_configured_stage(name, store):
    from fixtures.configs import CONFIGS

    cfg = CONFIGS[name]
    con = store(RUNS / name)
    layout = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM layout").fetchall()}
    assert (layout["zero_stage"], layout["microbatches"]) == (cfg.zero_stage, cfg.microbatches)
    assert json.loads((RUNS / name / "truth.json").read_text())["layout"]["zero_stage"] == cfg.zero_stage
    # per rank and step: every micro-batch's forward gathers every unit (root + blocks); ZeRO-3 gathers the
    # blocks again in each micro-batch's backward (the root keeps its parameters: reshard_after_forward False)
    m, units, blocks = cfg.microbatches, cfg.dims.layers + 1, cfg.dims.layers
    per = {(op, phase): n for op, phase, n in con.execute(
        "SELECT c.op, f.phase, count(*) // count(DISTINCT (c.rank, c.step)) FROM comm_ops c "
        "JOIN comm_features f USING (rank, op_id) WHERE c.step IS NOT NULL GROUP BY ALL").fetchall()}
    want = {("all_gather", "forward"): m * units, ("reduce_scatter", "backward"): units}
    if cfg.zero_stage == 3:
        want[("all_gather", "backward")] = m * blocks
    assert per == want
