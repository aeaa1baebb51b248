"""The measured run as it would have been without its straggler (``whatif --without-straggler``).

The imbalance check names a straggler when it arrives late beyond chance, costs the others a material share of the
step, and the critical path runs through it most (analyzers/imbalance.py). Brought to the others' pace, the step is
what the step graph replays with the straggler's work at its peers' median (``imbalance.cost.per_step``: per
profiled step, ``savings.rank_excess`` on that step's graph, each of the rank's ops and its time in no op scaled to
its peers' median; the others' ops, the transfers and every dependency as measured). The step is the measured step
less the mean of what those replays save. The terms follow, so that a target layout can be forecast from them:

- compute (mean over ranks): the straggler's compute replaced by the others' mean;
- exposed communication: each other rank's waits shorten by what it lost waiting for the straggler
  (``straggler.lost_per_step_ns``: per other rank and step, the union of the spans from the next latest member's
  arrival to its own over the collectives it arrived last at), so the mean over ranks by the loss x (N - 1) / N,
  taken from each strategy in proportion to its waits for a late peer (overlap.per_strategy.waiting_ns), never
  below 0 (no more waiting is saved than there was exposed communication);
- other (the step less compute and exposed communication: idle, Python, launches): what is left of the replayed
  step.

Where the document has no replay (no step graph), the step is the measured step less what compute and exposed
communication lost. The target layout is then forecast from these facts as from any measured run
(``forecast.forecast``); a pipeline's per-action overhead is calibrated again on the shorter step.
"""

import statistics

from traceparse.errors import TraceError
from traceparse.layout.model_facts import fact
from traceparse.whatif.measured import layout
from traceparse.whatif.pipeline import calibrated_overhead
from traceparse.units import duration


def without_straggler(m: dict, doc: dict, profiled_step=None) -> dict:
    """The facts ``m`` (measured.measured) with the named straggler's cost taken out; TraceError where the run has
    no named straggler (the imbalance check's reason said). ``profiled_step``: the facts are those of that profiled
    step alone (measured.per_step), and so is the replay's saving."""
    imbalance = doc["checks"]["imbalance"]
    if imbalance.get("straggler_verdict") != "named":
        why = imbalance.get("straggler_reason") or imbalance.get("straggler_verdict") or "no imbalance check"
        raise TraceError(None, f"--without-straggler: the run has no named straggler ({why})")
    e, per_rank = imbalance["straggler"], imbalance["per_rank"]
    lost, rank, n = e["lost_per_step_ns"], e["rank"], len(per_rank)
    step, compute = m["step_time_ns"]["value"], m["compute_ns"]["value"]
    if step is None or compute is None or n < 2:
        raise TraceError(None, "--without-straggler: the run has no profiled step windows")
    own = next(p["compute_ns"] for p in per_rank if p["rank"] == rank) or 0
    others = [p["compute_ns"] or 0 for p in per_rank if p["rank"] != rank]
    mean_others = sum(others) / len(others)
    waits = {s: v["waiting_ns"] for s, v in (doc["checks"]["overlap"].get("per_strategy") or {}).items()
             if v.get("waiting_ns")}
    drop = lost * (n - 1) / n
    out = dict(m)
    src = f"without straggler rank {rank}"
    excess = (own - mean_others) / n
    total = sum(waits.values())
    cut = {s: min(f["value"], drop * waits.get(s, 0) / total) if total and f["value"] is not None else 0
           for s, f in m["exposed_comm_ns"].items()}  # never below 0: no more waiting saved than was exposed
    replayed = _replayed_saving(imbalance, rank, profiled_step)
    saved = replayed if replayed is not None else excess + sum(cut.values())
    out["compute_ns"] = fact(compute - excess,
                             f"{m['compute_ns']['source']}, {src}: its compute ({duration(own)}) replaced by the "
                             f"others' mean ({duration(mean_others)})")
    out["exposed_comm_ns"] = {
        s: fact(f["value"] if f["value"] is None else f["value"] - cut[s],
                f"{f['source']}, {src}: less the loss x (N - 1) / N in proportion to the strategy's waits for a late "
                "peer (overlap.per_strategy.waiting_ns), never below 0")
        for s, f in m["exposed_comm_ns"].items()}
    how = (f"the step graph replayed with its work at its peers' median saves {duration(saved)} per profiled step "
           "(imbalance.cost.per_step, savings.rank_excess)" if replayed is not None else
           f"less what the straggler's removal takes from the mean compute and exposed communication "
           f"({duration(saved)}; each other rank lost {duration(lost)} per step waiting for it, "
           "imbalance.straggler.lost_per_step_ns), the rest kept")
    out["step_time_ns"] = fact(step - saved, f"{m['step_time_ns']['source']}, without straggler rank {rank}: {how}")
    out["straggler_removed"] = fact({"rank": rank, "lost_per_step_ns": lost, "saved_per_step_ns": saved,
                                     "replayed": replayed is not None, "step_time_ns": step - saved,
                                     "compute_ns": out["compute_ns"]["value"],
                                     "exposed_comm_ns": {s: f["value"] for s, f in out["exposed_comm_ns"].items()}},
                                    "imbalance.straggler: the named straggler and what each other rank loses per "
                                    "step waiting for it; imbalance.cost.per_step: what the replay without it saves; "
                                    "the run's step, compute and exposed communication without it")
    out["action_overhead_ns"] = calibrated_overhead(out, layout(out))  # a pipeline's, on the shorter step
    return out


def _replayed_saving(imbalance: dict, rank: int, step=None) -> int | None:
    """The mean over the profiled steps (``step``: that step's alone) of what the step graph's replay saves with
    ``rank``'s work at its peers' median (``imbalance.cost.per_step``: a step where the rank was not among those
    replayed, or saved nothing, counts 0); None where the check replayed nothing (no step graph)."""
    per_step = [s for s in (imbalance.get("cost") or {}).get("per_step") or () if step is None or s["step"] == step]
    if not per_step:
        return None
    return round(statistics.fmean((s["ranks"].get(str(rank)) or {}).get("saved_ns", 0) for s in per_step))
