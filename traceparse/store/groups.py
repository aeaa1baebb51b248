"""Find the process group of communication operations whose trace does not name it.

gloo's ``c10d::*`` ops carry no group; when a rank belongs to several groups
(a DeviceMesh), the group is inferred from the other ranks:

- a collective's members finish it together: among the rank's groups, the
  largest whose every other member ends an operation of the same kind and size
  at the same moment is the group. Evidence is pooled per worker thread (each
  gloo process group runs its collectives on its own threads), so one
  coincidence cannot decide.
- a send or receive names its peer by its index in the group: the group is the
  one under which the peer posts the matching receive (or send) naming this rank
  back, as many times and with the same size.

Rows resolved here get ``group_source`` 'inferred: ...'; rows left unresolved
keep NULL and reports count them.
"""

from bisect import bisect_left
from collections import Counter, defaultdict
from statistics import median

P2P = {"send": "recv", "recv": "send"}
MIN_TOLERANCE_NS = 100_000


def infer_groups(con):
    groups = defaultdict(list)
    for rank, name, desc, members in con.execute(
        "SELECT rank, pg_name, pg_desc, ranks FROM process_groups WHERE ranks IS NOT NULL ORDER BY rank, pg_name"
    ).fetchall():
        groups[rank].append((name, desc, tuple(members)))
    ops = con.execute(
        """SELECT rank, op_id, op, bytes_in, peer_in_group, exec_stream, exec_ts_ns + exec_dur_ns,
                  group_ranks IS NULL AS open
           FROM comm_ops"""
    ).fetchall()
    loaded = {r for (r,) in con.execute("SELECT rank FROM ranks").fetchall()}
    # only groups of two or more ranks, all of them loaded, can be judged
    groups = {r: [g for g in gs if len(g[2]) > 1 and set(g[2]) <= loaded] for r, gs in groups.items()}
    todo = [o for o in ops if o[7] and len(groups.get(o[0], ())) > 1]
    if not todo:
        return
    found = {}
    found.update(_collectives(ops, todo, groups))
    found.update(_point_to_point(ops, todo, groups))
    rows = [(g[2], len(g[2]), g[0], g[1], how, rank, op_id) for (rank, op_id), (g, how) in found.items()]
    if rows:
        con.executemany(
            "UPDATE comm_ops SET group_ranks = ?, group_size = ?, pg_name = ?, pg_desc = ?, group_source = ? "
            "WHERE rank = ? AND op_id = ?",
            rows,
        )


def _collectives(ops, todo, groups):
    ends = defaultdict(list)  # (rank, op, bytes) -> sorted execution ends
    for rank, _, op, size, _, _, end, _ in ops:
        if end is not None and op not in P2P:
            ends[(rank, op, size)].append(end)
    for v in ends.values():
        v.sort()
    by_thread = defaultdict(list)
    for o in todo:
        if o[2] not in P2P and o[6] is not None:
            by_thread[(o[0], o[5])].append(o)
    found = {}
    for (rank, _), items in by_thread.items():
        best = _best_group(rank, items, groups[rank], ends)
        if best:
            for o in items:
                found[(rank, o[1])] = (best, "inferred: members end the same operations together")
    return found


def _best_group(rank, items, candidates, ends):
    scored = []
    for g in candidates:
        skews = []
        for _, _, op, size, _, _, end, _ in items:
            worst = 0
            for m in g[2]:
                if m != rank:
                    worst = max(worst, _nearest(ends.get((m, op, size), []), end))
            skews.append(worst)
        scored.append((median(skews), g))
    if not scored:
        return None
    best_skew = min(s for s, _ in scored)
    tolerance = max(MIN_TOLERANCE_NS, 4 * best_skew)
    consistent = [g for s, g in scored if s <= tolerance and s != float("inf")]
    return max(consistent, key=lambda g: len(g[2])) if consistent else None


def _nearest(sorted_ends, t):
    if not sorted_ends:
        return float("inf")
    i = bisect_left(sorted_ends, t)
    return min(abs(sorted_ends[j] - t) for j in (i - 1, i) if 0 <= j < len(sorted_ends))


def _point_to_point(ops, todo, groups):
    posted = Counter()  # (rank, op, peer_in_group, bytes) -> count
    for rank, _, op, size, peer, _, _, _ in ops:
        if op in P2P and peer is not None:
            posted[(rank, op, peer, size)] += 1
    found = {}
    for rank, op_id, op, size, peer, _, _, _ in todo:
        if op not in P2P or peer is None:
            continue
        mine = posted[(rank, op, peer, size)]
        matches = []
        for g in groups[rank]:
            members = g[2]
            if rank not in members or peer >= len(members) or members[peer] == rank:
                continue
            other = members[peer]
            back = members.index(rank)
            if posted[(other, P2P[op], back, size)] == mine:
                matches.append(g)
        if len({g[2] for g in matches}) == 1:
            found[(rank, op_id)] = (matches[0], "inferred: the peer posts the matching operation back")
    return found
