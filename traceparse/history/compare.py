"""Compare two runs metric by metric: the document of ``traceparse compare BASE NEW``.

``compare_metrics(base, new, thresholds)`` takes two metric sets of ``traceparse.history.run_metrics`` and
returns the comparison; ``compare_runs(base_doc, new_doc, thresholds)`` does the same for two analyze
documents and names the runs; given each run's ``kernel_times``, it adds the kernel-by-kernel ``diff`` section
(``traceparse.history.kernel_diff``). ``load_thresholds(overrides)`` reads rules/compare_thresholds.toml and
applies ``--threshold KEY=VALUE`` overrides. Rendering is in ``traceparse.render.compare``.

A metric regresses when it moves in its worse direction (Metric.better) by more than its threshold
(``traceparse explain regression``). When the runs differ in micro-batches per step, the per-step
groups (step time, exposed communication, volume) are compared per micro-batch.

Two runs compare only when both are whole: a run missing ranks, against the world size its traces declare
(or NEW against BASE's ranks when NEW declares none), makes the verdict ``incomplete`` (exit 1), with the
reasons in ``incomplete``: its metrics would cover the loaded ranks only.
"""

import math
import tomllib
from dataclasses import dataclass
from importlib.resources import files

from traceparse import stats
from traceparse.errors import TraceError
from traceparse.thresholds import check_thresholds
from traceparse.units import in_unit
from traceparse.load.run_identity import rank_list
from traceparse.axes import AXES as DEGREES
from traceparse.axes import LAYOUT_KEYS
from traceparse.history.kernel_diff import diff, step_mean_ns
from traceparse.history.run_metrics import GROUPS, PER_MICROBATCH, PER_STEP_GROUPS, Metric, current_id, metric_ids, per_step_id, run_metrics

VERSION = 1
THRESHOLDS_FILE = "compare_thresholds.toml"
STRAGGLER = "imbalance.straggler"
STRETCH = "imbalance.stretch"  # host contention: explains a slower step, never gated itself
BUBBLE, UNPRICED = "bubble", "bubble.unpriced"  # the bubble, and its part the replay does not price (never gated)
CONTENDED = ("step_time", "exposed_comm")  # what host contention stretches
CAUSES = "cost"  # what a cause costs a step by replay
SLOW_RANK = "cost.rank"  # a rank's excess: gated when it grows in every step, whatever the p-value
NAMED = ("cost.cause", "cost.stage")  # a cause the check names on its own evidence: gated by its saving alone


@dataclass(frozen=True)
class Limit:
    """One threshold: how far a metric may move in its worse direction."""

    key: str  # the metric group or id it is given for
    text: str  # as given: "15%" or "0.05"
    relative: bool  # True: a fraction of the base value; False: absolute, in the metric's unit
    value: float

    def exceeded(self, base: float, delta: float) -> bool:
        if not self.relative:
            return abs(delta) > self.value
        return delta != 0 if base == 0 else abs(delta / base) > self.value


@dataclass(frozen=True)
class Thresholds:
    limits: dict  # group or metric id -> Limit
    floors: dict  # group -> fraction of the new run's mean step time below which it is not gated

    def limit(self, metric: Metric) -> Limit | None:
        """The metric id's own threshold, else its per-step id's, else its group's."""
        for key in (metric.id, per_step_id(metric.id), metric.group):
            if key in self.limits:
                return self.limits[key]
        return None


def gated_keys() -> tuple[list[str], list[str]]:
    """The metric groups and the per-step ids a threshold may be given for: not layout, not the straggler rank."""
    groups = [g for g in GROUPS if g != "layout"]
    return groups, [i for i in metric_ids() if i.split(".", 1)[0] in groups and i not in (STRAGGLER, STRETCH, UNPRICED)
                    and i not in groups]


