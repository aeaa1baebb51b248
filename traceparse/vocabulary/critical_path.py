"""What set the pace of each profiled step: its critical path across ranks (the analyze document's
``critical_path``), the binding path of the step graph (vocabulary/step_graph.py) from the moment the step ended.

The step ends when the last rank's step window ends (its ProfilerStep#N); the path runs back to that window's start,
so its length is that rank's measured step. Replayed with the measured durations the graph gives back every moment
the trace recorded (the replay invariant), so at each point the path stands on, one of its dependencies is the one
that set its time, and the path goes on from it:

- a lane's own work (a CPU thread's outermost op, or its time in no op; a kernel) is on the path, back to the
  point before it on its lane;
- a wait (a CPU thread blocked in a communication call or wait, a synchronization, a gloo wait inside an op's own
  time, a gap while another thread worked): the path waits from what it waited for (a communication operation's
  completion, the GPU activity a synchronization waited for, another thread's op) to the wait's end, and goes on from
  there; when that came before the wait began, the wait is the lane's own time (a call's own time);
- a communication operation's transfer is on the path from the moment it was released (the last member of a
  collective arrived; a receive's matched send was issued); before that, the operation waited for a late peer, and
  the path goes to that peer, at that moment: a blocked thread's time belongs to what released it, never to idle;
- a GPU activity's start: after an activity of another stream that ended last before it (an event), else after
  the one before it on its stream when that ended after its launch call returned, else after its launch (from the
  launching CPU thread).

Each piece of the path has a rank, a lane and a cause: compute (kernels that compute; the CPU ops of a CPU-only
rank), communication (a transfer, per strategy, or a call's own time), host (a GPU rank's CPU work: launching,
Python, the optimizer; a synchronization), launch (from a launch call to its start on the GPU), idle (a CPU thread
running no recorded op and waiting for nothing), device (a GPU activity queued on a dependency). ``traceparse explain
critical_path`` defines it.
"""

import bisect
from collections import defaultdict

from traceparse.vocabulary.step_graph import INSIDE, KCOMM, KSTART, WAIT, StepGraph, context

MAX_HOPS = 200_000  # a guard: a step's path takes a few hops per point
STILL = 1_000  # a guard: hops at one moment (zero-length stretches) before the rest is left unexplained
TOP = 5  # the longest pieces a step names


