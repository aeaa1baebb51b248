"""What set the pace of each profiled step: its critical path across ranks (the analyze document's
``critical_path``), walked backward from the moment the step ended over the graph of vocabulary/critical_path.sql.

The step ends when the last rank's step window ends (its ProfilerStep#N); the path runs back to that window's start,
so its length is that rank's measured step. At each point it stands on a lane of one rank (a CPU thread or a GPU
stream) and asks what that lane was waiting for:

- a CPU thread blocked in a communication call or wait, or a GPU synchronization: on the latest completion inside
  that block (a communication operation's end, or a GPU activity's end). A communication operation's transfer is on
  the path from the moment it was released (the last member of a collective arrived; a receive's matched send was
  issued); before that, the operation waited for a late peer, and the path goes to that peer, at that moment;
- a CPU thread of a CPU-only rank in an op's own time (between its children) in which an operation it issued
  completes, released by another rank: waiting for it since that stretch of own time began (gloo's wait inside a
  framework's hook, which records no op of its own);
- a GPU activity: on the one before it on its stream, when it was launched before that one ended; otherwise on
  its launch, and the path goes to the launching CPU thread;
- otherwise the lane's own work (its outermost CPU op, its kernel), which is on the path.

Each piece of the path has a rank, a lane and a cause: compute (kernels that compute; the CPU ops of a CPU-only
rank), communication (a transfer, per strategy), host (a GPU rank's CPU work: launching, Python, the optimizer),
launch (from a launch call to its start on the GPU), idle (a CPU thread running no recorded op), device (a GPU
activity queued on a dependency). Waiting for a late peer is never on the path: the path follows the peer instead.
``traceparse explain critical_path`` defines it.
"""

import bisect
from collections import defaultdict

from traceparse.store.query import rows, sql_file

MAX_HOPS = 200_000  # a guard: a step's path takes a few hops per operation
STILL = 1_000  # a guard: hops at one moment (zero-length activities) before the rest is left unexplained
TOP = 5  # the longest pieces a step names
SCAN = 10_000  # a guard: events looked at back from a moment for the op holding it


def rank_rows(con, rank: int) -> dict:
    """Rank ``rank``'s rows of the graph, each in one total order (the same document whatever order the store holds
    its rows in): ``ops`` (its threads' outermost ops), ``blocking``, ``done`` (its communication completions) and
    ``acts`` (its GPU activities, with the communication operation each executes)."""
    return {
        "ops": rows(con, "SELECT * FROM cp_cpu_ops(?) ORDER BY s, e, tid, name", [rank]),
        "blocking": rows(con, "SELECT * FROM cp_blocking(?) ORDER BY s, e, tid, kind, op_id, name", [rank]),
        "done": rows(con, "SELECT * FROM cp_completions WHERE rank = ? ORDER BY done_ns, op_id", [rank]),
        "acts": rows(con, """SELECT a.stream, a.name, a.kind, a.start_ns, a.end_ns, a.launch_tid, a.launch_ns,
                                    a.launch_end_ns, c.op_id
                             FROM gpu_activity a
                             LEFT JOIN comm_intervals c ON c.rank = a.rank AND c.ev_id = a.ev_id AND c.part = 'exec'
                             WHERE a.rank = ? ORDER BY a.start_ns, a.end_ns, a.stream, a.name, c.op_id""", [rank]),
    }


