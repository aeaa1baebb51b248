"""Render the document of ``traceparse compare`` (traceparse.history.compare) as text or Markdown.

Both put a layout change first, then the notes on how the runs were compared, why the comparison is
incomplete (a run missing ranks), the regressions, every compared metric (layout metrics are in the layout
line), and the verdict. A value the run does not
give prints as ``-``.
"""

from traceparse.render.text import table
from traceparse.units import size

MARK = {"regressed": "❌", "incomplete": "⚠️", "ok": "✅"}


def value(v, unit: str) -> str:
    """A metric value in its unit: ns as ms, bytes as the report writes them (text.size: kB, MB, ...), fractions and
    ratios as numbers, a rank as 'rank N'."""
    if v is None:
        return "-"
    if unit == "ns":
        return f"{v / 1e6:,.3f} ms"
    if unit == "bytes":
        return size(v)
    if unit in ("fraction", "ratio"):
        return f"{v:.3f}"
    if unit == "rank":
        return f"rank {v}"
    return str(v)


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


def render_text(doc: dict) -> str:
    out = [layout_line(doc), *(f"  note: {n}" for n in doc["notes"]), run_line("base", doc.get("base")),
           run_line("new", doc.get("new")), ""]
    if doc.get("incomplete"):
        out += ["incomplete:", *(f"  ! {why}" for why in doc["incomplete"]), ""]
    if doc["regressions"]:
        by_id = {r["id"]: r for r in doc["metrics"]}
        out.append("regressions:")
        out += [f"  ! {r['id']}: {value(by_id[r['id']]['base'], by_id[r['id']]['unit'])} -> "
                f"{value(by_id[r['id']]['new'], by_id[r['id']]['unit'])}: {r['note']}" for r in doc["regressions"]]
        out.append("")
    rows = _rows(doc)
    cells = [[("! " if r["regressed"] else "  ") + r["id"], value(r["base"], r["unit"]), value(r["new"], r["unit"]),
              delta(r), relative(r), r["threshold"] or "-"] for r in rows]
    lines = table(["  metric", "base", "new", "delta", "relative", "threshold"], cells).split("\n")
    out += [f"{line}  {note}" for line, note in zip(lines, ["note", "----", *(r["note"] for r in rows)], strict=True)]
    out += ["", verdict_line(doc)]
    return "\n".join(out)


def render_markdown(doc: dict) -> str:
    out = [f"### {MARK[doc['verdict']]} traceparse compare: {doc['verdict']}", "",
           f"**{_md(layout_line(doc))}**", ""]
    out += [f"> {_md(n)}" for n in doc["notes"]] + ([""] if doc["notes"] else [])
    out += [f"- {_md(run_line(name, doc.get(name)))}" for name in ("base", "new")] + [""]
    out += [f"> {MARK['incomplete']} **incomplete:** {_md(why)}" for why in doc.get("incomplete", [])]
    out += [""] if doc.get("incomplete") else []
    out += ["| | metric | base | new | delta | relative | threshold | note |",
            "|---|---|--:|--:|--:|--:|--:|---|"]
    for r in _rows(doc):
        cells = [MARK["regressed"] if r["regressed"] else "", f"`{r['id']}`", value(r["base"], r["unit"]),
                 value(r["new"], r["unit"]), delta(r), relative(r), r["threshold"] or "-", r["note"]]
        out.append("| " + " | ".join(_md(c) for c in cells) + " |")
    out += ["", f"_{_md(verdict_line(doc))}_"]
    return "\n".join(out)


def _md(text: str) -> str:
    return str(text).replace("|", "\\|")
