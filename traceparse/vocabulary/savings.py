"""What a cause cost each step, as a counterfactual replayed on the step graph (``step_graph``): the step's measured
length less its length replayed with the cause taken away. Overlapping causes are not counted twice, and a number
that is off but sets nobody's pace costs nothing.

A rank's excess (the ByteDance what-if method: each op at the median of the same work on its peers): every work
stretch of the rank, per op name, scaled down to the median over its peers (the other ranks of its pipeline stage,
else every other rank) of their total time in that op in the step; time in ops its peers never run, removed; time
in no op (a sleep, a stall, Python between ops), down to the peers' median. Its kind is where the excess lies:
``work`` (more ops than its peers, or ops they do not run), ``slower`` (the same ops, each taking longer: its host,
or heavier inputs), ``stall`` (time in no op).

A strategy's communication hidden (``hidden_cost``, what the overlap check grades): each of its operations' transfer,
from its release to its completion, replayed as nothing. A heavy pipeline stage (``stage_cost``): its ranks' ops
at the stages' mean compute.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

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


def rank_excess(graph, rank: int, peers: list[int]) -> dict | None:
    """The step saved by running rank ``rank``'s work as its ``peers`` do: ``{saved_ns, share, kind, excess_ns}``,
    None without peers."""
    peers = _peers(graph, rank, peers)
    if not peers:
        return None
    factor, excess = {}, defaultdict(int)
    for key, (ns, n, med, med_n) in _beyond_peers(graph, rank, peers).items():
        factor[key] = med / ns
        kind = "stall" if key[1] is None else "work" if med == 0 or n > med_n else "slower"
        excess[kind] += ns - med
    if not factor:
        return {"saved_ns": 0, "share": 0.0, "kind": None, "excess_ns": 0}

    def scale(r, lane_key, name):
        return factor.get((lane_key[0], name), 1.0) if r == rank else 1.0

    return {**_saved(graph, graph.replay(scale)), "kind": max(excess, key=excess.get),
            "excess_ns": sum(excess.values())}


def _saved(graph, replayed: dict) -> dict:
    """``{saved_ns, share}``: the step's measured end (the measured replay's, the replay invariant) less the end of
    the ``replayed`` counterfactual, and that as a share of the step."""
    measured = graph.end_ns()
    saved, length = max(0, measured - replayed["end_ns"]), measured - graph.start_ns()
    return {"saved_ns": saved, "share": round(saved / length, 4) if length > 0 else None}


CANDIDATES = 3  # the ranks of a step with the most excess that are replayed (the others' excess is smaller)
KINDS = {
    "work": "its own work (ops its peers do not run, or more of them)",
    "slower": "the same ops as its peers, each taking longer (its host: contention or a slower device; or heavier "
              "inputs)",
    "stall": "time in no op (a sleep, garbage collection, a synchronization, Python between ops)",
}


def rank_costs(graphs: list, group_of: dict, material: float) -> dict:
    """What each step's most costly ranks cost it, and the rank that costs the steps most when it is a cause:
    ``{"per_step": [{step, ranks: {rank: {saved_ns, share, kind}}}], "cause": {...} | None}``. A rank is the cause
    when, in a majority of the profiled steps (in the one, with one), it is the rank whose excess the replay finds
    costs the step most, at least ``material`` of it; ``group_of``: rank -> its peers' key (pipeline stage)."""
    per_step, lead = [], {}
    for g in graphs:
        members = {}
        for r in g.windows:
            members.setdefault(group_of.get(r), []).append(r)
        ranked = sorted(g.windows, key=lambda r: (-_excess(g, r, members[group_of.get(r)]), r))[:CANDIDATES]
        got = {r: rank_excess(g, r, members[group_of.get(r)]) for r in ranked}
        got = {r: v for r, v in got.items() if v is not None and v["saved_ns"] > 0}
        per_step.append({"step": g.step, "ranks": {str(r): v for r, v in sorted(got.items())}})
        if got:
            top = max(got, key=lambda r: (got[r]["saved_ns"], -r))
            if (got[top]["share"] or 0) >= material:
                lead[g.step] = top
    counts = {}
    for r in lead.values():
        counts[r] = counts.get(r, 0) + 1
    named = [r for r, c in counts.items() if 2 * c > len(graphs)]
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
    """Rank ``rank``'s work beyond its peers' median (what ``rank_excess`` would take away), 0 without peers: which
    ranks are worth a replay."""
    peers = _peers(graph, rank, peers)
    return sum(ns - med for ns, _, med, _ in _beyond_peers(graph, rank, peers).values()) if peers else 0


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
    def scale(r, _lane_key, name):
        return factor if r in ranks and name is not None else 1.0

    return over_steps(graphs, lambda g: _saved(g, g.replay(scale)))


def over_steps(graphs: list, saving) -> dict:
    """``{per_step: [{step, saved_ns, share}], saved_per_step_ns, share}`` of ``saving(graph) -> {saved_ns, share}``
    over the profiled steps (share: the savings over the steps' total length)."""
    lengths = sum(g.end_ns() - g.start_ns() for g in graphs)
    per_step = [{"step": g.step, **saving(g)} for g in graphs]
    saved = sum(p["saved_ns"] for p in per_step)
    return {"per_step": per_step, "saved_per_step_ns": round(saved / len(graphs)) if graphs else None,
            "share": round(saved / lengths, 4) if lengths > 0 else None}
