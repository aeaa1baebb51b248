"""Hang and crash forensics: where the ranks of a stopped job diverge (``traceparse hang``).

Every rank's calls on every group are put in one shape, from Flight Recorder dumps (``fr_entries``) when any were
loaded, else from the traces (``comm_ops``, numbered per rank and group in issue order). Then, per group:

- **collectives** are matched across the group's members by sequence number (``collective_seq_id``: the n-th
  collective a rank issued on the group). The first number where the members differ is the group's divergence:
  members that never issued it (``missing_rank``; ``rank_died`` when the missing rank left no dump, or its trace
  is cut off), or that issued another op (``op_mismatch``), other sizes (``size_mismatch``) or dtypes
  (``dtype_mismatch``). Numbers below the highest first number a member's buffer still holds are not compared
  (the ring buffer dropped them). A member with no call on the group at all (no dump) is reported missing at
  the last call the others agree on: where they stopped;
- **sends and receives** are paired per direction in issue order (the k-th send from a to b with the k-th
  receive at b from a); the first one left without a partner is a ``p2p_mismatch`` (a send no one receives, or
  both sides receiving). gloo's Flight Recorder records none: the send or receive a rank was blocked in when it
  dumped (``fr_inflight``, from the plugin's dumper) is added, numbered among the rank's point-to-point calls on
  the group (its ``op_id`` less the collectives issued on the group before it).

The job's divergence is the one issued first (the earliest call in it): the others are usually its consequence
(ranks stuck there never reach their next collective elsewhere). Each group is named by its ranks, its mesh
dimension (from its description, ``mesh_tp``) and its strategy and variant (the tags of the traces' operations on
that group and op, when traces were loaded). A rank missing from it is shown with its last call and, when its dump
has an in-flight record, where its training thread was at the dump (``at_dump``: the call it was blocked in, or
the code it was stuck in).
"""

import json
from collections import defaultdict

from ..store.query import rows

VERSION = 1
P2P = {"send", "recv"}


def hang_document(con) -> dict:
    dumped = {r for (r,) in con.execute("SELECT rank FROM fr_dumps").fetchall()}
    traced = {r for (r,) in con.execute("SELECT rank FROM ranks").fetchall()}
    calls = _fr_calls(con) if dumped else _trace_calls(con)
    at_dump = {w["rank"]: w for w in rows(con, "SELECT * FROM fr_inflight")}
    calls += _inflight_p2p(calls, at_dump.values())
    reporting = dumped or traced
    cut_off = {r for (r,) in con.execute("SELECT rank FROM ranks WHERE cut_off").fetchall()}
    by_group = defaultdict(list)
    for c in calls:
        if c["group_ranks"]:
            by_group[tuple(c["group_ranks"])].append(c)
    found = []
    for members, group_calls in by_group.items():
        gone = {m for m in members if m not in reporting} | (cut_off & set(members))
        d = _collectives(members, [c for c in group_calls if c["op"] not in P2P], gone)
        d = d or _p2p(members, [c for c in group_calls if c["op"] in P2P], gone)
        if d:
            found.append(d)
    found.sort(key=lambda d: d["time_ns"] if d["time_ns"] is not None else float("inf"))
    for d in found:
        _describe(con, d, calls, at_dump)
    notes = []
    if dumped and traced - dumped:
        notes.append(f"ranks with a trace but no Flight Recorder dump: {sorted(traced - dumped)}")
    if not found and calls and dumped and not at_dump and not any(c["op"] in P2P for c in calls) and _has_p2p(con):
        notes.append("every recorded collective matches; the traces show sends and receives, which this backend's "
                     "Flight Recorder does not record (gloo): a point-to-point deadlock would not show here")
    return json.loads(json.dumps({
        "version": VERSION,
        "source": "flight_recorder" if dumped else "traces",
        "ranks": sorted(reporting),
        "divergence": found[0] if found else None,
        "divergences": found,
        "last_completed": _last_completed(calls),
        "notes": notes,
    }, default=str))


def _fr_calls(con) -> list[dict]:
    got = rows(con, """
        SELECT rank, group_ranks, pg_name, pg_desc, CASE WHEN op IN ('send', 'recv') THEN nullif(p2p_seq, 0) ELSE seq END
               AS seq, op_id, op, peer, input_sizes, input_dtypes,
               state = 'completed' OR (retired AND state <> 'started') AS done, time_created_ns AS time_ns,
               state, frames, record_id AS ord
        FROM fr_entries ORDER BY rank, record_id""")
    for c in got:
        c["frames"] = json.loads(c["frames"] or "[]")
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
                    "done": False, "state": "in flight at the dump", "frames": json.loads(w["frames"] or "[]"),
                    "ord": float("inf")})
    return out


def _trace_calls(con) -> list[dict]:
    """comm_ops as calls: collectives numbered per rank and group in issue order (from 1), sends and receives apart."""
    return rows(con, """
        SELECT rank, group_ranks, pg_name, pg_desc, op, peer_in_group,
               CASE WHEN op IN ('send', 'recv') THEN NULL ELSE
                 row_number() OVER (PARTITION BY rank, group_ranks, op IN ('send', 'recv') ORDER BY host_ts_ns, op_id) END
                 AS seq,
               NULL AS op_id, CASE WHEN peer_in_group IS NOT NULL THEN group_ranks[peer_in_group + 1] END AS peer,
               CAST(bytes_in AS VARCHAR) AS input_sizes, dtype AS input_dtypes, true AS done,
               host_ts_ns AS time_ns, 'completed' AS state, [] AS frames, op_id AS ord
        FROM comm_ops WHERE group_ranks IS NOT NULL ORDER BY rank, host_ts_ns""")


