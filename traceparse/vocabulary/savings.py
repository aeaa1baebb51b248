"""What a cause cost each step, as a counterfactual replayed on the step graph (``step_graph``): the step's measured
length less its length replayed with the cause taken away. Overlapping causes are not counted twice, and a number
that is off but sets nobody's pace costs nothing.

A rank's excess (the ByteDance what-if method: each op at the median of the same work on its peers): every work
stretch of the rank, per op name, scaled down to the median over its peers (the other ranks of its pipeline stage,
else every other rank) of their total time in that op in the step; time in ops its peers never run, removed; time
in no op (a sleep, a stall, Python between ops), down to the peers' median. Its kind is where the excess lies:
``work`` (its own work: more ops than its peers, or heavier ones: its compute floor in the step, the same ops at
their fastest, beyond its peers' median, at its own pace, its ops' time over its floor), ``slower`` (the rest of its
excess in ops: the same ops, each taking longer, its host), ``stall`` (time in no op beyond its peers', less what its
host's pace stretched it by: its ops' time over their floor against its peers'; that part is ``slower``), ``input``
(in the data loader's ops: host_cause.sql).

A strategy's communication hidden (``hidden_cost``, what the overlap check grades): each of its operations' transfer,
from its release to its completion, replayed as nothing. A heavy pipeline stage (``stage_cost``): its ranks' ops
at the stages' mean compute. A pipeline's bubble beyond its schedule (``pipeline_cost``): both, pp transfers free and
the heavy stage at the mean. The GPUs' waits on their hosts (``host_wait_cost``): each launch when its GPU went idle.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

import numpy as np

from traceparse.vocabulary.step_graph import WORK


def work_by_name(graph, rank: int) -> dict:
    """{(lane kind, name (None: no op)): (total ns, count)} of rank ``rank``'s work stretches in the step's window
    (read once per graph)."""
    memo = graph.__dict__.setdefault("_work_by_name", {})
    if rank not in memo:
        memo[rank] = _work_by_name(graph, rank)
    return memo[rank]


def _work_by_name(graph, rank: int) -> dict:
    ws, we = graph.windows[rank]
    out = defaultdict(lambda: [0, 0])
    for lane in graph.lanes.values():
        if lane.rank != rank:
            continue
        prev_name = object()
        for k in range(1, len(lane.times)):
            if lane.kinds[k] != WORK or lane.times[k] <= ws or lane.times[k - 1] >= we:
                continue
            name = lane.names[k]
            d = min(lane.times[k], we) - max(lane.times[k - 1], ws)
            key = (lane.key[0], name)
            out[key][0] += d
            if name is not None and name != prev_name:
                out[key][1] += 1
            prev_name = name
    return {k: tuple(v) for k, v in out.items()}


def _beyond_peers(graph, rank: int, peers: list[int]) -> dict:
    """{(lane kind, name): (ns, count, peers' median ns, peers' median count)} of rank ``rank``'s work above its
    ``peers``' median: what a rank's excess takes away."""
    own, theirs = work_by_name(graph, rank), [work_by_name(graph, p) for p in peers]
    out = {}
    for key, (ns, n) in own.items():
        med = statistics.median(t.get(key, (0, 0))[0] for t in theirs)
        if ns > med:
            out[key] = (ns, n, med, statistics.median(t.get(key, (0, 0))[1] for t in theirs))
    return out


def _peers(graph, rank: int, peers: list[int]) -> list[int]:
    return [p for p in peers if p != rank and p in graph.windows] if rank in graph.windows else []


def rank_excess(graph, rank: int, peers: list[int], floor: dict | None = None) -> dict | None:
    """The step saved by running rank ``rank``'s work as its ``peers`` do: ``{saved_ns, share, kind, excess_ns}``,
    None without peers. ``floor``: {(rank, step): compute floor of the window} (compute.floor_per_window), which
    tells its own work from the same ops taking longer on CPU lanes; without it (GPU lanes), an op its peers run
    fewer times (or never) is its work, one they run as often is slower."""
    peers = _peers(graph, rank, peers)
    if not peers:
        return None
    more = _floor_excess(floor or {}, graph.step, rank, peers)
    pace = None if more is None else _pace(graph, rank, peers, floor)
    factor, excess, in_ops = {}, defaultdict(int), 0
    for key, (ns, n, med, med_n) in _beyond_peers(graph, rank, peers).items():
        factor[key] = med / ns
        if key[1] is None:  # time in no op, less what its host's contention stretched it by (CPU lanes: the floor's)
            host = min(ns - med, round(med * (pace - 1))) if key[0] == "cpu" and pace else 0
            excess["stall"] += ns - med - host
            excess["slower"] += host
        elif key[1] in graph.ctx["input"]:
            excess["input"] += ns - med
        elif key[0] == "cpu" and more is not None:
            in_ops += ns - med
        else:
            excess["work" if med == 0 or n > med_n else "slower"] += ns - med
    if in_ops:  # its extra floor at its own pace is its work; the rest, its ops running slower than its peers'
        work = min(in_ops, round(more * _stretch(graph, rank, floor[(rank, graph.step)])))
        excess["work"] += work
        excess["slower"] += in_ops - work
    if not factor:
        return {"saved_ns": 0, "share": 0.0, "kind": None, "excess_ns": 0}

    def scale(lane):
        return [factor.get((lane.key[0], name), 1.0) for name in lane.names] if lane.rank == rank else None

    return {**_saved(graph, graph.replay(scale, lanes=graph.lanes_of({rank}))), "kind": max(excess, key=excess.get),
            "excess_ns": sum(excess.values())}


def _floor_excess(floor: dict, step, rank: int, peers: list[int]) -> int | None:
    """How much more compute floor rank ``rank`` has in the step than its peers' median (0 when less), None when
    unknown for any of them."""
    got = [floor.get((r, step)) for r in [rank, *peers]]
    if not peers or any(v is None for v in got):
        return None
    return max(0, round(got[0] - statistics.median(got[1:])))


def _pace(graph, rank: int, peers: list[int], floor: dict) -> float:
    """How much longer rank ``rank``'s ops ran against their floor than its peers' did (their median; at least 1):
    its host's contention, which stretches its time between ops as much (a preempted thread loses time wherever it
    is), where a sleep, a collection or a synchronization adds time in no op alone."""
    own = _stretch(graph, rank, floor[(rank, graph.step)])
    return max(1.0, own / statistics.median(_stretch(graph, p, floor[(p, graph.step)]) for p in peers))


def _stretch(graph, rank: int, floor_ns: int) -> float:
    """How much longer rank ``rank``'s CPU ops ran in the step than its compute floor (the same ops at their
    fastest), at least 1: the pace its own extra work ran at."""
    ops = sum(ns for (lane, name), (ns, _) in work_by_name(graph, rank).items()
              if lane == "cpu" and name is not None and name not in graph.ctx["input"])
    return max(1.0, ops / floor_ns) if floor_ns else 1.0


def _saved(graph, replayed: dict) -> dict:
    """``{saved_ns, share}``: the step's measured end (the measured replay's, the replay invariant) less the end of
    the ``replayed`` counterfactual, and that as a share of the step."""
    measured = graph.end_ns()
    saved, length = max(0, measured - replayed["end_ns"]), measured - graph.start_ns()
    return {"saved_ns": saved, "share": round(saved / length, 4) if length > 0 else None}


CANDIDATES = 3  # the ranks of a step with the most excess that are replayed, with the one with the most floor excess
KINDS = {
    "work": "its own work (more ops than its peers, or heavier ones: more compute floor)",
    "slower": "the same ops as its peers, each taking longer (its host: contention or a slower device; or heavier "
              "inputs)",
    "stall": "time in no op (a sleep, garbage collection, a synchronization, Python between ops)",
    "input": "its input: longer in the data loader than its peers",
}
STRUCTURAL = ("work",)  # an excess no balanced job shows by chance: a cause seen in one step is named


def rank_costs(graphs: list, group_of: dict, material: float, floor: dict | None = None) -> dict:
    """What each step's most costly ranks cost it, and the rank that costs the steps most when it is a cause:
    ``{"per_step": [{step, ranks: {rank: {saved_ns, share, kind}}}], "cause": {...} | None}``. A rank leads a step
    when the replay finds its excess costs the step most, at least ``material`` of it. It is the cause when it leads
    a majority of the profiled steps (the one, with one), or any step where its excess is its own work
    (``STRUCTURAL``: a balanced job's ranks run the same ops, so no chance gives one more compute floor than its
    peers); of several, the one that saves the most over the steps. ``group_of``: rank -> its peers' key (pipeline
    stage); ``floor``: compute.floor_per_window."""
    per_step, lead = [], {}
    for g in graphs:
        members = {}
        for r in g.windows:
            members.setdefault(group_of.get(r), []).append(r)
        ranked = sorted(g.windows, key=lambda r: (-_excess(g, r, members[group_of.get(r)]), r))[:CANDIDATES]
        heavier = {r: _floor_excess(floor or {}, g.step, r, _peers(g, r, members[group_of.get(r)])) for r in g.windows}
        heavier = {r: v for r, v in heavier.items() if v}  # a rank whose own work exceeds its peers' is replayed too
        ranked += [r for r in sorted(heavier, key=lambda r: (-heavier[r], r))[:1] if r not in ranked]
        got = {r: rank_excess(g, r, members[group_of.get(r)], floor) for r in ranked}
        got = {r: v for r, v in got.items() if v is not None and v["saved_ns"] > 0}
        per_step.append({"step": g.step, "ranks": {str(r): v for r, v in sorted(got.items())}})
        if got:
            top = max(got, key=lambda r: (got[r]["saved_ns"], -r))
            if (got[top]["share"] or 0) >= material:
                lead[g.step] = (top, got[top]["kind"])
    counts, structural = defaultdict(int), set()
    for r, kind in lead.values():
        counts[r] += 1
        if kind in STRUCTURAL:
            structural.add(r)
    saved_by = {r: sum(s["ranks"][str(r)]["saved_ns"] for s in per_step if str(r) in s["ranks"]) for r in counts}
    named = sorted((r for r in counts if 2 * counts[r] > len(graphs) or r in structural),
                   key=lambda r: (-saved_by[r], r))
    if not named:
        return {"per_step": per_step, "cause": None}
    rank = named[0]
    mine = [s["ranks"].get(str(rank)) for s in per_step]
    saved = [v["saved_ns"] if v else 0 for v in mine]
    by_kind = defaultdict(int)  # the kind of the steps that cost the most
    for v in mine:
        if v and v["kind"]:
            by_kind[v["kind"]] += v["saved_ns"]
    lengths = [g.end_ns() - g.start_ns() for g in graphs]
    return {"per_step": per_step, "cause": {
        "rank": rank, "kind": max(sorted(by_kind), key=by_kind.get) if by_kind else None,
        "saved_per_step_ns": round(statistics.fmean(saved)),
        "share": round(sum(saved) / sum(lengths), 4) if sum(lengths) > 0 else None,
        "steps_seen": counts[rank], "steps": len(graphs)}}


def _excess(graph, rank: int, peers: list[int]) -> int:
    """Rank ``rank``'s time in the step beyond its peers', 0 without peers: its work less its peers' median, summed
    over its work stretches' names with sign (what a rank does less of offsets what it does more of, so that the
    step-to-step jitter of every op does not add up), which ranks are worth a replay."""
    peers = _peers(graph, rank, peers)
    if not peers:
        return 0
    own, theirs = work_by_name(graph, rank), [work_by_name(graph, p) for p in peers]
    keys = set(own).union(*theirs)
    return sum(own.get(k, (0, 0))[0] - statistics.median(t.get(k, (0, 0))[0] for t in theirs) for k in keys)


def hidden_cost(graph, strategy: str) -> dict:
    """The step saved were strategy ``strategy``'s communication fully hidden: each of its operations' transfer
    (from its release, the last member's arrival, to its completion) replayed as nothing; waits for a late member
    stay (a straggler's cost, not overlap's). ``{saved_ns, share}``."""
    return _saved(graph, graph.replay(transfer=lambda d: 0.0 if d["strategy"] == strategy else 1.0))


def strategy_costs(graphs: list, strategies) -> dict:
    """Per strategy, what hiding its communication saves each profiled step by replay (``hidden_cost``):
    ``{strategy: over_steps(...)}``."""
    return {s: over_steps(graphs, lambda g, s=s: hidden_cost(g, s)) for s in strategies}


def stage_cost(graphs: list, ranks, factor: float) -> dict:
    """What a heavy pipeline stage costs each profiled step: the ops of its ``ranks`` replayed at ``factor`` of
    their measured time (the stages' mean compute floor / the stage's), time in no op as it was; ``over_steps``."""
    return over_steps(graphs, lambda g: _saved(g, g.replay(_in_ops(ranks, factor), lanes=g.lanes_of(ranks))))


def pipeline_cost(graphs: list, heavy=(), factor: float = 1.0) -> dict:
    """What a pipeline's bubble beyond its schedule costs each profiled step: its point-to-point (pp) transfers
    replayed as nothing and the ops of its heavy stage's ranks (``heavy``) at ``factor`` of their time (the stages'
    mean compute floor / the stage's), so that only the schedule's own ramp is left; ``over_steps``."""
    def free_pp(d):
        return 0.0 if d["strategy"] == "pp" else 1.0

    return over_steps(graphs, lambda g: _saved(g, g.replay(_in_ops(heavy, factor), free_pp, g.lanes_of(heavy))))


def host_wait_cost(graphs: list, waits: dict) -> dict:
    """What the GPUs' waits on their hosts cost each profiled step: the launching threads' time while their GPU sat
    idle waiting for the next launch (``waits``: {(rank, thread): sorted disjoint [(start, launch)]}, gpu_time.sql
    gpu_gaps) replayed as nothing, so each launch comes when the GPU went idle; ``over_steps``."""
    spans = {k: np.array(v, np.int64).reshape(-1, 2).T for k, v in waits.items() if v}  # (starts, ends)

    def scale(lane):
        got = spans.get((lane.rank, lane.key[1])) if lane.key[0] == "cpu" else None
        if got is None:
            return None
        t = np.asarray(lane.times, np.int64)
        length = np.diff(t, prepend=t[:1])
        covered = np.diff(_covered_until(*got, t), prepend=0)
        return np.where(length > 0, 1.0 - covered / np.maximum(length, 1), 1.0).tolist()

    return over_steps(graphs, lambda g: _saved(g, g.replay(scale, lanes={(r, "cpu", t) for r, t in waits})))


def _in_ops(ranks, factor: float):
    """A replay's scale: the work of ``ranks`` in ops (not time in no op) at ``factor`` of its measured time."""
    def scale(lane):
        return [1.0 if name is None else factor for name in lane.names] if lane.rank in ranks else None

    return scale


def _covered_until(starts, ends, t):
    """How much of the time up to each moment of ``t`` (a sorted int64 array) the sorted disjoint intervals
    [starts, ends) cover, exactly (int64)."""
    before = np.concatenate(([0], np.cumsum(ends - starts)))  # covered up to each interval's start
    i = np.searchsorted(starts, t, side="right")  # the intervals started by then
    last = np.maximum(i - 1, 0)
    return np.where(i > 0, before[last] + np.minimum(t - starts[last], ends[last] - starts[last]), 0)


def over_steps(graphs: list, saving) -> dict:
    """``{per_step: [{step, saved_ns, share}], saved_per_step_ns, share}`` of ``saving(graph) -> {saved_ns, share}``
    over the profiled steps (share: the savings over the steps' total length)."""
    lengths = sum(g.end_ns() - g.start_ns() for g in graphs)
    per_step = [{"step": g.step, **saving(g)} for g in graphs]
    saved = sum(p["saved_ns"] for p in per_step)
    return {"per_step": per_step, "saved_per_step_ns": round(saved / len(graphs)) if graphs else None,
            "share": round(saved / lengths, 4) if lengths > 0 else None}