class Rank:
    """One rank's lanes, loaded once when the path first reaches it."""

    def __init__(self, con, rank: int):
        self.rank, self.con = rank, con
        self.nested = None  # per CPU thread, all its events by start: read when first needed (self_gap)
        self.main = con.execute("SELECT tid FROM main_threads WHERE rank = ?", [rank]).fetchone()
        self.main = self.main[0] if self.main else None
        read = rank_rows(con, rank)
        self.blocking = _by(read["blocking"], "tid")
        ops, done, acts = read["ops"], read["done"], read["acts"]
        self.ops = _by(ops, "tid")
        self.ops_by_end = sorted(ops, key=lambda o: (o["e"], o["tid"]))
        self.op_ends = [o["e"] for o in self.ops_by_end]
        self.done, self.done_at = done, [d["done_ns"] for d in done]
        self.by_op = {d["op_id"]: d for d in done}
        self.gpu = bool(acts)
        self.streams = _by(acts, "stream")
        for lane in self.streams.values():
            for i, a in enumerate(lane):
                a["i"] = i  # its place on its stream: where the walk goes on with it
        self.stream_starts = {s: [a["start_ns"] for a in v] for s, v in self.streams.items()}
        self.acts_by_end = sorted(acts, key=lambda a: a["end_ns"])
        self.act_ends = [a["end_ns"] for a in self.acts_by_end]

    def latest_done(self, after: int, upto: int, tid):
        """The communication operation that completed last in (after, upto], issued on ``tid`` or run on a GPU."""
        return latest(self.done, self.done_at, after, upto, lambda d: d["lane"] == "gpu" or d["tid"] in (None, tid))

    def self_gap(self, tid, t: int):
        """(start, end) of the stretch around ``t`` that thread ``tid`` spent in an op's own time, between that op's
        children (an op with none is its own work: None); None too where no op holds ``t``."""
        if self.nested is None:
            self.nested = _by(rows(self.con, "SELECT tid, s, e FROM cp_cpu_events(?) ORDER BY s, e DESC",
                                   [self.rank]), "tid")
            self.nested_starts = {k: [o["s"] for o in v] for k, v in self.nested.items()}
        return own_gap(self.nested.get(tid, []), self.nested_starts.get(tid, []), t)

    def latest_other_thread(self, tid, after: int, upto: int):
        """The op of another CPU thread than ``tid`` that ended last in (after, upto]: what an idle thread waited for
        (the autograd engine's thread running backward while the main thread waits in it)."""
        return latest(self.ops_by_end, self.op_ends, after, upto, lambda o: o["tid"] != tid)

    def latest_other_end(self, stream, after: int, upto: int):
        """The activity of another stream than ``stream`` that ended last in (after, upto]."""
        return latest(self.acts_by_end, self.act_ends, after, upto, lambda a: a["stream"] != stream)

    def latest_gpu_end(self, after: int, upto: int):
        return latest(self.acts_by_end, self.act_ends, after, upto, lambda _: True)


def own_gap(evs: list, starts: list, t: int):
    """(start, end) of the stretch around ``t`` that a thread (``evs``: its events by start, longer first; ``starts``
    their starts) spent in an op's own time, between that op's children (an op with none is its own work: None);
    None too where no op holds ``t``."""
    i = bisect.bisect_right(starts, t) - 1
    holder = None  # the innermost event holding t: the latest to start among those that do
    for j in range(i, max(i - SCAN, -1), -1):  # back over the siblings that ended before t, to its holder
        if evs[j]["s"] < t < evs[j]["e"]:
            holder = j
            break
    if holder is None:
        return None
    op, lo, hi, children = evs[holder], evs[holder]["s"], evs[holder]["e"], False
    for c in evs[holder + 1:]:
        if c["s"] >= op["e"]:
            break
        children = True
        if c["e"] <= t:
            lo = max(lo, c["e"])
        elif c["s"] >= t:
            hi = min(hi, c["s"])
            break
    return (lo, hi) if children else None


def latest(items: list, ends: list, after: int, upto: int, keep):
    """The last of ``items`` (sorted by end, ``ends`` their ends) ending in (after, upto] that ``keep`` accepts."""
    i = bisect.bisect_right(ends, upto) - 1
    while i >= 0 and ends[i] > after:
        if keep(items[i]):
            return items[i]
        i -= 1
    return None


def _by(items, key) -> dict:
    out = defaultdict(list)
    for it in items:
        out[it[key]].append(it)
    return out


def _before(items: list, starts: list, t: int):
    """The last of ``items`` (sorted by start, ``starts`` their starts) starting before ``t``."""
    i = bisect.bisect_left(starts, t) - 1
    return items[i] if i >= 0 else None


