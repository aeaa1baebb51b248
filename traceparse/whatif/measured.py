"""What a forecast starts from: the measured run, read from its analyze document and its store.

Every value is ``{"value": v, "source": "..."}`` (analyzers.model_facts.fact). The model facts (Phi, delta,
b S H, layers, optimizer) are the ones the comm_volume and memory checks used, taken from their sections of the
document; times are means per rank per profiled step of the store's vocabulary (window_totals,
window_strategy_comm).
"""

from traceparse.layout.model_facts import fact
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
    out["world_size"] = fact(con.execute("SELECT coalesce(max(world_size), count(*)) FROM ranks").fetchone()[0],
                             "ranks: the job's world size (the traces' distributedInfo), else the ranks loaded")
    out.update(_times(con))
    out["comm_fit"] = _comm_fit(con)
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


def _times(con) -> dict:
    """Step, compute and exposed communication per strategy: means per rank per step window."""
    step, compute, windows = con.execute(
        "SELECT avg(window_ns), avg(compute_ns), count(*) FROM window_totals WHERE step IS NOT NULL").fetchone()
    exposed = {s: fact(ns, "window_strategy_comm: (comm_ns - hidden_ns) summed / rank-step windows")
               for s, ns in con.execute(
                   "SELECT strategy, sum(comm_ns - hidden_ns) / ? FROM window_strategy_comm WHERE step IS NOT NULL "
                   "GROUP BY 1 ORDER BY 1", [max(windows, 1)]).fetchall()}
    src = "window_totals: mean over ranks and profiled steps"
    optimizer = con.execute(
        """SELECT sum(e - s) / ? FROM interval_intersect(
               'SELECT e.rank AS k, e.rank AS g, e.ts_ns AS s, e.ts_ns + e.dur_ns AS e FROM events e
                JOIN main_threads m ON m.rank = e.rank AND m.pid = e.pid AND m.tid = e.tid
                WHERE e.cat = ''user_annotation'' AND is_optimizer(e.name)',
               'SELECT rank AS k, start_ns AS s, end_ns AS e FROM compute_intervals WHERE step IS NOT NULL')""",
        [max(windows, 1)]).fetchone()[0]
    return {"step_time_ns": fact(step, f"{src} (window_ns)"), "compute_ns": fact(compute, f"{src} (compute_ns)"),
            "optimizer_ns": fact(optimizer or 0.0, "compute_intervals within the main thread's optimizer annotations "
                                                   "(is_optimizer: Optimizer.step#*, Optimizer.zero_grad#*), per "
                                                   "rank-step window (0: none annotated)"),
            "exposed_comm_ns": exposed}


def _comm_fit(con) -> list[dict]:
    """Per (strategy, op, group size): time = latency + bytes / bandwidth, least squares over the profiled operations
    (bytes: the larger of input and output; time: the execution, else the CPU call), with the fit's relative RMS
    error; with a single size, or where the fit's latency or slope comes out negative (too few sizes, noisy times),
    time per byte only."""
    rows = con.execute(
        """
        WITH o AS (
            SELECT coalesce(strategy, 'untagged') AS strategy, op, group_size,
                   greatest(bytes_in, coalesce(bytes_out, 0))::DOUBLE AS b, coalesce(exec_dur_ns, host_dur_ns)::DOUBLE AS t
            FROM comm_ops WHERE step IS NOT NULL AND bytes_in > 0 AND coalesce(exec_dur_ns, host_dur_ns) IS NOT NULL
        ),
        f AS (
            SELECT strategy, op, group_size, count(*) AS n, count(DISTINCT b) AS sizes, avg(t) AS mean_t,
                   sum(t) / sum(b) AS per_byte, regr_intercept(t, b) AS a, regr_slope(t, b) AS k
            FROM o GROUP BY ALL
        ),
        r AS (
            SELECT f.*, CASE WHEN f.sizes > 1 AND f.a >= 0 AND f.k > 0 THEN f.a END AS latency_ns,
                   CASE WHEN f.sizes > 1 AND f.a >= 0 AND f.k > 0 THEN f.k ELSE f.per_byte END AS slope
            FROM f
        )
        SELECT r.strategy, r.op, r.group_size, r.n, r.sizes, r.latency_ns, r.slope,
               sqrt(avg(power(o.t - coalesce(r.latency_ns, 0) - r.slope * o.b, 2))) / any_value(r.mean_t) AS err
        FROM r JOIN o ON o.strategy = r.strategy AND o.op = r.op AND o.group_size IS NOT DISTINCT FROM r.group_size
        GROUP BY r.strategy, r.op, r.group_size, r.n, r.sizes, r.latency_ns, r.slope ORDER BY 1, 2, 3
        """).fetchall()
    return [{"strategy": s, "op": op, "group_size": g, "ops": n, "sizes": sizes, "latency_ns": a,
             "bandwidth_bytes_per_s": 1e9 / k if k and k > 0 else None, "rms_error": err,
             "source": "comm_ops in the profiled steps: least squares of time on bytes" if a is not None else
                       "comm_ops in the profiled steps: time per byte only, latency folded in (one size, or a fit with "
                       "a negative latency or slope)"}
            for s, op, g, n, sizes, a, k, err in rows]
