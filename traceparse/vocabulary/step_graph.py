"""The step graph: each profiled step across ranks as a graph that can be replayed with its durations changed.

Each rank's lanes (its CPU threads, its GPU streams) are sequences of points, the moments the trace recorded:
the boundaries of its outermost ops and of its blocking intervals, the moments it issued communication and launched
kernels, its kernels' starts and ends, its step window. Between two points of a lane lies a stretch of one kind:

- work: the lane's own time (an op, or time in no op), replayed as its duration (scaled in a counterfactual);
- a wait: a CPU thread blocked until something elsewhere completes (a communication operation released by its last
  member, the GPU activity a synchronization waited for, the op of another thread), replayed as
  ``max(start, what it waited for) + tail``, the tail being what the measured wait lasted after its dependency;
- a kernel's start: after the kernel before it on its stream, its launch, and (when it started later than both) the
  activity of another stream that ended last before it (an event), with the lag measured after the latest;
- a communication kernel: ``max(start, released) + transfer``, released when the last member of the collective (or
  the matched peer of a point-to-point operation) arrived.

A communication operation's completion is ``max(arrival, release) + transfer``, its release the latest arrival of its
members, each arrival a point of the member's lane (the call that issued it, or its kernel's start). Replayed with the
measured durations, every point comes out at its measured time: the graph holds every dependency the step had (the
replay invariant, held by a test on every bundled run and public trace). A counterfactual changes durations and
replays: what the step would have taken, so what a cause cost is the step's measured length less its replayed one,
and causes that overlap are not counted twice. The critical path (critical_path.py) is the graph's binding path.
``traceparse explain step_graph`` defines it.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from traceparse.store.query import rows
from traceparse.vocabulary.graph_rows import graph_tables, latest, own_gap, rank_rows
from traceparse.vocabulary.modules import use

WORK, WAIT, INSIDE, KSTART, KCOMM = "work", "wait", "inside a wait", "kernel start", "comm kernel"


@dataclass
class Lane:
    rank: int
    key: tuple  # ("cpu", tid) or ("gpu", stream)
    times: list = field(default_factory=list)  # measured points, sorted
    kinds: list = field(default_factory=list)  # kinds[k]: the stretch (times[k-1], times[k]] (kinds[0] unused)
    deps: list = field(default_factory=list)  # deps[k]: what a wait / comm kernel depends on (a kernel start: a list)
    names: list = field(default_factory=list)  # the op or kernel a work stretch is in (None: no op)
    info: list = field(default_factory=list)  # what the path names: a wait's blocking interval, the communication
    # call a stretch of work is in, a GPU activity
    fixed_before: int = 0  # points at or before this time are not replayed (before the window)
    out: list = field(default_factory=list)  # replayed times
    factors: list | None = None  # factors[k]: the replay under way's factor for the work stretch ending at point k
    # (None: the lane's work as measured)


class StepGraph:
    """The graph of one step (``step`` None: a run without ProfilerStep#N) over every rank with a window for it."""

    def __init__(self, con, step, windows: dict[int, tuple[int, int]], ctx: dict):
        self.step, self.windows, self.ctx = step, windows, ctx
        self.lanes: dict[tuple, Lane] = {}
        self.order = None  # every point (its lane's number, its index) by measured time, as two arrays (_by_time)
        lo = self.start_ns()  # lanes reach back to the step's start (points before a rank's window fixed)
        for r, (ws, we) in windows.items():
            self._rank(con, r, ws, we, min(ws, lo))
        for lane in self.lanes.values():
            self._finish(lane)

    def end_ns(self) -> int:
        """The step's measured end: the end of the last rank's window."""
        return max(we for _, we in self.windows.values())

    def end_rank(self) -> int:
        """The rank whose window ended last (the lowest of those that tie)."""
        return max(self.windows, key=lambda r: (self.windows[r][1], -r))

    def lanes_of(self, ranks) -> set:
        """The keys of the lanes (CPU threads and GPU streams) of ``ranks``."""
        return {key for key in self.lanes if key[0] in ranks}

    def start_ns(self) -> int:
        """The step's start: the start of the window of the rank that ended last (as its critical path's)."""
        return self.windows[self.end_rank()][0]

    # --- building -------------------------------------------------------------------------------------------------

    def _lane(self, rank, key, fixed_before) -> Lane:
        k = (rank, *key)
        if k not in self.lanes:
            self.lanes[k] = Lane(rank, key, fixed_before=fixed_before)
        return self.lanes[k]

    def _rank(self, con, r: int, ws: int, we: int, lo: int):
        ctx = self.ctx
        main = ctx["main"].get(r)
        ops = [o for o in ctx["ops"].get(r, []) if o["e"] > lo and o["s"] < we]
        blocks = [b for b in ctx["blocking"].get(r, []) if b["e"] > lo and b["s"] < we]
        done = ctx["done"].get(r, [])
        done_at = [d["done_ns"] for d in done]
        released = sorted((d for d in done if d["released_by"] != r), key=lambda d: (d["released_ns"], d["op_id"]))
        released_at = [d["released_ns"] for d in released]  # operations another rank released, by that moment
        acts = [a for a in ctx["acts"].get(r, []) if a["end_ns"] > lo and a["start_ns"] < we]
        acts_by_end = sorted(acts, key=lambda a: a["end_ns"])
        act_ends = [a["end_ns"] for a in acts_by_end]
        by_tid = defaultdict(list)
        for o in ops:
            by_tid[o["tid"]].append(o)
        ops_by_end = sorted(ops, key=lambda o: o["e"])
        op_ends = [o["e"] for o in ops_by_end]
        tids = set(by_tid) | {b["tid"] for b in blocks}
        if main is not None:
            tids.add(main)
        points = defaultdict(dict)  # tid -> {t: (kind, dependency, name, info)} of the stretch ending at t
        waits = defaultdict(list)  # tid -> [(s, e)]
        for tid in tids:
            for o in by_tid.get(tid, []):
                points[tid].setdefault(max(o["s"], lo), (WORK, None, None, None))
                points[tid][min(o["e"], we)] = (WORK, None, o["name"], None)
        found = []  # (tid, start, end, dependency, the blocking interval)
        for b in blocks:
            s, e = max(b["s"], lo), min(b["e"], we)
            dep = self._waited_for(r, b, s, e, done, done_at, acts_by_end, act_ends, ops_by_end, op_ends, released,
                                   released_at)
            if e > s and dep is not None:
                found.append((b["tid"], s, e, dep, b))
        if not acts:  # a CPU-only rank also waits inside an op's own time, where no op records it (gloo)
            found += self._inside_waits(con, r, lo, we, done, tids)
        # waits do not overlap: one that ends later than the last taken on its thread goes on from that one's end
        used = defaultdict(int)  # tid -> end of the last wait taken
        for tid, s, e, dep, b in sorted(found, key=lambda w: (w[1], w[2])):
            if e <= used[tid]:
                continue
            s = max(s, used[tid])
            used[tid] = e
            points[tid].setdefault(s, (WORK, None, None, None))
            points[tid][e] = (WAIT, dep, None, b)
            waits[tid].append((s, e))
        calls = defaultdict(list)  # tid -> its communication calls by start; their bounds are points (the path
        for b in blocks:           # names their time)
            if b["kind"] not in ("gap", "sync") and b["tid"] in tids:
                calls[b["tid"]].append(b)
                for t in (max(b["s"], lo), min(b["e"], we)):
                    points[b["tid"]].setdefault(t, (WORK, None, None, None))
        if main is not None:
            points[main].setdefault(ws, (WORK, None, None, None))
            points[main].setdefault(we, (WORK, None, None, None))
        for d in done:  # the moment each operation was issued, a point of its thread
            if d["lane"] == "cpu" and d["host_ts_ns"] is not None and lo <= d["host_ts_ns"] <= we and d["tid"] in tids:
                points[d["tid"]].setdefault(d["host_ts_ns"], (WORK, None, None, None))
        for a in acts:  # each launch, a point of the launching thread
            if a["launch_ns"] is not None and a["launch_tid"] in tids and lo <= a["launch_ns"] <= we:
                points[a["launch_tid"]].setdefault(a["launch_ns"], (WORK, None, None, None))
        for tid, pts in points.items():
            lane = self._lane(r, ("cpu", tid), ws)
            call_starts = [b["s"] for b in calls[tid]]
            starts = [s for s, _ in sorted(waits[tid])]
            ends = [e for _, e in sorted(waits[tid])]
            op_list = by_tid.get(tid, [])
            op_starts = [o["s"] for o in op_list]
            for t in sorted(pts):
                kind, dep, name, info = pts[t]
                if kind == WORK:
                    i = bisect.bisect_left(ends, t)  # a point inside a wait replays as an offset in it
                    if i < len(starts) and starts[i] < t < ends[i]:
                        kind = INSIDE
                    if name is None:
                        name = (_holder(op_list, op_starts, t) or {}).get("name")
                    info = _holder(calls[tid], call_starts, t)  # a communication call's own time
                lane.times.append(t)
                lane.kinds.append(kind)
                lane.deps.append(dep)
                lane.names.append(name)
                lane.info.append(info)
        streams = defaultdict(list)
        for a in sorted(acts, key=lambda a: (a["start_ns"], a["end_ns"])):
            streams[a["stream"]].append(a)
        for stream, lst in streams.items():
            lane = self._lane(r, ("gpu", stream), ws)
            for i, a in enumerate(lst):
                lane.times.append(a["start_ns"])
                lane.kinds.append(KSTART)
                lane.deps.append(_started_after(r, a, lst[i - 1] if i else None, acts_by_end, act_ends))
                lane.names.append(None)
                lane.info.append(a)
                d = self.ctx["by_op"].get((r, a["op_id"])) if a["op_id"] is not None else None
                lane.times.append(a["end_ns"])
                lane.kinds.append(KCOMM if d is not None else WORK)
                lane.deps.append(("comm", r, a["op_id"]) if d is not None else None)
                lane.names.append(a["name"])
                lane.info.append(a)

    def _inside_waits(self, con, r, lo, we, done, tids) -> list:
        """Waits of a CPU-only rank's threads inside an op's own time, between its children, in (lo, we]: an
        operation the thread issued, released by another rank, completes there; the thread waited from where that
        stretch began (a gloo Work's wait inside a framework's hook, which records no op of its own)."""
        mine = [d for d in done if d["lane"] == "cpu" and d["tid"] in tids and d["released_by"] != r
                and lo < d["done_ns"] <= we]
        if not mine:
            return []
        nested = defaultdict(list)
        for e in rows(con, "SELECT tid, s, e FROM cp_cpu_events(?) WHERE e > ? AND s < ? ORDER BY s, e DESC",
                      [r, lo, we]):
            nested[e["tid"]].append(e)
        starts = {tid: [e["s"] for e in evs] for tid, evs in nested.items()}
        out = []
        for d in mine:
            gap = own_gap(nested.get(d["tid"], []), starts.get(d["tid"], []), d["done_ns"])
            if gap is not None and gap[0] < d["done_ns"]:
                out.append((d["tid"], max(gap[0], lo), d["done_ns"], ("comm", r, d["op_id"]), None))
        return out

    def _waited_for(self, r, b, s, e, done, done_at, acts_by_end, act_ends, ops_by_end, op_ends, released,
                    released_at):
        """What the blocking interval ``b`` of rank ``r`` (clipped to [s, e]) waited for, as a dependency, or None."""
        tid = b["tid"]
        if b["kind"] == "sync":
            a = latest(acts_by_end, act_ends, s, e, lambda _: True)
            return ("gpu", r, a["stream"], a["end_ns"]) if a is not None else None
        own = self.ctx["by_op"].get((r, b["op_id"])) if b["kind"] == "call" else None
        if own is not None and own["released_by"] != r and s < own["released_ns"] < e:
            return ("release", r, own["op_id"])  # its own call, returned once its last peer arrived
        d = latest(done, done_at, s, e, lambda d: d["lane"] == "gpu" or d["tid"] in (None, tid))
        if d is not None:
            if d["lane"] == "gpu" and d["stream"] is not None:  # its kernel's end (the operation: what the path names)
                return ("gpu", r, d["stream"], d["done_ns"], d["op_id"])
            return ("comm", r, d["op_id"])
        if b["kind"] == "gap":
            o = latest(ops_by_end, op_ends, s, e, lambda o: o["tid"] != tid)
            if o is not None:
                return ("cpu", r, o["tid"], o["e"])
            d = latest(released, released_at, s, e, lambda d: d["done_ns"] >= e)
            if d is not None:  # an operation in flight its last peer released inside the gap: the thread resumed
                return ("release", r, d["op_id"])  # after it (gloo's worker ends its annotation later)
        return None

    def _finish(self, lane: Lane):
        """Order the lane's points by time (a GPU stream's kernels may overlap)."""
        order = sorted(range(len(lane.times)), key=lambda i: (lane.times[i], i))
        for attr in ("times", "kinds", "deps", "names", "info"):
            vals = getattr(lane, attr)
            setattr(lane, attr, [vals[i] for i in order])
        lane.out = [None] * len(lane.times)

    # --- replaying ------------------------------------------------------------------------------------------------

    def replay(self, scale=None, transfer=None, lanes=None) -> dict:
        """Replay the step with each work stretch's duration multiplied by its factor, ``scale(lane)[k]`` for the
        stretch ending at point k of ``lane`` (a sequence as long as the lane's points, asked once per lane and
        replay; None: the lane's work as measured; ``by_stretch`` makes one from a factor per stretch), and each
        communication operation's transfer (from its release to its completion) by ``transfer(operation)`` (its
        ``cp_completions`` row; None: measured). ``lanes``: the lanes ``scale`` can change (keys of ``self.lanes``:
        ``lanes_of``), the only ones it is asked for; the others' work is as measured, as ``scale`` would have them
        (None: every lane). Returns ``{"end_ns": the step's replayed end, "ranks": {rank: replayed window end}}``."""
        self.transfer = transfer
        self.memo_comm = {}
        for key, lane in self.lanes.items():
            lane.out = [None] * len(lane.times)
            lane.factors = scale(lane) if scale is not None and (lanes is None or key in lanes) else None
        if self.order is None:
            self.order = self._by_time()
        compute, order = self._compute, list(self.lanes.values())
        for n, k in zip(*(a.tolist() for a in self.order), strict=True):  # by measured time: what a point needs is
            ln = order[n]  # almost always replayed before it; what is not yet, _at replays first (_value)
            out = ln.out
            if out[k] is not None:
                continue
            if k and ln.kinds[k] == WORK and ln.times[k] > ln.fixed_before:  # _work, inline: most points
                t, prev_t, f = ln.times[k], ln.times[k - 1], ln.factors
                out[k] = out[k - 1] + (round((t - prev_t) * f[k]) if f is not None else t - prev_t)
            else:
                out[k] = compute(ln, k)
        ranks = {}
        for r, (_, we) in self.windows.items():
            main = self.lanes.get((r, "cpu", self.ctx["main"].get(r)))
            ranks[r] = self._at(main, we) if main is not None else we
        return {"end_ns": max(ranks.values()), "ranks": ranks}

    def _by_time(self) -> tuple:
        """Every point by measured time, then lane, then index: (the lanes' numbers, the indices), two arrays (a
        tenth of the memory of a list of pairs, for a graph's hundreds of thousands of points)."""
        import numpy as np

        lanes = list(self.lanes.values())
        times = np.fromiter((t for lane in lanes for t in lane.times), np.int64)
        which = np.repeat(np.arange(len(lanes)), [len(lane.times) for lane in lanes])
        index = np.concatenate([np.arange(len(lane.times)) for lane in lanes]) if lanes else np.zeros(0, np.int64)
        order = np.lexsort((index, which, times))
        return which[order], index[order]

    def _value(self, lane: Lane, k: int) -> int:
        stack = [(lane, k)]
        while stack:
            ln, i = stack[-1]
            if ln.out[i] is not None:
                stack.pop()
                continue
            need = self._needs(ln, i)
            if need:
                stack.extend(need)
                continue
            ln.out[i] = self._compute(ln, i)
            stack.pop()
        return lane.out[k]

    def _needs(self, ln: Lane, i: int) -> list:
        """The points (lane, index) that point i of ``ln`` needs replayed first."""
        if ln.times[i] <= ln.fixed_before or (i == 0 and ln.kinds[i] != KSTART):
            return []
        need = [(ln, i - 1)] if i and ln.out[i - 1] is None else []
        dep = ln.deps[i]
        if not dep or ln.kinds[i] in (WORK, INSIDE):
            return need
        deps = dep if ln.kinds[i] == KSTART else [dep]
        return need + [p for d in deps for p in self._dep_points(d) if p[0].out[p[1]] is None]

    def _dep_points(self, dep) -> list:
        """The lane points a dependency's replayed time is read from."""
        if dep[0] in ("comm", "release"):
            return [p for p in map(self._arrival_point, self._members(dep[1], dep[2])) if p is not None]
        lane = self.lanes.get((dep[1], dep[0], dep[2]))
        if lane is None:
            return []
        j = bisect.bisect_right(lane.times, dep[3]) - 1
        return [(lane, j)] if j >= 0 else []

    def _members(self, r, op_id) -> list:
        """The operations whose arrivals released operation ``op_id`` of rank ``r``: itself, and those of a
        collective's members (the matched peer of a point-to-point operation) that arrived before it completed (a
        broadcast's root waits for no receiver)."""
        d = self.ctx["by_op"].get((r, op_id))
        if d is None:
            return []
        if d.get("match_key") is not None:
            others = self.ctx["members"][d["match_key"]]
        else:
            partner = self.ctx["by_op"].get(self.ctx["partner"].get((r, op_id)))
            others = [partner] if partner is not None else []
        return [d] + [m for m in others if m is not d and m["arrival_ns"] <= d["done_ns"]]

    def _arrival_point(self, d):
        """(lane, index) of the point where operation ``d`` arrived: its kernel's start, or its issuing call."""
        if d["lane"] == "gpu" and d["stream"] is not None and d["exec_ts_ns"] is not None:
            lane = self.lanes.get((d["rank"], "gpu", d["stream"]))
            t = d["exec_ts_ns"]
        elif d["host_ts_ns"] is not None and d["tid"] is not None:
            lane = self.lanes.get((d["rank"], "cpu", d["tid"]))
            t = d["host_ts_ns"]
        else:
            return None
        if lane is None:
            return None
        j = bisect.bisect_right(lane.times, t) - 1
        return (lane, j) if j >= 0 else None

    def _arrival(self, d) -> int:
        """The replayed moment operation ``d`` arrived."""
        if d["lane"] == "gpu" and d["stream"] is not None and d["exec_ts_ns"] is not None:
            lane, t = self.lanes.get((d["rank"], "gpu", d["stream"])), d["exec_ts_ns"]
            base = d["exec_ts_ns"]
        elif d["host_ts_ns"] is not None and d["tid"] is not None:
            lane, t = self.lanes.get((d["rank"], "cpu", d["tid"])), d["host_ts_ns"]
            base = d["host_ts_ns"]
        else:
            return d["arrival_ns"]
        at = self._at(lane, t) if lane is not None else t
        return at + (d["arrival_ns"] - base)  # the lag from the call to the execution's start, kept

    def _release(self, r, op_id) -> tuple[int, int]:
        """(replayed, measured) moment operation ``op_id`` of rank ``r`` was released: its members' latest arrival."""
        key = (r, op_id)
        if key not in self.memo_comm:
            members = self._members(r, op_id)
            self.memo_comm[key] = (max(self._arrival(m) for m in members), max(m["arrival_ns"] for m in members))
        return self.memo_comm[key]

    def _completion(self, r, op_id) -> int:
        """Its replayed completion: its release, then the transfer measured after it."""
        replayed, measured = self._release(r, op_id)
        d = self.ctx["by_op"][(r, op_id)]
        return replayed + self._transfer(d, d["done_ns"] - measured)

    def _transfer(self, d, ns: int) -> int:
        """A transfer of ``ns`` measured of operation ``d``, replayed."""
        ns = max(0, ns)
        return round(ns * self.transfer(d)) if self.transfer else ns

    def _dep_time(self, dep) -> tuple[int, int]:
        """(replayed, measured) time of a dependency."""
        if dep[0] == "release":
            return self._release(dep[1], dep[2])
        if dep[0] == "comm":
            d = self.ctx["by_op"][(dep[1], dep[2])]
            return self._completion(dep[1], dep[2]), d["done_ns"]
        lane = self.lanes.get((dep[1], dep[0], dep[2]))
        return (self._at(lane, dep[3]) if lane is not None else dep[3]), dep[3]

    def _compute(self, ln: Lane, i: int) -> int:
        t, kind = ln.times[i], ln.kinds[i]
        if t <= ln.fixed_before or (i == 0 and kind != KSTART):
            return t
        if kind == WORK:
            return self._work(ln, i)
        dep = ln.deps[i]
        if kind == KSTART:  # after the kernel before it on its stream, its launch and an event: the lag after the
            got, measured = (ln.out[i - 1], ln.times[i - 1]) if i else (None, None)  # latest kept
            for d in dep:
                g, m = self._dep_time(d)
                got = g if got is None or g > got else got
                measured = m if measured is None or m > measured else measured
            return t if got is None else got + max(0, t - measured)
        prev, prev_t = ln.out[i - 1], ln.times[i - 1]
        if kind == INSIDE:
            return prev + (t - prev_t)
        if dep is None:
            return self._work(ln, i)
        got, measured = self._dep_time(dep)  # a wait or a communication kernel: after what it waited for
        tail = max(0, t - max(prev_t, measured))
        if dep[0] == "release":  # a call that returned once its last peer arrived: the rest is its transfer
            tail = self._transfer(self.ctx["by_op"][(dep[1], dep[2])], tail)
        return max(prev, got) + tail

    def _work(self, ln: Lane, i: int) -> int:
        """Point i of ``ln`` ends a stretch of work (or of time in no op): the point before it, then the stretch's
        measured length, scaled."""
        t, prev_t = ln.times[i], ln.times[i - 1]
        if ln.factors is None:
            return ln.out[i - 1] + (t - prev_t)
        return ln.out[i - 1] + round((t - prev_t) * ln.factors[i])

    def _at(self, lane: Lane, t: int) -> int:
        """The replayed time of measured moment ``t`` on ``lane``."""
        times = lane.times
        j = bisect.bisect_right(times, t) - 1
        if j < 0:
            return t
        base = lane.out[j]
        if base is None:
            base = self._value(lane, j)
        if lane.factors is not None and j + 1 < len(times) and lane.kinds[j + 1] == WORK:
            return base + round((t - times[j]) * lane.factors[j + 1])
        return base + (t - times[j])


def by_stretch(factor):
    """A replay's ``scale`` from ``factor(rank, lane key, name, start, end)``, the factor of one work stretch (its op
    or kernel's name, None in no op, and its measured bounds)."""
    def scale(lane: Lane) -> list:
        t, names = lane.times, lane.names
        return [factor(lane.rank, lane.key, names[k], t[k - 1], t[k]) if k else 1.0 for k in range(len(t))]

    return scale


def _started_after(r, a, prev, acts_by_end, act_ends) -> list:
    """What GPU activity ``a`` of rank ``r`` started after, besides the one before it on its stream (``prev``): its
    launch, and, when it started later than both, the activity of another stream that ended last before it (an
    event it waited for)."""
    deps = [("cpu", r, a["launch_tid"], a["launch_ns"])] if a["launch_ns"] is not None else []
    earliest = max(x for x in (prev["end_ns"] if prev else None, a["launch_end_ns"], -1) if x is not None)
    event = latest(acts_by_end, act_ends, earliest, a["start_ns"], lambda o: o["stream"] != a["stream"]) \
        if earliest >= 0 else None
    return deps + ([("gpu", r, event["stream"], event["end_ns"])] if event is not None else [])


def _holder(items: list, starts: list, t: int):
    """The last of ``items`` (outermost ops, or calls; by start, ``starts`` theirs) to start before ``t`` when the
    stretch ending at ``t`` lies in it; None otherwise."""
    i = bisect.bisect_left(starts, t) - 1
    return items[i] if i >= 0 and items[i]["s"] < t <= items[i]["e"] else None


def context(con) -> dict:
    """What the graphs of a run's steps are built from, read once: per rank its lanes' ops, blocking intervals, GPU
    activities, communication completions, and each collective's members."""
    graph_tables(con)
    ranks = [r[0] for r in con.execute("SELECT DISTINCT rank FROM step_windows ORDER BY 1").fetchall()]
    ctx = {"main": dict(con.execute("SELECT rank, tid FROM main_threads").fetchall()), "ops": {}, "blocking": {},
           "acts": {}, "done": {}, "by_op": {}, "members": defaultdict(list),
           "partner": {(p["rank"], p["op_id"]): (p["partner"], p["partner_op"])
                       for p in rows(con, "SELECT rank, op_id, partner, partner_op FROM cp_p2p")}}
    arrivals = {(a["rank"], a["op_id"]): a["match_key"]
                for a in rows(con, "SELECT rank, op_id, match_key FROM collective_arrivals")}
    execs = {(e["rank"], e["op_id"]): e["exec_ts_ns"] for e in rows(con, "SELECT rank, op_id, exec_ts_ns FROM comm_ops")}
    for r in ranks:
        read = rank_rows(con, r)
        ctx["ops"][r], ctx["blocking"][r], ctx["acts"][r] = read["ops"], read["blocking"], read["acts"]
        done = read["done"]
        for d in done:
            d["match_key"] = arrivals.get((r, d["op_id"]))
            d["exec_ts_ns"] = execs.get((r, d["op_id"]))
            ctx["by_op"][(r, d["op_id"])] = d
            if d["match_key"] is not None:
                ctx["members"][d["match_key"]].append(d)
        ctx["done"][r] = done
    use(con, "host_cause")
    names = sorted({o["name"] for ops in ctx["ops"].values() for o in ops if o["name"] is not None})
    ctx["input"] = {n for (n,) in con.execute("SELECT n FROM unnest(?::VARCHAR[]) t(n) WHERE host_cause(n) = "
                                              "'dataloader'", [names]).fetchall()}
    return ctx


def step_graphs(con) -> list[StepGraph]:
    """One graph per step every rank has a window for (as the critical path's steps)."""
    windows = defaultdict(dict)
    for s, r, a, b in con.execute("SELECT step, rank, start_ns, end_ns FROM step_windows ORDER BY step, rank").fetchall():
        windows[s][r] = (a, b)
    n = len({r for w in windows.values() for r in w})
    if not windows:
        return []
    ctx = context(con)
    return [StepGraph(con, s, w, ctx) for s, w in sorted(windows.items(), key=lambda kv: (kv[0] is None, kv[0]))
            if len(w) == n]


def graphs_once(con, shared: dict) -> list[StepGraph]:
    """The run's step graphs (``step_graphs``), built once per ``shared`` dict: every check of a document and its
    GPU section read the same ones."""
    if "graphs" not in shared:
        shared["graphs"] = step_graphs(con)
    return shared["graphs"]
