"""The text of ``traceparse whatif``. A value that cannot be forecast (None) prints as ``-``, never as 0."""

from traceparse.render.text import ms as _ms
from traceparse.render.text import pct as _share
from traceparse.axes import AXES, SCHEDULE_KEYS


def layout_name(t: dict) -> str:
    """dp, tp, pp and the ZeRO stage; cp, sp, ep, m and v when above 1; a pipeline's schedule and m."""
    pipeline = (t.get("pp") or 1) > 1
    keys = AXES + SCHEDULE_KEYS
    shown = [k for k in keys if t.get(k) is not None and (
        k in ("dp", "tp", "pp", "zero_stage") or t[k] != 1 or (pipeline and k == "microbatches"))]
    return ", ".join(f"{k}={t[k]}" for k in shown)


def _bytes(b):
    return "-" if b is None else f"{b:,.0f} B"


def render_whatif(doc: dict) -> str:
    t, p, m = doc["target"], doc["prediction"], doc["measured"]
    lines = [f"target: {layout_name(t)} ({t['world_size']} ranks{', stages balanced' if t.get('balanced') else ''})",
             f"step time: {_ms(p['step_time_ns'])} (measured run: {_ms(m['step_time_ns']['value'])})",
             f"  how: {doc['how']['step_time']}",
             f"  = compute {_ms(p['compute_ns'])} + exposed communication "
             f"{_ms(sum(v or 0 for v in p['exposed_comm_ns'].values()))} + other {_ms(p['other_ns'])} "
             f"(measured run: {_ms(m['compute_ns']['value'])} + "
             f"{_ms(sum(f['value'] or 0 for f in m['exposed_comm_ns'].values()))} + the rest)",
             f"bubble: {_share(p['bubble'])} (the notes' formula); replayed: {_share(p['bubble_replay'])} "
             f"({doc['how']['bubble_replay']})",
             f"memory per device: {_bytes(p['memory_per_device_bytes'])} ({doc['how']['memory']['why']})",
             f"  activations: {_bytes(p['activation_bytes'])} ({doc['how']['memory']['activations_source']})",
             "communication volume per rank per step (notes' count: all-reduce 2x):"]
    for k, b in p["bytes_per_rank_per_step"].items():
        lines.append(f"  {k}: {_bytes(b)}  [{doc['how']['bytes'][k]}]")
    lines.append("exposed communication per step:")
    for k, ns in p["exposed_comm_ns"].items():
        lines.append(f"  {k}: {_ms(ns)}  [{doc['how']['exposed_comm'][k]}]")
    lines.append("communication measured (time = latency + bytes / bandwidth; relative RMS error of the fit):")
    for f in m["comm_fit"]:
        latency = "-" if f["latency_ns"] is None else f"{f['latency_ns'] / 1e3:.0f} us"
        bw = "-" if f["bandwidth_bytes_per_s"] is None else f"{f['bandwidth_bytes_per_s'] / 1e9:.3g} GB/s"
        lines.append(f"  {f['strategy']} {f['op']} x{f['group_size']}: {f['ops']} ops, {f['sizes']} sizes, latency "
                     f"{latency}, bandwidth {bw}, error {f['rms_error']:.0%}")
    lines.append("inputs:")
    for k, f in doc["inputs"].items():
        lines.append(f"  {k} = {f['value']}  ({f['source']})")
    return "\n".join(lines)


def render_sweep(doc: dict) -> str:
    lines = [f"layouts of {doc['world_size']} ranks, fastest predicted first:",
             "bounds: " + ", ".join(f"{k} {v}" for k, v in doc["bounds"].items())]
    for c in doc["candidates"]:
        t, p = c["layout"], c["prediction"]
        name = layout_name(t)
        tail = f"excluded: {c['excluded']}" if c["excluded"] else (
            f"step {_ms(p['step_time_ns'])}" + ("" if p["step_time_ns"] is not None else f" ({c['step_time_how']})"))
        lines.append(f"  {name}: {tail}; memory {_bytes(p['memory_per_device_bytes'])}")
    return "\n".join(lines)


def render_whatif_html(doc: dict) -> str:
    """One offline page: the chart (whatif_chart) above the text report."""
    from traceparse.render.charts import spec
    from traceparse.render.charts.whatif import whatif_chart
    from traceparse.render.page import render_page, text

    sweep = "candidates" in doc
    title = "traceparse whatif: " + ("every layout of the run's world size" if sweep else "forecast")
    chart = whatif_chart(doc)
    figure = '<figure><div class="chart" id="whatif"></div></figure>' if chart is not None else ""
    body = f"<h1>{text(title)}</h1>{figure}<pre>{text(render_sweep(doc) if sweep else render_whatif(doc))}</pre>"
    return render_page(title, body, {"whatif": spec(chart)} if chart is not None else {})