class BindingPath:
    """The binding path of step graph ``g`` back to ``start``: ``run`` gives its pieces."""

    def __init__(self, g: StepGraph, start: int):
        self.g, self.start, self.pieces = g, start, []

    def run(self, rank: int, end: int) -> list[dict]:
        """The pieces from ``end`` on ``rank``'s main thread back to the start."""
        ln, t, still = self._main(rank), end, 0
        for _ in range(MAX_HOPS):
            if ln is None or t <= self.start or still > STILL:
                break
            nxt, back = self._back(ln, t)
            still = still + 1 if back >= t else 0
            ln, t = nxt or ln, min(back, t)  # the path only goes back in time
        if t > self.start and ln is not None:  # the guard: what is left is unexplained
            self._piece(ln, "other", self.start, t)
        return self.pieces

    # --- one stretch back -------------------------------------------------------------------------------------

    def _back(self, ln, t: int):
        """The stretch of lane ``ln`` that ends at (or holds) ``t``, on the path: its pieces, and (the lane, the
        moment) where the path goes on."""
        times = ln.times
        k = bisect.bisect_left(times, t)
        if k == len(times) or (k == 0 and ln.kinds[0] != KSTART):  # beyond the lane's points
            if ln.key[0] == "gpu":
                if k == 0:
                    return self._main(ln.rank), t
                self._piece(ln, "device", times[-1], t)
                return ln, times[-1]
            lo = times[-1] if k else self.start
            self._cpu_ops(ln, lo, t)
            return ln, lo
        kind, prev = ln.kinds[k], times[k - 1] if k else None
        if kind == KSTART:
            if t < times[k]:  # between two activities of the stream
                self._piece(ln, "device", prev, t)
                return ln, prev
            return self._started(ln, k, t)
        if kind in (WAIT, INSIDE):  # a wait, from the point before its first inner point to its end (``j``)
            j, i = k, k
            while ln.kinds[j] == INSIDE:
                j += 1
            while i > 1 and ln.kinds[i - 1] == INSIDE:
                i -= 1
            return self._waited(ln, times[i - 1], t, ln.deps[j], ln.info[j])
        if ln.key[0] == "cpu":
            c = ln.info[k]
            if c is not None:  # a communication call's own time
                self._piece(ln, "communication", prev, t, c["name"], c["strategy"])
            else:
                name = ln.names[k]
                self._piece(ln, ("host" if self._gpu(ln.rank) else "compute") if name else "idle", prev, t, name)
            return ln, prev
        a = ln.info[k]
        d = self.g.ctx["by_op"].get((ln.rank, a["op_id"])) if kind == KCOMM else None
        if d is None:
            self._piece(ln, "compute" if a["kind"] == "compute" else "device", prev, t, a["name"])
            return ln, prev
        if d["released_by"] != ln.rank and prev < d["released_ns"] < t:  # its transfer, then its releaser
            self._piece(ln, "communication", d["released_ns"], t, a["name"], d["strategy"])
            return self._arrival(d), d["released_ns"]
        self._piece(ln, "communication", prev, t, a["name"], d["strategy"])
        return ln, prev

    def _started(self, ln, k: int, t: int):
        """Why the GPU activity starting at point ``k`` started at ``t``: after another stream's activity (an
        event), after the one before it on its stream when that ended after its launch call returned, else after
        its launch."""
        deps, a = ln.deps[k], ln.info[k]
        event = next((d for d in deps if d[0] == "gpu"), None)
        if event is not None:
            self._piece(ln, "device", event[3], t)
            return self._lane(ln.rank, "gpu", event[2]), event[3]
        prev = ln.times[k - 1] if k else None
        if prev is not None and (a["launch_end_ns"] is None or prev >= a["launch_end_ns"]):
            self._piece(ln, "device", prev, t)
            return ln, prev
        launch = next((d for d in deps if d[0] == "cpu"), None)
        if launch is None:
            return self._main(ln.rank), t
        self._piece(ln, "launch", launch[3], t, a["name"])
        return self._lane(ln.rank, "cpu", launch[2]) or self._main(ln.rank), launch[3]

    def _waited(self, ln, s: int, t: int, dep: tuple, b: dict | None):
        """A wait of lane ``ln`` over (s, t] for ``dep`` (``b``: its blocking interval; None: a wait inside an op):
        from what it waited for, when that came inside it; else the wait is the lane's own time."""
        name, strategy = (b["name"], b["strategy"]) if b else (None, None)
        if dep[0] in ("gpu", "cpu"):  # a GPU activity (a synchronization, or a communication kernel), another thread
            d = self.g.ctx["by_op"][(ln.rank, dep[4])] if len(dep) > 4 else None
            cause = "communication" if d else "host" if dep[0] == "gpu" else "idle"
            if d:
                name, strategy = name or d["op"], strategy or d["strategy"]
            if s < dep[3] <= t:
                self._piece(ln, cause, dep[3], t, name, strategy)
                return self._lane(ln.rank, dep[0], dep[2]), dep[3]
            self._piece(ln, cause, s, t, name, strategy)
            return ln, s
        d = self.g.ctx["by_op"][(dep[1], dep[2])]
        released = d["released_ns"]
        if dep[0] == "release":  # its own call, returned once its last peer arrived
            if s < released < t:
                self._piece(ln, "communication", released, t, name, strategy)
                return self._arrival(d), released
            self._piece(ln, "communication", s, t, name, strategy)
            return ln, s
        done = d["done_ns"]  # an operation's completion: its transfer from its release
        if not s < done <= t:
            self._piece(ln, "communication", s, t, name, strategy)
            return ln, s
        self._piece(ln, "communication", done, t, name or d["op"], strategy or d["strategy"])
        released = min(released, done)
        self._piece(ln, "communication", max(released, s), done, d["op"], d["strategy"])
        if released > s and d["released_by"] != ln.rank:
            return self._arrival(d), released
        if released > s:  # released by this rank, late: its own call or execution was queued
            self._piece(ln, "communication", s, released, d["op"], d["strategy"])
        return ln, s

    # --- helpers ----------------------------------------------------------------------------------------------

    def _piece(self, ln, cause: str, a: int, b: int, name=None, strategy=None):
        a = max(a, self.start)
        if b > a:
            self.pieces.append({"rank": ln.rank, "lane": f"{ln.key[0]} {ln.key[1]}", "cause": cause,
                                "strategy": strategy, "name": name, "start_ns": a, "end_ns": b})

    def _gpu(self, r: int) -> bool:
        return bool(self.g.ctx["acts"].get(r))

    def _lane(self, r: int, kind: str, key):
        return self.g.lanes.get((r, kind, key))

    def _main(self, r: int):
        return self._lane(r, "cpu", self.g.ctx["main"].get(r))

    def _arrival(self, d: dict):
        """The lane of the member whose arrival released operation ``d``: its kernel's stream, else the thread that
        issued it, else its rank's main thread."""
        m = self.g.ctx["by_op"].get((d["released_by"], d["released_op"]))
        if m is None:
            return self._main(d["released_by"])
        if m["lane"] == "gpu" and m["stream"] is not None and self._lane(m["rank"], "gpu", m["stream"]) is not None:
            return self._lane(m["rank"], "gpu", m["stream"])
        return (self._lane(m["rank"], "cpu", m["tid"]) if m["tid"] is not None else None) or self._main(m["rank"])

    def _cpu_ops(self, ln, a: int, b: int):
        """[a, b] of a CPU lane beyond its points: split by its thread's outermost ops; no op: idle."""
        ops = [o for o in self.g.ctx["ops"].get(ln.rank, []) if o["tid"] == ln.key[1]]
        starts = [o["s"] for o in ops]
        t, i = b, bisect.bisect_left(starts, b) - 1
        own = "host" if self._gpu(ln.rank) else "compute"
        while t > a:
            o = ops[i] if i >= 0 else None
            if o is None or o["e"] <= a:
                self._piece(ln, "idle", a, t)
                return
            if o["e"] < t:
                self._piece(ln, "idle", o["e"], t)
                t = o["e"]
            self._piece(ln, own, max(o["s"], a), t, o["name"])
            t = max(o["s"], a)
            i -= 1


