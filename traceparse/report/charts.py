"""Altair charts built from the analyze document (never from the store): one function per chart.

An unknown value (None) is left out of a chart, never drawn as 0.
"""

import altair as alt


def step_time_per_rank(doc) -> alt.Chart | None:
    rows = [{"rank": r["rank"], "ms": r["step_mean_ns"] / 1e6} for r in doc["summary"]["per_rank"]
            if r["step_mean_ns"] is not None]
    if not rows:
        return None
    return alt.Chart(alt.Data(values=rows), title="Mean step time per rank").mark_bar().encode(
        x=alt.X("rank:O", title="rank"), y=alt.Y("ms:Q", title="step time (ms)"))


def overlap_per_strategy(doc) -> alt.Chart | None:
    per = doc["checks"]["overlap"].get("per_strategy") or {}
    rows = [{"strategy": s, "part": part, "ms": v[f"{part}_ns"] / 1e6}
            for s, v in per.items() for part in ("hidden", "exposed") if v.get(f"{part}_ns") is not None]
    if not rows:
        return None
    return alt.Chart(alt.Data(values=rows), title="Communication hidden under compute vs exposed").mark_bar().encode(
        x=alt.X("ms:Q", stack="zero", title="time, all ranks and steps (ms)"), y=alt.Y("strategy:N"),
        color=alt.Color("part:N", scale=alt.Scale(domain=["hidden", "exposed"])))


def bubble_per_stage(doc) -> alt.Chart | None:
    b = doc["checks"]["bubble"]
    rows = [{"stage": s["stage"], "measured": s["measured"]} for s in b.get("per_stage") or []
            if s["measured"] is not None]
    if not rows:
        return None
    bars = alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("stage:O"), y=alt.Y("measured:Q", title="bubble fraction of the step", scale=alt.Scale(domain=[0, 1])))
    if b.get("expected") is None:
        return bars.properties(title="Pipeline bubble per stage (no expected value)")
    rule = alt.Chart(alt.Data(values=[{"expected": b["expected"]}])).mark_rule(color="black").encode(y="expected:Q")
    return alt.layer(bars, rule, title=f"Pipeline bubble per stage (line: {b.get('expected_formula', 'expected')})")


def volume_per_strategy(doc) -> alt.Chart | None:
    per = doc["checks"]["comm_volume"].get("per_strategy") or {}
    rows = [{"strategy": s, "kind": kind, "MB": v[f"{kind}_bytes"] / 1e6}
            for s, v in per.items() for kind in ("measured", "expected") if v.get(f"{kind}_bytes") is not None]
    if not rows:
        return None
    return alt.Chart(alt.Data(values=rows), title="Bytes per rank per step: measured vs the notes' formula").mark_bar().encode(
        x=alt.X("kind:N", title=None), y=alt.Y("MB:Q"), column=alt.Column("strategy:N"), color="kind:N")


CHARTS = (step_time_per_rank, overlap_per_strategy, bubble_per_stage, volume_per_strategy)


def charts(doc) -> list:
    return [c for c in (f(doc) for f in CHARTS) if c is not None]
