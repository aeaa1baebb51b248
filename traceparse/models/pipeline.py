"""Pipeline schedules in theory (docs/parallelism.md 3.2): the notes' bubble formulas, the ramp floor of the
zero-bubble schedules, textbook action orders, and the replay of an order with given action costs.

Pure functions of the schedule's terms (N_PP, m, v) and of action orders: no store, no trace. The bubble check
(analyzers/bubble.py) and the what-if forecasts (traceparse/whatif) use them.
"""

from fractions import Fraction

FORMULAS = {
    "gpipe": "(N_PP - 1) / (m + N_PP - 1)",
    "1f1b": "(N_PP - 1) / (m + N_PP - 1)",
    "interleaved_1f1b": "(N_PP - 1) / (v m + N_PP - 1)",
    "interleaved_zero_bubble": "0 (zero bubble: ~0 in the ideal)",
    "zbv_zero_bubble": "0 (zero bubble: ~0 in the ideal)",
    "dualpipe_v": "none in docs/parallelism.md 3.2: the replay (simulated)",
}
ZERO_BUBBLE = ("interleaved_zero_bubble", "zbv_zero_bubble", "dualpipe_v")
RAMP_FLOOR = "(N_PP - 1) / (3 v m + N_PP - 1)"
# An order is built and replayed action by action (``replay``: passes over the ranks until none advances), so its
# size is bounded, whatever gives N_PP, m and v (--layout, --given, the traces' metadata): 2 m v actions on each
# of N_PP ranks, and N_PP v stages. Real pipelines (N_PP <= 128, m v of a few hundred) are well inside; a larger
# one has no textbook order (``textbook_orders`` None) and its numbers come from the closed forms above.
MAX_ACTIONS = 2**15
MAX_STAGES = 2**10


def replayable(n, m, v=1) -> bool:
    """Whether an order of ``n`` ranks, ``m`` micro-batches and ``v`` chunks per rank is small enough to build and
    replay (MAX_ACTIONS, MAX_STAGES)."""
    n, m, v = n or 1, m or 1, v or 1
    return n * v <= MAX_STAGES and 2 * m * v * n <= MAX_ACTIONS


def expected_bubble(schedule, n, m, v=1, replay=None):
    """The notes' bubble fraction of the step (docs/parallelism.md 3.2), or None when a term is unknown.

    Zero-bubble schedules (interleaved zero bubble, ZB-V): 0, the notes' "~0 in the ideal"; DualPipeV, which the
    notes do not name: ``replay`` (the simulated bubble of the reconstructed order).
    """
    if schedule not in FORMULAS or not n or not m:
        return None
    if schedule == "dualpipe_v":
        return replay
    if schedule in ZERO_BUBBLE:
        return 0.0
    vm = (v or 1) * m if schedule == "interleaved_1f1b" else m
    return (n - 1) / (vm + n - 1)


def ramp_floor(n, m, v=1, backward=2):
    """The least idle share any order of v m micro-batch chunks per rank can reach (F = 1, I = W = backward/2).

    The rank holding stage N_PP - 1 (looped or V-shaped) gets its first input after N_PP - 1 forwards and then
    has v m (F + B) of work; every rank has that much, so the makespan is at least (N_PP - 1) F + v m (F + B).
    """
    return Fraction(n - 1) / (Fraction(n - 1) + (v or 1) * m * (1 + Fraction(backward)))


