"""What a forecast starts from: the measured run, read from its analyze document and its store.

Every value is ``{"value": v, "source": "..."}`` (analyzers.model_facts.fact). The model facts (Phi, delta,
b S H, layers, optimizer) are the ones the comm_volume and memory checks used, taken from their sections of the
document; times are means per rank per profiled step of the store's vocabulary (window_totals,
window_strategy_comm).
"""

from traceparse.layout.model_facts import fact
from traceparse.store.query import sql_file
from traceparse.vocabulary.modules import use
from traceparse.whatif.calls import fit
from traceparse.whatif.pipeline import calibrated_overhead
from traceparse.axes import AXES, SCHEDULE_KEYS

LAYOUT = AXES + SCHEDULE_KEYS


def measured(con, doc: dict) -> dict:
    """{name: fact} of the measured run."""
    checks = doc["checks"]
    volume, memory, bubble = checks["comm_volume"], checks["memory"], checks["bubble"]
    x = {k: v for k, v in (volume.get("inputs") or {}).items() if isinstance(v, dict) and "value" in v}
    out = {k: x.get(k) or fact(doc["layout"].get(k), doc["layout"]["evidence"].get(k, "layout")) for k in LAYOUT}
    out["pp_schedule"] = fact(doc["layout"].get("pp_schedule") or bubble.get("schedule"),
                              doc["layout"]["evidence"].get("pp_schedule", "layout"))
    for k in ("delta", "Phi_dp", "b", "S", "H", "bSH", "L_local", "kv_over_q", "K_MoE"):
        out[k] = x.get(k) or fact(None, "the comm_volume check did not report it")
    per_strategy = [x[k] for k in ("delta_tp", "delta_pp", "delta_cp", "delta_sp", "delta_ep") if x.get(k, {}).get("value")]
    if out["delta"]["value"] is None and per_strategy:  # no dp collective: the element size of another strategy's
        out["delta"] = per_strategy[0]
    for k in ("delta_tp", "delta_pp", "delta_cp", "delta_sp", "delta_ep"):
        out[k] = x[k] if x.get(k, {}).get("value") is not None else out["delta"]
    stage_of = {p["rank"]: p["stage"] for p in bubble.get("per_stage") or []}
    growth = {}
    for g in memory.get("step_growth") or []:  # per pipeline stage (every rank is stage 0 without a pipeline)
        st = stage_of.get(g["rank"], 0)
        growth[st] = max(growth.get(st, 0), g["growth_bytes"])
    out["step_growth_bytes"] = fact(growth or None, "memory.step_growth: what a profiled step allocates above its "
                                                    "start, per pipeline stage (the largest of its ranks)")
    mem = memory.get("inputs") or {}
    for k in ("Phi_device", "n_opt", "delta_opt"):
        out[k] = mem.get(k) or fact(None, f"the memory check did not report it ({memory.get('reason', '')})")
    out["bytes"] = {s: fact(v["measured_volume_bytes"], "comm_volume: measured volume per rank per step (notes' "
                                                         "count: all-reduce 2x)")
                    for s, v in (volume.get("per_strategy") or {}).items() if v.get("measured_volume_bytes") is not None}
    out["formula_bytes"] = {s: fact(v["expected_volume_bytes"], f"comm_volume: the notes' formula with the run's "
                                                                f"layout ({v['formula']})")
                            for s, v in (volume.get("per_strategy") or {}).items() if v.get("expected_volume_bytes")}
    out["bubble"] = fact(bubble.get("measured"), "bubble: measured (1 - compute / step time, mean over pp ranks)")
    per = {}
    for p in bubble.get("per_stage") or []:
        per.setdefault(p["stage"], []).append(p["compute_ns"])
    out["stage_compute_ns"] = fact({st: sum(v) / len(v) for st, v in sorted(per.items())} or None,
                                   "bubble.per_stage: compute per step of each pipeline stage (mean over its ranks)")
    acts = {}
    for a in bubble.get("action_ns") or []:
        acts.setdefault(a["stage"], {})[a["kind"]] = a["mean_ns"]
    out["order"] = fact({r: [tuple(a) for a in acts] for r, acts in enumerate(bubble.get("order") or [])} or None,
                        "bubble.order: the run's reconstructed order of forward and backward work per rank")
    out["action_ns"] = fact(acts or None, "bubble.action_ns: compute of one forward (F), backward (B) or split "
                                          "backward (I, W) per (virtual) stage and micro-batch, mean over ranks and steps")
    terms = times(con)  # measured.sql's views made
    out["world_size"] = fact(con.table("whatif_world").fetchall()[0][0],
                             "world (vocabulary/world.sql): the job's world size, else the ranks loaded")
    out.update(terms)
    out["calls"], out["call_fit"] = _calls(con)
    out["action_overhead_ns"] = calibrated_overhead(out, layout(out))
    return out


