"""The chart of ``traceparse whatif --format html``: the forecast against the measured run, or the sweep's ranking."""

import altair as alt

from traceparse.render.whatif import layout_name as _name
from traceparse.render.charts.inline import inline


def whatif_chart(doc) -> alt.Chart | None:
    """Sweep: each layout kept, its predicted step time (memory in the tooltip), fastest first. One target: the
    measured run's step time beside the forecast's. Unknown step times are left out."""
    if "candidates" in doc:
        rows = [{"layout": _name(c["layout"]), "ms": c["prediction"]["step_time_ns"] / 1e6,
                 "memory_mib": (c["prediction"]["memory_per_device_bytes"] or 0) / 2**20}
                for c in doc["candidates"] if not c["excluded"] and c["prediction"]["step_time_ns"] is not None]
        title = "Predicted step time of each layout kept (fastest first)"
    else:
        pred, run = doc["prediction"]["step_time_ns"], doc["measured"]["step_time_ns"]["value"]
        rows = [{"layout": what, "ms": ns / 1e6, "memory_mib": None}
                for what, ns in (("measured run", run), (f"forecast: {_name(doc['target'])}", pred)) if ns is not None]
        title = "Step time: the measured run and the forecast"
    if not rows:
        return None
    return alt.Chart(inline(rows), title=title).mark_bar().encode(
        x=alt.X("ms:Q", title="step time (ms)"),
        y=alt.Y("layout:N", sort=[r["layout"] for r in rows], title=None, axis=alt.Axis(labelLimit=500)),
        tooltip=["layout:N", alt.Tooltip("ms:Q", format=".2f"), alt.Tooltip("memory_mib:Q", format=".2f",
                                                                          title="memory per device (MiB)")],
    ).properties(width=700, height=alt.Step(18))
