"""Render the document of ``traceparse compare`` (traceparse.history.compare) as text, Markdown or HTML.

All put a layout change first, then the notes on how the runs were compared, why the comparison is
incomplete (a run missing ranks), the regressions, every compared metric (layout metrics are in the layout
line), what changed kernel by kernel (the ``diff`` section, traceparse.history.kernel_diff), and the verdict.
A value the run does not give prints as ``-``. Everything from a trace (file and kernel names) is data: the text
shows it through ``escape.terminal`` (a name's newline, ESC or bidi override as a visible escape), the Markdown
through ``escape.markdown_cell`` (one table row per name, never a link, an image or a heading), the HTML page,
one offline file without scripts, through ``page.text``.
"""

from traceparse.escape import markdown_cell, terminal
from traceparse.render.page import CSP, STYLE, text as esc
from traceparse.render.plain_table import shorten
from traceparse.render.text import table
from traceparse.units import duration, in_unit as value

MARK = {"regressed": "❌", "incomplete": "⚠️", "ok": "✅"}


def delta(row: dict) -> str:
    if row["delta"] is None:
        return "-"
    return ("+" if row["delta"] >= 0 else "-") + value(abs(row["delta"]), row["unit"])


def relative(row: dict) -> str:
    return "-" if row["relative"] is None else f"{row['relative']:+.1%}"


def layout_line(doc: dict) -> str:
    if not doc["layout_changes"]:
        return "layout: unchanged"
    return "layout changed: " + ", ".join(f"{c['key']} {_v(c['base'])} -> {_v(c['new'])}" for c in doc["layout_changes"])


def _v(x) -> str:
    return "none" if x is None else str(x)


def run_line(name: str, run: dict | None) -> str:
    if not run:
        return f"{name}: -"
    steps = ", ".join(map(str, run["steps"])) or "none"
    return (f"{name}: {len(run['files'])} file(s) in {_folders(run['files'])}, world size "
            f"{run['world_size'] or 'unknown'}, steps {steps}")


def _folders(paths: list[str]) -> str:
    folders = list(dict.fromkeys(p.rsplit("/", 1)[0] for p in paths))
    return ", ".join(folders[:2]) + (f" (+{len(folders) - 2} more)" if len(folders) > 2 else "")


def verdict_line(doc: dict) -> str:
    n = len(doc["regressions"])
    if doc["verdict"] == "incomplete":
        regressed = f"; {n} metric{'s' if n != 1 else ''} regressed" if n else ""
        return f"verdict: incomplete (a run lacks ranks{regressed}; exit 1)"
    if doc["verdict"] == "regressed":
        return f"verdict: regressed ({n} metric{'s' if n != 1 else ''}; exit 1)"
    return "verdict: ok (no metric regressed beyond its threshold; exit 0)"


def _rows(doc: dict) -> list[dict]:
    """The compared metrics, regressions first, layout metrics left to the layout line."""
    rows = [r for r in doc["metrics"] if r["group"] != "layout"]
    return sorted(rows, key=lambda r: not r["regressed"])


DIFF_TITLE = "What changed, kernel by kernel"
DIFF_KINDS = (("kernels", "kernel", "GPU kernels"), ("cpu_ops", "cpu_op", "CPU ops"))
NAME_WIDTH = 60
DIFF_HEADERS = ["base", "new", "delta", "share", "calls/step"]


def short(name: str, width: int = NAME_WIDTH) -> str:
    """A kernel or op name in ``width`` characters: a longer one loses a leading 'void ' and its argument list
    (the parenthesised end), then its middle ('...'), keeping the end where template arguments tell kernels apart."""
    if len(name) <= width:
        return name
    cut = name.removeprefix("void ")
    if cut.endswith(")"):
        depth = 0
        for i in range(len(cut) - 1, 0, -1):
            depth += {")": 1, "(": -1}.get(cut[i], 0)
            if depth == 0:
                cut = cut[:i].rstrip() or cut
                break
    return shorten(cut, width)


def diff_name(row: dict, width: int = NAME_WIDTH) -> str:
    """The row's name, shortened, with a communication kernel's strategy in brackets."""
    return short(row["name"], width) + (f" [{row['strategy']}]" if row["strategy"] else "")


def _calls(row: dict) -> str:
    return f"{row['base_calls_per_step']:.4g} -> {row['new_calls_per_step']:.4g}"


