"""The dashboard of a run history (``traceparse dashboard HISTORY -o PAGE``): one offline page, drawn from
``traceparse.history.dashboard.dashboard_data`` (the comparisons are made there; this module only formats).

Top to bottom: the regressions, each run against the previous run of its series; a series selector; one
chart per metric group over the runs (x: run id, the recording order), regressed points ringed in red, each
point linking to its run's report when one was written; the runs with their labels, layout and files.
Everything from the history (labels, file names) goes through ``page.text`` or ``page.script_json``.
"""

from pathlib import Path

import altair as alt

from traceparse.render.page import render_page, script_json, text
from traceparse.axes import AXES as DEGREES

SHOWN = {"ns": ("ms", 1e-6), "bytes": ("MB", 1e-6)}  # unit stored -> (unit shown, factor)
TITLES = {
    "step_time": "Step time (mean, p95)",
    "exposed_comm": "Exposed communication per rank per step",
    "bubble": "Pipeline bubble (fraction of the step)",
    "overlap": "Communication hidden under compute (fraction)",
    "imbalance": "Slowest rank's step time over the mean",
    "cost": "What a cause costs a step, by replay (fraction of the step)",
    "volume": "Communication volume per rank per step (notes' count: all-reduce 2x)",
}
STYLE = ("<style>.charts{display:flex;flex-wrap:wrap;gap:0 1.5em} .charts .chart{flex:0 0 560px} "
         ".dash td,.dash th{text-align:left} td.labels,td.files{max-width:28em;overflow-wrap:anywhere}</style>")
# Picking a series filters every chart to it; a chart with no point of that series is hidden instead, left as it
# was: drawn empty, Vega would warn of an infinite extent and draw its axes at NaN.
PICK_SCRIPT = """<script>
const chartSeries = {series};
document.getElementById('series').addEventListener('change', e => {{
  const pick = e.target.value;
  for (const [id, view] of Object.entries(window.chartViews)) {{
    const shown = pick === '' || chartSeries[id].includes(pick);
    document.getElementById(id).style.display = shown ? '' : 'none';
    if (shown) view.signal('pick', pick).runAsync();
  }}
}});
</script>"""


def shown(value, unit) -> tuple[float, str]:
    """A stored number in the unit a person reads: ns as ms, bytes as MB."""
    name, factor = SHOWN.get(unit, (unit, 1))
    return value * factor, name


def fmt(value, unit) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if unit == "rank":
        return f"rank {value}"
    v, name = shown(value, unit)
    return f"{v:.4g} {name}".strip()


def group_chart(group: str, rows: list[dict]) -> alt.LayerChart:
    unit = rows[0]["unit"]
    base = alt.Chart(alt.Data(values=rows)).transform_filter("pick === '' || datum.series === pick").encode(
        x=alt.X("run:O", title="run (recording order)", axis=alt.Axis(labelAngle=0, labelOverlap=True)),
        y=alt.Y("value:Q", title=unit or "value", scale=alt.Scale(zero=unit == "fraction")),
        color=alt.Color("metric:N", title=None, legend=alt.Legend(orient="bottom")))
    tooltip = ["run:O", "metric:N", alt.Tooltip("value:Q", format=".4~g", title=unit or "value"), "labels:N",
               "recorded:N", alt.Tooltip("note:N", title="regression")]
    line = base.mark_line(strokeWidth=1.5).encode(detail="series:N")
    dots = base.mark_point(filled=True, size=50, cursor="pointer").encode(tooltip=tooltip, href="href:N")
    # every point, ringed when regressed (size 0 otherwise): a layer of the regressed points alone would be empty
    # in a chart without one, and Vega warns of the infinite extent of an empty layer
    ring = base.mark_point(shape="circle", filled=False, color="#d62728", strokeWidth=2.5).encode(
        color=alt.value("#d62728"), size=alt.condition("datum.regressed", alt.value(260), alt.value(0)),
        tooltip=tooltip, href="href:N")
    return alt.layer(line, dots, ring, title=TITLES.get(group, group)).add_params(
        alt.param(name="pick", value="")).properties(width=500, height=190)


