"""The critical path of each profiled step as a timeline: which rank it runs through, when, and why (its cause)."""

import altair as alt

from traceparse.render.charts.inline import inline

CAUSES = {"compute": "#4c78a8", "communication": "#f58518", "host": "#9d755d", "launch": "#bab0ac",
          "idle": "#d8b5a5", "device": "#bcbd22", "other": "#79706e"}


def critical_path_timeline(doc) -> alt.Chart | None:
    """Per step, one row per rank the path runs through: its pieces on that rank, coloured by cause, in ms from the
    step's start (the start of the window of the rank whose step ends last)."""
    cp = doc.get("critical_path") or {}
    rows = []
    for s in cp.get("steps") or []:
        step = "whole trace" if s["step"] is None else f"step {s['step']}"
        rows += [{"row": f"{step} · rank {p['rank']}", "cause": p["cause"], "name": p["name"] or "",
                  "start_ms": (p["start_ns"] - s["start_ns"]) / 1e6, "end_ms": (p["end_ns"] - s["start_ns"]) / 1e6,
                  "dur_ms": (p["end_ns"] - p["start_ns"]) / 1e6} for p in s["segments"]]
    if not rows:
        return None
    order = list(dict.fromkeys(r["row"] for r in sorted(rows, key=lambda r: r["row"])))
    causes = [c for c in CAUSES if any(r["cause"] == c for r in rows)]
    return alt.Chart(inline(rows), title="The critical path of each step: the rank it runs through, and why").mark_bar(
    ).encode(
        x=alt.X("start_ms:Q", title="ms from the step's start"), x2="end_ms:Q",
        y=alt.Y("row:N", sort=order, title=None),
        color=alt.Color("cause:N", scale=alt.Scale(domain=causes, range=[CAUSES[c] for c in causes]), title=None),
        tooltip=["row:N", "cause:N", "name:N", alt.Tooltip("dur_ms:Q", format=".3f"),
                 alt.Tooltip("start_ms:Q", format=".3f")],
    ).properties(width=860, height=alt.Step(16))
