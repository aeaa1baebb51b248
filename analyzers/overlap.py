"""Compute/communication overlap (docs/parallelism.md 4, "how it overlaps").

Per rank, step and strategy: communication time, the part hidden under compute and the
exposed rest; strategies ranked by exposed time, the time a user could win back. The overall
GPU number is HTA's get_comm_comp_overlap. Every number selects from the store's vocabulary
(overlap.sql, overlap_hta.sql).
"""

from collections import defaultdict

from traceparse.units import ms

from traceparse.analyzers.base import Result, Spec, grade, inline_p2p, not_applicable, sql
from traceparse.status import worst
from traceparse.store.query import table_rows
from traceparse.vocabulary import critical_path, savings
from traceparse.vocabulary.modules import use

HTA_DEFINITION = (
    "HTA get_comm_comp_overlap: per rank, length of (union of NCCL kernels) intersected with (union of "
    "compute kernels) / length of the union of NCCL kernels, over the kernels launched before the rank's "
    "last ProfilerStep starts (all kernels when the trace names fewer than two steps)"
)

SPEC = Spec(
    id="overlap",
    title="Compute/communication overlap",
    definition=(
        "Straight from the store's vocabulary. Per rank, step window and strategy (window_strategy_comm): "
        "comm_ns = length of the union of the strategy's counted comm_intervals anchored in the window (execution:"
        " communication kernels, gloo worker annotations, custom kernels; the call when no execution is known), "
        "hidden_ns = length of their intersection with the union of the rank's compute_intervals (GPU: "
        "every kernel that executes no communication; CPU-only: the main thread's cpu_ops overlapping none of "
        "its communication calls and waits), exposed_ns = comm_ns - hidden_ns, overlap = hidden_ns / comm_ns. "
        "The exposed time split by cause: waiting_ns = the part of it inside the strategy's collective waits "
        "(collective_arrivals: from the rank's arrival to the last member's; window_strategy_comm.waiting_ns): "
        "waiting for a late peer, a straggler's cost that no overlap can hide; exposed_transfer_ns = exposed_ns - "
        "waiting_ns; transfer_overlap = hidden_ns / (hidden_ns + exposed_transfer_ns), the share of the "
        "communication not spent waiting that compute hides. cost (per_strategy[s].cost), by replay on the step graph "
        "(traceparse explain step_graph): per profiled step, saved_ns = the step's measured length - its length "
        "replayed with every transfer of the strategy (from its release, the last member's arrival, to its "
        "completion) taken as nothing, the most hiding it could win; waits for a late member stay (a straggler's "
        "cost: imbalance); share = the saving summed over the steps / their lengths. The status grades the cost "
        "share of each strategy expected to hide (warn_saving_share, fail_saving_share), so exposed time that "
        "costs the step nothing is reported, never graded; one that cannot be hidden in this setup (gloo runs "
        "send/recv inline on the calling thread: cannot_hide says why) is reported with its cost, not graded. "
        "per_strategy sums over ranks and windows, with each time also "
        "*_per_step_ns = the sum / the strategy's (rank, step) windows (per rank per step, as the findings "
        "quote); critical_path_per_step_ns = the strategy's communication on the run's critical path "
        "(critical_path.by_strategy summed over its steps) / its steps, and critical_path_share = that / the "
        "path's length: the part of the exposed time that set the step's pace, the only part whose hiding shortens "
        "the step, so the advice (a likely cause, the time to win back) concerns it alone. per_step: per step and strategy, the same per rank, and overlap. per_rank and overall: all communication of a rank together "
        "(window_totals: strategies communicating at the same moment count once); per_rank[].comm_ns is the "
        "summary's time in communication. concurrent_ns = sum over strategies - sum over ranks: time two "
        "strategies communicate at once, counted by each. hta_per_rank / hta_overall (GPU ranks only), a "
        "variant: " + HTA_DEFINITION
    ),
    numerator="hidden_ns: communication time during which the rank also computes; the status: cost.saved_ns, what "
              "the replay of each step saves with the strategy's transfers hidden",
    denominator="comm_ns: communication time (union of the counted communication intervals); the status: the "
                "profiled steps' measured length",
    needs="comm_intervals with execution intervals (GPU kernels or gloo worker annotations, else CPU calls); "
          "compute_intervals (GPU kernels, or the main thread's CPU ops on CPU-only traces); step_windows",
    notes=(
        "docs/parallelism.md 4 ('how it overlaps'): DP/ZeRO (bucketed with backward, prefetch), PP (pipelining) "
        "and ring CP should hide under compute; TP, Ulysses SP and EP are hard to overlap, so their exposure is "
        "expected and never warns (rules/thresholds.toml [overlap]). The HTA variant differs from per_rank in "
        "its window (HTA 0.5: when the loaded ranks name two ProfilerStep#N or more, only kernels launched "
        "before the rank's latest ProfilerStep event starts, GPU-side copies of the step annotation included, "
        "which in newer traces keeps every kernel; and only kernels whose launch is in the trace) where "
        "per_rank takes every window's kernels by their launch. Deliberate differences from HTA: exact ns "
        "timestamps, where HTA shrinks float-microsecond events to whole microseconds (ceil start, floor end; "
        "the difference grows with the share of kernels a few microseconds long: up to 1.01 points of GPU idle on "
        "the public traces, measured in docs/gpu.md; equal with HTA_DISABLE_NS_ROUNDING=1); HTA counts cuda_sync events (stream, event and context synchronization) as "
        "GPU activity, traceparse does not; "
        "PyTorch symmetric-memory all-reduce kernels, 'void nccl...' names and custom communication kernels "
        "(DeepEP) are communication, where HTA counts only '^nccl.*Kernel' and calls the others compute (HTA "
        "gives NaN without NCCL kernels); kernels named '*Sync*' are compute (HTA drops them); a rank without "
        "ProfilerStep keeps all its kernels. On gloo, send/recv run inline on the calling thread and cannot "
        "hide under its compute, and a worker's annotation can end after the caller resumed (CPU contention), "
        "which counts as hidden."
    ),
    example=(
        "fsdp2_zero2_dp4 (fixtures/runs: FSDP2 ZeRO-2 on 4 gloo ranks): each rank's dp all-gathers and "
        "reduce-scatters take about 38 ms a step and none runs under compute (overlap 0.0); replayed with every dp "
        "transfer free, the step ends about 26% sooner, past fail_saving_share (25%): fail, with FSDP's prefetch "
        "named as the fix."
    ),
)