def layout(m: dict) -> dict:
    """The measured layout's values, unknown degrees taken as 1 (the ZeRO stage as 0)."""
    got = {k: m[k]["value"] if m[k]["value"] is not None else (0 if k == "zero_stage" else 1) for k in LAYOUT}
    got["pp_schedule"] = m["pp_schedule"]["value"]
    return got


def model_layers(m: dict):
    """The model's layers: L_local x the measured pp, or None."""
    return (m["L_local"]["value"] or 0) * (m["pp"]["value"] or 1) or None


def times(con) -> dict:
    """Step, compute and exposed communication per strategy: means per rank per step window (measured.sql, whose
    views it makes, after what they read: optimizer_spans.sql, world.sql)."""
    use(con, "optimizer_spans", "world")
    con.execute(sql_file(__package__, "measured.sql"))
    step, compute, _ = con.table("whatif_times").fetchall()[0]
    exposed = {s: fact(ns, "window_strategy_comm: (comm_ns - hidden_ns) summed / rank-step windows")
               for s, ns in con.table("whatif_exposed").order("strategy").fetchall()}
    src = "window_totals: mean over ranks and profiled steps"
    (optimizer,) = con.table("whatif_optimizer").fetchall()[0]
    return {"step_time_ns": fact(step, f"{src} (window_ns)"), "compute_ns": fact(compute, f"{src} (compute_ns)"),
            "optimizer_ns": fact(optimizer or 0.0, "compute_intervals within the main thread's optimizer annotations "
                                                   "(optimizer_spans: Optimizer.step#*, Optimizer.zero_grad#*), per "
                                                   "rank-step window (0: none annotated)"),
            "exposed_comm_ns": exposed}


def per_step(con) -> dict:
    """{step: the facts of ``times`` measured on that profiled step alone (its step, compute and exposed communication
    per strategy: means over its rank windows; the optimizer's time as the run's mean)}, for each step's own forecast.
    Reads measured.sql's views (``times`` makes them)."""
    exposed = {}
    for step, strategy, ns in con.table("whatif_step_exposed").order("step, strategy").fetchall():
        exposed.setdefault(step, {})[strategy] = ns
    src = "window_totals of profiled step {}: mean over its rank windows"
    return {step: {"step_time_ns": fact(ns, f"{src.format(step)} (window_ns)"),
                   "compute_ns": fact(compute, f"{src.format(step)} (compute_ns)"),
                   "exposed_comm_ns": {s: fact(v, f"window_strategy_comm of profiled step {step}: (comm_ns - "
                                                  "hidden_ns) summed / its rank windows")
                                       for s, v in exposed.get(step, {}).items()}}
            for step, ns, compute in con.table("whatif_step_times").order("step").project(
                "step, step_ns, compute_ns").fetchall()}


def _calls(con) -> tuple[dict, dict]:
    """({strategy: fact([(op, group size, bytes, per rank per step)])}, {strategy: fact(calls.fit)}): the run's
    collectives per profiled step and their cost per call fitted over their transfers (measured.sql)."""
    calls = {}
    for s, op, g, per, n in con.table("whatif_calls").order("strategy, op, group_size").fetchall():
        calls.setdefault(s, []).append((op, g, n, per))
    transfers = {}
    for s, op, g, n, ns in con.table("whatif_transfers").fetchall():
        transfers.setdefault(s, []).append((op, g, n, ns))
    src = ("whatif_transfers: least squares of each collective's transfer (from its last member's arrival to its "
           "completion; unmatched: its duration) on the ring model's steps and bytes moved, each coefficient kept where "
           "the calls show it above 0 ([stats] alpha; calls.fit)")
    return ({s: fact(v, "whatif_calls: the collectives a rank issues per profiled step, by op and group size, and "
                        "their mean size") for s, v in calls.items()},
            {s: fact(fit(v), src) for s, v in transfers.items()})
