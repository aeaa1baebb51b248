"""What the dashboard of a run history shows (``traceparse dashboard HISTORY -o PAGE``), as plain data;
``traceparse.render.dashboard`` draws it.

``dashboard_data(hist, out)`` compares each run with the previous run of its series
(``store.compare_previous``) and returns the regressions, the charts' points (one per run and charted
metric, regressed ones marked), the series, and the runs with their labels, metrics and files; links to
the reports are relative to the page ``out`` when they sit in its folder (or below), else file: URLs.
"""

from pathlib import Path
from urllib.parse import quote

from traceparse.history.run_metrics import GROUPS, PER_MICROBATCH, per_step_id
from traceparse.history.store import History, compare_previous, label_key, label_text, series

STAMP = "%Y-%m-%d %H:%M:%S"


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


def regression_rows(comparisons: dict) -> list[tuple[int, int, dict]]:
    """(run id, previous run id, compared metric) for every regressed metric, newest run first."""
    rows = [(run_id, prev, m) for run_id, (prev, cmp) in comparisons.items() for m in cmp["metrics"]
            if m.get("regressed")]
    return sorted(rows, key=lambda r: (-r[0], r[2]["id"]))


def points(hist: History, by, regressed: dict, out_dir: Path) -> list[dict]:
    """One row per (run, metric with a direction): the charts' data, the value in its stored unit."""
    runs = {r["run_id"]: r for r in hist.runs}
    rows = []
    for m in hist.metrics:
        if m["better"] is None or isinstance(m["value"], str) or m["value"] is None or m["id"].endswith(PER_MICROBATCH):
            continue  # layout values and the straggler's rank are in the runs table; per micro-batch: per step
        r = runs[m["run_id"]]
        note = regressed.get((r["run_id"], m["id"])) or regressed.get((r["run_id"], m["group"]))
        rows.append({"run": r["run_id"], "metric": m["id"], "group": m["group"], "value": m["value"], "unit": m["unit"],
                     "series": label_key(series(r["labels"], by)), "labels": label_text(r["labels"]),
                     "recorded": f"{r['recorded_at']:{STAMP}} UTC", "regressed": note is not None,
                     "note": note or "", "href": report_link(r["report"], out_dir)})
    return rows


def dashboard_data(hist: History, out, by=None, thresholds=None) -> tuple[dict, int]:
    """(the dashboard's data, the number of regressed metrics) of ``hist`` for a page written at ``out``.
    ``by``: the label keys that make a series (``store.series``); ``thresholds``: ``compare.load_thresholds``.

    The data: ``title_line`` counts (runs, series, span); ``regressions`` newest run first; ``series``
    ``[(key, text)]`` for the selector; ``groups`` ``{group: points}`` in ``run_metrics.GROUPS`` order, only
    groups with a point; ``runs`` newest first, each with its ``metrics`` ``{id: value}``."""
    out_dir = Path(out).resolve().parent
    reg = regression_rows(compare_previous(hist, by, thresholds))
    notes = {}  # (run id, charted metric id, or the group of a regressed metric not charted: the straggler) -> note
    for run_id, prev, m in reg:
        key = per_step_id(m["id"]) if m.get("better") else m["group"]
        notes[(run_id, key)] = "; ".join(filter(None, [notes.get((run_id, key)), m.get("note") or f"worse than run {prev}"]))
    rows = points(hist, by, notes, out_dir)
    runs = {r["run_id"]: r for r in hist.runs}
    units = {(m["run_id"], m["id"]): m["unit"] for m in hist.metrics}
    regressions = [{"run": run_id, "previous": prev, "labels": label_text(runs[run_id]["labels"]), "metric": m["id"],
                    "unit": units.get((run_id, m["id"]), ""), "base": m.get("base"), "new": m.get("new"),
                    "relative": m.get("relative"), "threshold": m.get("threshold"), "note": m.get("note"),
                    "href": report_link(runs[run_id]["report"], out_dir)} for run_id, prev, m in reg]
    keys = {}
    for r in hist.runs:
        s = series(r["labels"], by)
        keys.setdefault(label_key(s), label_text(s))
    by_run = {}
    for m in hist.metrics:
        by_run.setdefault(m["run_id"], {})[m["id"]] = m["value"]
    span = (f", recorded {hist.runs[0]['recorded_at']:%Y-%m-%d %H:%M} to {hist.runs[-1]['recorded_at']:%Y-%m-%d %H:%M}"
            " UTC" if hist.runs else "")
    data = {
        "title_line": f"{len(hist.runs)} runs in {len(keys)} series{span}",
        "regressions": regressions,
        "series": sorted(keys.items(), key=lambda kv: kv[1]),
        "groups": {g: [p for p in rows if p["group"] == g] for g in GROUPS if any(p["group"] == g for p in rows)},
        "runs": [{"run": r["run_id"], "recorded": f"{r['recorded_at']:{STAMP}}", "labels": label_text(r["labels"]),
                  "metrics": by_run.get(r["run_id"], {}), "files": list(r["files"]), "version": r["version"],
                  "href": report_link(r["report"], out_dir)} for r in reversed(hist.runs)],
    }
    return data, len(reg)
