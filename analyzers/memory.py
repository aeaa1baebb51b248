"""memory: the ZeRO memory model of parameters, gradients and optimizer state (docs/parallelism.md 3.1), beside the measured peak."""

from traceparse.layout import model_facts as mf
from traceparse.analyzers.base import Result, Spec, not_applicable
from traceparse.models.memory import ZERO_FORMULAS, zero_memory
from traceparse.vocabulary.modules import use

SPEC = Spec(
    id="memory",
    title="Memory model: parameters, gradients and optimizer state per device",
    definition=(
        "Per device, bytes of parameters, gradients and optimizer state by the ZeRO table of docs/parallelism.md 3.1 "
        "with Phi = the parameters a device holds before ZeRO sharding: ZeRO-0 (2 delta + (n_opt+1) delta_opt) Phi, "
        "ZeRO-1 (2 delta + (n_opt+1) delta_opt / N_DP) Phi, ZeRO-2 (delta + delta / N_DP + (n_opt+1) delta_opt / N_DP) "
        "Phi, ZeRO-3 (2 delta / N_DP + (n_opt+1) delta_opt / N_DP) Phi, delta_opt = 4; beside the measured peak, "
        "the largest total_allocated of any accelerator (else CPU) device in the memory events. step_growth = per "
        "rank, what a profiled step allocates above its start on that device: the step's largest total_allocated "
        "less the total just before its first memory event, mean over steps (activations, gradients freed by "
        "zero_grad(set_to_none=True), temporaries)."),
    numerator="measured peak allocated bytes (largest device)",
    denominator="modelled parameters + gradients + optimizer state per device",
    needs="Phi (stated params, or inferred from dp gradient collectives or AccumulateGrad shapes), the optimizer "
          "(stated n_opt / optimizer, or the Optimizer.step#<Name>.step annotation); memory events for the measured peak",
    notes=(
        "docs/parallelism.md 3.1 (ZeRO table), 1 (n_opt: SGD 0, momentum 1, Adam/AdamW 2, Muon 1; delta_opt usually 4). "
        "Phi per device = stated params / (N_TP N_PP), assuming TP and PP split every parameter (replicated norms and "
        "embeddings make it larger), except for a pipeline without TP or EP, whose stages hold different parameters "
        "(embedding, head): there the trace's AccumulateGrad count comes first (a stage's received activation, also "
        "a leaf with a gradient, left out; none where some shape is not accumulated m times a step, as under a "
        "split backward, whose weight gradients bypass AccumulateGrad); with EP, that stated params cannot be split (experts vs dense) so the trace is "
        "used: AccumulateGrad elements per step / m (the rank's parameters with gradients, experts included; skipped "
        "under TP, where DTensor shows logical shapes), or the dp gradient collective bytes / delta (largest rank). "
        "N_DP = stated dp, else the size of the dp gradient groups (EP folded into DP counts), else the layout's dp. "
        "The (n_opt+1) counts an fp32 master copy; with fp32 parameters (delta = 4) there is none, so the model "
        "over-counts by delta_opt Phi (/ N_DP from ZeRO-1). Activations, buffers and allocator fragmentation are not "
        "modelled: the measured peak includes them, so [memory] warn_over_model (3) allows for them. "
        "Without a measured peak (no memory events) or without the optimizer state the check compares nothing: "
        "not_applicable with the reason, the model's bytes still reported (unknown ones null)."),
    example=(
        "ddp2 (fixtures/runs: 115,328 fp32 parameters, AdamW, ZeRO-0): (2 delta + (n_opt + 1) delta_opt) Phi = "
        "(8 + 3 x 4) x 115,328 = 2,306,560 bytes per device: parameters and gradients 461,312 each, AdamW's two "
        "states and the fp32 copy 1,383,936; its trace has no memory events (profile_memory off), so the check "
        "compares nothing: not_applicable, the model's bytes reported."
    ),
)


