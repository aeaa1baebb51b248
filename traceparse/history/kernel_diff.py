"""What changed between two runs, kernel by kernel: the ``diff`` section of ``traceparse compare``.

``kernel_times(con)`` reads one run's store: per GPU kernel name (kernels, memcpy and memset) and per CPU op
name, the time and calls anchored in the run's step windows, and the number of windows (one per rank per
profiled step). ``diff(base, new, top)`` puts two of them side by side, per rank per step, the largest
changes first, each also as a share of the change of the mean step time (``step_mean_ns(doc)``, from the
analyze document's summary). Like HTA's trace diff (``TraceDiff.compare_traces``: counts and total duration
per name), but over every rank and step of both runs and normalised per rank per step, so runs of different
sizes and step counts compare. ``traceparse explain diff`` prints the definition.
"""

import statistics

from traceparse.store.query import rows
from traceparse.vocabulary.modules import use

KINDS = (("kernel", "kernels"), ("cpu_op", "cpu_ops"))  # kind -> the section's list
DEFINITION = (
    "per name, per rank per step: the total duration of its instances anchored in a step window (GPU activity: "
    "cat kernel, gpu_memcpy, gpu_memset, placed by its launch; CPU ops: cat cpu_op, placed by its start, each "
    "op's whole duration, so nested ops each count theirs) over all ranks / the windows (ranks x profiled steps; "
    "a rank without ProfilerStep#N is one window); delta = new - base; share_of_change = delta / the change of "
    "the mean step time per rank (summary.per_rank[].step_mean_ns averaged over the ranks); kernels overlap each "
    "other and the CPU, so shares need not add up to 1; a communication kernel carries the strategy of its "
    "operations (the most common; 'untagged' when none)"
)

KERNEL_TIMES = """
-- GPU activity placed by its launch (gpu_activity.in_window); CPU ops by their start, in the window it falls in
WITH placed AS (
    SELECT rank, ev_id, name, end_ns - start_ns AS dur_ns, 'kernel' AS kind FROM gpu_activity WHERE in_window
    UNION ALL
    SELECT e.rank, e.ev_id, e.name, e.dur_ns, 'cpu_op'
    FROM host_ops e ASOF JOIN step_windows w ON w.rank = e.rank AND e.ts_ns >= w.start_ns
    WHERE e.cat = 'cpu_op' AND e.ts_ns < w.end_ns
),
comm AS (
    SELECT p.name, coalesce(c.strategy, 'untagged') AS strategy, count(*) AS n
    FROM placed p JOIN comm_intervals c ON c.rank = p.rank AND c.ev_id = p.ev_id
    WHERE p.kind = 'kernel' AND c.part = 'exec' AND c.stream IS NOT NULL
    GROUP BY ALL
),
strategy AS (SELECT name, first(strategy ORDER BY n DESC, strategy) AS strategy FROM comm GROUP BY name)
SELECT p.kind, p.name, sum(p.dur_ns)::BIGINT AS total_ns, count(*) AS calls,
       CASE WHEN p.kind = 'kernel' THEN any_value(s.strategy) END AS strategy
FROM placed p LEFT JOIN strategy s ON s.name = p.name
GROUP BY p.kind, p.name
ORDER BY p.kind, p.name
"""


def kernel_times(con) -> dict:
    """One run's time per name, from its store: ``{"windows", "ranks", "kernel": {name: {total_ns, calls,
    strategy}}, "cpu_op": {name: {total_ns, calls, strategy: None}}}``, totals over all ranks of the instances
    anchored in a step window (the module's DEFINITION); ``windows`` the distinct (rank, step) windows they are
    divided by."""
    windows, ranks = con.execute(
        "SELECT count(*), count(DISTINCT rank) FROM (SELECT DISTINCT rank, step FROM step_windows)").fetchone()
    out = {"windows": windows, "ranks": ranks, "kernel": {}, "cpu_op": {}}
    use(con, "host_ops")
    for r in rows(con, KERNEL_TIMES):
        out[r["kind"]][r["name"]] = {"total_ns": r["total_ns"], "calls": r["calls"], "strategy": r["strategy"]}
    return out


def step_mean_ns(doc: dict) -> float | None:
    """The mean step time per rank of an analyze document: ``summary.per_rank[].step_mean_ns`` averaged over the
    ranks that have steps; None when none has."""
    means = [r["step_mean_ns"] for r in (doc.get("summary") or {}).get("per_rank") or ()
             if r.get("step_mean_ns") is not None]
    return statistics.fmean(means) if means else None


def diff(base: dict, new: dict, top: int = 15) -> dict:
    """The ``diff`` section of NEW against BASE, two ``kernel_times`` (each with ``step_mean_ns`` when known):
    per kind the ``top`` names by |delta per rank per step|, a name of one run only with 0 on the other side."""
    steps = {"base": base.get("step_mean_ns"), "new": new.get("step_mean_ns")}
    change = None if None in steps.values() else steps["new"] - steps["base"]
    out = {"status": "ok", "step_change_ns": _round(change), "step_ns": {k: _round(v) for k, v in steps.items()},
           "windows": {"base": base["windows"], "new": new["windows"]}, "names": {}, "kernels": [], "cpu_ops": [],
           "definition": DEFINITION}
    empty = [name for name, t in (("base", base), ("new", new)) if not t["windows"]]
    if empty:
        return {**out, "status": "not_applicable",
                "reason": f"the {' and '.join(empty)} run{'s have' if len(empty) > 1 else ' has'} no step window"}
    if not any(base[kind] or new[kind] for kind, _ in KINDS):
        return {**out, "status": "not_applicable", "reason": "neither run has a GPU kernel or a CPU op in a step window"}
    for kind, key in KINDS:
        b, n = base[kind], new[kind]
        names = sorted({*b, *n})
        rows_ = [_row(kind, name, b.get(name), n.get(name), base["windows"], new["windows"], change) for name in names]
        rows_.sort(key=lambda r: (-abs(r["delta_ns_per_step"]), r["name"]))
        out[key], out["names"][kind] = rows_[:top], len(names)
    return out


def _row(kind: str, name: str, b: dict | None, n: dict | None, wb: int, wn: int, change: float | None) -> dict:
    zero = {"total_ns": 0, "calls": 0, "strategy": None}
    bt, nt = b or zero, n or zero
    base_ns, new_ns = bt["total_ns"] / wb, nt["total_ns"] / wn
    delta = new_ns - base_ns
    return {"name": name, "kind": kind, "strategy": nt["strategy"] or bt["strategy"],
            "base_ns_per_step": _round(base_ns), "new_ns_per_step": _round(new_ns), "delta_ns_per_step": _round(delta),
            "base_calls_per_step": round(bt["calls"] / wb, 3), "new_calls_per_step": round(nt["calls"] / wn, 3),
            "share_of_change": round(delta / change, 4) if change else None,
            "only_in": "base" if n is None else "new" if b is None else None}


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)
