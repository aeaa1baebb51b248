"""Hang and crash forensics: where the ranks of a stopped job diverge (``traceparse hang``).

Every rank's calls on every group are put in one shape, from Flight Recorder dumps (``fr_entries``) when any were
loaded, else from the traces (``comm_ops``, numbered per rank and group in issue order). A group is its name with
its ranks (``pg_name``, the same on every rank): two groups of the same ranks (the default group and a
``new_group()`` of every rank) are two groups, each with its own sequence numbers.

**What each call's outcome is known to be.** NCCL records a state (``scheduled``, ``started``, ``completed``);
gloo records none and marks a call ``retired`` when it ends, completed or failed alike. So a call is

- ``completed``: its state says so; or, for a gloo call that ended: when a later call of the rank was still in
  flight at the dump and every member of the call's group left a dump (where one died, any call of its last step
  may have failed); when the rank went on to a later step (the period of its calls is a step, which starts after
  the cycle's longest pause); when every member entered and ended it (with no one missing, nothing could fail
  it); or when another member completed it;
- ``in_flight``: not retired at the dump;
- ``failed``: retired without completing (a backend that records completion);
- ``ended``: retired, completed or failed, which of the two not recorded (gloo) nor inferred as above.

Then, per group:

- **collectives** are matched across the group's members by sequence number (``collective_seq_id``: the n-th
  collective a rank issued on the group). The first number where the members differ is the group's divergence:
  members that never issued it (``missing_rank``; ``rank_died`` when the missing rank left no dump, or its trace
  is cut off), or that issued another op (``op_mismatch``), other sizes (``size_mismatch``) or dtypes
  (``dtype_mismatch``). Numbers below the highest first number a member's buffer still holds are not compared
  (the ring buffer dropped them). A member with no call on the group at all (no dump) never entered the earliest
  call the others are not known to have completed (a call completes only when every member joins it): the
  group diverges there. A call every member entered and none is known to have completed is ``not_completed``;
- **sends and receives** are paired per direction in issue order (the k-th send from a to b with the k-th
  receive at b from a); the first one left without a partner is a ``p2p_mismatch`` (a send no one receives, or
  both sides receiving). gloo's Flight Recorder records none: the send or receive a rank was blocked in when it
  dumped (``fr_inflight``, from the plugin's dumper) is added, numbered among the rank's point-to-point calls on
  the group (its ``op_id`` less the collectives issued on the group before it).

**The root cause first.** A divergence is explained by another when each rank missing from it is itself blocked
in that other one (its own dump holds that call, not completed) and, as far as its own earlier steps show (the
period of its calls), that call comes first in its program: the rank could not reach this one. A rank whose own
steps put the call it is blocked in *after* the one it is missing skipped that one: that divergence is where it
went wrong (``skipped``). A divergence is also explained when each rank missing from it is missing from a root
its own steps issue earlier (``never_reached``: it stopped before that one). The divergences no other one explains
come first (``root``), those a common missing rank would have reached first before the others, else the one
issued first; then the ones they explain.

Each group is named by its ranks, its mesh dimension (from its description, ``mesh_tp``) and its strategy and
variant (the tags of the traces' operations on that group and op, when traces were loaded). A rank missing from it
is shown with its last call, the calls its dump holds not completed (``blocked_in``) and, when its dump has an
in-flight record, where its training thread was at the dump (``at_dump``). Dumps that contradict each other on a
group's members are reported (``contradictions``), never passed over.
"""

import json
from collections import defaultdict
from statistics import median

from traceparse.store.query import rows

VERSION = 1
P2P = {"send", "recv"}
OUTCOMES = {
    "completed": "completed",
    "in_flight": "in flight at the dump",
    "failed": "failed: ended without completing",
    "ended": "ended: completed or failed (gloo marks both retired)",
    "in_trace": "in its trace",
}
NOT_SIZE_IN = {"all_to_all", "all_to_all_single", "all_to_all_v_single", "scatter"}  # as torch's analyzer compares
NOT_SIZE_OUT = {"all_to_all", "all_to_all_single", "all_to_all_v_single", "gather"}


