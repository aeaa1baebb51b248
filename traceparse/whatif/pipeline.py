"""The step of a pipelined target, replayed: the target schedule's order run with the measured cost of each action.

The measured run's order (the bubble check's reconstruction, else its schedule's textbook order:
models.pipeline.textbook_orders) is replayed with each (virtual) stage's measured compute per micro-batch and
action kind (bubble.action_ns: F, B, and the I and W halves of a split backward) plus one per-action overhead o
(send/recv calls and their latency, Python, launches), and o is the one value for which that replay lasts the
measured pipeline time (the step less the exposed non-pipeline communication and the optimizer). The target's
order (the measured one where the target keeps the schedule, N_PP, m and v; else the textbook order of GPipe,
1F1B or interleaved 1F1B) is then replayed with its actions' compute (the measured ones scaled by the layers a
chunk holds and the work a device does in one) plus the same o: its makespan is the target's pipeline time.
"""

from traceparse.models.pipeline import MAX_STAGES, replay, textbook_orders
from traceparse.layout.model_facts import fact
from traceparse.units import duration

ITERATIONS = 60  # bisection steps for o: the makespan is continuous and increasing in o
SHAPE = ("pp_schedule", "pp", "microbatches", "virtual_stages")


def _kinds(c: dict) -> dict:
    """A stage's costs with the backward both whole (B) and split (I, W): B = I + W, else I = W = B / 2."""
    c = dict(c)
    if "B" not in c and {"I", "W"} <= set(c):
        c["B"] = c["I"] + c["W"]
    if "B" in c:
        c.setdefault("I", c["B"] / 2)
        c.setdefault("W", c["B"] / 2)
    return c


def action_costs(m: dict, s: dict, t: dict, work: float, layers) -> tuple[dict | None, str]:
    """({(kind, stage): ns} of the target's actions per micro-batch and (virtual) stage, how), or (None, why). The
    measured stage's own costs where the target keeps its stages (same N_PP, v and layers per stage, not
    ``balanced``); otherwise every stage alike: the measured compute per layer (mean over the stages) times the
    layers of a target chunk."""
    acts = {st: _kinds(c) for st, c in (m["action_ns"]["value"] or {}).items()}
    if not acts or any(not {"F", "B"} <= set(c) for c in acts.values()):
        return None, "no measured forward and backward per stage (bubble.action_ns)"
    chunk_s = (m["L_local"]["value"] or 1) / s["virtual_stages"]
    chunk_t = layers / t["pp"] / t["virtual_stages"] if layers else chunk_s
    stages_t = t["pp"] * t["virtual_stages"]
    if stages_t > MAX_STAGES:
        return None, f"{stages_t:,} (virtual) stages: more than a replay holds ({MAX_STAGES:,})"
    if stages_t == len(acts) and chunk_t == chunk_s and not t["balanced"]:
        return ({(k, st): v * work for st, c in acts.items() for k, v in c.items()},
                f"each stage's measured compute per action x work per device {work:g}")
    per_layer = {k: sum(c[k] for c in acts.values()) / len(acts) / chunk_s for k in "FBIW"}
    return ({(k, st): per_layer[k] * chunk_t * work for st in range(stages_t) for k in "FBIW"},
            f"every stage alike: measured compute per layer (F {duration(per_layer['F'])}, B "
            f"{duration(per_layer['B'])}, mean over the stages) x {chunk_t:g} layers a chunk x work {work:g}")


def orders(m: dict, s: dict, t: dict) -> tuple[dict | None, dict | None]:
    """(the measured run's order, the target's order)."""
    measured = m["order"]["value"]
    textbook = textbook_orders(t["pp_schedule"], t["pp"], t["microbatches"], t["virtual_stages"])
    own = measured or textbook_orders(s["pp_schedule"], s["pp"], s["microbatches"], s["virtual_stages"])
    keeps = all(s[k] == t[k] for k in SHAPE)
    return own, (own if keeps and measured else textbook)


def overhead(order: dict, cost: dict, span_ns: float) -> float:
    """The per-action overhead o >= 0 with which ``order`` replayed with ``cost`` + o lasts ``span_ns`` (0 when the
    compute alone lasts longer)."""
    def span(o):
        return replay(order, lambda k, st: cost[(k, st)] + o)[0]

    lo, hi = 0.0, span_ns
    if span(lo) >= span_ns:
        return 0.0
    for _ in range(ITERATIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if span(mid) < span_ns else (lo, mid)
    return (lo + hi) / 2


def _replayable(order, cost) -> bool:
    return (order is not None and cost is not None and all((k, st) in cost for acts in order.values()
                                                           for k, st, _ in acts)
            and replay(order, lambda *_: 0) is not None)


def calibrated_overhead(m: dict, s: dict) -> dict:
    """fact(o): the per-action overhead with which the run's own order, replayed with its measured compute per
    action, lasts its measured pipeline time (the step less exposed non-pipeline communication and the
    optimizer); fact(None, why) without a pipeline, an order or the costs."""
    if s["pp"] == 1:
        return fact(None, "no pipeline")
    order, _ = orders(m, s, s)
    cost, _ = action_costs(m, s, s | {"balanced": False}, 1.0, None)
    step = m["step_time_ns"]["value"]
    if step is None or not _replayable(order, cost):
        return fact(None, "no profiled step, or no order with a measured cost for every action (an order beyond "
                          "models.pipeline.MAX_ACTIONS actions is not built)")
    non_pp = sum(f["value"] or 0 for k, f in m["exposed_comm_ns"].items() if k != "pp")
    pipeline_ns = step - non_pp - (m["optimizer_ns"]["value"] or 0)
    own = "reconstructed" if m["order"]["value"] else "textbook"
    return fact(overhead(order, cost, pipeline_ns),
                f"the one with which the measured {s['pp_schedule']} order ({own}), replayed with its measured "
                f"compute per action, lasts the measured {duration(pipeline_ns)} of pipeline per step (the step "
                "less exposed non-pipeline communication and the optimizer)")


def replayed_step(m: dict, s: dict, t: dict, work: float, layers) -> dict | None:
    """{pipeline_ns, compute_ns, bubble, how} of the target, or None where an order or a cost is missing."""
    o = m["action_overhead_ns"]["value"]
    _, orders_t = orders(m, s, t)
    cost_t, how = action_costs(m, s, t, work, layers)
    if o is None or not _replayable(orders_t, cost_t):
        return None
    span, _ = replay(orders_t, lambda k, st: cost_t[(k, st)] + o)
    pure_span, pure_busy = replay(orders_t, lambda k, st: cost_t[(k, st)])
    compute = sum(pure_busy.values()) / len(pure_busy)
    return {"pipeline_ns": span, "compute_ns": compute, "bubble": 1 - compute / pure_span,
            "how": f"the {t['pp_schedule']} order of {t['pp']} stages, m = {t['microbatches']}"
                   + (f", v = {t['virtual_stages']}" if t["virtual_stages"] > 1 else "")
                   + f" replayed with {how} + an overhead per action of {duration(o)} "
                   f"({m['action_overhead_ns']['source']})"}