def parse_limit(key: str, value, where: str) -> Limit:
    """A threshold ``value`` ("5%", "0.03", or a TOML number) for ``key``; bad ones raise TraceError(where)."""
    groups, ids = gated_keys()
    per_mb = key.endswith(PER_MICROBATCH) and key.split(".", 1)[0] in PER_STEP_GROUPS
    if key not in groups and (per_step_id(key) if per_mb else key) not in ids:
        raise TraceError(where, f"{key}={value}: no gated metric group or id {key!r} (groups: {', '.join(groups)}; "
                         f"ids: {', '.join(ids)}; a step_time, exposed_comm or volume id also as <id>{PER_MICROBATCH}; "
                         "layout and the straggler rank have no threshold)")
    text = str(value).strip()
    relative = text.endswith("%")
    try:
        number = float(text.removesuffix("%")) if not isinstance(value, bool) else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise TraceError(where, f"{key}={value}: not a threshold; give a percentage (5%) or a number >= 0 in the "
                         "metric's unit (0.03 for a fraction)")
    return Limit(key, text, relative, number / 100 if relative else number)


def _derived(key: str, value, where: str):
    """A default given as ``{from = "<check>.<name>", less = x, times = y}``: the checks' threshold of that name
    (rules/thresholds.toml), less ``less``, times ``times`` (both optional), so the two files cannot drift apart;
    any other value as it is."""
    if not isinstance(value, dict):
        return value
    table, _, name = str(value.get("from", "")).partition(".")
    source = check_thresholds().get(table, {}).get(name)
    if not isinstance(source, int | float) or set(value) - {"from", "less", "times"}:
        raise TraceError(where, f"{key}={value}: a derived threshold is {{from = \"<check>.<name>\", less = x, "
                         "times = y}, <check>.<name> a number of rules/thresholds.toml")
    return round((source - value.get("less", 0)) * value.get("times", 1), 12)


def load_thresholds(overrides=()) -> Thresholds:
    """The defaults of rules/compare_thresholds.toml with ``overrides`` ("KEY=VALUE", group or id) applied."""
    data = tomllib.loads(files("traceparse.rules").joinpath(THRESHOLDS_FILE).read_text())
    where = f"rules/{THRESHOLDS_FILE}"
    defaults = {k: parse_limit(k, _derived(k, v, where), where) for k, v in data.get("threshold", {}).items()}
    given = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise TraceError("--threshold", f"{item!r}: expected KEY=VALUE, e.g. step_time=5% or bubble=0.02")
        key = current_id(key.strip())  # bytes, bytes.<strategy>: the former names of volume, volume.<strategy>
        given[key] = parse_limit(key, value.strip(), "--threshold")
    # an override of a group replaces the group's defaults, those of its ids included
    kept = {k: v for k, v in defaults.items() if not any(k == g or k.startswith(g + ".") for g in given)}
    return Thresholds({**kept, **given}, {k: float(v) for k, v in data.get("floor", {}).items()})


def compare_runs(base_doc: dict, new_doc: dict, thresholds: Thresholds,
                 kernels: tuple[dict, dict] | None = None) -> dict:
    """compare_metrics of two analyze documents, with the runs named (files, world size, ranks, steps) and
    the reasons the comparison is ``incomplete`` (``missing_ranks``), which then is its verdict. ``kernels``: the
    two runs' ``kernel_diff.kernel_times`` (BASE, NEW), which add the ``diff`` section; None: no such section."""
    doc = compare_metrics(run_metrics(base_doc), run_metrics(new_doc), thresholds)
    verdict, incomplete = doc.pop("verdict"), missing_ranks(base_doc["run"], new_doc["run"])
    doc["notes"] += _same_part(base_doc["run"], new_doc["run"])
    out = {"version": doc.pop("version"), "base": _run(base_doc), "new": _run(new_doc), **doc,
           "incomplete": incomplete, "verdict": "incomplete" if incomplete else verdict}
    if kernels is not None:
        out["diff"] = diff(*({**times, "step_mean_ns": step_mean_ns(d)}
                             for times, d in zip(kernels, (base_doc, new_doc), strict=True)))
    return out


def _run(doc: dict) -> dict:
    run = doc["run"]
    return {"files": run["files"], "world_size": run["world_size"], "ranks": run.get("ranks"), "steps": run["steps"]}