def hang_document(con) -> dict:
    dumped = {r for (r,) in con.execute("SELECT rank FROM fr_dumps").fetchall()}
    traced = {r for (r,) in con.execute("SELECT rank FROM ranks").fetchall()}
    calls = _fr_calls(con) if dumped else _trace_calls(con)
    at_dump = {w["rank"]: w for w in rows(con, "SELECT * FROM fr_inflight")}
    calls += _inflight_p2p(calls, at_dump.values())
    reporting = dumped or traced
    cut_off = {r for (r,) in con.execute("SELECT rank FROM ranks WHERE cut_off").fetchall()}
    by_group, by_rank = defaultdict(list), defaultdict(list)
    for c in calls:
        by_rank[c["rank"]].append(c)
        if c["group_ranks"]:
            by_group[c["group"]].append(c)
    _infer_outcomes(by_rank, {g for g in by_group if set(g[1]) <= dumped})
    programs = {r: _Program([c for c in by_rank[r] if c["ord"] != float("inf")]) for r in dumped}
    found, notes = [], []
    for (_, members), group_calls in by_group.items():
        gone = {m for m in members if m not in reporting} | (cut_off & set(members))
        d = _collectives(members, [c for c in group_calls if c["op"] not in P2P], gone, notes, by_rank)
        d = d or _p2p(members, [c for c in group_calls if c["op"] in P2P], gone)
        if d:
            found.append(d)
    found = _root_causes(found, by_rank, programs)
    for d in found:
        _describe(con, d, by_rank, at_dump)
    contradictions = _contradictions(con)
    if dumped and traced - dumped:
        notes.append(f"ranks with a trace but no Flight Recorder dump: {sorted(traced - dumped)}")
    notes += _membership_notes(con) if dumped else []
    if not found and calls and dumped and not at_dump and not any(c["op"] in P2P for c in calls) and _has_p2p(con):
        notes.append(_p2p_unseen(con, calls, programs))
    notes += [f"{f}: {what}" for f, what in con.execute(
        "SELECT file, what FROM load_issues WHERE what LIKE 'nothing read from this folder%' ORDER BY file").fetchall()]
    return json.loads(json.dumps({
        "version": VERSION,
        "source": "flight_recorder" if dumped else "traces",
        "ranks": sorted(reporting),
        "divergence": found[0] if found else None,
        "divergences": found,
        "contradictions": contradictions,
        "last_completed": _last_completed(calls),
        "notes": notes,
    }, default=str))


# ------------------------------------------------------------------ calls and what is known of them
def _fr_calls(con) -> list[dict]:
    got = rows(con, """
        SELECT rank, group_ranks, group_source, pg_name, pg_desc,
               CASE WHEN op IN ('send', 'recv') THEN nullif(p2p_seq, 0) ELSE seq END AS seq, op_id, op, peer, backend,
               input_sizes, output_sizes, input_dtypes, output_dtypes, state, retired, time_created_ns AS time_ns,
               frames, record_id AS ord
        FROM fr_entries ORDER BY rank, record_id""")
    for c in got:
        c["frames"] = json.loads(c["frames"] or "[]")
        c["group"] = (c["pg_name"], tuple(c["group_ranks"] or ()))
        c["outcome"] = ("completed" if c["state"] == "completed" else "in_flight" if not c["retired"]
                        else "ended" if c["backend"] == "gloo" else "failed")
    return got


def _inflight_p2p(calls, at_dump) -> list[dict]:
    """Sends and receives ranks were blocked in at their dump that the dumps do not hold, as calls."""
    held = {(c["rank"], c["pg_name"], c["op_id"]) for c in calls}
    out = []
    for w in at_dump:
        if w["op"] not in P2P or not w["group_ranks"] or (w["rank"], w["pg_name"], w["op_id"]) in held:
            continue
        before = [c["seq"] for c in calls if (c["rank"], c["pg_name"]) == (w["rank"], w["pg_name"]) and c["op"] not in P2P
                  and w["op_id"] is not None and c["op_id"] is not None and c["op_id"] < w["op_id"]]
        out.append({**{k: w[k] for k in ("rank", "group_ranks", "pg_name", "pg_desc", "op_id", "op", "peer",
                                         "input_sizes", "input_dtypes", "time_ns")},
                    "seq": None if w["op_id"] is None else w["op_id"] - max(before, default=0),
                    "output_sizes": None, "output_dtypes": None, "backend": None, "group_source": "in-flight record",
                    "group": (w["pg_name"], tuple(w["group_ranks"])), "outcome": "in_flight",
                    "state": "in flight at the dump", "frames": json.loads(w["frames"] or "[]"), "ord": float("inf")})
    return out


