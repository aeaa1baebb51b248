"""The pipeline bubble chart: measured per stage against the schedule's formula and its replay."""

import altair as alt

from traceparse.render.charts.inline import inline


def bubble_lines(b) -> list[dict]:
    """The expected bubble as lines: the schedule's formula and the simulated replay, those known."""
    return [{"what": what, "bubble": v} for what, v in (
        (f"formula {b.get('expected_formula') or ''}".strip(), b.get("expected")),
        ("simulated replay of the schedule", b.get("simulated"))) if v is not None]


def bubble_per_stage(doc) -> alt.Chart | None:
    """Per pipeline stage and rank (bubble.per_stage): idle share of the step, with the expected lines."""
    b = doc["checks"]["bubble"]
    rows = [{"stage": s["stage"], "rank": s["rank"], "measured": s["measured"]} for s in b.get("per_stage") or []
            if s["measured"] is not None]
    if not rows:
        return None
    schedule = f" ({b['schedule']}, m={b['microbatches']})" if b.get("schedule") else ""
    bars = alt.Chart(inline(rows)).mark_bar(color="#4c78a8").encode(
        x=alt.X("stage:O", title="pipeline stage", axis=alt.Axis(labelAngle=0)), xOffset="rank:N",
        y=alt.Y("measured:Q", title="bubble: idle share of the step", scale=alt.Scale(domain=[0, 1])),
        tooltip=["stage:O", "rank:O", alt.Tooltip("measured:Q", format=".1%")])
    lines = bubble_lines(b)
    if not lines:
        return bars.properties(title=f"Pipeline bubble per stage{schedule}, no expected value", width=600, height=260)
    rules = alt.Chart(inline(lines)).mark_rule(strokeWidth=2).encode(
        y="bubble:Q", color=alt.Color("what:N", title="expected", scale=alt.Scale(range=["black", "#e45756"])),
        strokeDash=alt.StrokeDash("what:N", title="expected", scale=alt.Scale(range=[[1, 0], [6, 4]])),
        tooltip=["what:N", alt.Tooltip("bubble:Q", format=".1%")])
    return alt.layer(bars, rules, title=f"Pipeline bubble per stage{schedule}: measured vs expected").properties(
        width=600, height=260)