def textbook_orders(schedule, n, m, v=1) -> dict | None:
    """{rank: [(kind, stage, mb), ...]} of a schedule's textbook order on N_PP = ``n`` ranks with ``m`` micro-batches;
    None for another schedule (or interleaving whose m is not a multiple of N_PP), or for an order too large to
    build (``replayable``: MAX_ACTIONS, MAX_STAGES).

    GPipe: every forward, then every backward. 1F1B: N_PP - 1 - s forwards, then one forward and one backward in
    turn, then the remaining backwards. Interleaved 1F1B (Megatron's order, ``v`` chunks, rank s holding stages
    s, s + N_PP, ...): forwards go through the chunks N_PP micro-batches at a time, backwards through the chunks
    in reverse; (v - 1) N_PP + 2 (N_PP - 1 - s) warm-up forwards, then one forward and one backward in turn.
    """
    if not replayable(n, m, v):
        return None
    out = {}
    for s in range(n):
        if schedule == "gpipe":
            out[s] = [("F", s, i) for i in range(m)] + [("B", s, i) for i in range(m)]
        elif schedule == "1f1b":
            warm = min(n - 1 - s, m)
            out[s] = ([("F", s, i) for i in range(warm)] + [a for i in range(m - warm)
                                                            for a in (("F", s, warm + i), ("B", s, i))]
                      + [("B", s, i) for i in range(m - warm, m)])
        elif schedule == "interleaved_1f1b" and m % n == 0:
            chunk = [((k // n) % v, (k // (n * v)) * n + k % n) for k in range(v * m)]  # (chunk, mb) of the k-th
            fw = [("F", c * n + s, i) for c, i in chunk]
            bw = [("B", (v - 1 - c) * n + s, i) for c, i in chunk]
            warm = min((v - 1) * n + 2 * (n - 1 - s), v * m)
            out[s] = fw[:warm] + [a for k in range(v * m - warm) for a in (fw[warm + k], bw[k])] + bw[v * m - warm:]
        else:
            return None
    return out


def simulate(orders, backward=1.0):
    """Replay {rank: [(kind, stage, mb), ...]} with F = 1, B = ``backward`` and I = W = ``backward`` / 2 time units.
    Returns {rank: idle / makespan} as exact fractions, or None when the orders cannot complete (``replay``)."""
    b = Fraction(backward)
    unit = {"F": Fraction(1), "B": b, "I": b / 2, "W": b / 2}
    got = replay(orders, lambda kind, _: unit[kind])
    if got is None:
        return None
    span, busy = got
    return {r: 1 - busy[r] / span for r in orders}


def replay(orders, cost):
    """Replay {rank: [(kind, stage, mb), ...]}, each action taking ``cost(kind, stage)``: (makespan, {rank: busy}),
    or None when the orders cannot complete (missing or cyclic work).

    Kinds: F forward, B full backward, I input-grad and W weight-grad halves of a split backward (zero-bubble
    schedules). F(s, i) waits for F(s - 1, i); B(s, i) and I(s, i) for F(s, i) and the input gradient of stage
    s + 1 (its B or I of micro-batch i); W(s, i) only for stage s's own B or I of micro-batch i. The stage
    numbers carry the placement (looped or V-shaped), so the replay needs none; each rank runs its list in order.
    """
    last = max(s for acts in orders.values() for _, s, _ in acts)
    done, pos, free = {}, dict.fromkeys(orders, 0), dict.fromkeys(orders, 0)
    progress = True
    while progress:
        progress = False
        for r, acts in orders.items():
            while pos[r] < len(acts):
                k, s, i = acts[pos[r]]
                if k == "F":
                    deps = [("F", s - 1, i)] if s > 0 else []
                elif k == "W":
                    deps = [("grad", s, i)]
                else:  # B or I: the input gradient, which stage s - 1 waits for
                    deps = [("F", s, i)] + ([("grad", s + 1, i)] if s < last else [])
                if any(d not in done for d in deps):
                    break
                done[(k, s, i)] = free[r] = max([free[r]] + [done[d] for d in deps]) + cost(k, s)
                if k in "BI":
                    done[("grad", s, i)] = free[r]
                pos[r] += 1
                progress = True
    if any(pos[r] < len(acts) for r, acts in orders.items()):
        return None
    return max(free.values()), {r: sum(cost(k, s) for k, s, _ in acts) for r, acts in orders.items()}
