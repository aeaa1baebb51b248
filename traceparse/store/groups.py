"""Find the process group of communication operations whose trace does not name it.

gloo's ``c10d::*`` ops carry no group. When a rank belongs to several groups (a
DeviceMesh), the group is inferred from every signal the traces hold, strongest first:

- **Worker threads.** A gloo process group runs its collectives on its own worker
  threads (2 per group), so every operation a thread executes belongs to one group,
  and two groups never share a thread. The threads are the unit of decision (a
  *lane*): one decision per thread, on all of its operations' evidence, never one
  coincidence per operation.
- **Sizes that state the group size.** An all-gather's output is its input times the
  group size, a reduce-scatter the reverse, an all-to-all has one split per member:
  a group of another size is impossible.
- **Whole sequences.** The members of a group run its collectives in the same order
  with the same sizes, and a collective cannot end on one member before every member
  has issued it. For a candidate group, each operation of the thread is paired, in
  order and one to one, with an operation of the same kind and size on every other
  member whose lifetime overlaps it (issued before this one ended, ended after this
  one was issued). A group where a member lacks partners for more than ``MAX_MISSING``
  of the operations is impossible. The members of one collective end within its
  transfer time of each other, and the member that arrived last waited for nobody, so
  its exec time is that transfer time: a group is consistent when every member's
  median end skew is within it (at least ``FLOOR_NS``) and no member lacks more
  partners than in the best group; among the consistent ones the largest is preferred
  (a subgroup of the true group ends together too), then the tightest. A group of more
  than ``MAX_CHECKED`` ranks is judged on a fixed sample of that many of its members
  (seeded by the rank): a wrong group is one where many members lack partners or end
  apart, which such a sample shows, and the cost of a load stays linear in its ranks.
- **Framework context.** DTensor wraps tensor/sequence-parallel collectives in
  ``_c10d_functional::*`` ops; FSDP's collectives sit inside ``FSDP::`` annotations.
  When the candidate groups are named after mesh axes (``mesh_tp``,
  ``mesh_dp_replicate``), a wrapped operation leans to a tp/sp/cp/ep group and an FSDP
  one to a dp group. This decides what timing cannot (data-parallel replicas that run
  the same tensor-parallel all-reduce at the same moment; HSDP's replicate all-reduce,
  which the sharded reduce-scatter just before it can put in step on every rank, like
  a world all-reduce), never against the sizes or the sequences.
- **Thread creation order.** Groups are created in the order of their names ("0", "1",
  ...) and each creates its threads then, so on a rank a thread with a lower id belongs
  to a group created no later, and a group has at most ``THREADS_PER_GROUP`` threads.
  The rank's threads are assigned jointly under these two constraints (the cheapest
  assignment by the costs above); if the thread ids contradict the other evidence
  (ids wrapped), the threads are decided one by one.

- **The default group, where a rank reports none.** Traces of PyTorch 2.0 and older (and
  many others) carry no ``pg_config`` and no group on their ops, yet state the world size:
  the one group that certainly exists is the default group, ranks 0..world_size-1 (named
  "0"). It is the only candidate of such a rank, judged only when every member is loaded,
  and a lane is its own only when its whole sequence matches on every (checked) member
  with no operation lacking a partner, and every member ends the operations with it. The
  lane is the execution lane: the gloo worker thread, or for NCCL the communication
  kernels' CUDA stream (a ProcessGroupNCCL communicator runs its collectives on its own
  stream). One stream per group, so when several NCCL streams of a rank (more than two
  gloo threads) pass, which one is the default group is unknown and none is resolved; a
  lane that does not match the whole world stays unresolved too: a subgroup is not
  guessed (symmetric subgroups, such as TP pairs of data-parallel replicas, run the same
  sizes at the same time, so the ranks whose lanes carry the same sequence do not name it).
  Sends and receives are not given it: a subgroup's index of the peer can be its global
  rank too.

A send or receive names its peer by its index in the group: the group is the one under
which the peer posts the matching receive (or send) naming this rank back, as many times
and with the same size; when several groups do and name the same global peer, the
smallest (the mesh axis, not the world that contains it); when they name different
peers, the one whose peer's matching operation overlaps this one in time.

Rows resolved here get ``group_source`` 'inferred: ...'; rows left unresolved keep NULL
and reports count them.
"""

