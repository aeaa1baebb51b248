"""Why the profiled steps are slow: every cause the checks priced by replay on the step graph (``traceparse explain
step_graph``), in one list, the costliest first (the analyze document's ``causes``; ``traceparse explain causes``).

A cause's cost is what taking it away shortens the step by, replayed: a rank's excess over its peers
(imbalance.cost.cause), a heavy pipeline stage's ops at the mean stage's compute (imbalance.heavy_stage_cost), a
strategy's communication hidden under compute (overlap.per_strategy[s].cost), the GPUs' waits on their hosts
removed (gpu.host_cost). The costs
are not added up: causes overlap (a rank late to a collective also lengthens its exposed wait)."""

from traceparse.document.gpu import CAUSE_WORDS
from traceparse.vocabulary.savings import KINDS


def causes(checks: dict, gpu: dict | None = None) -> list[dict]:
    """``[{check, cause, kind, saved_per_step_ns, share, note}]`` of the checks' documents and the GPU section, each
    with a saving, the costliest first."""
    out = []
    host = (gpu or {}).get("host_cost")
    if host and host["saved_per_step_ns"]:
        out.append({"check": "gpu", "cause": "GPU idle waiting on the host", "kind": "host",
                    "saved_per_step_ns": host["saved_per_step_ns"], "share": host["share"],
                    "note": "each launch at the moment its GPU went idle"
                            + (f" (mostly {CAUSE_WORDS[host['cause']]})" if host["cause"] else "")})
    imb = ((checks.get("imbalance") or {}).get("cost") or {}).get("cause")
    if imb and imb["saved_per_step_ns"]:
        seen = "seen once" if imb["steps"] == 1 else f"seen in {imb['steps_seen']} of {imb['steps']} steps"
        out.append({"check": "imbalance", "cause": f"rank {imb['rank']}", "kind": imb["kind"],
                    "saved_per_step_ns": imb["saved_per_step_ns"], "share": imb["share"],
                    "note": f"{KINDS.get(imb['kind'], 'its work')}; {seen}"})
    imbalance = checks.get("imbalance") or {}
    stage = imbalance.get("heavy_stage_cost")
    if stage and stage["saved_per_step_ns"]:
        out.append({"check": "imbalance", "cause": f"pipeline stage {imbalance['heavy_stage']}", "kind": "work",
                    "saved_per_step_ns": stage["saved_per_step_ns"], "share": stage["share"],
                    "note": "its ops at the mean stage's compute (move layers off it)"})
    for s, v in sorted(((checks.get("overlap") or {}).get("per_strategy") or {}).items()):
        cost = v.get("cost")
        if not cost or not cost["saved_per_step_ns"]:
            continue
        note = f"cannot be hidden here: {v['cannot_hide']}" if v.get("cannot_hide") else "were it hidden under compute"
        out.append({"check": "overlap", "cause": f"{s} communication", "kind": "exposed",
                    "saved_per_step_ns": cost["saved_per_step_ns"], "share": cost["share"], "note": note})
    return sorted(out, key=lambda c: (-(c["share"] or 0), c["check"], c["cause"]))