def _trace_calls(con) -> list[dict]:
    """comm_ops as calls: collectives numbered per rank and group in issue order (from 1), sends and receives apart."""
    got = rows(con, """
        SELECT rank, group_ranks, group_source, pg_name, pg_desc, op, peer_in_group,
               CASE WHEN op IN ('send', 'recv') THEN NULL ELSE
                 row_number() OVER (PARTITION BY rank, pg_name, group_ranks, op IN ('send', 'recv')
                                    ORDER BY host_ts_ns, op_id) END AS seq,
               NULL AS op_id, CASE WHEN peer_in_group IS NOT NULL THEN group_ranks[peer_in_group + 1] END AS peer,
               CAST(bytes_in AS VARCHAR) AS input_sizes, NULL AS output_sizes, dtype AS input_dtypes,
               NULL AS output_dtypes, host_ts_ns AS time_ns, 'completed' AS state, [] AS frames, op_id AS ord
        FROM comm_ops WHERE group_ranks IS NOT NULL ORDER BY rank, host_ts_ns""")
    for c in got:
        c["group"] = (c["pg_name"], tuple(c["group_ranks"]))
        c["outcome"] = "in_trace"
    return got


def _token(c):
    return c["group"], c["op"] in P2P, c["op"], c["input_sizes"]


