"""The metrics of a run that ``traceparse compare`` compares and ``--record`` keeps, taken from the
analyze document only: one flat mapping id -> Metric, so that two runs, or a history of runs, line up
metric by metric. ``traceparse explain <group>`` prints each group's definition (traceparse/metrics.py).

Groups and ids:
- ``step_time.mean``, ``step_time.p95``: ns, over every (rank, step) window of summary.per_step
- ``exposed_comm.<strategy>``: ns per rank per step, overlap.per_strategy[].exposed_ns / windows
- ``bubble``: fraction of the step, bubble.measured
- ``overlap.<strategy>``: fraction of the strategy's communication hidden under compute
- ``imbalance.max_over_mean``: slowest rank's step time over the mean; ``imbalance.straggler``: its rank
- ``bytes.<strategy>``: bytes per rank per step, comm_volume.per_strategy[].measured_bytes
- ``layout.<key>``: the inferred layout (dp, tp, pp, ..., pp_schedule, microbatches)
- ``<id>_per_microbatch`` for each step_time, exposed_comm and bytes metric: its value / layout.microbatches
  (same group, unit and direction), the per-step work when runs differ in micro-batches per step
"""

from dataclasses import asdict, dataclass

from .tagging.layout import KEYS as LAYOUT_KEYS
from .tagging.rules import STRATEGIES

GROUPS = ("layout", "step_time", "exposed_comm", "bubble", "overlap", "imbalance", "bytes")
PER_STEP_GROUPS = ("step_time", "exposed_comm", "bytes")  # per step; also per micro-batch (PER_MICROBATCH)
PER_MICROBATCH = "_per_microbatch"
TAGGED = tuple(k for k in LAYOUT_KEYS if k in STRATEGIES)  # the strategies a rule tags, in layout order


@dataclass(frozen=True)
class Metric:
    id: str
    group: str
    value: float | int | str | None
    unit: str  # ns, fraction, ratio, bytes, rank, or "" for a layout value
    better: str | None  # "lower", "higher", or None: a change is reported, never a regression by size

    def as_dict(self) -> dict:
        return asdict(self)


def run_metrics(doc: dict) -> dict[str, Metric]:
    """Every metric of the analyze document ``doc``, by id (metrics without a value are left out)."""
    out = [*_layout(doc), *_step_time(doc), *_exposed(doc), *_bubble(doc), *_overlap(doc), *_imbalance(doc),
           *_bytes(doc)]
    out += list(_per_microbatch(out))
    return {m.id: m for m in out if m.value is not None}


def metric_ids() -> list[str]:
    """Every id run_metrics can give, in group order, without the per-micro-batch ids (any per-step id +
    PER_MICROBATCH): the overlap check's strategies include the untagged rest, comm_volume's do not."""
    overlap = (*TAGGED, "untagged")
    return [*(f"layout.{k}" for k in LAYOUT_KEYS), "step_time.mean", "step_time.p95",
            *(f"exposed_comm.{s}" for s in overlap), "bubble", *(f"overlap.{s}" for s in overlap),
            "imbalance.max_over_mean", "imbalance.straggler", *(f"bytes.{s}" for s in TAGGED)]


def per_step_id(metric_id: str) -> str:
    """The per-step metric a per-micro-batch metric divides (any other id: itself)."""
    return metric_id.removesuffix(PER_MICROBATCH)


def _per_microbatch(metrics):
    """Each per-step metric over the micro-batches per step (layout.microbatches), when that is known."""
    m = next((x.value for x in metrics if x.id == "layout.microbatches"), None)
    if not isinstance(m, int) or m < 1:
        return
    for x in metrics:
        if x.group in PER_STEP_GROUPS and x.value is not None:
            yield Metric(x.id + PER_MICROBATCH, x.group, x.value / m, x.unit, x.better)


def _layout(doc):
    for k in LAYOUT_KEYS:
        yield Metric(f"layout.{k}", "layout", doc["layout"].get(k), "", None)


def _windows(doc) -> list[dict]:
    """The (rank, step) windows of profiled steps; a trace without steps has one whole-trace window."""
    return doc["summary"].get("per_step") or []


def _step_time(doc):
    times = sorted(w["window_ns"] for w in _windows(doc) if w["step"] is not None and w["window_ns"] is not None)
    if not times:
        return
    yield Metric("step_time.mean", "step_time", sum(times) / len(times), "ns", "lower")
    yield Metric("step_time.p95", "step_time", percentile(times, 0.95), "ns", "lower")


def percentile(sorted_values: list, q: float):
    """The nearest-rank percentile: the smallest value with at least ``q`` of the values at or below it."""
    import math

    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def _exposed(doc):
    n = len(_windows(doc))
    for s, v in sorted((doc["checks"]["overlap"].get("per_strategy") or {}).items()):
        if n and v.get("exposed_ns") is not None:
            yield Metric(f"exposed_comm.{s}", "exposed_comm", v["exposed_ns"] / n, "ns", "lower")


def _bubble(doc):
    yield Metric("bubble", "bubble", doc["checks"]["bubble"].get("measured"), "fraction", "lower")


def _overlap(doc):
    for s, v in sorted((doc["checks"]["overlap"].get("per_strategy") or {}).items()):
        yield Metric(f"overlap.{s}", "overlap", v.get("overlap"), "fraction", "higher")


def _imbalance(doc):
    imb = doc["checks"]["imbalance"]
    yield Metric("imbalance.max_over_mean", "imbalance", (imb.get("step_time") or {}).get("max_over_mean"), "ratio",
                 "lower")
    yield Metric("imbalance.straggler", "imbalance", imb.get("straggler_rank"), "rank", None)


def _bytes(doc):
    for s, v in sorted((doc["checks"]["comm_volume"].get("per_strategy") or {}).items()):
        yield Metric(f"bytes.{s}", "bytes", v.get("measured_bytes"), "bytes", "lower")