def missing_ranks(base: dict, new: dict) -> list[str]:
    """A line for each run (an analyze document's ``run``) missing ranks: against the world size its traces
    declare; NEW, when it declares none, against BASE's ranks. Two runs holding the same ranks compare like for
    like (one profiled rank of a large job, in both): not incomplete (``_same_part`` notes it). A run that names
    no ranks is not judged."""
    if base.get("ranks") is not None and sorted(base["ranks"]) == sorted(new.get("ranks") or ()):
        return []
    out = []
    for name, run in (("base", base), ("new", new)):
        if run.get("ranks") is None:
            continue
        have, size = set(run["ranks"]), run["world_size"]
        if size:
            want, source = set(range(size)), f"world size {size}, as its traces declare"
        else:
            want, source = (set(base.get("ranks") or ()), "the base run's ranks") if name == "new" else (set(), "")
        missing = sorted(want - have)
        if missing:
            out.append(f"the {name} run lacks rank{'s' if len(missing) > 1 else ''} {rank_list(missing)} "
                       f"({len(want & have)} of {len(want)} loaded; {source}): its metrics cover the loaded ranks only")
    return out


def _same_part(base: dict, new: dict) -> list[str]:
    """A note when both runs hold the same ranks, fewer than the world size they declare."""
    ranks, size = sorted(new.get("ranks") or ()), new.get("world_size")
    if base.get("ranks") is None or sorted(base["ranks"]) != ranks or not size or len(ranks) >= size:
        return []
    return [f"both runs hold ranks {rank_list(ranks)} of {size}: compared like for like, the other ranks unseen"]


def compare_metrics(base: dict[str, Metric], new: dict[str, Metric], thresholds: Thresholds) -> dict:
    """``{version, layout_changes, notes, metrics, regressions, verdict}`` of NEW against BASE."""
    changes = [{"key": k.removeprefix("layout."), "base": _value(base, k), "new": _value(new, k)}
               for k in _ids(base, new) if k.startswith("layout.") and _value(base, k) != _value(new, k)]
    m_base, m_new = _value(base, "layout.microbatches"), _value(new, "layout.microbatches")
    per_mb = m_base is not None and m_new is not None and m_base != m_new
    notes = _notes(changes, m_base, m_new, per_mb)
    rows = []
    for k in _ids(base, new):
        b, n = base.get(k), new.get(k)
        m = n or b
        if m.group in PER_STEP_GROUPS and k.endswith(PER_MICROBATCH) != per_mb:
            continue  # the per-step metric, or its per-micro-batch version: one of them is compared
        rows.append(_row(m, b, n, thresholds, base, new, per_mb))
    regressions = [{"id": r["id"], "note": r["note"]} for r in rows if r["regressed"]]
    return {"version": VERSION, "layout_changes": changes, "notes": notes, "metrics": rows,
            "regressions": regressions, "verdict": "regressed" if regressions else "ok"}


def _ids(base: dict, new: dict) -> list[str]:
    """Every metric id of either run, in group order (run_metrics.GROUPS), layout keys in their order, the
    others as run_metrics lists them."""
    ids = list(dict.fromkeys([*base, *new]))
    keys = [f"layout.{k}" for k in LAYOUT_KEYS]
    return sorted(ids, key=lambda k: (GROUPS.index((base.get(k) or new.get(k)).group), keys.index(k) if k in keys else 0))


def _value(metrics: dict, key: str):
    m = metrics.get(key)
    return None if m is None else m.value


def _notes(changes, m_base, m_new, per_mb) -> list[str]:
    notes = []
    degrees = [c for c in changes if c["key"] in DEGREES]
    if degrees:
        what = ", ".join(f"{c['key']} {c['base']} -> {c['new']}" for c in degrees)
        notes.append(f"the runs have different parallel layouts ({what}): their metrics are compared as they are, "
                     "and a difference reflects the layout as much as the change under test")
    if per_mb:
        notes.append(f"micro-batches per step differ ({m_base} -> {m_new}): step time, exposed communication and "
                     f"volume are compared per micro-batch (each value / microbatches, ids *{PER_MICROBATCH}; "
                     "traceparse explain per_microbatch)")
    elif (m_base is None) != (m_new is None):
        which = "base" if m_base is None else "new"
        notes.append(f"micro-batches per step unknown in the {which} run: step time, exposed communication and volume "
                     "are compared per step")
    return notes


