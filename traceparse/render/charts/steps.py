"""Charts of each rank's steps: the time split of every step window, and the imbalance heat map."""

import altair as alt

from traceparse.render.charts import palette
from traceparse.render.charts.inline import inline

SPLIT_PARTS = (("compute", "compute_ns"), ("exposed communication", "exposed_ns"), ("idle", "idle_ns"))


def _where(r) -> str:
    return f"rank {r['rank']} · " + ("whole trace" if r["step"] is None else f"step {r['step']}")


def _idle_parts(doc) -> dict:
    """{(rank, step): [(part, fraction of the idle)]} from gpu.idle_causes: a GPU rank's idle split in proportion
    to what kept its GPU idle in that step."""
    by_step = {}
    for c in (doc.get("gpu") or {}).get("idle_causes") or ():
        by_step.setdefault((c["rank"], c["step"]), []).append(c)
    out = {}
    for key, causes in by_step.items():
        total = sum(c["idle_ns"] for c in causes)
        if total:
            out[key] = [(f"idle: {c['cause']}", c["idle_ns"] / total) for c in causes]
    return out


def step_split(doc) -> alt.Chart | None:
    """Per rank and step window (summary.per_step): compute, exposed communication and idle, stacked; a GPU rank's
    idle split by cause in proportion to gpu.idle_causes (explain step_split)."""
    per_step = doc["summary"]["per_step"]
    causes = _idle_parts(doc)
    rows = []
    for r in per_step:
        window_ms = r["window_ns"] / 1e6 if r["window_ns"] is not None else None
        row = {"where": _where(r), "rank": r["rank"], "step": r["step"], "window_ms": window_ms}
        for i, (part, col) in enumerate(SPLIT_PARTS):
            if r[col] is None:
                continue
            split = causes.get((r["rank"], r["step"])) if col == "idle_ns" else None
            for j, (name, share) in enumerate(split or [(part, 1.0)]):
                rows.append({**row, "part": name, "order": i + j / 100, "ms": r[col] * share / 1e6})
    if not rows:
        return None
    order = list(dict.fromkeys(_where(r) for r in per_step))
    colours = {**palette.STEP_PARTS, **{k: v for k, v in palette.IDLE_CAUSES.items()
                                        if any(r["part"] == k for r in rows)}}
    return alt.Chart(inline(rows), title="Each step window: compute, exposed communication, idle (by cause on a GPU)"
                     ).mark_bar().encode(
        x=alt.X("ms:Q", stack="zero", title="time in the step window (ms)"),
        y=alt.Y("where:N", sort=order, title=None),
        color=alt.Color("part:N", scale=palette.scale(colours), title=None),
        order=alt.Order("order:Q"),
        tooltip=["rank:O", "step:O", "part:N", alt.Tooltip("ms:Q", format=".3f"),
                 alt.Tooltip("window_ms:Q", format=".3f", title="window (ms)")],
    ).properties(width=860, height=alt.Step(16))


HEAT_PANELS = (("step time", "blues"), ("compute (busy)", "greens"), ("compute floor", "greens"),
               ("wait at collectives", "oranges"))


def _heat_rows(doc) -> dict[str, list[dict]]:
    """Per panel, the rows rank, step, value (ms): step time and compute (busy) from summary.per_step, the
    compute floor (imbalance.per_rank: per step window, the same every step: what the findings on work quote),
    the mean wait per collective from imbalance.per_step; unknown values left out."""
    steps = [r for r in doc["summary"]["per_step"] if r["step"] is not None]
    imb = doc["checks"]["imbalance"]
    waits = imb.get("per_step") or []
    floor = {r["rank"]: r["compute_floor_ns"] for r in imb.get("per_rank") or ()}
    cell = lambda r, v: {"rank": r["rank"], "step": r["step"], "value": v / 1e6}  # noqa: E731
    return {
        "step time": [cell(r, r["window_ns"]) for r in steps if r["window_ns"] is not None],
        "compute (busy)": [cell(r, r["compute_ns"]) for r in steps if r["compute_ns"] is not None],
        "compute floor": [cell(r, floor[r["rank"]]) for r in steps if floor.get(r["rank"]) is not None],
        "wait at collectives": [cell(r, r["wait_ns"]) for r in waits if r["wait_ns"] is not None],
    }


def marked_ranks(doc) -> list[dict]:
    """The ranks the imbalance check names: the straggler and the rank receiving the most routed tokens."""
    imb = doc["checks"]["imbalance"]
    return [{"rank": imb[key], "role": role} for key, role in
            (("straggler_rank", "straggler"), ("hot_rank", "hot rank (most routed tokens)"))
            if imb.get(key) is not None]


def _panel(title, rows, scheme, marks, n_cells):
    base = alt.Chart(inline(rows))
    rects = base.mark_rect().encode(
        x=alt.X("step:O", title="step", axis=alt.Axis(labelAngle=0)), y=alt.Y("rank:O", title="rank"),
        color=alt.Color("value:Q", scale=alt.Scale(scheme=scheme, zero=True), title="ms"),
        tooltip=["rank:O", "step:O", alt.Tooltip("value:Q", format=".3f", title=f"{title} (ms)")])
    layers = [rects]
    if n_cells <= 100:
        layers.append(base.mark_text(fontSize=10).encode(
            x="step:O", y="rank:O", text=alt.Text("value:Q", format=".1f")))
    if marks:
        layers.append(alt.Chart(inline(marks)).mark_rect(fill=None, stroke="black", strokeWidth=3).encode(
            y="rank:O", tooltip=["rank:O", "role:N"]))
    return alt.layer(*layers, title=f"{title} (ms)").resolve_scale(color="independent").properties(
        width=alt.Step(56), height=alt.Step(24))


def imbalance_heatmap(doc) -> alt.Chart | None:
    """Ranks x steps: step time, compute (busy and floor) and the wait at collectives, the straggler and hot rank
    outlined."""
    if doc["checks"]["imbalance"]["status"] == "not_applicable":
        return None  # one rank: nothing to compare
    panels = _heat_rows(doc)
    marks = marked_ranks(doc)
    charts = [_panel(title, panels[title], scheme, marks, len(panels[title]))
              for title, scheme in HEAT_PANELS if panels[title]]
    if not charts:
        return None
    named = "; ".join(f"rank {m['rank']} outlined: {m['role']}" for m in marks)
    title = alt.Title("Imbalance across ranks and steps", subtitle=named or "no straggler or hot rank named")
    return alt.hconcat(*charts, title=title).resolve_scale(color="independent")