from bisect import bisect_left
from collections import Counter, defaultdict
from random import Random
from statistics import median

P2P = {"send": "recv", "recv": "send"}
FLOOR_NS = 50_000          # ends this close are "together" however short the transfer
SLACK_NS = 100_000         # clock tolerance of the lifetime-overlap (causality) test
MAX_MISSING = 0.5          # a candidate where a member lacks partners for more ops is impossible
MAX_CHECKED = 16           # members of one candidate group whose sequences are compared with the rank's
THREADS_PER_GROUP = 2      # gloo: 2 worker threads per device, one device
TP_LIKE = {"tp", "sp", "cp", "ep"}
DEFAULT_DESC = "default_pg (inferred: world_size, no pg_config)"

# costs of one thread's candidate groups (lower is better)
IMPOSSIBLE, INCONSISTENT, SMALLER, LARGEST = 100.0, 3.0, 1.0, 0.0
CONTEXT = 1.5              # framework context agreeing (-) or disagreeing (+) with the group's axis
OVER_CAP = 20.0            # per thread beyond THREADS_PER_GROUP in one group


def infer_groups(con):
    groups = defaultdict(list)
    for rank, name, desc, members, axis in con.execute(
        "SELECT rank, pg_name, pg_desc, ranks, group_axis(pg_desc, pg_name) FROM process_groups "
        "WHERE ranks IS NOT NULL ORDER BY rank, pg_name"
    ).fetchall():
        groups[rank].append(Group(name, desc, tuple(members), axis))
    loaded = {r for (r,) in con.execute("SELECT rank FROM ranks").fetchall()}
    # a rank that reports no group at all: the default group its world size states, when all of it is loaded
    for rank, world in con.execute(
        "SELECT rank, world_size FROM ranks WHERE world_size > 1 AND rank NOT IN (SELECT rank FROM process_groups)"
    ).fetchall():
        if world <= len(loaded) and set(range(world)) <= loaded and rank < world:
            groups[rank] = [Group("0", DEFAULT_DESC, tuple(range(world)), None, default=True)]
    # only groups of two or more ranks, all of them loaded, can be judged
    groups = {r: [g for g in gs if len(g.members) > 1 and set(g.members) <= loaded] for r, gs in groups.items()}
    ops = [Op(*row) for row in con.execute(
        """
        SELECT c.rank, c.op_id, c.op, c.bytes_in, c.bytes_out, c.in_split, c.group_size, c.peer_in_group,
               c.exec_stream, c.host_ts_ns, c.exec_ts_ns, c.exec_ts_ns + c.exec_dur_ns,
               coalesce(c.exec_ts_ns + c.exec_dur_ns, c.host_ts_ns + c.host_dur_ns),
               c.group_ranks IS NULL, c.name LIKE '_c10d_functional::%', f.op_id IS NOT NULL,
               c.kernel LIKE 'gloo:%'
        FROM comm_ops c
        LEFT JOIN (SELECT DISTINCT o.rank, o.op_id FROM comm_ops o JOIN events e
                     ON e.rank = o.rank AND e.tid = o.tid AND e.name LIKE 'FSDP::%'
                    AND e.ts_ns <= o.host_ts_ns AND e.ts_ns + e.dur_ns >= o.host_ts_ns + o.host_dur_ns
                   WHERE o.group_ranks IS NULL) f ON f.rank = c.rank AND f.op_id = c.op_id
        """
    ).fetchall()]
    # one candidate suffices only when it is a synthesized default group (judged strictly, _lane_costs)
    todo = [o for o in ops if o.open and (len(gs := groups.get(o.rank, ())) > 1 or (gs and gs[0].default))]
    if not todo:
        return
    found = {}
    found.update(_collectives(ops, todo, groups))
    found.update(_point_to_point(ops, todo, groups))
    if not found:
        return
    import pyarrow as pa

    rows = [(rank, op_id, list(g.members), g.name, g.desc, how) for (rank, op_id), (g, how) in found.items()]
    names = ["rank", "op_id", "group_ranks", "pg_name", "pg_desc", "group_source"]
    con.register("found_groups", pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows]))
    con.execute(
        """UPDATE comm_ops c SET group_ranks = f.group_ranks, group_size = len(f.group_ranks), pg_name = f.pg_name,
                  pg_desc = f.pg_desc, group_source = f.group_source
           FROM found_groups f WHERE c.rank = f.rank AND c.op_id = f.op_id"""
    )
    con.unregister("found_groups")