def regressions_section(rows: list[dict]) -> str:
    if not rows:
        body = "<p>No regression: no run is worse than the previous run of its series beyond the thresholds.</p>"
    else:
        head = ("<tr><th>run</th><th>labels</th><th>metric</th><th>previous run</th><th>before</th><th>after</th>"
                "<th>change</th><th>threshold</th><th>note</th><th>report</th></tr>")
        trs = []
        for m in rows:
            unit, rel = m["unit"], m.get("relative")
            trs.append(
                f'<tr class="regressed"><td>{m["run"]}</td><td class="labels">{text(m["labels"])}</td>'
                f"<td>{text(m['metric'])}</td><td>{m['previous']}</td><td>{text(fmt(m.get('base'), unit))}</td>"
                f"<td>{text(fmt(m.get('new'), unit))}</td>"
                f"<td>{text('-' if rel is None else f'{rel:+.1%}')}</td><td>{text(m.get('threshold') or '-')}</td>"
                f"<td>{text(m.get('note') or '')}</td><td>{_link(m['href'])}</td></tr>")
        body = f'<table class="dash" id="regression-table">{head}{"".join(trs)}</table>'
    return (f'<section id="regressions"><h2>Regressions against the previous run of the same series '
            f"({len(rows)})</h2>{body}</section>")


def _link(href) -> str:
    return f'<a href="{text(href)}">report</a>' if href else ""


def series_select(options: list) -> str:
    opts = "".join(f'<option value="{text(k)}">{text(t)}</option>' for k, t in options)
    return (f'<p><label>Series: <select id="series"><option value="">every series ({len(options)})</option>{opts}'
            "</select></label></p>")


def runs_section(runs: list[dict]) -> str:
    trs = []
    for r in runs:
        ms = r["metrics"]
        folders = sorted({Path(f).parent.name or Path(f).name for f in r["files"]})
        files = f"{len(r['files'])} file(s) in {', '.join(folders)}" if folders else "none"
        trs.append(f"<tr><td>{r['run']}</td><td>{r['recorded']}</td>"
                   f'<td class="labels">{text(r["labels"])}</td><td>{text(layout_text(ms))}</td>'
                   f"<td>{text(ms.get('imbalance.straggler', '-'))}</td>"
                   f'<td class="files" title="{text(chr(10).join(r["files"]))}">{text(files)}</td>'
                   f"<td>{text(r['version'])}</td><td>{_link(r['href'])}</td></tr>")
    head = ("<tr><th>run</th><th>recorded (UTC)</th><th>labels</th><th>layout</th><th>straggler rank</th>"
            "<th>trace files</th><th>traceparse</th><th>report</th></tr>")
    return f'<section id="runs"><h2>Runs ({len(runs)})</h2><table class="dash">{head}{"".join(trs)}</table></section>'


def layout_text(ms: dict) -> str:
    """The parallel degrees above 1, the ZeRO stage and the pipeline schedule of a run."""
    parts = [f"{k}={ms[f'layout.{k}']}" for k in DEGREES if ms.get(f"layout.{k}") not in (None, 1)]
    if ms.get("layout.zero_stage"):
        parts.append(f"zero={ms['layout.zero_stage']}")
    if ms.get("layout.pp_schedule"):
        parts.append(str(ms["layout.pp_schedule"]))
    return " ".join(parts) or "no parallelism"


def chart_rows(group_points: list[dict]) -> list[dict]:
    """The points of a group with each value in the unit a person reads (``shown``)."""
    out = []
    for p in group_points:
        v, unit = shown(p["value"], p["unit"])
        out.append({**p, "value": v, "unit": unit})
    return out


def render_dashboard(data: dict) -> str:
    """The page of ``data`` (``traceparse.history.dashboard.dashboard_data``)."""
    specs, chart_series = {}, {}
    for group, group_points in data["groups"].items():
        specs[f"chart-{group}"] = group_chart(group, chart_rows(group_points)).to_dict()
        chart_series[f"chart-{group}"] = sorted({p["series"] for p in group_points})
    body = "\n".join([
        STYLE,
        "<h1>traceparse dashboard</h1>",
        f'<p class="meta">{text(data["title_line"])}</p>',
        regressions_section(data["regressions"]),
        series_select(data["series"]),
        '<div class="charts">' + "".join(f'<div class="chart" id="{i}"></div>' for i in specs) + "</div>",
        runs_section(data["runs"]),
        PICK_SCRIPT.format(series=script_json(chart_series)),
    ])
    return render_page("traceparse dashboard", body, specs)