def _row(m: Metric, b: Metric | None, n: Metric | None, thresholds: Thresholds, base: dict, new: dict,
         per_mb: bool) -> dict:
    limit = thresholds.limit(m) if m.better else None
    row = {"id": m.id, "group": m.group, "unit": m.unit, "better": m.better,
           "base": None if b is None else b.value, "new": None if n is None else n.value,
           "delta": None, "relative": None, "threshold": limit.text if limit else None,
           "threshold_key": limit.key if limit else None, "p": None, "regressed": False, "note": ""}
    if m.id == STRAGGLER:
        row["regressed"], row["note"] = _straggler(row["base"], row["new"], _graded(new, thresholds))
        return row
    if b is None or n is None:
        row["note"] = f"only in the {'new' if b is None else 'base'} run"
        return row
    if m.better is None or not _numeric(b.value) or not _numeric(n.value):
        row["note"] = "" if b.value == n.value else f"changed: {in_unit(b.value, m.unit)} -> {in_unit(n.value, m.unit)}"
        return row
    delta = n.value - b.value
    row["delta"], row["relative"] = delta, (delta / b.value if b.value else None)
    worse = delta > 0 if m.better == "lower" else delta < 0
    per = "per micro-batch; " if per_mb and m.group in PER_STEP_GROUPS else ""
    if delta == 0:
        row["note"] = per + "unchanged"
    elif not worse:
        row["note"] = per + "better"
    elif limit is None:
        row["note"] = per + "worse; no threshold"
    elif _below_floor(m, n.value, thresholds, new, per_mb):
        row["note"] = (per + f"worse, not gated: under {thresholds.floors[m.group]:.0%} of the step time "
                       f"([floor] {m.group})")
    elif limit.exceeded(b.value, delta):
        by = f"{abs(row['relative']):.1%}" if row["relative"] is not None else "from 0"
        row["note"] = per + f"worse by {by if limit.relative else _plain(abs(delta))}, over {limit.text} ({limit.key})"
        noise = _noise(b, n)
        apart = m.id == SLOW_RANK and noise is not None and noise["p"] > stats.ALPHA and _apart(b, n, limit)
        row["regressed"] = noise is None or noise["p"] <= stats.ALPHA or apart
        if noise is not None:
            row["p"] = round(noise["p"], 6)
            row["note"] += (f"; every step of NEW is worse than every step of BASE by more than {limit.text} "
                            f"(p = {noise['p']:.2g} over {len(b.samples)} and {len(n.samples)} steps)" if apart else
                            f"; beyond the step-to-step variation (p = {noise['p']:.2g})" if row["regressed"] else
                            f", but within the step-to-step variation (p = {noise['p']:.2g} over "
                            f"{len(b.samples)} and {len(n.samples)} steps): not gated")
        contended = m.group in CONTENDED or (m.group == CAUSES and m.id not in (SLOW_RANK, *NAMED))
        explained = row["regressed"] and ((_busier(base, new, limit) if contended else None)
                                          or (_priced_growth(base, new, limit) if m.id == BUBBLE else None))
        if explained:
            row["regressed"], row["note"] = False, row["note"] + f"; {explained}: not gated"
    else:
        row["note"] = per + f"worse, within {limit.text} ({limit.key})"
    return row


def _busier(base: dict, new: dict, limit: Limit) -> str | None:
    """Why a slower step is the host's doing, or None: NEW's ops ran longer against their fastest (the compute
    floor: the work) than BASE's by more than the step time's own threshold, i.e. more contention."""
    b, n = _value(base, STRETCH), _value(new, STRETCH)
    margin = limit.value if limit.relative else load_thresholds().limits["step_time"].value  # absolute: the default
    if not _numeric(b) or not _numeric(n) or not b or n / b - 1 <= margin:
        return None
    return (f"the host was busier: the same ops ran {n:.2f}x their fastest in NEW against {b:.2f}x in BASE "
            f"({STRETCH})")


