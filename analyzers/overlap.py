"""Compute/communication overlap (docs/parallelism.md 4, "how it overlaps").

Per rank, step and strategy: communication time, the part hidden under compute and the
exposed rest; strategies ranked by exposed time, the time a user could win back. The overall
GPU number is HTA's get_comm_comp_overlap. Every number selects from the store's vocabulary
(overlap.sql, overlap_hta.sql).
"""

from collections import defaultdict

from .base import Result, Spec, grade, not_applicable, sql, worst

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
        "per_strategy sums over ranks and windows. per_rank and overall: all communication of a rank together "
        "(window_totals: strategies communicating at the same moment count once); per_rank[].comm_ns is the "
        "summary's time in communication. concurrent_ns = sum over strategies - sum over ranks: time two "
        "strategies communicate at once, counted by each. hta_per_rank / hta_overall (GPU ranks only), a "
        "variant: " + HTA_DEFINITION
    ),
    numerator="hidden_ns: communication time during which the rank also computes",
    denominator="comm_ns: communication time (union of the counted communication intervals)",
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
        "up to ~3 points lower on AMD traces with many tiny kernels, equal with HTA_DISABLE_NS_ROUNDING=1); "
        "PyTorch symmetric-memory all-reduce kernels, 'void nccl...' names and custom communication kernels "
        "(DeepEP) are communication, where HTA counts only '^nccl.*Kernel' and calls the others compute (HTA "
        "gives NaN without NCCL kernels); kernels named '*Sync*' are compute (HTA drops them); a rank without "
        "ProfilerStep keeps all its kernels. On gloo, send/recv run inline on the calling thread and cannot "
        "hide under its compute, and a worker's annotation can end after the caller resumed (CPU contention), "
        "which counts as hidden."
    ),
)

CAUSES = {
    "dp": "the gradient sync runs after backward instead of bucketed with it (e.g. one DDP bucket, buckets "
          "ready only at the end of backward, or ZeRO-3 all-gathers not prefetched)",
    "pp": "the stage waits on its sends/receives (blocking point-to-point, or warm-up/cool-down with "
          "nothing to compute)",
    "cp": "the ring's K/V transfers are waited on before the next attention block instead of running under it",
}
INLINE_P2P = "on gloo, send/recv run inline on the calling thread, so nothing can hide them"


def _sums(rows) -> dict:
    comm = sum(r["comm_ns"] for r in rows)
    hidden = sum(r["hidden_ns"] for r in rows)
    return {"comm_ns": comm, "hidden_ns": hidden, "exposed_ns": comm - hidden,
            "overlap": hidden / comm if comm else None}


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
    per_strategy = {s: _sums(rs) for s, rs in sorted(by_strategy.items())}
    ranking = sorted(per_strategy, key=lambda s: (-per_strategy[s]["exposed_ns"], s))
    rank_rows = [r for r in rows if r["scope"] == "rank"]
    hta = ctx.rows(sql("overlap_hta"))
    gpu = {r["rank"] for r in hta}

    numbers = {
        "per_strategy": per_strategy,
        "per_rank": _per_rank(rank_rows),
        "overall": _sums(rank_rows)["overlap"],
        "concurrent_ns": sum(v["comm_ns"] for v in per_strategy.values()) - _sums(rank_rows)["comm_ns"],
        "ranking": ranking,
        "hta_overall": _sums(hta)["overlap"] if hta else None,
        "hta_per_rank": [{"rank": r["rank"], **_sums([r])} for r in hta] or None,
        "hta_definition": HTA_DEFINITION,
    }
    tables = {"per_rank": [{"rank": r["rank"], "step": r["step"], "strategy": r["strategy"],
                            **_sums([r])} for r in steps]}
    status, findings = _grade(ctx.limits, per_strategy, ranking, steps, gpu)
    return Result(status=status, numbers=numbers, tables=tables, findings=findings)


def _grade(limits, per_strategy, ranking, steps, gpu):
    hidden_ok = set(limits.get("expected_hidden", ()))
    exposed_ok = set(limits.get("expected_exposed", ()))
    warn, fail = limits.get("warn_below", 0.5), limits.get("fail_below", 0.2)
    statuses = []
    exposed = [f"{s} {per_strategy[s]['exposed_ns'] / 1e6:.1f} ms ({100 * per_strategy[s]['overlap']:.0f}% hidden)"
               for s in ranking if per_strategy[s]["exposed_ns"] > 0]
    findings = []
    if exposed:
        findings.append(f"Exposed communication by strategy, largest first (the time overlap could win back, all "
                        f"ranks and steps): {', '.join(exposed)}.")
    for s in ranking:
        v = per_strategy[s]
        if v["overlap"] is None:
            continue
        ms, pct = v["exposed_ns"] / 1e6, 100 * v["overlap"]
        if s in exposed_ok:
            findings.append(f"{s} communication is {pct:.0f}% hidden ({ms:.1f} ms exposed): expected, "
                            f"docs/parallelism.md 4 says {s} communication is hard to overlap.")
        elif s in hidden_ok:
            st = grade(v["overlap"], warn, fail, higher_is_worse=False)
            statuses.append(st)
            if st != "ok":
                cpu_p2p = s in ("pp", "cp") and any(r["rank"] not in gpu for r in steps if r["strategy"] == s)
                cause = INLINE_P2P if cpu_p2p else CAUSES.get(s, "it is not overlapped with compute")
                findings.append(f"{s} communication is only {pct:.0f}% hidden under compute ({ms:.1f} ms "
                                f"exposed over all ranks and steps), though docs/parallelism.md 4 expects it to "
                                f"overlap; likely cause: {cause}.")
    if per_strategy.get("untagged", {}).get("exposed_ns"):
        findings.append(f"{per_strategy['untagged']['exposed_ns'] / 1e6:.1f} ms of exposed communication is "
                        f"untagged (no rule matched it), so it is not graded.")
    return worst(statuses), findings