class Walk:
    def __init__(self, con, step: int, start: int, end: int):
        self.con, self.step, self.start = con, step, start
        self.ranks: dict[int, Rank] = {}
        self.pieces: list[dict] = []
        self.end = end

    def rank(self, r: int) -> Rank:
        if r not in self.ranks:
            self.ranks[r] = Rank(self.con, r)
        return self.ranks[r]

    def piece(self, rank, lane, cause, a, b, name=None, strategy=None):
        a = max(a, self.start)
        if b > a:
            self.pieces.append({"rank": rank, "lane": lane, "cause": cause, "strategy": strategy, "name": name,
                                "start_ns": a, "end_ns": b})

    def cpu_work(self, rk: Rank, tid, a: int, b: int):
        """[a, b] of CPU thread ``tid``: split by its outermost ops; no op: idle."""
        ops = rk.ops.get(tid, [])
        starts = [o["s"] for o in ops]
        t = b
        i = bisect.bisect_left(starts, t) - 1
        own = "host" if rk.gpu else "compute"
        while t > a:
            o = ops[i] if i >= 0 else None
            if o is None or o["e"] <= a:
                self.piece(rk.rank, f"cpu {tid}", "idle", a, t)
                return
            if o["e"] < t:
                self.piece(rk.rank, f"cpu {tid}", "idle", o["e"], t)
                t = o["e"]
            self.piece(rk.rank, f"cpu {tid}", own, max(o["s"], a), t, o["name"])
            t = max(o["s"], a)
            i -= 1

    def run(self, rank: int) -> list[dict]:
        lane, r, where, t = "cpu", rank, self.rank(rank).main, self.end
        still = 0  # hops without going back in time
        for _ in range(MAX_HOPS):
            if t <= self.start or still > STILL:
                break
            rk = self.rank(r)
            step = self.cpu_step if lane == "cpu" else self.gpu_step
            lane, r, where, back = step(rk, where, t)
            still = still + 1 if back >= t else 0
            t = min(back, t)  # the path only goes back in time
        if t > self.start:  # the guard: what is left is unexplained
            self.piece(r, lane, "other", self.start, t)
        return self.pieces

    def cpu_step(self, rk: Rank, tid, t: int):
        blocks = rk.blocking.get(tid, [])
        b = _before(blocks, [x["s"] for x in blocks], t)
        waited = self.waited_inside(rk, tid, b["e"] if b else self.start, t)
        if waited is not None:
            done, since = waited
            self.cpu_work(rk, tid, done["done_ns"], t)
            return self.transfer(rk, done, since, f"cpu {tid}", tid)
        if b is None:
            self.cpu_work(rk, tid, self.start, t)
            return "cpu", rk.rank, tid, self.start
        e = min(b["e"], t)
        self.cpu_work(rk, tid, e, t)
        if b["kind"] == "sync":
            act = rk.latest_gpu_end(b["s"], e)
            if act is None:
                self.piece(rk.rank, f"cpu {tid}", "host", b["s"], e, b["name"])
                return "cpu", rk.rank, tid, b["s"]
            self.piece(rk.rank, f"cpu {tid}", "host", act["end_ns"], e, b["name"])
            return "gpu", rk.rank, (act["stream"], act["i"]), act["end_ns"]
        own = rk.by_op.get(b["op_id"]) if b["kind"] == "call" else None
        if own is not None and own["released_by"] != rk.rank and b["s"] < own["released_ns"] < e:
            done = min(own["done_ns"], e)
            self.piece(rk.rank, f"cpu {tid}", "communication", done, e, b["name"], b["strategy"])
            return self.transfer(rk, {**own, "done_ns": done}, b["s"], f"cpu {tid}", tid)
        done = rk.latest_done(b["s"], e, tid)
        other = rk.latest_other_thread(tid, b["s"], e) if done is None and b["kind"] == "gap" else None
        if other is not None:  # idle while another thread worked: waiting for it
            self.piece(rk.rank, f"cpu {tid}", "idle", other["e"], e)
            return "cpu", rk.rank, other["tid"], other["e"]
        if done is None:  # waited for nothing: a call's own time, or an idle gap
            self.piece(rk.rank, f"cpu {tid}", "idle" if b["kind"] == "gap" else "communication", b["s"], e, b["name"],
                       b["strategy"])
            return "cpu", rk.rank, tid, b["s"]
        self.piece(rk.rank, f"cpu {tid}", "communication", done["done_ns"], e, b["name"] or done["op"],
                   b["strategy"] or done["strategy"])
        if done["lane"] == "gpu" and done["stream"] is not None:
            return "gpu", rk.rank, done["stream"], done["done_ns"]
        return self.transfer(rk, done, b["s"], f"cpu {tid}", tid)

    def waited_inside(self, rk: Rank, tid, after: int, upto: int):
        """(the operation, the moment the wait began) when CPU thread ``tid`` of a CPU-only rank waited inside an op
        in (after, upto] for an operation it issued, with no op recorded for the wait (a gloo Work's wait inside a
        framework's hook): the latest such completion falls in that op's own time between its children, and was
        released by another rank; the wait began where that stretch of own time did. None otherwise."""
        if rk.gpu:
            return None
        done = latest(rk.done, rk.done_at, after, upto,
                       lambda d: d["lane"] == "cpu" and d["tid"] == tid and d["released_by"] != rk.rank)
        gap = rk.self_gap(tid, done["done_ns"]) if done is not None else None
        return None if gap is None else (done, max(gap[0], after))

    def transfer(self, rk: Rank, done: dict, floor: int, lane: str, tid):
        """The transfer of ``done`` back to the moment it was released (not before ``floor``), then the releasing
        rank at that moment when it is another, else this lane at ``floor``."""
        released = min(done["released_ns"], done["done_ns"])
        self.piece(rk.rank, lane, "communication", max(released, floor), done["done_ns"], done["op"], done["strategy"])
        if released > floor and done["released_by"] != rk.rank:
            peer = self.rank(done["released_by"])
            op = peer.by_op.get(done["released_op"])
            if op is not None and op["lane"] == "gpu" and op["stream"] is not None:
                return "gpu", peer.rank, op["stream"], released
            return "cpu", peer.rank, (op or {}).get("tid") or peer.main, released
        if released > floor:  # released by this rank, late: its own call or execution was queued
            self.piece(rk.rank, lane, "communication", floor, released, done["op"], done["strategy"])
        return "cpu", rk.rank, tid if tid is not None else rk.main, floor

    def gpu_step(self, rk: Rank, where, t: int):
        """``where``: a stream (go on with its last activity to start at or before ``t``), or (stream, i): go on
        with its i-th activity."""
        stream, i = where if isinstance(where, tuple) else (where, None)
        acts, starts = rk.streams.get(stream, []), rk.stream_starts.get(stream, [])
        if i is None:
            i = bisect.bisect_right(starts, t) - 1
        lane = f"gpu {stream}"
        if i < 0:
            return "cpu", rk.rank, rk.main, t
        k = acts[i]
        if k["end_ns"] < t:
            self.piece(rk.rank, lane, "device", k["end_ns"], t)
            t = k["end_ns"]
        done = rk.by_op.get(k["op_id"]) if k["op_id"] is not None else None
        if done is not None and done["released_by"] != rk.rank and k["start_ns"] < done["released_ns"] < t:
            self.piece(rk.rank, lane, "communication", done["released_ns"], t, k["name"], done["strategy"])
            peer = self.rank(done["released_by"])
            op = peer.by_op.get(done["released_op"])
            if op is not None and op["stream"] is not None:
                return "gpu", peer.rank, op["stream"], done["released_ns"]
            return "cpu", peer.rank, peer.main, done["released_ns"]
        cause = "communication" if k["op_id"] is not None else "compute" if k["kind"] == "compute" else "device"
        self.piece(rk.rank, lane, cause, k["start_ns"], t, k["name"], done["strategy"] if done else None)
        t = k["start_ns"]
        return self.started(rk, stream, k, acts[i - 1] if i > 0 else None, t)

    def started(self, rk: Rank, stream, k: dict, prev: dict | None, t: int):
        """Why GPU activity ``k`` started at ``t``: after the one before it on its stream, after its launch, or, when
        it started later than both, after the activity of another stream that ended last before it (an event)."""
        lane = f"gpu {stream}"
        ready = k["launch_end_ns"]
        earliest = max(x for x in (prev["end_ns"] if prev else None, ready, -1) if x is not None)
        dep = rk.latest_other_end(stream, earliest, t) if earliest >= 0 else None
        if dep is not None:
            self.piece(rk.rank, lane, "device", dep["end_ns"], t)
            return "gpu", rk.rank, (dep["stream"], dep["i"]), dep["end_ns"]
        if prev is not None and (ready is None or prev["end_ns"] >= ready):
            self.piece(rk.rank, lane, "device", prev["end_ns"], t)
            return "gpu", rk.rank, (stream, prev["i"]), min(prev["end_ns"], t)
        if ready is None:
            return "cpu", rk.rank, rk.main, t
        self.piece(rk.rank, lane, "launch", k["launch_ns"], t, k["name"])
        return "cpu", rk.rank, k["launch_tid"], k["launch_ns"]


