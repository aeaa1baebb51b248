"""Activation memory of a target: the micro-batches a device holds under the target schedule (docs/parallelism.md
3.2: GPipe m, 1F1B at most N_PP) times what one holds, measured.

What one micro-batch holds is read off the measured run's memory timeline (memory.step_growth: what a step
allocates above its start, per rank): (growth - the gradients where they exist at the peak; zero_grad(set_to_none=
True) frees them every step) / the micro-batches the rank holds at most under its own order. The most a rank holds
is counted on the order itself: the largest number of forwards (of any chunk) whose backward has not run yet.
"""

from traceparse.layout.model_facts import fact


def held(orders: dict | None) -> dict:
    """{rank: (the most forwards without their backward yet, whether the gradients exist then)} of an order: the
    gradients exist at the peak when the rank holds that many again after a backward has run (1F1B's steady
    state), not when it only does before its first backward (GPipe). Without an order (no pipeline): one
    micro-batch at a time, gradients not yet there (each micro-batch's activations go in its backward)."""
    if not orders:
        return {0: (1, False)}
    out = {}
    for r, acts in orders.items():
        live, most, seen, backward = 0, 0, [], False
        for k, _, _ in acts:
            live += {"F": 1, "B": -1, "I": -1}.get(k, 0)
            backward = backward or k in "BIW"
            seen.append((live, backward))
            most = max(most, live)
        out[r] = (most, any(v == most and b for v, b in seen))
    return out


def activation_bytes(m: dict, held_s: dict, held_t: dict, per_chunk: float, gradients_s: float) -> dict:
    """fact({rank: bytes}) of the target's activations, or fact(None, why). ``per_chunk``: target layers per chunk
    / measured (x the work a device does); ``gradients_s``: the measured run's gradient bytes per device."""
    growth = m["step_growth_bytes"]["value"]
    if not growth:
        return fact(None, "no memory events in the run (profile_memory off): activations unknown")
    each = {r: (g - gradients_s * held_s[r][1]) / held_s[r][0] for r, g in growth.items() if held_s.get(r, (0,))[0]}
    if not each:
        return fact(None, "the run's ranks and its order's ranks do not match")
    if set(held_t) == set(each) and per_chunk == 1:
        got = {r: held_t[r][0] * each[r] for r in held_t}
        how = "each rank's"
    else:
        mean = sum(each.values()) / len(each)
        got = {r: h * mean * per_chunk for r, (h, _) in held_t.items()}
        how = f"the ranks' mean ({mean:,.0f} B) x layers per chunk and work {per_chunk:g}"
    return fact(got, f"micro-batches held under the target's order x activations of one micro-batch ({how}; "
                     f"measured: (step growth - the gradients {gradients_s:,.0f} B where they exist at the peak) / "
                     f"micro-batches held under the run's order)")
