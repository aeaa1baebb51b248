"""The chart of ``traceparse whatif --format html``: the forecast against the measured run, or the sweep's ranking.

It draws rows it is given (render.whatif.chart_rows names the layouts and orders them), so it imports nothing of
render.whatif."""

import altair as alt

from traceparse.render.charts.inline import inline

TIER_COLOURS = {"reliable": "#4c9a4c", "not reliable": "#d98c1f", "not validated": "#999999",
                "measured": "#4c78a8", "forecast": "#9ecae9"}


def whatif_chart(rows: list[dict], title: str) -> alt.Chart | None:
    """A bar per row (``layout``: its label, ``ms``; ``name``, ``memory_mib``, ``forecast``: its tier, ``kind``,
    ``error`` in the tooltip and colour), in the rows' order; None without rows. Its width follows the page's."""
    if not rows:
        return None
    tiers = list(dict.fromkeys(r["forecast"] for r in rows))
    return alt.Chart(inline(rows), title=alt.TitleParams(title, anchor="start")).mark_bar().encode(
        x=alt.X("ms:Q", title="step time (ms)"),
        y=alt.Y("layout:N", sort=[r["layout"] for r in rows], title=None, axis=alt.Axis(labelLimit=240)),
        color=alt.Color("forecast:N", title="forecast", scale=alt.Scale(
            domain=tiers, range=[TIER_COLOURS.get(t, "#9ecae9") for t in tiers]), legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("name:N", title="layout"), alt.Tooltip("ms:Q", format=".2f"), "forecast:N", "kind:N", "error:N",
                 alt.Tooltip("memory_mib:Q", format=".2f", title="memory per device (MiB)")],
    ).properties(width="container", height=alt.Step(18))
