"""Compute per rank and per pipeline stage, as every check reads it: from the store's vocabulary.

Not a check: the shared reading of ``window_totals`` (compute per step window), of the compute
floor (a variant, compute_floor.sql) and of the pipeline stages, so that the bubble and imbalance
checks state the same compute and name the same heavy stage.
"""

import statistics
from collections import defaultdict

from traceparse.store.query import table_rows
from traceparse.vocabulary.modules import use


def per_window(ctx) -> dict:
    """{(rank, step): window_totals row}: compute and communication per step window."""
    return {(r["rank"], r["step"]): r for r in ctx.rows("SELECT * FROM window_totals")}


def mean_per_rank(windows: dict) -> dict:
    """{rank: mean compute_ns over its step windows}."""
    by_rank = defaultdict(list)
    for (rank, _), w in windows.items():
        by_rank[rank].append(w["compute_ns"])
    return {rank: statistics.fmean(v) for rank, v in by_rank.items()}


def floor_per_window(con) -> dict:
    """{(rank, step): compute floor of the step window} of the ranks with CPU ops (compute_floor.sql)."""
    use(con, "compute_floor")
    return {(r["rank"], r["step"]): r["floor_ns"] for r in table_rows(con, "compute_floor", "rank, step NULLS FIRST")}


def floor_per_rank(ctx, compute: dict) -> dict:
    """{rank: compute floor per step window (the mean over its windows)}; a GPU rank's floor is its compute (kernel
    time is not stretched by host contention)."""
    floor = dict(compute)
    by_rank = defaultdict(list)
    for (rank, _), ns in floor_per_window(ctx.con).items():
        by_rank[rank].append(ns)
    floor.update({rank: statistics.fmean(v) for rank, v in by_rank.items()})
    return floor


def pipeline_stages(ctx) -> list[dict]:
    """The rows of pp_stages (pp_stages.sql), the one definition of a rank's pipeline stage: rank, stage, group_ranks
    (the group, in stage order), basis ('group', or 'pp ranks' when no group is known), loaded."""
    use(ctx.con, "pp_stages")
    return table_rows(ctx.con, "pp_stages", "stage, rank, group_ranks")


def stages(ctx) -> dict:
    """{rank: pipeline stage} (position in its pp group) of the ranks that run pp-tagged operations in it."""
    return {r["rank"]: r["stage"] for r in pipeline_stages(ctx) if r["basis"] == "group" and r["loaded"]}


def heavy_stage(stage_of: dict, floor: dict, stands_out: float):
    """(heavy stage or None, its compute floor / the stages' mean, {stage: mean floor}).

    Stage compute = mean compute floor of the stage's ranks; the heavy stage is the one with the most,
    named only when it computes at least ``stands_out`` times the mean stage.
    """
    by_stage = defaultdict(list)
    for rank, stage in stage_of.items():
        if floor.get(rank) is not None:
            by_stage[stage].append(floor[rank])
    loads = {s: statistics.fmean(v) for s, v in by_stage.items()}
    if len(loads) < 2 or not statistics.fmean(loads.values()):
        return None, None, loads
    top = max(loads, key=lambda s: (loads[s], -s))
    ratio = round(loads[top] / statistics.fmean(loads.values()), 4)
    return (top if ratio >= stands_out else None), ratio, loads