def critical_path_section(graphs: list[StepGraph]) -> dict:
    """The analyze document's ``critical_path``: ``{status, reason?, steps: [...], findings}``, one entry per step
    graph (``step_graph.step_graphs``: each step every rank has a window for; a run without ProfilerStep#N: its
    whole-trace window, step null)."""
    if not graphs:
        return {"status": "not_applicable", "reason": "no step every rank has a window for", "steps": [],
                "findings": []}
    out = []
    for g in graphs:
        s = {"step": g.step, "rank": g.end_rank(), "start_ns": g.start_ns(), "end_ns": g.end_ns()}
        out.append(_summary(s, BindingPath(g, s["start_ns"]).run(s["rank"], s["end_ns"])))
    return {"status": "ok", "steps": out, "findings": _findings(out)}


def window_path(con, rank: int, start_ns: int, end_ns: int) -> dict:
    """The critical path of one window of one rank's time, back from ``end_ns`` on ``rank`` to ``start_ns`` (a user
    annotation's window, to set beside another tool's path over it), over the graph of that window on every rank,
    summarized as a step's (step null)."""
    ctx = context(con)
    g = StepGraph(con, None, {r: (start_ns, end_ns) for r in ctx["ops"]}, ctx)
    return _summary({"step": None, "rank": rank, "start_ns": start_ns, "end_ns": end_ns},
                    BindingPath(g, start_ns).run(rank, end_ns))


