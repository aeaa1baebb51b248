"""``traceparse whatif``: forecast another layout of the same job from a measured run.

``whatif_document(con, doc, target, given)`` returns the versioned document: the measured facts it used (each with its
source), the target layout, and the prediction (step time, bubble, bytes per rank per step and exposed
communication per strategy, memory per device), the forecast's kind with its validated error and, where it has no
step time, what would make it forecastable (``reliability``). The models are in ``forecast``.
"""

from traceparse.errors import TraceError
from traceparse.layout.model_facts import fact
from traceparse.whatif.forecast import forecast
from traceparse.whatif.measured import layout, measured, model_layers, per_step
from traceparse.whatif.pipeline import calibrated_overhead
from traceparse.whatif.reliability import kind, remedy
from traceparse.whatif.straggler import without_straggler
from traceparse.whatif.sweep import bounds, excluded, restated, sweep
from traceparse.units import duration

VERSION = 1


def whatif_document(con, doc: dict, target: dict, given: dict | None = None) -> dict:
    """The whatif document of the run in ``con`` (its analyze document ``doc``) for the layout ``target``.
    A target ``--sweep`` would exclude (``sweep.excluded``, bounded by ``given``: stated and the traces' metadata,
    by default the metadata in ``doc``) is refused (TraceError) with the sweep's reason, unless the measured
    layout is excluded for that same reason (the run shows such a layout runs, e.g. 5 layers on 4 stages)."""
    facts = measured(con, doc)
    start = without_straggler(facts, doc) if target.get("without_straggler") else facts
    got = forecast(start, target)
    got["prediction"]["step_time_range_ns"] = _range(con, facts, doc, target, got)
    if start is not facts:
        removed = start["straggler_removed"]["value"]
        got["how"]["step_time"] = (f"from the measured run without straggler rank {removed['rank']}: "
                                   f"{_removal(removed)} (whatif/straggler.py); then {got['how']['step_time']}")
    facts_b = bounds(doc["metadata"]["values"] if given is None else given)
    why = excluded(got["target"], facts_b, got["inputs"]["layers"]["value"],
                   got["prediction"]["memory_per_device_bytes"])
    if why and why != excluded(layout(facts), facts_b, model_layers(facts), None):
        raise TraceError(None, f"--layout: {why} (whatif --sweep excludes this layout)")
    return {"version": VERSION, "run": doc["run"], "measured": facts, **got,
            "without_straggler": start["straggler_removed"]["value"] if start is not facts else None,
            "forecast_kind": kind(restated(facts), got["target"], model_layers(facts)),
            "remedy": remedy(got["prediction"], got["how"])}


def _range(con, facts: dict, doc: dict, target: dict, got: dict) -> dict | None:
    """``{low_ns, high_ns, steps, readings}``: the least and greatest of the same forecast made from each profiled
    step's own measured step, compute and exposed communication (``measured.per_step``; a pipeline's overhead per
    action calibrated on that step; the straggler's replay of that step): how far the source run's step-to-step
    variation moves the forecast; widened by each strategy's calls read as all latency and as all bandwidth where
    the run's calls cannot tell them apart (``got``'s ``how.calls``, ``readings`` True). None without either (fewer
    than two profiled steps, or a step without a step time, and no such reading)."""
    steps = []
    for step, terms in per_step(con).items():
        m = {**facts, **terms, "exposed_comm_ns": {
            s: terms["exposed_comm_ns"].get(s) or fact(0, f"no {s} communication in profiled step {step}")
            for s in facts["exposed_comm_ns"]}}
        m["action_overhead_ns"] = calibrated_overhead(m, layout(m))
        if target.get("without_straggler"):
            m = without_straggler(m, doc, step)
        steps.append(forecast(m, target)["prediction"]["step_time_ns"])
    if len(steps) < 2 or any(v is None for v in steps):
        steps = []
    exposed, step = got["prediction"]["exposed_comm_ns"], got["prediction"]["step_time_ns"]
    below = sum(exposed[k] - c["low_ns"] for k, c in got["how"]["calls"].items())
    above = sum(c["high_ns"] - exposed[k] for k, c in got["how"]["calls"].items())
    readings = step is not None and (below > 0 or above > 0)
    if not steps and not readings:
        return None
    return {"low_ns": min(steps or [step]) - below, "high_ns": max(steps or [step]) + above, "steps": len(steps),
            "readings": readings}


def _removal(removed: dict) -> str:
    """How the straggler was taken out (``without_straggler``: by replay, or the terms' sum without a step graph)."""
    if removed["replayed"]:
        return (f"its step graph replayed with the straggler's work at its peers' median, "
                f"{duration(removed['saved_per_step_ns'])} shorter per step; its compute in the others' mean, the "
                f"others' waits for it (each lost {duration(removed['lost_per_step_ns'])} per step) out of the "
                "exposed communication, the rest of the replayed step as other")
    return ("its compute in the others' mean, the others' waits for it (each lost "
            f"{duration(removed['lost_per_step_ns'])} per step) out of the exposed communication, the rest kept")


def sweep_document(con, doc: dict, given: dict, device_memory_bytes=None) -> dict:
    """The ``--sweep`` document: every layout of the run's world size, ranked (``sweep.sweep``). ``given``: what
    is known of the model (stated and the traces' metadata: ranks_per_node, kv_heads bound the candidates)."""
    facts = measured(con, doc)
    return {"version": VERSION, "run": doc["run"], "measured": facts,
            **sweep(facts, bounds(given, device_memory_bytes), facts["world_size"]["value"])}
