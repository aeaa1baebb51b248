"""The metrics of a run that ``traceparse compare`` compares and ``--record`` keeps, taken from the
analyze document only: one flat mapping id -> Metric, so that two runs, or a history of runs, line up
metric by metric. ``traceparse explain <group>`` prints each group's definition (traceparse/metrics.py).

Groups and ids:
- ``step_time.mean``, ``step_time.p95``: ns, over every (rank, step) window of summary.per_step
- ``exposed_comm.<strategy>``: ns per rank per step, overlap.per_strategy[].exposed_ns / windows
- ``bubble``: fraction of the step, bubble.measured; ``bubble.unpriced``: the part of it the replay does not price
  (bubble.unpriced: the measured bubble less what its pp transfers and heavy stage cost a step; reported, never
  gated: compare reads it to tell a bubble grown by the schedule from one grown by slower transfers)
- ``overlap.<strategy>``: fraction of the strategy's communication hidden under compute
- ``imbalance.max_over_mean``: slowest rank's step time over the mean; ``imbalance.straggler``: the straggler's
  rank (named only when conclusive); ``imbalance.stretch``: compute busy time / compute floor over the ranks, how
  much longer the ops ran than at their fastest (host contention; reported, never gated)
- ``cost.rank``: what the costliest rank costs a step by replay, a share of the step (imbalance.cost: per step the
  largest saving of a rank's work at its peers' median, of an excess the check grades: its own work, a stall or its
  input, not the same ops taking longer, its host's; 0 where none saves anything); ``cost.cause``: the share of the
  rank the imbalance check names as a cause (imbalance.cost.cause, of a graded kind; 0 when none);
  ``cost.stage``: what the heavy pipeline stage costs (imbalance.heavy_stage_cost; 0 when none is heavy);
  ``cost.<strategy>``: what hiding the strategy's communication saves a step by replay, a share
  (overlap.per_strategy[].cost)
- ``volume.<strategy>``: communication volume per rank per step in the notes' count (all-reduce 2x the size),
  comm_volume.per_strategy[].measured_volume_bytes; not the collectives' input bytes. Formerly ``bytes.<strategy>``:
  ``current_id`` maps the old ids and group (histories, thresholds) to the new ones
- ``layout.<key>``: the inferred layout (dp, tp, pp, ..., pp_schedule, microbatches)
- ``<id>_per_microbatch`` for each step_time, exposed_comm and volume metric: its value / layout.microbatches
  (same group, unit and direction), the per-step work when runs differ in micro-batches per step
"""

from dataclasses import dataclass, field

from traceparse.axes import LAYOUT_KEYS
from traceparse.tagging.rules import STRATEGIES

GROUPS = ("layout", "step_time", "exposed_comm", "bubble", "overlap", "imbalance", "cost", "volume")
PER_STEP_GROUPS = ("step_time", "exposed_comm", "volume")  # per step; also per micro-batch (PER_MICROBATCH)
PER_MICROBATCH = "_per_microbatch"
TAGGED = tuple(k for k in LAYOUT_KEYS if k in STRATEGIES)  # the strategies a rule tags, in layout order


@dataclass(frozen=True)
class Metric:
    id: str
    group: str
    value: float | int | str | None
    unit: str  # ns, fraction, ratio, bytes, rank, or "" for a layout value
    better: str | None  # "lower", "higher", or None: a change is reported, never a regression by size
    # the metric per profiled step (same unit), when the run has them: the step-to-step variation compare
    # judges a change against; recorded in a history too (metrics.samples), so the dashboard judges as compare does
    samples: tuple | None = field(default=None, compare=False)


def run_metrics(doc: dict) -> dict[str, Metric]:
    """Every metric of the analyze document ``doc``, by id (metrics without a value are left out)."""
    out = [*_layout(doc), *_step_time(doc), *_exposed(doc), *_bubble(doc), *_overlap(doc), *_imbalance(doc),
           *_cost(doc), *_volume(doc)]
    out += list(_per_microbatch(out))
    return {m.id: m for m in out if m.value is not None}


def metric_ids() -> list[str]:
    """Every id run_metrics can give, in group order, without the per-micro-batch ids (any per-step id +
    PER_MICROBATCH): the overlap check's strategies include the untagged rest, comm_volume's do not."""
    overlap = (*TAGGED, "untagged")
    return [*(f"layout.{k}" for k in LAYOUT_KEYS), "step_time.mean", "step_time.p95",
            *(f"exposed_comm.{s}" for s in overlap), "bubble", "bubble.unpriced", *(f"overlap.{s}" for s in overlap),
            "imbalance.max_over_mean", "imbalance.straggler", "imbalance.stretch", "cost.rank", "cost.cause",
            "cost.stage", *(f"cost.{s}" for s in overlap), *(f"volume.{s}" for s in TAGGED)]


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
            yield Metric(x.id + PER_MICROBATCH, x.group, x.value / m, x.unit, x.better,
                         None if x.samples is None else tuple(v / m for v in x.samples))


def _layout(doc):
    for k in LAYOUT_KEYS:
        yield Metric(f"layout.{k}", "layout", doc["layout"].get(k), "", None)


def _windows(doc) -> list[dict]:
    """The (rank, step) windows of profiled steps; a trace without steps has one whole-trace window."""
    return doc["summary"].get("per_step") or []


def _by_step(doc) -> dict:
    """{step: [its (rank, step) windows]}, profiled steps only."""
    out = {}
    for w in _windows(doc):
        if w["step"] is not None and w["window_ns"] is not None:
            out.setdefault(w["step"], []).append(w)
    return out


