"""The text of ``traceparse whatif``. A value that cannot be forecast (None) prints as ``-``, never as 0; what the
trace gives (an input's value or source) through ``escape.terminal``."""

from traceparse.units import count, in_unit, size
from traceparse.units import ms as _ms
from traceparse.units import pct as _share
from traceparse.axes import AXES, SCHEDULE_KEYS
from traceparse.escape import terminal
from traceparse.render.page import text


def layout_name(t: dict) -> str:
    """dp, tp, pp and the ZeRO stage; cp, sp, ep, m and v when above 1; a pipeline's schedule and m."""
    pipeline = (t.get("pp") or 1) > 1
    keys = AXES + SCHEDULE_KEYS
    shown = [k for k in keys if t.get(k) is not None and (
        k in ("dp", "tp", "pp", "zero_stage") or t[k] != 1 or (pipeline and k == "microbatches"))]
    return ", ".join(f"{k}={t[k]}" for k in shown)


SHORT = {"zero_stage": "z", "microbatches": "m", "virtual_stages": "v", "pp_schedule": ""}


def short_name(t: dict) -> str:
    """layout_name, compact for a chart's axis: 'dp2 tp1 pp2 z1 1f1b m2'."""
    parts = [p.split("=") for p in layout_name(t).split(", ")]
    return " ".join(f"{SHORT.get(k, k)}{v}" for k, v in parts)


def _kind_lines(doc: dict) -> list[str]:
    """The forecast's kind and its validated error; where the step is unknown, what would make it forecastable."""
    k, out = doc.get("forecast_kind"), []
    if k:
        verdict = "reliable" if k["reliable"] else "not reliable" if k["error"] is not None else "not validated"
        pairs = "; ".join(f"{p['pair']}: {_signed(p['error'])}" for p in k["pairs"]) or "no validation pair"
        out.append(f"  kind: {kind_label(k)} ({k['what']}), {error_text(k)}: {verdict} [{pairs}; {k['source']}]")
    for k in doc.get("unmeasured") or []:
        out.append(f"  not measured: the run has no {k} communication, so the target's {k} calls are costed at the "
                   f"run's exposed time per byte of the others (their latency per call unknown)")
    if doc.get("remedy"):
        out.append(f"  step unknown: {doc['remedy']}")
    return out


def _range_lines(r: dict | None) -> list[str]:
    """The forecast's range over the source run's profiled steps and its calls' readings (whatif step_time_range_ns),
    a line or none."""
    return [f"  {_range_source(r)}: {_range(r)}"] if r else []


def _range_source(r: dict) -> str:
    calls = "each strategy's calls read as all latency and as all bandwidth"
    if not r["steps"]:
        return f"with {calls}"
    return f"from each of the {r['steps']} profiled steps' own terms" + (f" and {calls}" if r.get("readings") else "")


def _range(r: dict) -> str:
    return f"{_ms(r['low_ns'])} to {_ms(r['high_ns'])}"


def render_whatif(doc: dict) -> str:
    t, p, m = doc["target"], doc["prediction"], doc["measured"]
    removed = doc.get("without_straggler")
    also = (", stages balanced" if t.get("balanced") else "") + (
        f", without straggler rank {removed['rank']}, which cost each other rank {_ms(removed['lost_per_step_ns'])} "
        "a step"
        if removed else "")
    lines = [f"target: {layout_name(t)} ({t['world_size']} ranks{also})",
             f"step time: {_ms(p['step_time_ns'])} (measured run: {_ms(m['step_time_ns']['value'])})",
             *_range_lines(p.get("step_time_range_ns")),
             *_kind_lines(doc),
             f"  how: {doc['how']['step_time']}",
             f"  = compute {_ms(p['compute_ns'])} + exposed communication "
             f"{_ms(sum(v or 0 for v in p['exposed_comm_ns'].values()))} + other {_ms(p['other_ns'])} "
             f"(measured run: {_ms(m['compute_ns']['value'])} + "
             f"{_ms(sum(f['value'] or 0 for f in m['exposed_comm_ns'].values()))} + the rest)",
             f"bubble: {_share(p['bubble'])} (the notes' formula); replayed: {_share(p['bubble_replay'])} "
             f"({doc['how']['bubble_replay']})",
             f"memory per device: {size(p['memory_per_device_bytes'])} ({doc['how']['memory']['why']})",
             f"  activations: {size(p['activation_bytes'])} ({doc['how']['memory']['activations_source']})",
             "communication volume per rank per step (notes' count: all-reduce 2x):"]
    for k, b in p["bytes_per_rank_per_step"].items():
        lines.append(f"  {k}: {size(b)}  [{doc['how']['bytes'][k]}]")
    lines.append("exposed communication per step:")
    for k, ns in p["exposed_comm_ns"].items():
        lines.append(f"  {k}: {_ms(ns)}  [{doc['how']['exposed_comm'][k]}]")
    lines.append("communication measured (a collective's transfer = latency x its ring steps + bytes moved / "
                 "bandwidth, fitted per strategy; relative RMS error of the fit):")
    for k, f in m["call_fit"].items():
        lines.append(f"  {k}: {_fitted(f['value'])}")
    if not m["call_fit"]:
        lines.append("  none: no collective over 2 ranks or more in a profiled step (ProfilerStep#N)")
    lines.append("inputs:")
    for k, f in doc["inputs"].items():
        unit = "ns" if k.endswith("_ns") else "bytes" if k.endswith("_bytes") else ""
        value = "unknown" if f["value"] is None else terminal(in_unit(f["value"], unit))
        lines.append(f"  {k} = {value}  ({terminal(f['source'])})")
    return terminal("\n".join(lines), newlines=True)


