"""Charts of the communication per strategy: how much of it hides under compute, and its volume (the notes'
count, all-reduce 2x; not the collectives' input bytes, shown beside it in the tooltip)."""

import altair as alt

from traceparse.render.charts import palette
from traceparse.render.charts.inline import inline


def windows(doc) -> int:
    """The (rank, step) windows the per-strategy totals are summed over (summary.per_step; a trace without steps: one
    whole-trace window per rank): what divides them into time per rank per step, as traceparse compare's
    exposed_comm.<strategy>."""
    return len(doc["summary"].get("per_step") or [])


def overlap_per_strategy(doc) -> alt.Chart | None:
    """Per strategy (overlap.per_strategy): communication time hidden under compute vs exposed, per rank per step."""
    per = doc["checks"]["overlap"].get("per_strategy") or {}
    n = windows(doc)
    rows = [{"strategy": s, "part": part, "order": i, "ms": v[f"{part}_ns"] / n / 1e6}
            for s, v in per.items() for i, part in enumerate(palette.OVERLAP_PARTS) if v.get(f"{part}_ns") is not None]
    if not rows or not n:
        return None
    return alt.Chart(inline(rows), title="Communication hidden under compute vs exposed").mark_bar().encode(
        x=alt.X("ms:Q", stack="zero", title="time per rank per step (ms)"),
        y=alt.Y("strategy:N", sort=list(per), title="strategy"),
        color=alt.Color("part:N", scale=palette.scale(palette.OVERLAP_PARTS), title=None),
        order=alt.Order("order:Q"),
        tooltip=["strategy:N", "part:N", alt.Tooltip("ms:Q", format=".3f")],
    ).properties(width=860, height=alt.Step(24))


VOLUME_KINDS = {"measured": "#4c78a8", "expected": "#bab0ac"}


VOLUME_TITLE = "Communication volume per rank per step (notes' count: all-reduce 2x): measured vs the formula"
VOLUME_AXIS = "volume, MB per rank per step (notes' count: all-reduce 2x)"


def volume_per_strategy(doc) -> alt.Chart | None:
    """Per strategy (comm_volume.per_strategy): the volume per rank per step measured vs the formula's, the input
    bytes (what the ranks pass to the calls) in the tooltip."""
    per = doc["checks"]["comm_volume"].get("per_strategy") or {}
    rows = [{"strategy": s, "kind": kind, "MB": v[f"{kind}_volume_bytes"] / 1e6, "formula": v.get("formula"),
             "input_MB": None if v.get("input_bytes") is None else v["input_bytes"] / 1e6}
            for s, v in per.items() for kind in VOLUME_KINDS if v.get(f"{kind}_volume_bytes") is not None]
    if not rows:
        return None
    return alt.Chart(inline(rows), title=VOLUME_TITLE).mark_bar(
    ).encode(
        x=alt.X("kind:N", title=None, sort=list(VOLUME_KINDS), axis=alt.Axis(labelAngle=0)),
        y=alt.Y("MB:Q", title=VOLUME_AXIS),
        color=alt.Color("kind:N", scale=palette.scale(VOLUME_KINDS), title=None),
        column=alt.Column("strategy:N", sort=list(per), title="strategy"),
        tooltip=["strategy:N", "kind:N", alt.Tooltip("MB:Q", format=".4f", title="volume (MB)"), "formula:N",
                 alt.Tooltip("input_MB:Q", format=".4f", title="input bytes (MB), each call's input once")],
    ).properties(width=alt.Step(60), height=220)