def _step_time(doc):
    times = sorted(w["window_ns"] for w in _windows(doc) if w["step"] is not None and w["window_ns"] is not None)
    if not times:
        return
    steps = list(_by_step(doc).values())
    yield Metric("step_time.mean", "step_time", sum(times) / len(times), "ns", "lower",
                 tuple(sum(w["window_ns"] for w in ws) / len(ws) for ws in steps))
    # per step, the slowest (rank, step) window: of a few windows the p95 is nearly their maximum
    yield Metric("step_time.p95", "step_time", percentile(times, 0.95), "ns", "lower",
                 tuple(max(w["window_ns"] for w in ws) for ws in steps))


def percentile(sorted_values: list, q: float):
    """The nearest-rank percentile: the smallest value with at least ``q`` of the values at or below it."""
    import math

    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def _overlap_steps(doc, strategy: str) -> list[dict]:
    return [r for r in doc["checks"]["overlap"].get("per_step") or () if r["strategy"] == strategy
            and r["step"] is not None]


def _exposed(doc):
    n = len(_windows(doc))
    ranks = {step: len(ws) for step, ws in _by_step(doc).items()}
    for s, v in sorted((doc["checks"]["overlap"].get("per_strategy") or {}).items()):
        if n and v.get("exposed_ns") is not None:
            per_step = {r["step"]: r["exposed_per_step_ns"] * r["ranks"] for r in _overlap_steps(doc, s)}
            samples = tuple(per_step.get(step, 0) / k for step, k in ranks.items())  # over all ranks, as the value
            yield Metric(f"exposed_comm.{s}", "exposed_comm", v["exposed_ns"] / n, "ns", "lower", samples)


def _bubble(doc):
    b = doc["checks"]["bubble"]
    steps = b.get("per_step") or ()
    yield Metric("bubble", "bubble", b.get("measured"), "fraction", "lower", tuple(s["measured"] for s in steps))
    yield Metric("bubble.unpriced", "bubble", b.get("unpriced"), "fraction", None,
                 tuple(s["unpriced"] for s in steps if s.get("unpriced") is not None))


def _overlap(doc):
    for s, v in sorted((doc["checks"]["overlap"].get("per_strategy") or {}).items()):
        samples = tuple(r["overlap"] for r in _overlap_steps(doc, s) if r["overlap"] is not None)
        yield Metric(f"overlap.{s}", "overlap", v.get("overlap"), "fraction", "higher", samples)


def _imbalance(doc):
    imb = doc["checks"]["imbalance"]
    per_step = [[w["window_ns"] for w in ws] for ws in _by_step(doc).values() if len(ws) > 1]
    yield Metric("imbalance.max_over_mean", "imbalance", (imb.get("step_time") or {}).get("max_over_mean"), "ratio",
                 "lower", tuple(max(v) / (sum(v) / len(v)) for v in per_step if sum(v)))
    yield Metric("imbalance.straggler", "imbalance", imb.get("straggler_rank"), "rank", None)
    # how much longer the ops ran than the same ops at their fastest: host contention (1 on GPU ranks)
    rows = [r for r in imb.get("per_rank") or () if r.get("compute_ns") and r.get("compute_floor_ns")]
    yield Metric("imbalance.stretch", "imbalance", sum(r["compute_ns"] for r in rows) /
                 sum(r["compute_floor_ns"] for r in rows) if rows else None, "ratio", None)


GRADED_KINDS = ("work", "stall", "input")  # a rank's excess the imbalance check grades: not "slower" (its host, reported)


def _cost(doc):
    """What the causes the replay prices cost a step (shares of it), per profiled step as samples: the costliest
    rank's excess (a cause that appears or grows), each strategy's exposed communication."""
    steps = ((doc["checks"]["imbalance"].get("cost") or {}).get("per_step")) or []
    shares = tuple(max((r["share"] or 0 for r in s["ranks"].values() if r["kind"] in GRADED_KINDS), default=0.0)
                   for s in steps)
    yield Metric("cost.rank", "cost", sum(shares) / len(shares) if shares else None, "fraction", "lower", shares)
    imb = doc["checks"]["imbalance"]
    if imb.get("cost") is not None:  # the named causes: judged by the check's own evidence, so without samples
        cause = imb["cost"].get("cause")
        yield Metric("cost.cause", "cost", cause["share"] if cause and cause["kind"] in GRADED_KINDS else 0.0,
                     "fraction", "lower")
    if imb.get("pp_stages"):
        yield Metric("cost.stage", "cost", (imb.get("heavy_stage_cost") or {}).get("share") or 0.0, "fraction",
                     "lower")
    for s, v in sorted((doc["checks"]["overlap"].get("per_strategy") or {}).items()):
        cost = v.get("cost")
        if cost:
            yield Metric(f"cost.{s}", "cost", cost["share"], "fraction", "lower",
                         tuple(p["share"] for p in cost["per_step"] if p["share"] is not None))


RENAMED = {"bytes": "volume"}  # old group -> new (ids: old group + "." + rest), in histories recorded before the rename


def current_id(key: str) -> str:
    """A metric group or id under its current name: ``bytes`` -> ``volume``, ``bytes.dp`` -> ``volume.dp`` (recorded
    histories and ``--threshold`` keys written before the rename); any other key unchanged."""
    group, dot, rest = key.partition(".")
    return RENAMED[group] + dot + rest if group in RENAMED else key


def _volume(doc):
    for s, v in sorted((doc["checks"]["comm_volume"].get("per_strategy") or {}).items()):
        yield Metric(f"volume.{s}", "volume", v.get("measured_volume_bytes"), "bytes", "lower")