def _fitted(f: dict | None) -> str:
    """What a strategy's collectives told of a call's cost (whatif/calls.py fit)."""
    if f is None:
        return "no collective with a measured transfer"
    calls = f"{count(f['calls'], 'call')}, {count(f['sizes'], 'size')}"
    if f["alpha"] is None:
        return f"{calls}: they cannot tell latency from bandwidth (neither shown above 0)"
    bw = f"{size(1e9 / f['beta'])}/s" if f["beta"] > 0 else "-"
    return f"{calls}, latency {_ms(f['alpha'])} per ring step, bandwidth {bw}, error {f['rms_error']:.0%}"


TIER_HEADS = {
    "reliable": "reliable forecasts (their kind's validated step-time error within {bound})",
    "not_reliable": "not reliable (their kind's validated step-time error above {bound})",
    "not_validated": "not validated (no validation pair of their kind: the error is unknown)",
    "step_unknown": "no step time (what would make it forecastable)",
    "excluded": "excluded",
}
TIER_LABELS = {"reliable": "reliable", "not_reliable": "not reliable", "not_validated": "not validated",
               "step_unknown": "no step time", "excluded": "excluded"}


def _signed(e: float) -> str:
    return "0%" if e == 0 else f"{e:+.0%}"


def kind_label(k: dict) -> str:
    """A forecast's kind: its name, or the changes it combines (cross-strategy)."""
    return " + ".join(k["changes"]) if k["kind"] == "cross" else k["kind"]


def error_text(k: dict) -> str:
    """The kind's validated step-time error: the worst of its pairs, signed; or why there is none."""
    if k["error"] is None:
        return "error unknown (not validated)"
    if k["kind"] == "measured":
        return "error 0% (the measured step, by construction)"
    n = len(k["pairs"])
    return f"error {_signed(k['error'])}" + (f" (the worst of {n} validation pairs)" if n > 1 else "")


def _note(c: dict) -> str:
    """What a row adds: why it is excluded, what would make it forecastable, or what its kind's forecasts miss."""
    if c["excluded"]:
        return f"excluded: {c['excluded']}"
    if c["prediction"]["step_time_ns"] is None:
        return f"step unknown: {c.get('remedy') or c['step_time_how']}"
    k = c["forecast_kind"]
    if c["tier"] == "not_validated":
        return f"no validation pair of {' or '.join(k.get('unvalidated') or [k['kind']])}"
    return "" if k["reliable"] else (k["off"] or "")


def render_sweep(doc: dict) -> str:
    r = doc["reliability"]
    bound = f"{r['bound']:.0%}"
    lines = [f"layouts of {doc['world_size']} ranks: reliable forecasts first, then the rest, fastest predicted first "
             f"within each group",
             f"errors: the step-time error validated for each kind of forecast ({r['source']})",
             "bounds: " + ", ".join(f"{k} {v}" for k, v in doc["bounds"].items())]
    tier = None
    for i, c in enumerate(doc["candidates"], 1):
        if c["tier"] != tier:
            tier = c["tier"]
            lines.append(TIER_HEADS[tier].format(bound=bound) + ":")
        t, p, k = c["layout"], c["prediction"], c["forecast_kind"]
        step = "excluded" if c["excluded"] else f"step {_ms(p['step_time_ns'])}"
        note = _note(c)
        lines.append(f"  {i}. {layout_name(t)}: {step}; memory {size(p['memory_per_device_bytes'])}; "
                     f"kind {kind_label(k)}, {error_text(k)}" + (f"; {note}" if note and not c["excluded"] else "")
                     + (f" ({c['excluded']})" if c["excluded"] else ""))
    lines += _summary(doc) + _kinds_legend(doc)
    return terminal("\n".join(lines), newlines=True)