CAUSES = {
    "pp": "the stage waits on its sends/receives (blocking point-to-point, or warm-up/cool-down with "
          "nothing to compute)",
    "cp": "the ring's K/V transfers are waited on before the next attention block instead of running under it",
}
DP_CAUSES = {  # by the data-parallel implementation the layout found
    "ddp": "DDP: the gradient all-reduce runs after backward instead of bucketed with it (one bucket, or buckets "
           "ready only at the end of backward: a smaller bucket_cap_mb starts the sync earlier)",
    "zero1": "ZeRO-1 (sharded optimizer): the gradient all-reduce is not bucketed with backward, or the parameter "
             "broadcast / all-gather after the optimizer step has no compute to hide under",
    "fsdp": "FSDP (ZeRO-{k}): the all-gathers are not prefetched ahead of the layer that needs them, or the "
            "reduce-scatters run after backward (FSDP2: set_modules_to_forward_prefetch / "
            "set_modules_to_backward_prefetch, or more, smaller fully_shard units)",
}


def _cause(strategy: str, layout: dict, fsdp: bool) -> str:
    if strategy != "dp":
        return CAUSES.get(strategy, "it is not overlapped with compute")
    zero = layout.get("zero_stage")
    if zero in (2, 3) or fsdp:
        return DP_CAUSES["fsdp"].format(k=zero if zero is not None else "2/3")
    return DP_CAUSES["zero1" if zero == 1 else "ddp"]


