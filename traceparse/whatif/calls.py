"""A collective's cost per call, for what a target's collectives cost against the run's (docs/whatif.md, Collectives
per call).

The ring model (Thakur, Rabenseifner and Gropp 2005; NCCL's and gloo's rings): a call of ``n`` bytes over ``g`` ranks
takes ``alpha x steps + beta x moved``, ``steps`` the rounds of latency it waits and ``moved`` the bytes each rank
sends (``ring``). ``alpha`` and ``beta`` are fitted per strategy over the run's own collectives of the profiled steps
(``fit``: least squares of their transfers, measured.sql ``whatif_transfers``, each coefficient kept where the calls
show it above 0 beyond chance). Where they show neither (every call of one size and op, or too few and too scattered
to tell), any ``alpha`` from 0 to all of the time fits them, and a target's cost lies between the two readings, all
latency and all bandwidth (``cost_ratio`` gives both and their geometric mean, the estimate whose ratio to either end
is the least).

The target's calls per step (``target_calls``) are the run's own, resized, where the target keeps the strategy's
implementation, and otherwise those PyTorch's implementation of the target's ZeRO stage issues: DDP's all-reduce per
bucket, ZeroRedundancyOptimizer's broadcast per rank, FSDP2's all-gather and reduce-scatter per unit (each layer and
the root module).
"""

from __future__ import annotations

import math

from traceparse.stats import ALPHA, two_term_fit

DDP_BUCKET_BYTES = 25 << 20  # torch.nn.parallel.DistributedDataParallel's bucket_cap_mb default
RING_ROUNDS = {"all_reduce": (2, True), "all_gather": (1, True), "reduce_scatter": (1, True), "all_to_all": (1, True),
               "gather": (1, True), "scatter": (1, True), "broadcast": (1, False), "reduce": (1, False),
               "barrier": (1, False)}  # op: (rounds of g - 1 steps, whether each rank moves (g - 1) / g of n)
IMPLEMENTATION = {0: "DDP: an all-reduce per gradient bucket", 1: "DDP's all-reduces and ZeroRedundancyOptimizer's "
                  "broadcast of each rank's updated partition", 2: "FSDP2 without resharding after forward: per unit and "
                  "micro-batch an all-gather and a reduce-scatter", 3: "FSDP2: per unit and "
                  "micro-batch an all-gather in forward, one in backward (the root's kept), a reduce-scatter"}


def ring(op: str, g: int, n: float) -> tuple[float, float]:
    """(latency steps, bytes moved per rank) of one ``op`` of ``n`` bytes (the full tensor) over ``g`` ranks."""
    rounds, share = RING_ROUNDS.get(op, (1, False))
    if g < 2:
        return 0.0, 0.0
    return rounds * (g - 1), rounds * n * ((g - 1) / g if share else 1.0)


def fit(transfers: list[tuple]) -> dict | None:
    """{alpha, beta (ns per latency step, ns per byte moved; None where the calls cannot tell them apart), shown
    (which of them the calls show above 0), calls, sizes, rms_error} of the ``transfers`` ``(op, group size, bytes,
    ns)``; None without one. Least squares of the ring model (stats.two_term_fit); a coefficient not shown above 0
    (at the [stats] alpha) is taken as 0 and the other fitted alone, and where neither is shown (or every call has
    the same proportion of steps to bytes: one size of one op) the calls cannot tell latency from bandwidth."""
    rows = [(*ring(op, g, n or 0), ns) for op, g, n, ns in transfers if g and g > 1 and ns is not None]
    rows = [(s, m, t) for s, m, t in rows if s > 0]
    if not rows:
        return None
    base = {"calls": len(rows), "sizes": len({(s, m) for s, m, _ in rows})}
    f = two_term_fit(rows)
    terms = {} if f is None else {"alpha": (f["a"], f["p_a"]), "beta": (f["b"], f["p_b"])}
    shown = [k for k, (c, p) in terms.items() if c > 0 and p <= ALPHA]
    if not shown:
        return {**base, "alpha": None, "beta": None, "shown": [], "rms_error": None}
    if len(shown) == 2:
        a, b = f["a"], f["b"]
    elif shown == ["alpha"]:
        a, b = sum(s * t for s, _, t in rows) / sum(s * s for s, *_ in rows), 0.0
    else:
        a, b = 0.0, sum(m * t for _, m, t in rows) / sum(m * m for _, m, _ in rows)
    mean_t = sum(t for *_, t in rows) / len(rows)
    err = math.sqrt(sum((t - a * s - b * m) ** 2 for s, m, t in rows) / len(rows)) / mean_t if mean_t else None
    return {**base, "alpha": a, "beta": b, "shown": shown, "rms_error": err}


def cost(calls: list[tuple], alpha: float, beta: float) -> float:
    """What ``calls`` ``(op, group size, bytes, per step)`` cost per step at ``alpha``, ``beta``."""
    return sum(k * (alpha * s + beta * m) for op, g, n, k in calls for s, m in [ring(op, g, n)])


