"""Charts of the communication per strategy: how much of it hides under compute, and its bytes."""

import altair as alt

from . import palette
from .inline import inline


def overlap_per_strategy(doc) -> alt.Chart | None:
    """Per strategy (overlap.per_strategy): communication time hidden under compute vs exposed."""
    per = doc["checks"]["overlap"].get("per_strategy") or {}
    rows = [{"strategy": s, "part": part, "order": i, "ms": v[f"{part}_ns"] / 1e6}
            for s, v in per.items() for i, part in enumerate(palette.OVERLAP_PARTS) if v.get(f"{part}_ns") is not None]
    if not rows:
        return None
    return alt.Chart(inline(rows), title="Communication hidden under compute vs exposed").mark_bar().encode(
        x=alt.X("ms:Q", stack="zero", title="time, all ranks and steps (ms)"),
        y=alt.Y("strategy:N", sort=list(per), title="strategy"),
        color=alt.Color("part:N", scale=palette.scale(palette.OVERLAP_PARTS), title=None),
        order=alt.Order("order:Q"),
        tooltip=["strategy:N", "part:N", alt.Tooltip("ms:Q", format=".3f")],
    ).properties(width=860, height=alt.Step(24))


VOLUME_KINDS = {"measured": "#4c78a8", "expected": "#bab0ac"}


def volume_per_strategy(doc) -> alt.Chart | None:
    """Per strategy (comm_volume.per_strategy): bytes per rank per step measured vs the formula's."""
    per = doc["checks"]["comm_volume"].get("per_strategy") or {}
    rows = [{"strategy": s, "kind": kind, "MB": v[f"{kind}_bytes"] / 1e6, "formula": v.get("formula")}
            for s, v in per.items() for kind in VOLUME_KINDS if v.get(f"{kind}_bytes") is not None]
    if not rows:
        return None
    return alt.Chart(inline(rows), title="Bytes per rank per step: measured vs the formula").mark_bar(
    ).encode(
        x=alt.X("kind:N", title=None, sort=list(VOLUME_KINDS), axis=alt.Axis(labelAngle=0)),
        y=alt.Y("MB:Q", title="MB per rank per step"),
        color=alt.Color("kind:N", scale=palette.scale(VOLUME_KINDS), title=None),
        column=alt.Column("strategy:N", sort=list(per), title="strategy"),
        tooltip=["strategy:N", "kind:N", alt.Tooltip("MB:Q", format=".4f"), "formula:N"],
    ).properties(width=alt.Step(60), height=220)