def _priced_growth(base: dict, new: dict, limit: Limit) -> str | None:
    """Why a grown bubble is not the schedule's, or None: its part the replay does not price (bubble.unpriced: the
    bubble less what its pp transfers and heavy stage cost) did not grow past the bubble's threshold, so what grew
    is the transfers' time or a stage's compute, which exposed_comm.pp, cost.pp and cost.stage judge."""
    b, n = _value(base, UNPRICED), _value(new, UNPRICED)
    if not _numeric(b) or not _numeric(n) or (n > b and limit.exceeded(b, n - b)):
        return None
    return (f"the part the replay does not price ({UNPRICED}: the bubble less what its pp transfers and heavy stage "
            f"cost) went {b:.3f} -> {n:.3f}: the transfers or a stage grew, not the schedule's bubble")


def _noise(b: Metric, n: Metric) -> dict | None:
    """How likely the change is from step-to-step variation alone (traceparse.stats.mean_difference, one-sided in
    the metric's worse direction), when both runs give the metric per step (two steps or more each)."""
    if not b.samples or not n.samples or len(b.samples) < 2 or len(n.samples) < 2:
        return None
    a, c = (b.samples, n.samples) if n.better == "lower" else (n.samples, b.samples)
    return stats.mean_difference(list(a), list(c))


def _apart(b: Metric, n: Metric, limit: Limit) -> bool:
    """Whether NEW's best step is worse than BASE's worst by more than the threshold: a rank whose excess grew that
    much in every step is no step-to-step variation, however few the steps that leave the t-test without power (a
    slow rank that costs a lot is never missed for want of a p-value)."""
    if n.better == "lower":
        gap, worst_base = min(n.samples) - max(b.samples), max(b.samples)
    else:
        gap, worst_base = min(b.samples) - max(n.samples), min(b.samples)
    return limit.exceeded(worst_base, gap) and gap > 0


def _numeric(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _plain(x: float) -> str:
    return f"{x:.4g}"


def _below_floor(m: Metric, value: float, thresholds: Thresholds, new: dict, per_mb: bool) -> bool:
    """A metric with a [floor] under that fraction of the new run's mean step time (both per step or per micro-batch)."""
    floor = thresholds.floors.get(m.group)
    step = _value(new, "step_time.mean" + (PER_MICROBATCH if per_mb else ""))
    return floor is not None and _numeric(step) and value < floor * step


def _graded(new: dict, thresholds: Thresholds) -> str | None:
    """Why a straggler of the NEW run is not gated: its graded cost (``cost.cause``: the named rank's own work, a
    stall or its input, by replay) is under the cost threshold, so the others wait for its host's slowness (the same
    ops slower, which a busy host does to any rank) or for less than a cause costs; None when it is gated (or the
    run predates the cost)."""
    cause = new.get("cost.cause")
    limit = thresholds.limit(cause) if cause is not None else None
    if cause is None or not _numeric(cause.value) or limit is None or limit.relative or cause.value > limit.value:
        return None
    return (f"reported, not gated: what it costs as its own work, a stall or its input (cost.cause) is "
            f"{cause.value:.1%} of the step, within the {limit.text} threshold")


def _straggler(base, new, ungraded: str | None = None) -> tuple[bool, str]:
    """A straggler appearing, or a different straggler rank, regresses unless ``ungraded`` says why its cost does
    not (_graded); one going away is better."""
    if new is None:
        return False, "" if base is None else f"better: rank {base} is no longer a straggler"
    if base == new:
        return False, f"rank {new} is still the straggler"
    note = f"rank {new} became a straggler" if base is None else f"rank {new} became the straggler (was rank {base})"
    return (False, f"{note}; {ungraded}") if ungraded else (True, note)
