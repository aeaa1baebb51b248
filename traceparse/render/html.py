"""The post-mortem page of the analyze document: one self-contained HTML file that makes no request.

Top to bottom: what was loaded, the load problems, the findings (checks at fail and warn first, each
with its status), the charts (traceparse.render.charts), the full text report, then the rank files.
Everything from a trace (file, kernel, annotation names) goes through ``page.text`` or ``page.script_json``.
"""

import os

from traceparse.units import ms
from traceparse.status import SEVERITY
from traceparse.render.gpu import gpu_html
from traceparse.render.page import render_page, text
from traceparse.render.text import cost_unit, render, sections_flagged, shown_causes
from traceparse.axes import AXES

LOAD_SEVERITY = {"error": 2, "warn": 1}  # load issues shown at the top; 'info' ones wait in the report
STATUS_ORDER = {**SEVERITY, "not_applicable": -1}


def badge(status: str) -> str:
    cls = status if status in STATUS_ORDER else "unknown"
    return f'<span class="status {cls}">{text(status)}</span>'


def run_title(doc) -> str:
    """The run's name: the folder its rank files share, else the one file's name."""
    files = doc["run"]["files"]
    if len(files) != 1:
        try:
            return os.path.basename(os.path.commonpath([os.path.dirname(f) or "." for f in files])) or "run"
        except ValueError:  # none, or relative and absolute paths mixed
            return "run"
    return os.path.basename(files[0])


def run_line(doc) -> str:
    run, lay = doc["run"], doc.get("layout") or {}
    degrees = ", ".join(f"{k}={lay[k]}" for k in AXES if lay.get(k) not in (None, 1))
    parts = [f"{len(run['files'])} rank file(s)", f"world size {run['world_size'] or 'unknown'}",
             f"steps {', '.join(map(str, run['steps'])) or 'none'}", f"layout {degrees or 'no parallelism inferred'}",
             f"backend {', '.join(run['backend']) or 'unknown'}", f"devices {', '.join(run['devices']) or 'CPU only'}"]
    meta = doc.get("metadata") or {}
    if meta.get("present"):
        contradicted = [c["key"] for c in doc["layout_check"]["stated"] if c["status"] == "contradicts"]
        parts.append(f"configuration declared by the profiler plugin on {len(meta['ranks'])} rank(s)"
                     + (f", contradicted by the trace on {', '.join(contradicted)}" if contradicted else ""))
    return f'<p class="meta">{text("; ".join(parts))}</p>'


def times(count) -> str:
    return f" ({count}x)" if (count or 0) > 1 else ""


def load_problems(doc) -> str:
    issues = sorted((i for i in doc["load_issues"] if i["severity"] in LOAD_SEVERITY),
                    key=lambda i: -LOAD_SEVERITY[i["severity"]])
    if not issues:
        return ""
    items = "".join(f"<li>{badge(i['severity'])} {text(i['file'] or 'run')}: {text(i['what'])}"
                    f"{times(i.get('count'))}</li>" for i in issues)
    return f'<section id="load-issues"><h2>Loading problems</h2><ul class="findings">{items}</ul></section>'


def findings(doc) -> str:
    """A rank cut short first (what the verdicts leave out), the costliest causes, then every check, fail and warn
    first, with its findings; a check without any says why (reason) or 'ok'."""
    checks = sorted(doc["checks"].items(), key=lambda kv: -STATUS_ORDER.get(kv[1]["status"], -2))
    items = []
    for cid, c in checks:
        said = c.get("findings") or []
        body = "".join(f"<li>{text(f)}</li>" for f in said) if said else \
            f"<li class=\"quiet\">{text(c.get('reason') or 'nothing to report')}</li>"
        items.append(f'<li>{badge(c["status"])} <b>{text(cid)}</b><ul>{body}</ul></li>')
    flagged = sum(1 for _, c in checks if c["status"] in ("warn", "fail"))
    head = f"{flagged} of {len(checks)} checks at warn or fail" if flagged else "no check at warn or fail"
    head += "".join(f"; {s} (its section below)" for s in sections_flagged(doc))
    why = "".join(f"<li><b>{text(c['cause'])}</b>: {text(ms(c['saved_per_step_ns']))} {cost_unit(doc)} "
                  f"({c['share']:.0%}), "
                  f"{text(c['note'])} <span class=\"quiet\">[{text(c['check'])}]</span></li>"
                  for c in shown_causes(doc))
    why = (f'<p>Why the steps are slow, by replay (what taking each cause away saves; <code>traceparse explain '
           f'causes</code>):</p><ul class="findings">{why}</ul>') if why else ""
    cut = "".join(f'<p>{badge("warn")} <b>cut short</b>: {text(c["finding"])}</p>' for c in doc.get("cut_short") or [])
    return (f'<section id="findings"><h2>Findings</h2>{cut}{why}<p>{text(head)}; '
            f'<code>traceparse explain &lt;check&gt;</code> defines each.</p><ul class="findings">{"".join(items)}</ul>'
            "</section>")


def chart_section(made: dict) -> str:
    if not made:
        return ""
    figs = "".join(f'<figure><figcaption>{text(caption)}</figcaption><div class="chart" id="{text(cid)}"></div>'
                   f"</figure>" for cid, (_, caption) in made.items())
    return f'<section id="charts"><h2>Evidence</h2>{figs}</section>'


def rank_files(doc) -> str:
    run = doc["run"]
    rows = "".join(f"<tr><td>{text(rank)}</td><td>{text(f)}</td></tr>"
                   for rank, f in zip(run["ranks"], run["files"], strict=False))
    return f'<section id="files"><h2>Rank files</h2><table><tr><th>rank</th><th>file</th></tr>{rows}</table></section>'


def render_html(doc: dict) -> str:
    from traceparse.render.charts import charts, spec  # altair: imported by the page that draws, not by its findings

    made = charts(doc)
    title = f"traceparse post-mortem: {run_title(doc)}"
    body = "".join([
        f"<h1>{text(title)}</h1>", run_line(doc), load_problems(doc), findings(doc), gpu_html(doc), chart_section(made),
        f'<section id="report"><h2>Full report</h2><pre>{text(render(doc, full=True))}</pre></section>', rank_files(doc),
    ])
    return render_page(title, body, {cid: spec(chart) for cid, (chart, _) in made.items()})
