"""Altair charts built from the analyze document (never from the store): one function per chart.

An unknown value (None) is left out of a chart, never drawn as 0; a chart without data is left out.
"""

import altair as alt

from traceparse.render.charts.bubble import bubble_per_stage
from traceparse.render.charts.comm import overlap_per_strategy, volume_per_strategy
from traceparse.render.charts.critical_path import critical_path_timeline
from traceparse.render.charts.steps import imbalance_heatmap, step_split
from traceparse.render.charts.timeline import step_timeline

# (id of the chart on the page, function, what it shows: a sentence under its heading)
CHARTS = (
    ("step-split", step_split,
     "Each rank's step windows split into compute, communication not hidden under compute, and idle time."),
    ("timeline", step_timeline,
     "One profiled step on every rank: when it computed and when it communicated, by strategy."),
    ("critical-path", critical_path_timeline,
     "The critical path of each step: the chain of work and transfers that ended last, rank by rank, by cause "
     "(traceparse explain critical_path)."),
    ("imbalance", imbalance_heatmap,
     "Ranks against steps: where one rank's step, compute or wait at the collectives stands out."),
    ("bubble", bubble_per_stage,
     "The pipeline bubble of each stage against the schedule's formula and a replay of the schedule."),
    ("overlap", overlap_per_strategy,
     "Per strategy, the communication time per rank per step hidden under compute and the time exposed."),
    ("volume", volume_per_strategy,
     "Per strategy, the communication volume per rank per step in the notes' count (all-reduce 2x; not the "
     "collectives' input bytes) against the volume the layout's formula expects."),
)


def charts(doc) -> dict:
    """``{id: (chart, caption)}`` of the charts the document has data for, in page order."""
    out = {}
    for cid, make, caption in CHARTS:
        chart = make(doc)
        if chart is not None:
            out[cid] = (chart, caption)
    return out


def spec(chart) -> dict:
    """The Vega-Lite spec of ``chart`` (which it changes), its inline rows moved to top-level named
    datasets: Altair would convert and validate every row, seconds for a timeline of thousands of bars."""
    datasets = {}

    def lift(obj):
        data = getattr(obj, "data", alt.Undefined)
        if isinstance(data, alt.Data) and isinstance(getattr(data, "values", None), list):
            name = f"rows{len(datasets)}"
            datasets[name] = data.values
            obj.data = alt.Data(name=name)
        for key in ("layer", "hconcat", "vconcat", "concat", "spec"):
            sub = getattr(obj, key, alt.Undefined)
            for part in [] if sub is alt.Undefined else sub if isinstance(sub, list) else [sub]:
                lift(part)

    lift(chart)
    out = chart.to_dict()
    out["datasets"] = {**out.get("datasets", {}), **datasets}
    return out