def _share(row: dict) -> str:
    return "-" if row["share_of_change"] is None else f"{row['share_of_change']:+.1%}"


def _only(row: dict) -> str:
    return f"only in {row['only_in']}" if row["only_in"] else ""


def diff_cells(row: dict) -> list[str]:
    """base, new, delta (per rank per step), share of the step-time change, calls per step."""
    return [duration(row["base_ns_per_step"]), duration(row["new_ns_per_step"]),
            duration(row["delta_ns_per_step"], sign=True),
            _share(row), _calls(row)]


def diff_step_line(d: dict) -> str:
    """The step time each run took per rank and its change, which the shares are of."""
    steps = d.get("step_ns") or {}
    if d.get("step_change_ns") is None:
        return "mean step time per rank unknown in a run: no share of its change"
    return (f"mean step time per rank {duration(steps.get('base'))} -> {duration(steps.get('new'))} "
            f"({duration(d['step_change_ns'], sign=True)}); share = delta / that change")


def diff_heading(d: dict, key: str, kind: str, title: str) -> str:
    shown, names = len(d[key]), d.get("names", {}).get(kind, len(d[key]))
    return f"{title}: {shown} of {names} names, the largest change per rank per step first"


def render_diff_text(d: dict | None) -> list[str]:
    """The lines of the ``diff`` section; none when the document has none."""
    if d is None:
        return []
    if d["status"] != "ok":
        return [f"{DIFF_TITLE}: not applicable ({terminal(d.get('reason', ''))})", ""]
    out = [f"{DIFF_TITLE} (traceparse explain diff)", f"  {diff_step_line(d)}"]
    for key, kind, title in DIFF_KINDS:
        if not d[key]:
            continue
        out += ["", f"  {diff_heading(d, key, kind, title)}:"]
        noted = any(r["only_in"] for r in d[key])
        out.append(table([kind, *DIFF_HEADERS, *(["note"] if noted else [])],
                         [[diff_name(r), *diff_cells(r), *([_only(r)] if noted else [])] for r in d[key]], "    "))
    return [*out, ""]


def render_text(doc: dict) -> str:
    out = [terminal(layout_line(doc)), *(f"  note: {terminal(n)}" for n in doc["notes"]),
           terminal(run_line("base", doc.get("base"))), terminal(run_line("new", doc.get("new"))), ""]
    if doc.get("incomplete"):
        out += ["incomplete:", *(f"  ! {terminal(why)}" for why in doc["incomplete"]), ""]
    if doc["regressions"]:
        by_id = {r["id"]: r for r in doc["metrics"]}
        out.append("regressions:")
        out += [f"  ! {r['id']}: {value(by_id[r['id']]['base'], by_id[r['id']]['unit'])} -> "
                f"{value(by_id[r['id']]['new'], by_id[r['id']]['unit'])}: {terminal(r['note'])}"
                for r in doc["regressions"]]
        out.append("")
    rows = _rows(doc)
    cells = [[("! " if r["regressed"] else "  ") + r["id"], value(r["base"], r["unit"]), value(r["new"], r["unit"]),
              delta(r), relative(r), r["threshold"] or "-"] for r in rows]
    out.append(table(["  metric", "base", "new", "delta", "relative", "threshold"], cells,
                     notes=[r["note"] for r in rows]))
    out += ["", *render_diff_text(doc.get("diff")), verdict_line(doc)]
    return terminal("\n".join(out), newlines=True)


def render_markdown(doc: dict) -> str:
    out = [f"### {MARK[doc['verdict']]} traceparse compare: {doc['verdict']}", "",
           f"**{markdown_cell(layout_line(doc))}**", ""]
    out += [f"> {markdown_cell(n)}" for n in doc["notes"]] + ([""] if doc["notes"] else [])
    out += [f"- {markdown_cell(run_line(name, doc.get(name)))}" for name in ("base", "new")] + [""]
    out += [f"> {MARK['incomplete']} **incomplete:** {markdown_cell(why)}" for why in doc.get("incomplete", [])]
    out += [""] if doc.get("incomplete") else []
    out += ["| | metric | base | new | delta | relative | threshold | note |",
            "|---|---|--:|--:|--:|--:|--:|---|"]
    for r in _rows(doc):
        cells = [MARK["regressed"] if r["regressed"] else "", markdown_cell(r["id"], code=True),
                 value(r["base"], r["unit"]), value(r["new"], r["unit"]), delta(r), relative(r),  # numbers
                 markdown_cell(r["threshold"] or "-"), markdown_cell(r["note"])]
        out.append("| " + " | ".join(cells) + " |")
    out += ["", *render_diff_markdown(doc.get("diff")), f"_{markdown_cell(verdict_line(doc))}_"]
    return terminal("\n".join(out), newlines=True)