def _summary(doc: dict) -> list[str]:
    """Which candidates the sweep cannot forecast reliably, by why."""
    n = doc["reliability"]["tiers"]
    kept = sum(v for k, v in n.items() if k != "excluded")
    bad = n["not_reliable"] + n["not_validated"] + n["step_unknown"]
    if not bad:
        return [f"every one of the {kept} layouts kept is forecast reliably"]
    parts = [f"{n[k]} {what}" for k, what in (
        ("not_reliable", f"of a kind validated off by more than {doc['reliability']['bound']:.0%}"),
        ("not_validated", "of a kind no validation pair covers"), ("step_unknown", "without a step time")) if n[k]]
    return [f"cannot be forecast reliably: {bad} of the {kept} layouts kept ({', '.join(parts)})"]


def _kinds_legend(doc: dict) -> list[str]:
    """Each kind the sweep's rows have: what it changes, its validation pairs and errors, what its forecasts miss."""
    seen = {}
    for c in doc["candidates"]:
        seen.setdefault(kind_label(c["forecast_kind"]), c["forecast_kind"])
    out = ["kinds (what a forecast changes against the measured run; validation pair: step-time error):"]
    for label, k in seen.items():
        pairs = "; ".join(f"{p['pair']}: {_signed(p['error'])}" for p in k["pairs"]) or "no validation pair"
        out.append(f"  {label}: {k['what']} [{pairs}]" + (f"; most off: {k['off']}" if k["off"] else ""))
    return out


def chart_rows(doc: dict) -> tuple[list[dict], str]:
    """(rows, title) for the chart (charts.whatif.whatif_chart): per layout its name, step time (ms), memory (MiB)
    and tier. Sweep: each layout kept with a step time, in the sweep's order. One target: the measured run and
    the forecast. Unknown step times are left out."""
    if "candidates" in doc:
        rows = [{"layout": f"{i}. {short_name(c['layout'])}", "name": layout_name(c["layout"]),
                 "ms": c["prediction"]["step_time_ns"] / 1e6,
                 "memory_mib": (c["prediction"]["memory_per_device_bytes"] or 0) / 2**20,
                 "forecast": TIER_LABELS[c["tier"]], "kind": kind_label(c["forecast_kind"]),
                 "error": error_text(c["forecast_kind"])}
                for i, c in enumerate(doc["candidates"], 1)
                if not c["excluded"] and c["prediction"]["step_time_ns"] is not None]
        return rows, "Predicted step time (reliable forecasts first)"
    pred, run = doc["prediction"]["step_time_ns"], doc["measured"]["step_time_ns"]["value"]
    k = doc.get("forecast_kind")
    rows = [{"layout": what, "name": what, "ms": ns / 1e6, "memory_mib": None, "forecast": tier, "kind": kind,
             "error": err}
            for what, ns, tier, kind, err in (
                ("measured run", run, "measured", "", ""),
                (f"forecast: {short_name(doc['target'])}", pred,
                 ("reliable" if k["reliable"] else "not reliable" if k["error"] is not None else "not validated")
                 if k else "forecast", kind_label(k) if k else "", error_text(k) if k else ""))
            if ns is not None]
    return rows, "Step time: the measured run and the forecast"


HTML_STYLE = """<style>
.whatif-table table{width:100%}
.whatif-table td,.whatif-table th{text-align:left;vertical-align:top;white-space:normal;overflow-wrap:break-word}
.whatif-table td.num,.whatif-table th.num{text-align:right;white-space:nowrap}
tr.reliable td:first-child{border-left:4px solid #4c9a4c} tr.not_reliable td:first-child{border-left:4px solid #d98c1f}
tr.not_validated td:first-child{border-left:4px solid #999} tr.step_unknown td,tr.excluded td{color:#666}
pre.whatif{white-space:pre-wrap;overflow-wrap:anywhere}
.chart{width:100%}
@media (max-width:760px){
 .whatif-table table,.whatif-table tbody,.whatif-table tr,.whatif-table td{display:block;width:auto}
 .whatif-table thead{display:none}
 .whatif-table tr{margin:0 0 .6em;border:1px solid #ddd}
 .whatif-table td,.whatif-table td.num{border:none;text-align:left;white-space:normal}
 .whatif-table td::before{content:attr(data-label) ": ";font-weight:600}
}
</style>"""


def _num(i, num) -> str:
    return ' class="num"' if i in num else ""


def _cells(row, heads, num=()) -> str:
    """A row's cells, each labelled with its column (shown above it where the table stacks at narrow widths)."""
    return "".join(f'<td{_num(i, num)} data-label="{text(h)}">{text(v)}</td>' for i, (v, h) in enumerate(zip(row, heads, strict=True)))


