"""The dashboard of a run history (``traceparse dashboard HISTORY -o PAGE``): one offline page.

Top to bottom: the regressions, each run against the previous run of its series
(``history.compare_previous``); a series selector; one chart per metric group over the runs (x: run
id, the recording order), regressed points ringed in red, each point linking to its run's report when
one was written; the runs with their labels, layout and files. Everything from the history (labels,
file names) goes through ``page.text`` or ``page.script_json``.
"""

from pathlib import Path
from urllib.parse import quote

import altair as alt

from traceparse.history.store import History, compare_previous, label_key, label_text, series
from traceparse.history.run_metrics import GROUPS, PER_MICROBATCH, per_step_id
from traceparse.render.page import render_page, script_json, text
from traceparse.axes import AXES as DEGREES

SHOWN = {"ns": ("ms", 1e-6), "bytes": ("MB", 1e-6)}  # unit stored -> (unit shown, factor)
TITLES = {
    "step_time": "Step time (mean, p95)",
    "exposed_comm": "Exposed communication per rank per step",
    "bubble": "Pipeline bubble (fraction of the step)",
    "overlap": "Communication hidden under compute (fraction)",
    "imbalance": "Slowest rank's step time over the mean",
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


def report_link(report, out_dir: Path) -> str | None:
    """The link to a run's report: relative when it sits in the dashboard's folder (or below), else a
    file: URL."""
    if not report:
        return None
    p = Path(report)
    try:
        return quote(p.relative_to(out_dir.resolve()).as_posix())
    except ValueError:
        return p.as_uri()


def points(hist: History, by, regressed: dict, out_dir: Path) -> list[dict]:
    """One row per (run, metric with a direction): the charts' data."""
    runs = {r["run_id"]: r for r in hist.runs}
    rows = []
    for m in hist.metrics:
        if m["better"] is None or isinstance(m["value"], str) or m["value"] is None or m["id"].endswith(PER_MICROBATCH):
            continue  # layout values and the straggler's rank are in the runs table; per micro-batch: per step
        r = runs[m["run_id"]]
        v, unit = shown(m["value"], m["unit"])
        note = regressed.get((r["run_id"], m["id"])) or regressed.get((r["run_id"], m["group"]))
        rows.append({"run": r["run_id"], "metric": m["id"], "group": m["group"], "value": v, "unit": unit,
                     "series": label_key(series(r["labels"], by)), "labels": label_text(r["labels"]),
                     "recorded": f"{r['recorded_at']:%Y-%m-%d %H:%M:%S} UTC", "regressed": note is not None,
                     "note": note or "", "href": report_link(r["report"], out_dir)})
    return rows


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


def regression_rows(comparisons: dict) -> list[tuple[int, int, dict]]:
    """(run id, previous run id, compared metric) for every regressed metric, newest run first."""
    rows = [(run_id, prev, m) for run_id, (prev, cmp) in comparisons.items() for m in cmp["metrics"]
            if m.get("regressed")]
    return sorted(rows, key=lambda r: (-r[0], r[2]["id"]))


def regressions_section(hist: History, rows, out_dir: Path) -> str:
    runs = {r["run_id"]: r for r in hist.runs}
    units = {(m["run_id"], m["id"]): m["unit"] for m in hist.metrics}
    if not rows:
        body = "<p>No regression: no run is worse than the previous run of its series beyond the thresholds.</p>"
    else:
        head = ("<tr><th>run</th><th>labels</th><th>metric</th><th>previous run</th><th>before</th><th>after</th>"
                "<th>change</th><th>threshold</th><th>note</th><th>report</th></tr>")
        trs = []
        for run_id, prev, m in rows:
            r, unit = runs[run_id], units.get((run_id, m["id"]), "")
            rel = m.get("relative")
            trs.append(
                f'<tr class="regressed"><td>{run_id}</td><td class="labels">{text(label_text(r["labels"]))}</td>'
                f"<td>{text(m['id'])}</td><td>{prev}</td><td>{text(fmt(m.get('base'), unit))}</td>"
                f"<td>{text(fmt(m.get('new'), unit))}</td>"
                f"<td>{text('-' if rel is None else f'{rel:+.1%}')}</td><td>{text(m.get('threshold') or '-')}</td>"
                f"<td>{text(m.get('note') or '')}</td><td>{_link(report_link(r['report'], out_dir))}</td></tr>")
        body = f'<table class="dash" id="regression-table">{head}{"".join(trs)}</table>'
    return (f'<section id="regressions"><h2>Regressions against the previous run of the same series '
            f"({len(rows)})</h2>{body}</section>")


def _link(href) -> str:
    return f'<a href="{text(href)}">report</a>' if href else ""


def series_select(hist: History, by) -> str:
    keys = {}
    for r in hist.runs:
        s = series(r["labels"], by)
        keys.setdefault(label_key(s), label_text(s))
    opts = "".join(f'<option value="{text(k)}">{text(t)}</option>' for k, t in sorted(keys.items(), key=lambda kv: kv[1]))
    return (f'<p><label>Series: <select id="series"><option value="">every series ({len(keys)})</option>{opts}'
            "</select></label></p>")


def runs_section(hist: History, out_dir: Path) -> str:
    by_run = {}
    for m in hist.metrics:
        by_run.setdefault(m["run_id"], {})[m["id"]] = m["value"]
    trs = []
    for r in reversed(hist.runs):
        ms = by_run.get(r["run_id"], {})
        folders = sorted({Path(f).parent.name or Path(f).name for f in r["files"]})
        files = f"{len(r['files'])} file(s) in {', '.join(folders)}" if folders else "none"
        trs.append(f"<tr><td>{r['run_id']}</td><td>{r['recorded_at']:%Y-%m-%d %H:%M:%S}</td>"
                   f'<td class="labels">{text(label_text(r["labels"]))}</td><td>{text(layout_text(ms))}</td>'
                   f"<td>{text(ms.get('imbalance.straggler', '-'))}</td>"
                   f'<td class="files" title="{text(chr(10).join(r["files"]))}">{text(files)}</td>'
                   f"<td>{text(r['version'])}</td><td>{_link(report_link(r['report'], out_dir))}</td></tr>")
    head = ("<tr><th>run</th><th>recorded (UTC)</th><th>labels</th><th>layout</th><th>straggler rank</th>"
            "<th>trace files</th><th>traceparse</th><th>report</th></tr>")
    return f'<section id="runs"><h2>Runs ({len(hist.runs)})</h2><table class="dash">{head}{"".join(trs)}</table></section>'


def layout_text(ms: dict) -> str:
    """The parallel degrees above 1, the ZeRO stage and the pipeline schedule of a run."""
    parts = [f"{k}={ms[f'layout.{k}']}" for k in DEGREES if ms.get(f"layout.{k}") not in (None, 1)]
    if ms.get("layout.zero_stage"):
        parts.append(f"zero={ms['layout.zero_stage']}")
    if ms.get("layout.pp_schedule"):
        parts.append(str(ms["layout.pp_schedule"]))
    return " ".join(parts) or "no parallelism"


def render_dashboard(hist: History, out: Path, by=None, thresholds=None) -> tuple[str, int]:
    """The page of ``hist`` to be written at ``out`` (links to reports are made relative to it), and the
    number of regressions it shows. ``by``: the label keys that make a series (``history.series``)."""
    out_dir = Path(out).resolve().parent
    reg = regression_rows(compare_previous(hist, by, thresholds))
    notes = {}  # (run id, charted metric id, or the group of a regressed metric not charted: the straggler) -> note
    for run_id, prev, m in reg:
        key = per_step_id(m["id"]) if m.get("better") else m["group"]
        notes[(run_id, key)] = "; ".join(filter(None, [notes.get((run_id, key)), m.get("note") or f"worse than run {prev}"]))
    rows = points(hist, by, notes, out_dir)
    specs, chart_series = {}, {}
    for group in GROUPS:
        g = [p for p in rows if p["group"] == group]
        if g:
            specs[f"chart-{group}"] = group_chart(group, g).to_dict()
            chart_series[f"chart-{group}"] = sorted({p["series"] for p in g})
    n_series = len({label_key(series(r["labels"], by)) for r in hist.runs})
    span = (f", recorded {hist.runs[0]['recorded_at']:%Y-%m-%d %H:%M} to {hist.runs[-1]['recorded_at']:%Y-%m-%d %H:%M}"
            " UTC" if hist.runs else "")
    body = "\n".join([
        STYLE,
        "<h1>traceparse dashboard</h1>",
        f'<p class="meta">{text(f"{len(hist.runs)} runs in {n_series} series{span}")}</p>',
        regressions_section(hist, reg, out_dir),
        series_select(hist, by),
        '<div class="charts">' + "".join(f'<div class="chart" id="{i}"></div>' for i in specs) + "</div>",
        runs_section(hist, out_dir),
        PICK_SCRIPT.format(series=script_json(chart_series)),
    ])
    return render_page("traceparse dashboard", body, specs), len(reg)