def render_diff_markdown(d: dict | None) -> list[str]:
    """The ``diff`` section as Markdown tables, names in code spans (a kernel's '<' and '>' stay text) where a code
    span holds them (``escape.markdown_cell``)."""
    if d is None:
        return []
    if d["status"] != "ok":
        return [f"#### {DIFF_TITLE}", "", f"Not applicable: {markdown_cell(d.get('reason', ''))}.", ""]
    out = [f"#### {DIFF_TITLE}", "",
           f"Per rank per step; {markdown_cell(diff_step_line(d))} (`traceparse explain diff`).", ""]
    for key, kind, title in DIFF_KINDS:
        if not d[key]:
            continue
        out += [f"**{markdown_cell(diff_heading(d, key, kind, title))}**", "",
                f"| {kind} | {' | '.join(DIFF_HEADERS)} |", "|---|--:|--:|--:|--:|--:|"]
        for r in d[key]:
            name = markdown_cell(short(r["name"]), code=True)
            name += f" [{markdown_cell(r['strategy'])}]" if r["strategy"] else ""
            name += f" _({markdown_cell(_only(r))})_" if r["only_in"] else ""
            out.append("| " + " | ".join([name, *diff_cells(r)]) + " |")  # the numbers need no escaping
        out.append("")
    return out


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<title>{title}</title>
<style>{style}</style>
</head><body>
{body}
</body></html>
"""


def _html_table(headers: list[str], rows: list[tuple[list[str], str]]) -> str:
    """A table of escaped cells; each row (cells as HTML, the row's class)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(f'<tr class="{cls}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>" for cells, cls in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_diff_html(d: dict | None) -> str:
    if d is None:
        return ""
    if d["status"] != "ok":
        return (f'<section id="diff"><h2>{esc(DIFF_TITLE)}</h2><p>not applicable: {esc(d.get("reason", ""))}</p>'
                "</section>")
    parts = [f'<section id="diff"><h2>{esc(DIFF_TITLE)}</h2>',
             f"<p>Per rank per step; {esc(diff_step_line(d))} (<code>traceparse explain diff</code>).</p>"]
    for key, kind, title in DIFF_KINDS:
        if not d[key]:
            continue
        rows = [([f'<span title="{esc(r["name"])}">{esc(diff_name(r))}</span>', *map(esc, diff_cells(r)),
                  esc(_only(r))], "") for r in d[key]]
        parts += [f"<h3>{esc(diff_heading(d, key, kind, title))}</h3>", _html_table([kind, *DIFF_HEADERS, "note"], rows)]
    return "".join(parts) + "</section>"


def render_html(doc: dict) -> str:
    """One offline page of the comparison: verdict, layout, notes, runs, regressions, metrics, the diff."""
    title = f"traceparse compare: {doc['verdict']}"
    parts = [f"<h1>{esc(title)}</h1>", f"<p><b>{esc(layout_line(doc))}</b></p>"]
    parts += [f"<p>note: {esc(n)}</p>" for n in doc["notes"]]
    parts.append("<ul>" + "".join(f"<li>{esc(run_line(name, doc.get(name)))}</li>" for name in ("base", "new"))
                 + "</ul>")
    if doc.get("incomplete"):
        items = "".join(f'<li><span class="status warn">incomplete</span> {esc(why)}</li>' for why in doc["incomplete"])
        parts.append(f'<ul class="findings">{items}</ul>')
    rows = [([esc(r["id"]), esc(value(r["base"], r["unit"])), esc(value(r["new"], r["unit"])), esc(delta(r)),
              esc(relative(r)), esc(r["threshold"] or "-"), esc(r["note"])], "regressed" if r["regressed"] else "")
            for r in _rows(doc)]
    metrics = _html_table(["metric", "base", "new", "delta", "relative", "threshold", "note"], rows)
    parts.append(f'<section id="metrics"><h2>Metrics</h2>{metrics}</section>')
    parts += [render_diff_html(doc.get("diff")), f"<p><b>{esc(verdict_line(doc))}</b></p>"]
    return PAGE.format(csp=CSP, title=esc(title), style=STYLE, body="".join(parts))
