"""The timeline (Gantt) of one profiled step across ranks, from the document's timeline section."""

import altair as alt

from traceparse.render.charts import palette
from traceparse.render.charts.inline import inline


def series(row) -> str:
    """What a bar's colour says: compute, or the strategy of the communication."""
    return "compute" if row["kind"] == "compute" else f"comm: {row['strategy']}"


def lane(rank, kind) -> str:
    """One row of the chart: a rank's compute, or its communication."""
    return f"rank {rank} {kind}"


def step_timeline(doc) -> alt.Chart | None:
    """Per rank, a compute lane and a communication lane (coloured by strategy) over its step window."""
    t = doc.get("timeline") or {}
    rows = [{"rank": r["rank"], "lane": lane(r["rank"], r["kind"]), "series": series(r), "name": r["name"],
             "start_ms": r["start_ns"] / 1e6, "end_ms": (r["start_ns"] + r["dur_ns"]) / 1e6,
             "dur_ms": r["dur_ns"] / 1e6, "intervals": r["intervals"]}
            for r in t.get("rows") or [] if r["start_ns"] is not None and r["dur_ns"] is not None]
    if not rows:
        return None
    colours = {"compute": palette.COMPUTE}
    for s in sorted({r["series"] for r in rows} - {"compute"}):
        colours[s] = palette.strategy(s.removeprefix("comm: "))
    ranks = sorted({r["rank"] for r in rows} | {w["rank"] for w in t.get("windows") or []})
    lanes = [lane(r, kind) for r in ranks for kind in ("compute", "comm")]
    windows = [{"rank": w["rank"], "lane": lane(w["rank"], kind), "start_ms": w["start_ns"] / 1e6,
                "end_ms": (w["start_ns"] + w["dur_ns"]) / 1e6}
               for w in t.get("windows") or [] for kind in ("compute", "comm")]
    step = "the whole trace" if t["step"] is None else f"step {t['step']}"
    note = (f"{t['merged']} bars merged: gaps up to {t['merge_gap_ns'] / 1e3:.1f} µs closed to keep {t['bars']} bars"
            if t.get("aggregated") else f"{t['bars']} bars, each the union of touching intervals")
    y = alt.Y("lane:N", sort=lanes, title=None)
    x = alt.X("start_ms:Q", title=f"ms from the earliest rank's start of {step}")
    layers = [alt.Chart(inline(windows)).mark_bar(color="#f2f2f2").encode(
        x=x, x2="end_ms:Q", y=y, tooltip=["rank:O", alt.Tooltip("start_ms:Q", format=".3f", title="window start"),
                                          alt.Tooltip("end_ms:Q", format=".3f", title="window end")])] if windows else []
    layers.append(alt.Chart(inline(rows)).mark_bar().encode(
        x=x, x2="end_ms:Q", y=y, color=alt.Color("series:N", scale=palette.scale(colours), title=None),
        tooltip=["rank:O", "series:N", "name:N", alt.Tooltip("start_ms:Q", format=".3f"),
                 alt.Tooltip("dur_ms:Q", format=".3f"), "intervals:Q"]))
    title = alt.Title(f"Timeline of {step} (the median-length step on every rank)",
                      subtitle=f"grey: the rank's step window; {note}")
    return alt.layer(*layers, title=title).properties(width=860, height=alt.Step(18))