class Group:
    __slots__ = ("name", "desc", "members", "axis", "order", "default")

    def __init__(self, name, desc, members, axis, default=False):
        self.name, self.desc, self.members, self.axis = name, desc, members, axis
        self.default = default  # synthesized from the world size: the rank reports no group
        self.order = int(name) if isinstance(name, str) and name.isdigit() else None


class Op:
    __slots__ = ("rank", "op_id", "op", "bytes_in", "bytes_out", "in_split", "group_size", "peer", "thread",
                 "issue", "start", "end", "any_end", "open", "wrapped", "fsdp", "gloo", "kind")

    def __init__(self, *values):
        for k, v in zip(self.__slots__[:-1], values, strict=True):
            setattr(self, k, v)
        # what every member's copy of the operation shares: the op, and its input size (all-to-all sizes differ
        # between members)
        self.kind = (self.op, None if self.op == "all_to_all" else self.bytes_in)

    def implied_size(self):
        """The group size the operation's own sizes state, else None."""
        if self.group_size:
            return int(self.group_size)
        if self.op == "all_gather" and self.bytes_in and self.bytes_out and self.bytes_out % self.bytes_in == 0:
            return self.bytes_out // self.bytes_in
        if self.op == "reduce_scatter" and self.bytes_in and self.bytes_out and self.bytes_in % self.bytes_out == 0:
            return self.bytes_in // self.bytes_out
        if self.op == "all_to_all" and self.in_split and self.in_split.strip("[] "):
            return self.in_split.count(",") + 1
        return None


# ------------------------------------------------------------------ collectives
def _collectives(ops, todo, groups):
    by_kind = defaultdict(list)  # (rank, kind) -> ops with an end, by end
    for o in ops:
        if o.op not in P2P and o.end is not None and o.issue is not None:
            by_kind[(o.rank, o.kind)].append(o)
    for v in by_kind.values():
        v.sort(key=lambda o: o.end)
    ends = {k: [o.end for o in v] for k, v in by_kind.items()}
    longest = {k: max(o.end - o.issue for o in v) for k, v in by_kind.items()}
    lanes = defaultdict(list)  # rank -> thread -> its open collectives
    for o in todo:
        if o.op not in P2P and o.thread is not None and o.end is not None and o.issue is not None:
            lanes[(o.rank, o.thread)].append(o)
    per_rank = defaultdict(dict)
    for (rank, thread), items in lanes.items():
        per_rank[rank][thread] = _lane_costs(rank, items, groups[rank], by_kind, ends, longest)
    found = {}
    for rank, costs in per_rank.items():
        chosen = _default_lanes(costs, lanes, rank) if groups[rank][0].default else _assign(costs, groups[rank])
        for thread, (g, how) in chosen.items():
            for o in lanes[(rank, thread)]:
                found[(rank, o.op_id)] = (g, how)
    return found