def totals(section: dict) -> dict:
    """The path over all its steps: ``{length_ns, by_rank: {rank (int): ns}, by_cause, by_strategy, spells}``, each
    ordered largest first (ties: the lower rank or name); ``spells``: [(rank, ns)], the path's stretches on one rank
    in order, step after step; what the checks read of it."""
    sums = {"by_rank": defaultdict(int), "by_cause": defaultdict(int), "by_strategy": defaultdict(int)}
    spells = []
    for s in section.get("steps", []):
        for key, acc in sums.items():
            for k, ns in s[key].items():
                acc[int(k) if key == "by_rank" else k] += ns
        for i, g in enumerate(s["segments"]):
            if i and spells[-1][0] == g["rank"]:
                spells[-1][1] += g["end_ns"] - g["start_ns"]
            else:
                spells.append([g["rank"], g["end_ns"] - g["start_ns"]])
    return {"length_ns": sum(s["length_ns"] for s in section.get("steps", [])),
            **{key: _ordered(acc) for key, acc in sums.items()}, "spells": [tuple(x) for x in spells]}


def _findings(steps: list[dict]) -> list[str]:
    """The rank the path runs through most, over the steps, and the longest piece of the path."""
    t = totals({"steps": steps})
    total = t["length_ns"]
    ranks, causes = t["by_rank"], t["by_cause"]
    if total <= 0 or not ranks or not causes:  # no step with a piece of path (a window of no length)
        return []
    rank, ns = next(iter(ranks.items()))
    cause = next(iter(causes))
    top = max((p for s in steps for p in s["top"]), key=lambda p: p["share"] or 0)
    what = f" `{top['name']}`" if top["name"] else ""
    return [f"the critical path runs {ns / total:.0%} of the steps' time through rank {rank} ({len(ranks)} "
            f"rank{'s' if len(ranks) > 1 else ''} on it); by cause, {cause} {causes[cause] / total:.0%}; its longest "
            f"piece: rank {top['rank']}'s {top['cause']}{what}, {top['share']:.0%} of "
            + ("the trace" if top["step"] is None else f"step {top['step']}")]


def _summary(s: dict, pieces: list[dict]) -> dict:
    length = s["end_ns"] - s["start_ns"]
    by_cause, by_rank, by_strategy = defaultdict(int), defaultdict(int), defaultdict(int)
    named, runs = [], []
    for p in sorted(pieces, key=lambda p: p["start_ns"]):
        d = p["end_ns"] - p["start_ns"]
        by_cause[p["cause"]] += d
        by_rank[p["rank"]] += d
        if p["cause"] == "communication":
            by_strategy[p["strategy"] or "untagged"] += d
        _extend(named, p, ("rank", "lane", "cause", "strategy", "name"))
        _extend(runs, p, ("rank", "cause"))
    top = sorted(named, key=lambda p: (p["start_ns"] - p["end_ns"], p["start_ns"]))[:TOP]
    return {
        "step": s["step"], "end_rank": s["rank"], "start_ns": s["start_ns"], "end_ns": s["end_ns"],
        "length_ns": length, "covered_ns": sum(by_cause.values()),
        "by_cause": _ordered(by_cause), "by_strategy": _ordered(by_strategy),
        "by_rank": {str(k): v for k, v in _ordered(by_rank).items()},
        "top": [_shown(p, s["step"], length) for p in top],
        "segments": [{"rank": p["rank"], "cause": p["cause"], "start_ns": p["start_ns"], "end_ns": p["end_ns"],
                      "name": p["longest"]} for p in runs],
    }


def _extend(merged: list, p: dict, keys: tuple):
    """Append ``p`` to ``merged``, or lengthen the last piece when it has the same ``keys`` and touches it;
    ``longest``: the name of the longest piece merged in."""
    last = merged[-1] if merged else None
    d = p["end_ns"] - p["start_ns"]
    if last and all(last[k] == p[k] for k in keys) and last["end_ns"] == p["start_ns"]:
        last["end_ns"] = p["end_ns"]
        if d > last["longest_ns"]:
            last["longest"], last["longest_ns"] = p["name"], d
    else:
        merged.append({**p, "longest": p["name"], "longest_ns": d})


def _shown(p: dict, step, length: int) -> dict:
    d = p["end_ns"] - p["start_ns"]
    return {"step": step, "rank": p["rank"], "lane": p["lane"], "cause": p["cause"], "strategy": p["strategy"],
            "name": p["name"], "start_ns": p["start_ns"], "dur_ns": d, "share": round(d / length, 4) if length else None}


def _ordered(d: dict) -> dict:
    return {k: d[k] for k in sorted(d, key=lambda k: (-d[k], k if isinstance(k, int) else str(k)))}