def _sums(rows) -> dict:
    comm = sum(r["comm_ns"] for r in rows)
    hidden = sum(r["hidden_ns"] for r in rows)
    waiting = sum(r.get("waiting_ns") or 0 for r in rows)
    transfer = comm - hidden - waiting
    return {"comm_ns": comm, "hidden_ns": hidden, "exposed_ns": comm - hidden, "waiting_ns": waiting,
            "exposed_transfer_ns": transfer, "overlap": hidden / comm if comm else None,
            "transfer_overlap": hidden / (hidden + transfer) if hidden + transfer else None}


def _per_step(v: dict, windows: int) -> dict:
    """A per_strategy entry's times per rank per step (over its ``windows`` rank x step windows)."""
    return {k.replace("_ns", "_per_step_ns"): round(v[k] / windows) for k in
            ("comm_ns", "hidden_ns", "exposed_ns", "waiting_ns", "exposed_transfer_ns")}


def _per_step_rows(rows) -> list[dict]:
    """Per step and strategy, the times per rank (sums over the ranks with that window / their count) and the
    hidden fraction: the step-to-step variation compare judges a change against."""
    by_key = defaultdict(list)
    for r in rows:
        by_key[(r["step"], r["strategy"])].append(r)
    return [{"step": step, "strategy": strategy, "ranks": len(rs), **_per_step(_sums(rs), len(rs)),
             "overlap": _sums(rs)["overlap"]}
            for (step, strategy), rs in sorted(by_key.items(), key=lambda kv: (kv[0][0] is None, kv[0]))]


def _per_rank(rows) -> list[dict]:
    by_rank = defaultdict(list)
    for r in rows:
        by_rank[r["rank"]].append(r)
    return [{"rank": rank, **_sums(rs)} for rank, rs in sorted(by_rank.items())]


def run(ctx):
    rows = ctx.rows(sql("overlap"))
    steps = [r for r in rows if r["scope"] == "strategy"]
    if not steps:
        return not_applicable("the trace has no communication in its step windows (no communication kernels "
                              "or comm_ops execution with a duration)")
    by_strategy = defaultdict(list)
    for r in steps:
        by_strategy[r["strategy"]].append(r)
    per_strategy = {s: {**_sums(rs), **_per_step(_sums(rs), len(rs)), "windows": len(rs)}
                    for s, rs in sorted(by_strategy.items())}
    ranking = sorted(per_strategy, key=lambda s: (-per_strategy[s]["exposed_ns"], s))
    rank_rows = [r for r in rows if r["scope"] == "rank"]
    use(ctx.con, "hta_gpu_activity")
    hta = ctx.rows(sql("overlap_hta"))
    gpu = {r["rank"] for r in hta}
    use(ctx.con, "name_totals")
    fsdp = bool(table_rows(ctx.con, "name_totals", columns="count(*) AS n", where="starts_with(name, 'FSDP::')")[0]["n"])

    numbers = {
        "per_strategy": per_strategy,
        "per_rank": _per_rank(rank_rows),
        "overall": _sums(rank_rows)["overlap"],
        "concurrent_ns": sum(v["comm_ns"] for v in per_strategy.values()) - _sums(rank_rows)["comm_ns"],
        "ranking": ranking,
        "per_step": _per_step_rows(steps),
        "hta_overall": _sums(hta)["overlap"] if hta else None,
        "hta_per_rank": [{"rank": r["rank"], **_sums([r])} for r in hta] or None,
        "hta_definition": HTA_DEFINITION,
    }
    tables = {"per_rank": [{"rank": r["rank"], "step": r["step"], "strategy": r["strategy"],
                            **_sums([r])} for r in steps]}
    path, path_steps = critical_path.totals(ctx.critical_path), len(ctx.critical_path["steps"])
    for name, v in per_strategy.items():  # the communication of the strategy that lay on the critical path
        ns = path["by_strategy"].get(name, 0)
        v["critical_path_per_step_ns"] = round(ns / path_steps) if path_steps else None
        v["critical_path_share"] = round(ns / path["length_ns"], 4) if path["length_ns"] else None
    costs = savings.strategy_costs(ctx.step_graphs, per_strategy) if ctx.step_graphs else {}
    for name, v in per_strategy.items():
        v["cost"] = costs.get(name)
        v["cannot_hide"] = _cannot_hide(ctx.limits, name, steps, gpu)
    status, findings = _grade(ctx.limits, per_strategy, ranking, lambda s: _cause(s, ctx.layout, fsdp))
    return Result(status=status, numbers=numbers, tables=tables, findings=findings)