def _table(heads, rows, num=(), classes=None) -> str:
    """An HTML table that wraps: its cells wrap, and below 760 px each row stacks as labelled lines."""
    th = "".join(f"<th{_num(i, num)}>{text(h)}</th>" for i, h in enumerate(heads))
    body = "".join((f'<tr class="{text(c)}">' if c else "<tr>") + f"{_cells(r, heads, num)}</tr>"
                   for r, c in zip(rows, classes or [None] * len(rows), strict=True))
    return f'<div class="whatif-table"><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


def sweep_table_html(doc: dict) -> str:
    """The sweep as an HTML table: rank, layout, forecast (tier), kind, validated error, step, memory, note."""
    heads = ["#", "layout", "forecast", "kind", "validated step-time error", "predicted step", "memory per device",
             "note"]
    rows = []
    for i, c in enumerate(doc["candidates"], 1):
        p, k = c["prediction"], c["forecast_kind"]
        rows.append([i, layout_name(c["layout"]), TIER_LABELS[c["tier"]], kind_label(k),
                     error_text(k).removeprefix("error "), "-" if c["excluded"] else _ms(p["step_time_ns"]),
                     size(p["memory_per_device_bytes"]), _note(c)])
    return _table(heads, rows, num=(0, 5, 6), classes=[c["tier"] for c in doc["candidates"]])


def _forecast_table_html(doc: dict) -> str:
    """One forecast as an HTML table: each term of the step, the bubble and the memory, beside the measured run's."""
    p, m = doc["prediction"], doc["measured"]
    rows = [("step time", _ms(p["step_time_ns"]), _ms(m["step_time_ns"]["value"])),
            *[(f"step time {_range_source(r)}", _range(r), "") for r in [p.get("step_time_range_ns")] if r],
            ("compute", _ms(p["compute_ns"]), _ms(m["compute_ns"]["value"]))]
    for k, ns in p["exposed_comm_ns"].items():
        got = m["exposed_comm_ns"].get(k)
        rows.append((f"exposed {k} communication", _ms(ns), _ms(got["value"]) if got else "-"))
    rows += [("other (idle, Python, launches)", _ms(p["other_ns"]), ""),
             ("bubble (the notes' formula)", _share(p["bubble"]), ""),
             ("bubble (replayed)", _share(p["bubble_replay"]), ""),
             ("memory per device", size(p["memory_per_device_bytes"]), "")]
    rows += [(f"bytes per rank per step: {k}", size(b), "") for k, b in p["bytes_per_rank_per_step"].items()]
    return _table(["term", "forecast", "measured run"], rows, num=(1, 2))


def _kind_html(k: dict | None) -> str:
    if not k:
        return ""
    pairs = "; ".join(f"{p['pair']}: {_signed(p['error'])}" for p in k["pairs"]) or "no validation pair"
    verdict = "reliable" if k["reliable"] else "not reliable" if k["error"] is not None else "not validated"
    return (f"<p><b>Forecast kind</b>: {text(kind_label(k))}, {text(k['what'])}; {text(error_text(k))}: "
            f"<b>{text(verdict)}</b> (validation: {text(pairs)}; {text(k['source'])})</p>")


def render_whatif_html(doc: dict) -> str:
    """One offline page: the chart (charts.whatif.whatif_chart) above a table (the sweep's ranking, or the forecast's
    terms beside the measured run's) and, for one forecast, the full text report, wrapped."""
    from traceparse.render.charts import spec
    from traceparse.render.charts.whatif import whatif_chart
    from traceparse.render.page import render_page

    sweep = "candidates" in doc
    title = "traceparse whatif: " + ("every layout of the run's world size" if sweep else "forecast")
    chart = whatif_chart(*chart_rows(doc))
    figure = '<figure><div class="chart" id="whatif"></div></figure>' if chart is not None else ""
    if sweep:
        head = "".join(f"<p>{text(line)}</p>" for line in render_sweep(doc).split("\n")[:3])
        legend = _kinds_legend(doc)
        body = (f"{head}{figure}{sweep_table_html(doc)}"
                + "".join(f"<p><b>{text(line)}</b></p>" for line in _summary(doc))
                + f"<p>{text(legend[0])}</p><ul>{''.join(f'<li>{text(line.strip())}</li>' for line in legend[1:])}</ul>")
    else:
        remedy = doc.get("remedy")
        body = (f"<p>{text('target: ' + layout_name(doc['target']))}</p>{_kind_html(doc.get('forecast_kind'))}"
                + (f"<p>step unknown: {text(remedy)}</p>" if remedy else "")
                + f"{figure}{_forecast_table_html(doc)}<h2>Details</h2><pre class=\"whatif\">{text(render_whatif(doc))}</pre>")
    return render_page(title, HTML_STYLE + f"<h1>{text(title)}</h1>" + body,
                       {"whatif": spec(chart)} if chart is not None else {})