def _lane_costs(rank, items, candidates, by_kind, ends, longest):
    """{group: (cost, why)} for one worker thread's operations."""
    implied = {s for s in (o.implied_size() for o in items) if s}
    stats = {}
    for g in candidates:
        if implied and implied != {len(g.members)}:
            stats[g] = None
            continue
        pairs = {m: _match(items, m, by_kind, ends, longest) for m in _checked(g, rank)}
        missing = max(sum(p is None for p in ps) / len(items) for ps in pairs.values())
        # an operation's transfer time: the exec time of the member that arrived last (it waits for
        # nobody); members of one collective end within it of each other
        reach = [max(FLOOR_NS, min([o.end - o.start] + [p[1] for ps in pairs.values() if (p := ps[i])]))
                 for i, o in enumerate(items)]
        ratio = 0.0
        for ps in pairs.values():
            r = [p[0] / reach[i] for i, p in enumerate(ps) if p]
            ratio = max(ratio, median(r) if r else float("inf"))
        stats[g] = (missing, ratio)
    possible = {g: s for g, s in stats.items()
                if s is not None and s[0] <= (0.0 if g.default else MAX_MISSING) and s[1] != float("inf")}
    if not possible:
        return {g: (IMPOSSIBLE, "impossible") for g in candidates}
    best_missing = min(s[0] for s in possible.values())
    consistent = {g for g, s in possible.items() if s[0] <= best_missing + 0.1 and s[1] <= 1.0}
    largest = max((len(g.members) for g in consistent), default=0)
    wrapped = all(o.wrapped for o in items)
    fsdp = not wrapped and all(o.fsdp for o in items)
    out = {}
    for g in candidates:
        if g not in possible:
            out[g] = (IMPOSSIBLE, "sizes or sequences rule it out")
            continue
        if g in consistent:
            cost = LARGEST if len(g.members) == largest else SMALLER
            why = "every member ends its operations with it"
        else:
            cost, why = INCONSISTENT, "not every member ends its operations with it"
        cost += 0.01 * min(possible[g][1], 1.0)
        if g.axis and (wrapped or fsdp):
            agrees = (g.axis in TP_LIKE) if wrapped else (g.axis == "dp")
            cost += -CONTEXT if agrees else CONTEXT
            why += ("; DTensor-wrapped" if wrapped else "; FSDP") + (", as its axis says" if agrees else "")
        out[g] = (cost, why)
    return out


def _default_lanes(costs, lanes, rank):
    """{lane: (group, why)} for a rank whose only candidate is the synthesized default group: the lanes
    whose whole sequence matches on every member and ends with it (consistent); none when more lanes
    pass than one group runs on (1 NCCL stream, THREADS_PER_GROUP gloo threads): which is unknown."""
    passed = {t: g for t, c in costs.items() for g, (cost, _) in c.items() if cost < INCONSISTENT}
    gloo = all(o.gloo for t in passed for o in lanes[(rank, t)])
    if len(passed) > (THREADS_PER_GROUP if gloo else 1):
        return {}
    lane = "gloo worker thread" if gloo else "NCCL stream"
    how = (f"inferred: default group (world_size, no pg_config), the sequence on its {lane} matches every "
           "member and ends with it")
    return {t: (g, how) for t, g in passed.items()}


def _checked(g, rank):
    """The members of ``g`` other than ``rank`` whose sequences are compared with the rank's: all of them,
    or a sample of MAX_CHECKED, the same on every run (seeded by the rank)."""
    others = [m for m in g.members if m != rank]
    return others if len(others) <= MAX_CHECKED else Random(rank).sample(others, MAX_CHECKED)


def _match(items, m, by_kind, ends, longest):
    """For each item (in the given order), its partner on rank m as (end skew, partner's exec time), or
    None: items are paired in end order, one to one, with m's operation of the same kind whose lifetime
    overlaps theirs (issued before the item ended, ended after it was issued) and whose end is nearest."""
    out = [None] * len(items)
    used = defaultdict(int)  # kind -> next usable index (order-preserving, one to one)
    for k in sorted(range(len(items)), key=lambda k: items[k].end):
        o = items[k]
        kind, end, issue = o.kind, o.end, o.issue
        cands = by_kind.get((m, kind))
        if not cands:
            continue
        e, reach = ends[(m, kind)], longest[(m, kind)]
        lo, i = used[kind], bisect_left(e, end)
        best, best_j = None, None
        # right: ends grow; past the longest operation's reach, none was issued before o ended
        for j in range(max(i, lo), len(e)):
            ej = e[j]
            if (best is not None and ej - end >= best) or ej - reach > end + SLACK_NS:
                break
            if cands[j].issue <= end + SLACK_NS and issue <= ej + SLACK_NS:
                best, best_j = ej - end, j
        # left: ends shrink; before o was issued, none overlaps it
        for j in range(min(i, len(e)) - 1, lo - 1, -1):
            ej = e[j]
            if (best is not None and end - ej >= best) or ej < issue - SLACK_NS:
                break
            if cands[j].issue <= end + SLACK_NS:
                best, best_j = end - ej, j
        if best is not None:
            used[kind] = best_j + 1
            p = cands[best_j]
            out[k] = (best, p.end - p.start)
    return out