def _collectives(members, calls, gone) -> dict | None:
    per = defaultdict(dict)
    for c in calls:
        per[c["rank"]][c["seq"]] = c
    present = [m for m in members if per[m]]
    absent = [m for m in members if not per[m]]  # no dump (or trace) holds a call of theirs on this group
    if not present:
        return None
    start = max(min(per[m]) for m in present)
    for seq in sorted({s for m in present for s in per[m] if s >= start}):
        entered = [m for m in present if seq in per[m]]
        missing = [m for m in present if seq not in per[m]]
        here = [per[m][seq] for m in entered]
        kind = None
        if missing:
            kind = "rank_died" if set(missing) <= gone else "missing_rank"
        elif len({c["op"] for c in here}) > 1:
            kind = "op_mismatch"
        elif len({c["input_sizes"] for c in here}) > 1:
            kind = "size_mismatch"
        elif len({c["input_dtypes"] for c in here}) > 1:
            kind = "dtype_mismatch"
        if kind:
            return _divergence(members, kind, here, entered, missing, seq)
    if absent:  # the others agree to their last call: where they stopped waiting for the silent members
        last = max(s for m in present for s in per[m])
        here = [per[m][last] for m in present if last in per[m]]
        return _divergence(members, "rank_died" if set(absent) <= gone else "missing_rank", here,
                           [c["rank"] for c in here], absent, last)
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
        "entered": entered, "missing": missing, "time_ns": first["time_ns"],
        "calls": {str(c["rank"]): {"op": c["op"], "peer": c["peer"], "input_sizes": c["input_sizes"],
                                   "input_dtypes": c["input_dtypes"],
                                   "state": c["state"], "frame": _user_frame(c["frames"])} for c in here},
    }


def _describe(con, d, calls, at_dump):
    """Mesh dimension, strategy and variant of the group; what each missing rank did instead."""
    desc = d["pg_desc"] or ""
    d["mesh_dim"] = desc[len("mesh_"):] if desc.startswith("mesh_") else None
    tag = con.execute(
        "SELECT strategy, variant FROM comm_ops WHERE group_ranks = ?::INTEGER[] AND op = ? AND strategy IS NOT NULL "
        "GROUP BY ALL ORDER BY count(*) DESC LIMIT 1", [d["group_ranks"], d["op"]]).fetchone()
    if tag:
        d["strategy"], d["variant"], d["strategy_source"] = tag[0], tag[1], "tags of the traces' operations"
    else:
        axis = con.execute("SELECT group_axis(?, ?)", [d["pg_desc"], d["pg_name"]]).fetchone()[0]
        d["strategy"], d["strategy_source"] = axis, ("group description" if axis else "unknown: no traces of this group")
    last = {}
    for c in calls:
        if c["rank"] in d["missing"] and (c["rank"] not in last or (c["time_ns"] or 0) >= (last[c["rank"]]["time_ns"] or 0)):
            last[c["rank"]] = c
    for r in d["missing"]:
        if r not in last:  # no dump: the last operation its trace holds, if it has one
            got = rows(con, "SELECT rank, op, group_ranks, NULL AS seq, 'in its trace' AS state, true AS done, "
                            "[] AS frames FROM comm_ops WHERE rank = ? ORDER BY host_ts_ns DESC LIMIT 1", [r])
            if got:
                last[r] = got[0]
    d["instead"] = {str(r): ({"op": c["op"], "group_ranks": c["group_ranks"], "seq": c["seq"], "state": c["state"],
                              "done": c["done"], "frame": _user_frame(c["frames"])} if (c := last.get(r)) else None)
                    for r in d["missing"]}
    for r in d["missing"]:
        if (w := at_dump.get(r)) and d["instead"][str(r)] is not None:
            d["instead"][str(r)]["at_dump"] = {"op": w["op"], "peer": w["peer"], "group_ranks": w["group_ranks"],
                                               "frame": _user_frame(json.loads(w["frames"] or "[]")), "why": w["why"]}


def _user_frame(frames) -> str | None:
    """The innermost frame outside torch: where the training code made the call."""
    for f in frames or ():
        if "/torch/" not in (f.get("filename") or ""):
            return f"{f.get('name')} ({f.get('filename')}:{f.get('line')})"
    return None


def _last_completed(calls) -> list[dict]:
    last = {}
    for c in calls:
        if c["done"] and c["op"] not in P2P and c["group_ranks"]:
            key = (c["rank"], tuple(c["group_ranks"]))
            if key not in last or c["seq"] > last[key]["seq"]:
                last[key] = {"rank": c["rank"], "group_ranks": c["group_ranks"], "pg_desc": c["pg_desc"],
                             "seq": c["seq"], "op": c["op"]}
    return [last[k] for k in sorted(last)]


def _has_p2p(con) -> bool:
    return con.execute("SELECT count(*) > 0 FROM comm_ops WHERE op IN ('send', 'recv')").fetchone()[0]