def run(ctx):
    shape, deg = mf.run_shape(ctx), mf.degrees(ctx)
    d = mf.delta(ctx)
    if d["value"] is None:
        d = _any_delta(ctx)
    phi = mf.phi_device(ctx, shape, deg, d)
    if phi["value"] is None:
        return not_applicable(f"Phi cannot be known: {phi['source']}")
    opt = mf.optimizer(ctx)
    stage, n_dp = _sharding(ctx, deg)
    x = {"Phi_device": phi, "delta": d, "delta_opt": mf.fact(4, "assumed 4 (fp32 optimizer state, docs/parallelism.md 1)"),
         "n_opt": opt["n_opt"], "optimizer": opt["name"], "zero_stage": stage, "N_DP": n_dp,
         **{k: deg[k] for k in ("tp", "pp", "ep")}}
    k, z = opt["n_opt"]["value"], stage["value"]
    parts = zero_memory(phi["value"], d["value"], k, n_dp["value"], z)
    params, grads, state, total = (parts[p] for p in ("parameters", "gradients", "optimizer_state", "total"))
    formula = ZERO_FORMULAS[z] + f" [ZeRO-{z}, docs/parallelism.md 3.1]"
    peaks = _peaks(ctx)
    peak = max((p["peak_bytes"] for p in peaks), default=None)
    ratio = peak / total if peak is not None and total else None
    findings, status = [], "ok"
    if ratio is not None and ratio > ctx.limits["warn_over_model"]:
        status = "warn"
        findings.append(f"Measured peak {peak / 2**30:.2f} GiB is {ratio:.1f}x the modelled {total / 2**30:.2f} GiB of "
                        "parameters, gradients and optimizer state: activations (large b x S, no checkpointing), "
                        "unsharded copies or fragmentation dominate.")
    elif ratio is not None and ratio < 1:
        findings.append(f"Measured peak {peak / 2**30:.2f} GiB is below the modelled {total / 2**30:.2f} GiB: Phi, delta, "
                        "the optimizer or the sharding assumed by the model is not what ran.")
    numbers = {"per_device_bytes": {"parameters": params, "gradients": grads, "optimizer_state": state, "total": total},
               "formula": formula, "inputs": x, "measured_peak_bytes": peak, "measured_over_model": ratio,
               "step_growth": _step_growth(ctx)}
    tables = {"measured_peaks": peaks}
    if ratio is None:  # compared nothing: not applicable, never ok (the model's numbers stay in the document)
        why = []
        if k is None:
            why.append(f"optimizer state not modelled: {opt['n_opt']['source']}")
        if peak is None:
            why.append("no measured peak: the trace has no memory events with total_allocated (profile_memory off)")
        return Result(status="not_applicable", numbers=numbers, findings=findings, tables=tables,
                      reason="; ".join(why) or "the modelled total is 0 bytes")
    return Result(status=status, numbers=numbers, findings=findings, tables=tables)


def _any_delta(ctx):
    got = ctx.con.execute("SELECT elem_bytes, string_agg(DISTINCT dtype, ', ' ORDER BY dtype) FROM comm_ops "
                          "WHERE elem_bytes IS NOT NULL GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1").fetchone()
    if got:
        return mf.fact(got[0], f"trace: element size of the most common collectives ({got[1]})")
    return mf.fact(4, "assumed 4 (fp32): no stated dtype_bytes and no collective with a known dtype")


def _sharding(ctx, deg):
    """(ZeRO stage, N_DP) facts."""
    stage = deg["zero_stage"]
    if stage["value"] is None:
        got = ctx.con.execute("SELECT variant FROM comm_ops WHERE strategy = 'dp' AND variant LIKE 'zero%' "
                              "GROUP BY 1 ORDER BY count(*) DESC LIMIT 1").fetchone()
        stage = (mf.fact(int(got[0][-1]), f"trace: the dp collectives' variant ({got[0]})") if got
                 else mf.fact(0, f"assumed 0 (nothing sharded): {stage['source']}"))
    if "dp" in ctx.stated:
        return stage, mf.fact(ctx.stated["dp"], f"{ctx.given('dp')} (dp)")
    got = ctx.con.execute("SELECT group_size FROM comm_ops WHERE strategy = 'dp' AND group_size IS NOT NULL "
                          "GROUP BY 1 ORDER BY count(*) DESC LIMIT 1").fetchone()
    if got:
        return stage, mf.fact(got[0], "trace: size of the dp groups")
    if deg["dp"]["value"]:
        return stage, deg["dp"]
    return stage, mf.fact(1, f"assumed 1: {deg['dp']['source']}")


# d: the memory samples the check reads (the vocabulary's memory_samples: accelerators only when the trace has any)
DEVICES = """
        WITH d AS (SELECT * FROM memory_samples)"""


def _step_growth(ctx):
    """Per rank, on the device _peaks reads: what a profiled step allocates above what was allocated when it began
    (the step's largest total_allocated less the total just before its first memory event), mean over steps."""
    use(ctx.con, "memory_samples")
    return ctx.rows(
        DEVICES + """,
             per_step AS (
                 SELECT w.rank, w.step, d.device_type, d.device_id,
                        max(d.total_allocated) - arg_min(d.total_allocated - d.bytes, d.ts_ns) AS growth
                 FROM step_windows w JOIN d ON d.rank = w.rank AND d.ts_ns >= w.start_ns AND d.ts_ns < w.end_ns
                 WHERE w.step IS NOT NULL GROUP BY ALL)
        SELECT rank, device_type, device_id, avg(growth) AS growth_bytes, count(*) AS steps
        FROM per_step GROUP BY ALL ORDER BY rank, growth_bytes DESC
        """)


def _peaks(ctx):
    """Largest total_allocated per device; accelerators only when the trace has any."""
    use(ctx.con, "memory_samples")
    return ctx.rows(
        DEVICES + """
        SELECT rank, device_type, device_id, max(total_allocated) AS peak_bytes, count(*) AS events
        FROM d GROUP BY ALL ORDER BY peak_bytes DESC
        """)