def _assign(costs, candidates):
    """{thread: (group, why)}: the cheapest joint assignment of the rank's threads, with thread ids
    following group creation order and at most THREADS_PER_GROUP threads per group; threads one by
    one when the ids contradict the evidence (or the groups' creation order is unknown)."""
    threads = sorted(costs, key=lambda t: (not isinstance(t, int), t))
    free = {t: min(costs[t], key=lambda g: costs[t][g][0]) for t in threads}
    free_total = sum(costs[t][free[t]][0] for t in threads)
    ordered = sorted((g for g in candidates if g.order is not None), key=lambda g: g.order)
    best = None
    if len(ordered) == len(candidates) and all(isinstance(t, int) for t in threads):
        states = {(-1, 0): (0.0, ())}  # (group index, threads in it so far) -> (cost, choices)
        for t in threads:
            nxt = {}
            for (gi, n), (cost, chosen) in states.items():
                for gj in range(max(gi, 0), len(ordered)):
                    k = n + 1 if gj == gi else 1
                    c = cost + costs[t][ordered[gj]][0] + (OVER_CAP if k > THREADS_PER_GROUP else 0.0)
                    if (gj, k) not in nxt or c < nxt[(gj, k)][0]:
                        nxt[(gj, k)] = (c, chosen + (ordered[gj],))
            states = nxt
        total, chosen = min(states.values(), key=lambda s: s[0])
        if total < free_total + IMPOSSIBLE / 2:
            best = dict(zip(threads, chosen, strict=True))
            how = "inferred: its worker thread (with the rank's other threads in creation order): "
    if best is None:
        best = free
        how = "inferred: its worker thread: "
    out = {}
    for t, g in best.items():
        cost, why = costs[t][g]
        if cost < IMPOSSIBLE:
            out[t] = (g, how + why)
    return out


# ------------------------------------------------------------------ send / recv
def _point_to_point(ops, todo, groups):
    posted = Counter()  # (rank, op, peer_in_group, bytes) -> count
    timed = defaultdict(list)  # (rank, op, peer_in_group, bytes) -> (issue, end)
    for o in ops:
        if o.op in P2P and o.peer is not None:
            posted[(o.rank, o.op, o.peer, o.bytes_in)] += 1
            if o.issue is not None and o.any_end is not None:
                timed[(o.rank, o.op, o.peer, o.bytes_in)].append((o.issue, o.any_end))
    found = {}
    for o in todo:
        if o.op not in P2P or o.peer is None:
            continue
        mine = posted[(o.rank, o.op, o.peer, o.bytes_in)]
        matches = []
        for g in groups[o.rank]:
            members = g.members
            if g.default or o.rank not in members or o.peer >= len(members) or members[o.peer] == o.rank:
                continue
            key = (members[o.peer], P2P[o.op], members.index(o.rank), o.bytes_in)
            if posted[key] == mine:
                matches.append((g, key))
        peers = {g.members[o.peer] for g, _ in matches}
        how = "inferred: the peer posts the matching operation back"
        if len(peers) > 1 and o.issue is not None and o.any_end is not None:
            matches = [(g, k) for g, k in matches
                       if any(s <= o.any_end + SLACK_NS and o.issue <= e + SLACK_NS for s, e in timed[k])]
            peers = {g.members[o.peer] for g, _ in matches}
            how += ", at the same time"
        if len(peers) == 1:
            g = min((g for g, _ in matches), key=lambda g: len(g.members))
            if len(matches) > 1:
                how += "; the smallest of the groups that name the same peer"
            found[(o.rank, o.op_id)] = (g, how)
    return found