def cost_ratio(f: dict, run: list[tuple], target: list[tuple]) -> dict | None:
    """{value, low, high, latency, bandwidth}: what the ``target``'s calls cost per step over the ``run``'s, by the fit
    ``f``; where it cannot tell latency from bandwidth, the ratio read as all latency and as all bandwidth, the lesser
    ``low``, the greater ``high``, and ``value`` their geometric mean (with a fit, all of them ``value``). None where
    the run's calls cost nothing by the model."""
    if f["alpha"] is not None:
        c_run = cost(run, f["alpha"], f["beta"])
        if c_run <= 0:
            return None
        return dict.fromkeys(("value", "low", "high", "latency", "bandwidth"), cost(target, f["alpha"], f["beta"]) / c_run)
    readings = []
    for a, b in ((1.0, 0.0), (0.0, 1.0)):
        c_run = cost(run, a, b)
        if c_run <= 0:
            return None
        readings.append(cost(target, a, b) / c_run)
    low, high = min(readings), max(readings)
    return {"value": math.sqrt(low * high), "low": low, "high": high, "latency": readings[0], "bandwidth": readings[1]}


def target_calls(run: list[tuple], k: str, t: dict, facts: dict) -> tuple[list, str]:
    """(the target's calls of strategy ``k`` per rank per step, what they are). ``run``: the run's calls ``(op, group
    size, bytes, per step)``; ``t``: the target's layout; ``facts``: {layout (the run's), run_zero (its ZeRO stage),
    volume (the target's bytes over the run's by the notes' formula), per_call (calls per step, target over run:
    layers per device x m), m; for data parallelism: Phi_bytes (the target's delta Phi_dp), phi (Phi_dp, target over
    run), units (the target's layers per device + 1)}."""
    zero, s = t["zero_stage"], facts["layout"]
    if k != "dp" or zero == facts["run_zero"]:  # the same implementation: the run's calls, in the target's groups
        c = facts["per_call"]
        return ([(op, group(size, k, s, t), n * facts["volume"] / c, per * c) for op, size, n, per in run],
                f"the run's {k} calls" + (f" x {c:.3g} (layers per device x m, target / run)" if c != 1 else "")
                + " in the target's groups, their bytes in all the notes' bytes")
    units, m, phi = facts["units"], facts["m"], facts["Phi_bytes"]
    g = gradient_ranks(t)  # ZeRO shards over the ranks its gradients are reduced over
    if zero >= 2:
        gathers = (units if zero == 2 else 2 * units - 1) * m  # a micro-batch's backward reshards: gathered again
        return ([("all_gather", g, phi / units, gathers), ("reduce_scatter", g, phi / units, units * m)],
                f"as {IMPLEMENTATION[zero]} ({units} units: the layers a device holds and the root, Phi split evenly)")
    if facts["run_zero"] <= 1:  # DDP's calls as the run made them (its gradients' all-reduces x Phi target / run;
        # its buffers' broadcasts as they were), less ZeroRedundancyOptimizer's broadcasts of a ZeRO-1 run
        out = [(op, group(size, k, s, t), n * facts["phi"] if op == "all_reduce" else n, per)
               for op, size, n, per in run if not (op == "broadcast" and facts["run_zero"] == 1)]
    else:
        out = _buckets(phi, g)
    return out + ([("broadcast", g, phi / g, g)] if zero == 1 else []), f"as {IMPLEMENTATION[zero]}"


def group(size: int, k: str, s: dict, t: dict) -> int:
    """The ranks a call of strategy ``k`` over ``size`` ranks in a run of layout ``s`` spans in the target ``t``: its
    axis grown as N_k; a data-parallel group spanning the sequence shards too (N_DP N_CP N_SP ranks: CP and Ulysses
    shards reduce their gradients together), grown as they do; an expert's gradients (N_DP / N_EP ranks), as that."""
    wider = t[k] / s[k]
    if k == "dp" and s["cp"] * s["sp"] > 1 and size == gradient_ranks(s):
        wider = gradient_ranks(t) / gradient_ranks(s)
    elif k == "dp" and s["ep"] > 1 and size * s["ep"] == s["dp"]:
        wider *= s["ep"] / t["ep"]
    return max(1, round(size * wider))


def gradient_ranks(layout: dict) -> int:
    """The ranks a replica's gradients are reduced over: N_DP N_CP N_SP (CP and Ulysses shards reduce theirs with the
    data-parallel replicas: Megatron's dp x cp group, FSDP2's dp_shard x cp mesh, DeepSpeed's sequence-data-parallel
    group)."""
    return layout["dp"] * layout["cp"] * layout["sp"]


def _buckets(phi: float, g: int) -> list[tuple]:
    """DDP's all-reduces of ``phi`` bytes of gradients: one per bucket of its default size."""
    n = max(1, math.ceil(phi / DDP_BUCKET_BYTES))
    return [("all_reduce", g, phi / n, n)]