def _cannot_hide(limits, strategy: str, steps, gpu) -> str | None:
    """Why strategy ``strategy``'s communication cannot be hidden in this setup (None: it can): the notes expect it
    exposed, or it is gloo's inline point-to-point."""
    if strategy in limits["expected_exposed"]:
        return f"docs/parallelism.md 4 expects {strategy} communication exposed (hard to overlap)"
    if strategy in ("pp", "cp"):
        return inline_p2p({r["rank"] for r in steps if r["strategy"] == strategy}, gpu)
    return None


def _saving(v: dict) -> str:
    cost = v.get("cost")
    return f"{ms(cost['saved_per_step_ns'])} ({cost['share']:.0%})" if cost and cost["share"] is not None else "unknown"


def _grade(limits, per_strategy, ranking, cause_of):
    hidden_ok = set(limits["expected_hidden"])
    exposed_ok = set(limits["expected_exposed"])
    warn, fail = limits["warn_saving_share"], limits["fail_saving_share"]
    statuses = []
    exposed = [f"{s} {ms(v['exposed_per_step_ns'])}"
               + (f" ({ms(v['waiting_per_step_ns'])} waiting for the last peer, {ms(v['exposed_transfer_per_step_ns'])}"
                  f" transfer)" if v["waiting_ns"] else "") + f", {100 * v['overlap']:.0f}% hidden"
               + (f"; hidden, it would save the step {_saving(v)}" if v.get("cost") else "")
               for s in ranking if (v := per_strategy[s])["exposed_ns"] > 0]
    findings = []
    if exposed:
        findings.append(f"Exposed communication per rank per step, by strategy, largest first, and what hiding it all "
                        f"would save each step by replay: {'; '.join(exposed)}.")
    for s in ranking:
        v = per_strategy[s]
        if v["overlap"] is None:
            continue
        cost = v.get("cost") or {}
        share = cost.get("share")
        if s in exposed_ok:
            findings.append(f"{s} communication is {100 * v['overlap']:.0f}% hidden ({ms(v['exposed_per_step_ns'])} "
                            f"exposed per rank per step): expected, docs/parallelism.md 4 says {s} communication is "
                            f"hard to overlap.")
        elif s in hidden_ok and share is not None:
            st = grade(share, warn, fail)
            hidden = (f"{100 * v['transfer_overlap']:.0f}% of its transfers are hidden under compute"
                      if v["transfer_overlap"] is not None else "none of it is transfer")
            if v["cannot_hide"] and st != "ok":
                findings.append(f"{s} communication costs the step {_saving(v)} by replay, but cannot be hidden here: "
                                f"{v['cannot_hide']} (reported, not graded).")
                st = "ok"
            elif st != "ok":
                findings.append(f"{s} communication costs the step {_saving(v)} by replay (were it hidden, each step "
                                f"would be that much shorter); {hidden}, though docs/parallelism.md 4 expects it to "
                                f"overlap; likely cause: {cause_of(s)}.")
            elif v["exposed_transfer_ns"] > 0 and v["transfer_overlap"] is not None:
                findings.append(f"{s} transfers are {100 * v['transfer_overlap']:.0f}% hidden, but hiding them would "
                                f"save the step {_saving(v)} by replay, below {warn:.0%}: reported, not graded.")
            statuses.append(st)
        if v["waiting_ns"] and v["waiting_ns"] >= v["exposed_transfer_ns"]:
            findings.append(f"Most of {s}'s exposed communication is waiting for the last member to arrive "
                            f"({ms(v['waiting_per_step_ns'])} per rank per step), not transfer: overlap cannot hide "
                            f"it; a late rank causes it (imbalance: straggler, waits).")
    if per_strategy.get("untagged", {}).get("exposed_ns"):
        findings.append(f"{ms(per_strategy['untagged']['exposed_per_step_ns'])} per rank per step of exposed "
                        f"communication is untagged (no rule matched it), so it is not graded.")
    return worst(statuses), findings