def _period(tokens) -> int | None:
    """The smallest p such that the calls repeat every p calls over most of the sequence (a training step), the
    last step possibly cut short; None when no such p (fewer than two steps, or calls that do not repeat). The
    number of calls from the end that repeat at distance p is the Z-function of the reversed sequence at p: O(n)."""
    ids = {}
    r = [ids.setdefault(t, len(ids)) for t in reversed(tokens)]
    n = len(r)
    z, lo, hi = [0] * n, 0, 0
    for i in range(1, n):
        if i < hi:
            z[i] = min(hi - i, z[i - lo])
        while i + z[i] < n and r[z[i]] == r[i + z[i]]:
            z[i] += 1
        if i + z[i] > hi:
            lo, hi = i, i + z[i]
    return next((p for p in range(1, n // 2 + 1) if z[p] >= max(p, (n - p) // 2)), None)


def _last_step_start(cs) -> int | None:
    """Index in ``cs`` (a rank's calls in issue order) of the first call of its last step: the calls repeat every p
    (``_period``, the last calls that break the pattern left out), a step starts after the longest pause of the
    cycle (the median gap before each position); with one call per cycle, each call is a step."""
    tokens = [_token(c) for c in cs]
    times = [c["time_ns"] for c in cs]
    if len(cs) < 2 or any(t is None for t in times):
        return None
    for drop in range(min(4, len(cs) - 1)):
        p = _period(tokens[:len(tokens) - drop])
        if p:
            break
    else:
        return None
    n = len(tokens) - drop
    if p == 1:  # one call per step
        return n - 1
    gaps = {r: [] for r in range(p)}
    for i in range(1, n):
        gaps[i % p].append(times[i] - times[i - 1])
    phase = max(gaps, key=lambda r: median(gaps[r]) if gaps[r] else -1)  # median: a profiled step's pause is no step
    return max((i for i in range(n) if i % p == phase), default=None)


def _infer_outcomes(by_rank, whole) -> None:
    """Upgrade gloo's ``ended`` calls to ``completed`` where the dumps show it (the module's docstring). ``whole``:
    the groups every member of which left a dump; in another group a member may have died at any point of its last
    step, failing the calls of it that were in flight, so only the step rule applies there."""
    calls = [c for cs in by_rank.values() for c in cs]
    for rank_calls in by_rank.values():
        cs = sorted((c for c in rank_calls if c["ord"] != float("inf") and c["outcome"] != "in_trace"),
                    key=lambda c: c["ord"])
        alive = False  # a later call of the rank (on any group) in flight at the dump: it got past the earlier ones
        for c in reversed(cs):
            if c["outcome"] == "ended" and alive and c["group"] in whole:
                c["outcome"], c["known_by"] = "completed", "the rank went on to a call still in flight at the dump"
            alive = alive or c["outcome"] in ("in_flight", "completed")
        start = _last_step_start(cs)
        for c in cs[:start or 0]:
            if c["outcome"] == "ended":
                c["outcome"], c["known_by"] = "completed", "the rank went on to a later step"
    held = defaultdict(set)  # a call every member (each of which dumped) entered and ended had no one to wait for
    for c in calls:
        if c["op"] not in P2P and c["group"] in whole and c["outcome"] in ("ended", "completed"):
            held[(c["group"], c["seq"])].add(c["rank"])
    done = {(c["group"], c["seq"]) for c in calls if c["outcome"] == "completed" and c["op"] not in P2P}
    done |= {k for k, ranks in held.items() if ranks >= set(k[0][1])}
    for c in calls:
        if c["outcome"] == "ended" and c["op"] not in P2P and (c["group"], c["seq"]) in done:
            c["outcome"], c["known_by"] = "completed", "another member completed it, or every member ended it"


class _Program:
    """A rank's order of calls: where it issued each call, and where its own earlier steps put a call it has not
    issued or not completed (the pattern of its completed calls, continued)."""

    def __init__(self, cs):
        settled = []
        for c in cs:
            if c["outcome"] != "completed":
                break
            settled.append(c)
        if _period([_token(c) for c in settled]) is None:
            settled = cs  # too little completed to see a step: what it issued
        self.tokens = [_token(c) for c in settled]
        self.p = _period(self.tokens)
        self.at = {(c["group"], c["op"] in P2P, c["seq"]): i for i, c in enumerate(settled)}
        self.last = {}
        for c in settled:
            key = (c["group"], c["op"] in P2P)
            self.last[key] = max(self.last.get(key, 0), c["seq"] or 0)

    def next_call(self) -> tuple | None:
        """(group, op, seq) of the call its own steps issue after the last it holds; None when they show none."""
        if not self.p or not self.tokens:
            return None
        group, p2p, op, _ = self.tokens[len(self.tokens) - self.p]
        return None if p2p else (group, op, self.last.get((group, p2p), 0) + 1)

    def pos(self, group, p2p: bool, seq) -> float | None:
        if (group, p2p, seq) in self.at:
            return self.at[(group, p2p, seq)]
        last = self.last.get((group, p2p))
        if not self.p or last is None or seq is None or seq <= last:
            return None
        cycle = self.tokens[len(self.tokens) - self.p:]
        occurs = [j for j, t in enumerate(cycle) if (t[0], t[1]) == (group, p2p)]
        if not occurs:
            return None
        turn, k = divmod(seq - last - 1, len(occurs))
        return len(self.tokens) + turn * self.p + occurs[k]


# ------------------------------------------------------------------ divergences per group
def _sizes_differ(here) -> bool:
    op = here[0]["op"]
    for key, skip in (("input_sizes", NOT_SIZE_IN), ("output_sizes", NOT_SIZE_OUT)):
        known = {c[key] for c in here if c[key] not in (None, "null")}
        if op not in skip and len(known) > 1:
            return True
    return False


def _collectives(members, calls, gone, notes, by_rank) -> dict | None:
    per = defaultdict(dict)
    for c in calls:
        per[c["rank"]][c["seq"]] = c
    present = [m for m in members if per[m]]
    absent = [m for m in members if not per[m]]  # no dump (or trace) holds a call of theirs on this group
    if not present:
        return None
    start = max(min(per[m]) for m in present)
    seqs = sorted({s for m in present for s in per[m] if s >= start})
    never = None  # where the absent members stopped: the earliest call not known completed
    if absent:
        open_ = [s for s in seqs if any(per[m][s]["outcome"] not in ("completed", "in_trace")
                                        for m in present if s in per[m])]
        traced = any(per[m][s]["outcome"] == "in_trace" for m in present for s in per[m])
        never = open_[0] if open_ else seqs[-1] if traced else None
        if never is None:
            notes.append(f"ranks {absent} left no dump; every call on group {list(members)} "
                         f"({calls[0]['pg_desc'] or calls[0]['pg_name']}) the others hold completed")
    for seq in seqs:
        entered = [m for m in present if seq in per[m]]
        missing = [m for m in present if seq not in per[m]] + (absent if never is not None and seq >= never else [])
        here = [per[m][seq] for m in entered]
        kind = None
        if missing:
            kind = "rank_died" if set(missing) <= gone else "missing_rank"
        elif len({c["op"] for c in here}) > 1:
            kind = "op_mismatch"
        elif _sizes_differ(here):
            kind = "size_mismatch"
        elif len({c["input_dtypes"] for c in here}) > 1:
            kind = "dtype_mismatch"
        if kind:
            d = _divergence(members, kind, here, entered, sorted(missing), seq)
            if absent and never is not None and seq >= never:
                d["why"] = (f"ranks {absent} left no call on this group (no dump): they never entered " + (
                    "the earliest call the others are not known to have completed (a collective completes only when "
                    "every member joins it)" if open_ else "the others' last call (in their traces)"))
            return d

    def stuck_in(m, s):  # entered, not known completed, and nothing issued after it on another group
        c = per[m].get(s)
        return c is not None and c["outcome"] in ("in_flight", "ended", "failed") and not any(
            o["ord"] > c["ord"] for o in by_rank.get(m, ()) if o["group"] != c["group"])

    stuck = [s for s in seqs if all(stuck_in(m, s) for m in present)]
    if stuck and not absent:  # everyone entered it, no one is known to have completed it, no one went past it
        here = [per[m][stuck[0]] for m in present]
        return _divergence(members, "not_completed", here, present, [], stuck[0])
    return None


def _p2p(members, calls, gone) -> dict | None:
    """The first send or receive (in issue time) left without its partner; ``rank_died`` when that partner is gone
    (no dump, or a cut-off trace)."""
    sends, recvs = defaultdict(list), defaultdict(list)
    for c in sorted(calls, key=lambda c: (c["rank"], c["ord"])):
        if c["peer"] is None:
            continue
        if c["op"] == "send":
            sends[(c["rank"], c["peer"])].append(c)  # keyed (sender, receiver)
        else:
            recvs[(c["peer"], c["rank"])].append(c)
    alone = []
    for pair in set(sends) | set(recvs):
        s, r = sends[pair], recvs[pair]
        alone += s[len(r):] + r[len(s):]
    if not alone:
        return None
    first = min(alone, key=lambda c: c["time_ns"] or 0)
    both_receive = [c for c in alone if c["op"] == "recv"]
    here = [first] + [c for c in both_receive if c is not first and c["peer"] == first["rank"]]
    if first["peer"] in gone:
        return _divergence(members, "rank_died", [first], [first["rank"]], [first["peer"]], None)
    d = _divergence(members, "p2p_mismatch", here, sorted({c["rank"] for c in here}), [], first["seq"])
    d["p2p"] = [{"rank": c["rank"], "op": c["op"], "peer": c["peer"]} for c in here]
    return d


def _divergence(members, kind, here, entered, missing, seq) -> dict:
    first = min(here, key=lambda c: c["time_ns"] or 0)
    return {
        "kind": kind, "group_ranks": list(members), "pg_name": first["pg_name"], "pg_desc": first["pg_desc"],
        "mesh_dim": None, "strategy": None, "variant": None, "op": first["op"], "seq": seq,
        "entered": entered, "missing": missing, "time_ns": first["time_ns"], "root": True, "explained_by": [],
        "skipped": [], "never_reached": [],
        "calls": {str(c["rank"]): {"op": c["op"], "peer": c["peer"], "input_sizes": c["input_sizes"],
                                   "input_dtypes": c["input_dtypes"], "state": c["state"], "outcome": c["outcome"],
                                   "frame": _user_frame(c["frames"])} for c in here},
        "_group": first["group"], "_p2p": first["op"] in P2P,
    }


# ------------------------------------------------------------------ which divergence explains which
def _root_causes(found, by_rank, programs) -> list[dict]:
    """``found`` ordered root causes first (``root``, ``explained_by``, ``skipped``: the module's docstring)."""
    at = {}
    for d in found:
        if d["seq"] is not None:
            for r in d["entered"]:
                at[(r, d["_group"], d["_p2p"], d["seq"])] = d
    for d in found:
        explained = []
        for m in d["missing"]:
            prog = programs.get(m)
            blocked = [c for c in by_rank.get(m, ()) if c["outcome"] not in ("completed", "in_trace")
                       and c["group"] != d["_group"] and (m, c["group"], c["op"] in P2P, c["seq"]) in at]
            why = None
            for c in sorted(blocked, key=lambda c: c["ord"]):
                here = prog.pos(d["_group"], d["_p2p"], d["seq"]) if prog else None
                there = prog.pos(c["group"], c["op"] in P2P, c["seq"]) if prog else None
                what = {"rank": m, "op": c["op"], "group_ranks": c["group_ranks"], "pg_name": c["pg_name"],
                        "pg_desc": c["pg_desc"], "seq": c["seq"], "outcome": c["outcome"]}
                if here is not None and there is not None and there > here:
                    d["skipped"].append(what)  # its own steps put the call it waits in after this one
                    why = None
                    break
                why = why or what
            if why is None:
                break
            explained.append(why)
        else:
            if d["missing"] and explained:
                d["explained_by"], d["root"] = explained, False
    for d in found:  # a rank missing here that never reached an earlier call of its program, missing there too
        if not d["root"] or not d["missing"]:
            continue
        earlier = []
        for m in d["missing"]:
            e = next((e for e in found if e is not d and e["root"] and m in e["missing"] and _before(e, d, programs, m)),
                     None)
            if e is None:
                break
            earlier.append({"rank": m, "op": e["op"], "group_ranks": e["group_ranks"], "pg_name": e["pg_name"],
                            "pg_desc": e["pg_desc"], "seq": e["seq"], "outcome": "never_issued"})
        else:
            d["never_reached"], d["root"] = earlier, False
    roots = [d for d in found if d["root"]] or list(found)  # none: they explain each other; all are roots
    for d in roots:
        d["root"] = True
    ordered = []
    pending = sorted(roots, key=lambda d: (d["kind"] == "not_completed", d["time_ns"] or 0))
    while pending:  # a root a common missing rank reaches before another comes before it
        first = next((d for d in pending if not any(_before(e, d, programs) for e in pending if e is not d)),
                     pending[0])
        ordered.append(first)
        pending = [d for d in pending if d is not first]
    rest = sorted((d for d in found if not d["root"]), key=lambda d: d["time_ns"] or 0)
    return ordered + rest


def _before(a, b, programs, rank=None) -> bool:
    """Whether a rank missing from both ``a`` and ``b`` (or ``rank``) would have issued ``a`` first (its own steps
    say so)."""
    for m in [rank] if rank is not None else set(a["missing"]) & set(b["missing"]):
        prog = programs.get(m)
        pa = prog.pos(a["_group"], a["_p2p"], a["seq"]) if prog else None
        pb = prog.pos(b["_group"], b["_p2p"], b["seq"]) if prog else None
        if pa is not None and pb is not None and pa != pb:
            return pa < pb
    return False


def _describe(con, d, by_rank, at_dump):
    """Mesh dimension, strategy and variant of the group; what each missing rank did instead."""
    d.pop("_group")
    d.pop("_p2p")
    desc = d["pg_desc"] or ""
    d["mesh_dim"] = desc[len("mesh_"):] if desc.startswith("mesh_") else None
    tag = con.execute(
        "SELECT strategy, variant FROM comm_ops WHERE group_ranks = ?::INTEGER[] AND pg_name = ? AND op = ? "
        "AND strategy IS NOT NULL GROUP BY ALL ORDER BY count(*) DESC LIMIT 1",
        [d["group_ranks"], d["pg_name"], d["op"]]).fetchone()
    if tag:
        d["strategy"], d["variant"], d["strategy_source"] = tag[0], tag[1], "tags of the traces' operations"
    else:
        axis = con.execute("SELECT group_axis(?, ?)", [d["pg_desc"], d["pg_name"]]).fetchone()[0]
        d["strategy"], d["strategy_source"] = axis, ("group description" if axis else "unknown: no traces of this group")
    last = {r: max(by_rank[r], key=lambda c: (c["ord"], c["time_ns"] or 0)) for r in d["missing"] if by_rank.get(r)}
    for r in d["missing"]:
        if r not in last:  # no dump: the last operation its trace holds, if it has one
            got = rows(con, "SELECT rank, op, group_ranks, pg_name, pg_desc, NULL AS seq, 'in its trace' AS state, "
                            "'in_trace' AS outcome, [] AS frames FROM comm_ops WHERE rank = ? "
                            "ORDER BY host_ts_ns DESC LIMIT 1", [r])
            if got:
                last[r] = got[0]
    d["instead"] = {str(r): ({"op": c["op"], "group_ranks": c["group_ranks"], "pg_name": c["pg_name"],
                              "pg_desc": c["pg_desc"], "seq": c["seq"],
                              "state": c["state"], "outcome": c["outcome"], "done": c["outcome"] == "completed",
                              "frame": _user_frame(c["frames"])} if (c := last.get(r)) else None)
                    for r in d["missing"]}
    for r in d["missing"]:
        if d["instead"][str(r)] is None:
            continue
        blocked = [c for c in by_rank.get(r, ()) if c["outcome"] in ("in_flight", "ended", "failed")]
        d["instead"][str(r)]["blocked_in"] = [
            {"op": c["op"], "group_ranks": c["group_ranks"], "pg_name": c["pg_name"], "pg_desc": c["pg_desc"],
             "seq": c["seq"], "outcome": c["outcome"]} for c in blocked]
        if w := at_dump.get(r):
            d["instead"][str(r)]["at_dump"] = {"op": w["op"], "peer": w["peer"], "group_ranks": w["group_ranks"],
                                               "frame": _user_frame(json.loads(w["frames"] or "[]")), "why": w["why"]}


def _user_frame(frames) -> str | None:
    """The innermost frame outside torch: where the training code made the call."""
    for f in frames or ():
        if "/torch/" not in (f.get("filename") or ""):
            return f"{f.get('name')} ({f.get('filename')}:{f.get('line')})"
    return None


def _last_completed(calls) -> list[dict]:
    """Per rank and group, the last collective known completed, and what the rank's dump holds after it."""
    last, after = {}, defaultdict(list)
    for c in sorted(calls, key=lambda c: c["seq"] or 0):
        if c["op"] in P2P or not c["group_ranks"] or c["seq"] is None:
            continue
        key = (c["rank"], c["group"])
        if c["outcome"] in ("completed", "in_trace"):
            last[key] = {"rank": c["rank"], "group_ranks": c["group_ranks"], "pg_name": c["pg_name"],
                         "pg_desc": c["pg_desc"], "seq": c["seq"], "op": c["op"]}
            after[key] = []
        else:
            after[key].append({"seq": c["seq"], "op": c["op"], "outcome": c["outcome"]})
    return [{**last[k], "after": after[k][:4]} for k in sorted(last, key=lambda k: (k[0], k[1][1], k[1][0]))]


# ------------------------------------------------------------------ what else the dumps say
def _contradictions(con) -> list[dict]:
    """Dumps that disagree on a group's members: two pg_configs listing different ranks under one group name where
    they share a rank, a rank calling on a group another dump's pg_config lists without it, a pg_config and the
    traces' process groups disagreeing."""
    declared = rows(con, """
        SELECT pg_name, any_value(pg_desc) AS pg_desc, group_ranks, list(DISTINCT rank ORDER BY rank) AS dumped_by
        FROM fr_entries WHERE group_source = 'pg_config' GROUP BY pg_name, group_ranks ORDER BY pg_name, dumped_by""")
    out = []
    for i, a in enumerate(declared):
        for b in declared[i + 1:]:
            if a["pg_name"] == b["pg_name"] and set(a["group_ranks"]) & set(b["group_ranks"]):
                out.append({"what": "dumps list different ranks for one group", "pg_name": a["pg_name"],
                            "pg_desc": a["pg_desc"], "declared": {
                                f"ranks {a['dumped_by']}": a["group_ranks"], f"ranks {b['dumped_by']}": b["group_ranks"]}})
    outsiders = rows(con, """
        SELECT f.pg_name, any_value(f.pg_desc) AS pg_desc, list(DISTINCT f.rank ORDER BY f.rank) AS callers,
               any_value(d.group_ranks) AS group_ranks, any_value(d.rank) AS dumped_by
        FROM fr_entries f JOIN (SELECT pg_name, group_ranks, min(rank) AS rank FROM fr_entries
                                WHERE group_source = 'pg_config' GROUP BY ALL) d
          ON d.pg_name = f.pg_name AND NOT list_contains(d.group_ranks, f.rank)
        WHERE f.group_source IS DISTINCT FROM 'pg_config' AND NOT EXISTS (
            SELECT 1 FROM fr_entries e WHERE e.group_source = 'pg_config' AND e.pg_name = f.pg_name
            AND list_contains(e.group_ranks, f.rank))
        GROUP BY f.pg_name ORDER BY f.pg_name""")
    for o in outsiders:
        out.append({"what": f"ranks {o['callers']} call on a group whose members rank {o['dumped_by']}'s dump lists "
                            f"without them", "pg_name": o["pg_name"], "pg_desc": o["pg_desc"],
                    "declared": {f"ranks [{o['dumped_by']}]": o["group_ranks"]}, "callers": o["callers"]})
    traced = rows(con, """
        SELECT DISTINCT f.pg_name, f.pg_desc, f.group_ranks, f.rank, p.ranks AS traced
        FROM fr_entries f JOIN process_groups p ON p.pg_name = f.pg_name AND p.rank = f.rank
        WHERE f.group_source = 'pg_config' AND p.ranks IS NOT NULL AND list_sort(p.ranks) <> f.group_ranks
        ORDER BY f.pg_name, f.rank""")
    for t in traced:
        out.append({"what": f"rank {t['rank']}'s dump and its trace list different ranks for one group",
                    "pg_name": t["pg_name"], "pg_desc": t["pg_desc"],
                    "declared": {"dump": t["group_ranks"], "trace": t["traced"]}})
    return out


def _membership_notes(con) -> list[str]:
    got = con.execute("""
        SELECT pg_name, any_value(pg_desc), any_value(group_ranks) FROM fr_entries WHERE group_source = 'dumps'
        GROUP BY pg_name ORDER BY pg_name""").fetchall()
    return [f"members of group {ranks} ({desc or name}) are the ranks whose dumps call on it (no pg_config lists "
            "it, no trace names it): a member that left no dump is not seen; pass the traces too"
            for name, desc, ranks in got]


def _p2p_unseen(con, calls, programs) -> str:
    """Why nothing shows, and what the dumps and traces do show: each rank's last collective and what it had in
    flight, and the sends and receives its last traced step posted."""
    text = ("every recorded collective matches; the traces show sends and receives, which this backend's Flight "
            "Recorder does not record (gloo): a point-to-point deadlock would not show here")
    posted = defaultdict(list)
    for r, op, peer in con.execute("""
            SELECT rank, op, peer FROM comm_ops WHERE op IN ('send', 'recv')
              AND step = (SELECT max(step) FROM comm_ops c WHERE c.rank = comm_ops.rank)
            ORDER BY rank, host_ts_ns""").fetchall():
        posted[r].append(f"{op} {'to' if op == 'send' else 'from'} {peer}")
    said = []
    for r in sorted({c["rank"] for c in calls}):
        mine = [c for c in calls if c["rank"] == r]
        last = max(mine, key=lambda c: c["ord"])
        open_ = [c for c in mine if c["outcome"] != "completed"]
        nxt = programs[r].next_call() if r in programs else None
        before = f", before {nxt[1]} #{nxt[2]} (its steps' next collective)" if nxt and not open_ else ""
        where = (f"in {open_[0]['op']} #{open_[0]['seq']} on group {open_[0]['group_ranks']} "
                 f"({OUTCOMES[open_[0]['outcome']]})" if open_ else
                 f"in no recorded collective, after {last['op']} #{last['seq']} on group {last['group_ranks']} "
                 f"(completed){before}")
        p = f"; its last traced step posted {', '.join(posted[r])}" if posted.get(r) else ""
        said.append(f"rank {r}: {where}{p}")
    return text + ". At the dumps: " + "; ".join(said)


def _has_p2p(con) -> bool:
    return con.execute("SELECT count(*) > 0 FROM comm_ops WHERE op IN ('send', 'recv')").fetchone()[0]