def graph_tables(con):
    """The graph of vocabulary/critical_path.sql (its temporary tables and macros), made once per connection: the
    critical path and the step graph (step_graph.py) both read it."""
    made = con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'cp_completions'")
    if not made.fetchone()[0]:
        con.execute(sql_file("traceparse.vocabulary", "critical_path.sql"))


def critical_path_section(con) -> dict:
    """The analyze document's ``critical_path``: ``{status, reason?, steps: [...], findings}``, one entry per step
    every rank has a window for (a run without ProfilerStep#N: its whole-trace window, step null)."""
    graph_tables(con)
    steps = rows(con, """
        SELECT step, arg_max(rank, (end_ns, -rank)) AS rank, max(end_ns) AS end_ns,
               arg_max(start_ns, (end_ns, -rank)) AS start_ns, count(*) AS ranks
        FROM step_windows GROUP BY step
        HAVING count(*) = (SELECT count(DISTINCT rank) FROM step_windows)
        ORDER BY step""")
    if not steps:
        return {"status": "not_applicable", "reason": "no step every rank has a window for", "steps": [],
                "findings": []}
    out = [_summary(s, Walk(con, s["step"], s["start_ns"], s["end_ns"]).run(s["rank"])) for s in steps]
    return {"status": "ok", "steps": out, "findings": _findings(out)}


def window_path(con, rank: int, start_ns: int, end_ns: int) -> dict:
    """The critical path of one window of one rank's time, walked back from ``end_ns`` on ``rank`` to ``start_ns``
    (a user annotation's window, to set beside another tool's path over it), summarized as a step's (step null)."""
    graph_tables(con)
    return _summary({"step": None, "rank": rank, "start_ns": start_ns, "end_ns": end_ns},
                    Walk(con, None, start_ns, end_ns).run(rank))


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
            f"piece: rank {top['rank']}'s {top['cause']}{what}, {top['share']:.0%} of step {top['step']}"]


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
