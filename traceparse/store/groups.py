"""Find the process group of communication operations whose trace does not name it.

gloo's ``c10d::*`` ops carry no group. When a rank belongs to several groups (a
DeviceMesh), the group is inferred from every signal the traces hold, strongest first:

- **Worker threads.** A gloo process group runs its collectives on its own worker
  threads (2 per group), so every operation a thread executes belongs to one group,
  and two groups never share a thread. The threads are the unit of decision (a
  *lane*): one decision per thread, on the evidence of its operations together, never
  one coincidence per operation; the thread's group is every one of its operations'.
- **Sizes that state the group size.** An all-gather's output is its input times the
  group size, a reduce-scatter the reverse, an all-to-all has one split per member:
  a group of another size is impossible.
- **Whole sequences.** The members of a group run its collectives in the same order
  with the same sizes, and a collective cannot end on one member before every member
  has issued it. For a candidate group, each operation of the thread's sequence is
  paired, in order and one to one, with an operation of the same kind and size on every
  other member whose lifetime overlaps it (issued before this one ended, ended after this
  one was issued). A group where a member lacks partners for more than ``MAX_MISSING``
  of the operations is impossible. The sequence is the thread's first ``SAMPLE``
  operations in end order (all of them in a shorter trace): a thread is one group for all
  of its operations, and a wrong group shows in its first ones as in the others, so a
  longer trace adds cost, not evidence. Pairing goes in end order, each operation with
  the nearest unused partner, so the pairs of those first operations are the first pairs
  of the whole sequence, and a member's operations ending past their reach are never
  read; the sizes and the framework context below are still every operation's. The
  members of one collective end within its transfer time of each other, and the member
  that arrived last waited for nobody, so its exec time is that transfer time: a group
  is consistent when every member's median end skew is within it (at least
  ``FLOOR_NS``) and no member lacks more partners than in the best group; among the
  consistent ones the largest is preferred (a subgroup of the true group ends together
  too), then the tightest. A group of more
  than ``MAX_CHECKED`` ranks is judged on a fixed sample of that many of its members
  (seeded by the rank): a wrong group is one where many members lack partners or end
  apart, which such a sample shows, and the cost of a load stays linear in its ranks:
  at most ``SAMPLE`` x ``MAX_CHECKED`` pairings per thread and candidate, however long
  the trace (what grows with its length is DuckDB's part: selecting the sequences, the
  sizes and the context, and writing the groups).
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
  and a lane is its own only when its sequence (as above) matches on every (checked)
  member with no operation lacking a partner, and every member ends the operations with
  it. The lane is the execution lane: the gloo worker thread, or for NCCL the communication
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
from collections import Counter, defaultdict, namedtuple
from random import Random
from statistics import median

from traceparse.axes import ACTIVATION_AXES

P2P = {"send": "recv", "recv": "send"}
FLOOR_NS = 50_000          # ends this close are "together" however short the transfer
SLACK_NS = 100_000         # clock tolerance of the lifetime-overlap (causality) test
MAX_MISSING = 0.5          # a candidate where a member lacks partners for more ops is impossible
MAX_CHECKED = 16           # members of one candidate group whose sequences are compared with the rank's
THREADS_PER_GROUP = 2      # gloo: 2 worker threads per device, one device
DEFAULT_DESC = "default_pg (inferred: world_size, no pg_config)"
# operations of a lane whose sequence is paired with the members' (its first, in end order). A lane is one group for
# all of its operations and a wrong group shows in its first ones as in the rest (members without partners, ends
# apart), so more of them add cost, not evidence. 128: a few steps of a lane with a collective per layer of a model of
# tens of layers, a missing fraction to within 1% and a median end skew over 128 pairs (the bundled runs have at most
# 32 a lane: every operation is paired there). It bounds a lane's pairings to SAMPLE x MAX_CHECKED per candidate.
SAMPLE = 128

# costs of one thread's candidate groups (lower is better)
IMPOSSIBLE, INCONSISTENT, SMALLER, LARGEST = 100.0, 3.0, 1.0, 0.0
CONTEXT = 1.5              # framework context agreeing (-) or disagreeing (+) with the group's axis
OVER_CAP = 20.0            # per thread beyond THREADS_PER_GROUP in one group

# the collectives that take part in the sequences (a kind, a lifetime); on a rank being judged, those with a lane and
# no group are the lanes' operations
TIMED = ("coalesce(c.op, '') NOT IN ('send', 'recv') AND c.exec_ts_ns IS NOT NULL AND c.exec_dur_ns IS NOT NULL "
         "AND c.host_ts_ns IS NOT NULL")
OPEN_LANE = f"c.group_ranks IS NULL AND c.exec_stream IS NOT NULL AND {TIMED}"
# what every member's copy of an operation shares: the op, and its input size (all-to-all sizes differ between members)
KIND_BYTES = "CASE WHEN c.op = 'all_to_all' THEN NULL ELSE c.bytes_in END"
# the group size an operation's own sizes state, else NULL: all-gather out / in, reduce-scatter in / out, all-to-all
# one split per member
IMPLIED_SIZE = """CASE
    WHEN coalesce(c.group_size, 0) <> 0 THEN c.group_size
    WHEN c.op = 'all_gather' AND coalesce(c.bytes_in, 0) <> 0 AND coalesce(c.bytes_out, 0) <> 0
         AND c.bytes_out % c.bytes_in = 0 THEN c.bytes_out // c.bytes_in
    WHEN c.op = 'reduce_scatter' AND coalesce(c.bytes_in, 0) <> 0 AND coalesce(c.bytes_out, 0) <> 0
         AND c.bytes_in % c.bytes_out = 0 THEN c.bytes_in // c.bytes_out
    WHEN c.op = 'all_to_all' AND trim(coalesce(c.in_split, ''), '[] ') <> ''
         THEN length(c.in_split) - length(replace(c.in_split, ',', '')) + 1
END"""


def infer_groups(con):
    groups = _candidates(con)
    # one candidate suffices only when it is a synthesized default group (judged strictly, _lane_costs)
    judged = sorted(r for r, gs in groups.items() if len(gs) > 1 or (gs and gs[0].default))
    if not judged:
        return
    chosen = _collectives(con, judged, groups)
    found = _point_to_point(con, judged, groups)
    # a lane's group is every one of its operations' (the lane's operations: OPEN_LANE)
    _update(con, [(rank, thread, g, how) for (rank, thread), (g, how) in chosen.items()], "thread",
            f"c.exec_stream = f.thread AND {OPEN_LANE}")
    _update(con, [(rank, op_id, g, how) for (rank, op_id), (g, how) in found.items()], "op_id", "c.op_id = f.op_id")


def _candidates(con):
    """{rank: [Group]}: the groups each rank's operations may belong to, those that can be judged."""
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
    return {r: [g for g in gs if len(g.members) > 1 and set(g.members) <= loaded] for r, gs in groups.items()}


def _update(con, rows, key, where):
    """Set the group of the comm_ops rows of ``rows`` (rank, key, group, why)."""
    if not rows:
        return
    import pyarrow as pa

    names = ["rank", key, "group_ranks", "pg_name", "pg_desc", "group_source"]
    con.register("found_groups", pa.Table.from_pylist(
        [dict(zip(names, (rank, k, list(g.members), g.name, g.desc, how), strict=True)) for rank, k, g, how in rows]))
    con.execute(
        f"""UPDATE comm_ops c SET group_ranks = f.group_ranks, group_size = len(f.group_ranks), pg_name = f.pg_name,
                  pg_desc = f.pg_desc, group_source = f.group_source
           FROM found_groups f WHERE c.rank = f.rank AND {where}"""
    )
    con.unregister("found_groups")


class Group:
    __slots__ = ("name", "desc", "members", "axis", "order", "default")

    def __init__(self, name, desc, members, axis, default=False):
        self.name, self.desc, self.members, self.axis = name, desc, members, axis
        self.default = default  # synthesized from the world size: the rank reports no group
        self.order = int(name) if isinstance(name, str) and name.isdigit() else None


class Op:
    """One of a lane's sampled operations."""
    __slots__ = ("op_id", "kind", "issue", "start", "end")

    def __init__(self, op_id, op, kind_bytes, issue, start, end):
        self.op_id, self.kind, self.issue, self.start, self.end = op_id, (op, kind_bytes), issue, start, end


class Lane:
    """A worker thread's (gloo) or stream's (NCCL) operations without a group: the first SAMPLE of them (``items``,
    in end order), and what is known of all of them: the group sizes they state, and whether every one is
    DTensor-wrapped, inside an FSDP annotation, run by gloo."""
    __slots__ = ("rank", "thread", "items", "implied", "wrapped", "fsdp", "gloo")

    def __init__(self, rank, thread, items, implied, wrapped, fsdp, gloo):
        self.rank, self.thread, self.items, self.implied = rank, thread, items, implied
        self.wrapped, self.fsdp, self.gloo = wrapped, fsdp, gloo


# ------------------------------------------------------------------ collectives
def _lanes(con, judged, context=True):
    """The lanes of the judged ranks (Lane), each with its first SAMPLE operations; whether they sit inside FSDP
    annotations only with ``context`` (no candidate named after an axis: it decides nothing, and costs a scan of
    the events)."""
    fsdp = ("""SELECT DISTINCT o.rank, o.op_id FROM c o JOIN events e
                ON e.rank = o.rank AND e.tid = o.tid AND e.name LIKE 'FSDP::%'
               AND e.ts_ns <= o.host_ts_ns AND e.ts_ns + e.dur_ns >= o.host_ts_ns + o.host_dur_ns"""
            if context else "SELECT rank, op_id FROM c WHERE false")
    lanes = con.execute(
        f"""
        WITH c AS (SELECT c.*, c.exec_ts_ns + c.exec_dur_ns AS end_ns, {KIND_BYTES} AS kind_bytes,
                          {IMPLIED_SIZE} AS implied
                   FROM comm_ops c WHERE {OPEN_LANE} AND list_contains(?, c.rank)),
        f AS ({fsdp}),
        s AS (SELECT c.*, f.op_id IS NOT NULL AS fsdp,
                     row_number() OVER (PARTITION BY c.rank, c.exec_stream ORDER BY c.end_ns, c.op_id) AS k
              FROM c LEFT JOIN f ON f.rank = c.rank AND f.op_id = c.op_id)
        SELECT rank, exec_stream,
               list({{'op_id': op_id, 'op': op, 'kind_bytes': kind_bytes, 'issue': host_ts_ns, 'start': exec_ts_ns,
                     'end': end_ns}} ORDER BY k) FILTER (WHERE k <= {SAMPLE}),
               coalesce(list(DISTINCT implied) FILTER (WHERE coalesce(implied, 0) <> 0), []),
               bool_and(coalesce(name LIKE '_c10d_functional::%', false)), bool_and(fsdp),
               bool_and(coalesce(kernel LIKE 'gloo:%', false))
        FROM s GROUP BY rank, exec_stream ORDER BY rank, exec_stream
        """, [judged]).fetchall()
    return [Lane(rank, thread, [Op(**o) for o in items], set(implied), wrapped, fsdp, gloo)
            for rank, thread, items, implied, wrapped, fsdp, gloo in lanes]


def _collectives(con, judged, groups):
    """{(rank, thread): (group, why)} for the lanes of the judged ranks."""
    lanes = _lanes(con, judged, context=any(g.axis for r in judged for g in groups[r]))
    by_kind = _members(con, lanes, groups)
    per_rank, gloo = defaultdict(dict), defaultdict(dict)
    for lane in lanes:
        per_rank[lane.rank][lane.thread] = _lane_costs(lane, groups[lane.rank], by_kind)
        gloo[lane.rank][lane.thread] = lane.gloo
    chosen = {}
    for rank, costs in per_rank.items():
        got = _default_lanes(costs, gloo[rank]) if groups[rank][0].default else _assign(costs, groups[rank])
        for thread, found in got.items():
            chosen[(rank, thread)] = found
    return chosen


def _members(con, lanes, groups):
    """{(rank, kind): Timeline} of the operations the lanes' samples are paired with: for each member a sample is
    compared with (_checked) and each kind in it, the member's operations of that kind, in end order, up to the
    last that a pairing can look at (_match: ending within the longest such operation past the sample's last end)."""
    horizon = {}
    for lane in lanes:
        last = {}
        for o in lane.items:
            last[o.kind] = max(last.get(o.kind, o.end), o.end)
        for g in groups[lane.rank]:
            if _ruled_out(lane, g):
                continue
            for m in _checked(g, lane.rank):
                for kind, end in last.items():
                    horizon[(m, kind)] = max(horizon.get((m, kind), end), end)
    if not horizon:
        return {}
    import pyarrow as pa

    con.register("group_horizons", pa.Table.from_pylist(
        [{"rank": m, "op": op, "kind_bytes": b, "horizon": end} for (m, (op, b)), end in horizon.items()],
        schema=pa.schema([("rank", pa.int64()), ("op", pa.string()), ("kind_bytes", pa.int64()),
                          ("horizon", pa.int64())])))
    rows = con.execute(
        f"""
        WITH c AS (SELECT c.rank, c.op_id, c.op, {KIND_BYTES} AS kind_bytes, c.host_ts_ns AS issue,
                          c.exec_ts_ns AS start, c.exec_ts_ns + c.exec_dur_ns AS end_ns
                   FROM comm_ops c WHERE {TIMED} AND c.rank IN (SELECT rank FROM group_horizons)),
        w AS (SELECT *, max(end_ns - issue) OVER (PARTITION BY rank, op, kind_bytes) AS longest FROM c)
        SELECT w.rank, w.op, w.kind_bytes, any_value(w.longest),
               list(w.end_ns ORDER BY w.end_ns, w.op_id), list(w.issue ORDER BY w.end_ns, w.op_id),
               list(w.end_ns - w.start ORDER BY w.end_ns, w.op_id)
        FROM w JOIN group_horizons h
          ON h.rank = w.rank AND h.op IS NOT DISTINCT FROM w.op AND h.kind_bytes IS NOT DISTINCT FROM w.kind_bytes
        WHERE w.end_ns - w.longest <= h.horizon + {SLACK_NS}
        GROUP BY w.rank, w.op, w.kind_bytes
        """).fetchall()
    con.unregister("group_horizons")
    return {(rank, (op, b)): Timeline(ends, issues, execs, longest)
            for rank, op, b, longest, ends, issues, execs in rows}


class Timeline:
    """A member's operations of one kind, in end order: their ends, issues and exec times; the longest
    lifetime (issue to end) of all of them."""
    __slots__ = ("ends", "issues", "execs", "longest")

    def __init__(self, ends, issues, execs, longest):
        self.ends, self.issues, self.execs, self.longest = ends, issues, execs, longest


def _ruled_out(lane, g):
    """Whether the sizes of the lane's operations state another group size than g's."""
    return bool(lane.implied) and lane.implied != {len(g.members)}


def _lane_costs(lane, candidates, by_kind):
    """{group: (cost, why)} for one lane: its sampled operations' sequence, all of its operations' sizes and
    framework context."""
    items = lane.items
    stats = {}
    for g in candidates:
        if _ruled_out(lane, g):
            stats[g] = None
            continue
        pairs = {m: _match(items, m, by_kind) for m in _checked(g, lane.rank)}
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
    wrapped = lane.wrapped
    fsdp = not wrapped and lane.fsdp
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
            agrees = (g.axis in ACTIVATION_AXES) if wrapped else (g.axis == "dp")
            cost += -CONTEXT if agrees else CONTEXT
            why += ("; DTensor-wrapped" if wrapped else "; FSDP") + (", as its axis says" if agrees else "")
        out[g] = (cost, why)
    return out


def _default_lanes(costs, gloo):
    """{lane: (group, why)} for a rank whose only candidate is the synthesized default group: the lanes
    whose whole sequence matches on every member and ends with it (consistent); none when more lanes
    pass than one group runs on (1 NCCL stream, THREADS_PER_GROUP gloo threads): which is unknown."""
    passed = {t: g for t, c in costs.items() for g, (cost, _) in c.items() if cost < INCONSISTENT}
    gloo = all(gloo[t] for t in passed)  # gloo[lane]: whether gloo runs every operation of the lane
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


def _match(items, m, by_kind):
    """For each item (in the given order), its partner on rank m as (end skew, partner's exec time), or
    None: items are paired in end order, one to one, with m's operation of the same kind whose lifetime
    overlaps theirs (issued before the item ended, ended after it was issued) and whose end is nearest."""
    out = [None] * len(items)
    used = defaultdict(int)  # kind -> next usable index (order-preserving, one to one)
    for k in sorted(range(len(items)), key=lambda k: items[k].end):
        o = items[k]
        kind, end, issue = o.kind, o.end, o.issue
        line = by_kind.get((m, kind))
        if line is None:
            continue
        e, issues, reach = line.ends, line.issues, line.longest
        lo, i = used[kind], bisect_left(e, end)
        best, best_j = None, None
        # right: ends grow; past the longest operation's reach, none was issued before o ended
        for j in range(max(i, lo), len(e)):
            ej = e[j]
            if (best is not None and ej - end >= best) or ej - reach > end + SLACK_NS:
                break
            if issues[j] <= end + SLACK_NS and issue <= ej + SLACK_NS:
                best, best_j = ej - end, j
        # left: ends shrink; before o was issued, none overlaps it
        for j in range(min(i, len(e)) - 1, lo - 1, -1):
            ej = e[j]
            if (best is not None and end - ej >= best) or ej < issue - SLACK_NS:
                break
            if issues[j] <= end + SLACK_NS:
                best, best_j = end - ej, j
        if best is not None:
            used[kind] = best_j + 1
            out[k] = (best, line.execs[best_j])
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
# peer: its index in the group as the call states it; any_end: its completion (comm_done_ns); open: no group yet
P2pOp = namedtuple("P2pOp", "rank op_id op bytes_in peer issue any_end open")


def _point_to_point(con, judged, groups):
    """{(rank, op_id): (group, why)} for the sends and receives without a group of the judged ranks."""
    ops = con.execute(
        """SELECT rank, op_id, op, bytes_in, peer_in_group, host_ts_ns,
                  comm_done_ns(exec_ts_ns, exec_dur_ns, host_ts_ns, host_dur_ns), group_ranks IS NULL
           FROM comm_ops WHERE op IN ('send', 'recv') AND peer_in_group IS NOT NULL""").fetchall()
    judged = set(judged)
    posted = Counter()  # (rank, op, peer_in_group, bytes) -> count
    timed = defaultdict(list)  # (rank, op, peer_in_group, bytes) -> (issue, end)
    todo = []
    for o in map(P2pOp._make, ops):
        posted[(o.rank, o.op, o.peer, o.bytes_in)] += 1
        if o.issue is not None and o.any_end is not None:
            timed[(o.rank, o.op, o.peer, o.bytes_in)].append((o.issue, o.any_end))
        if o.open and o.rank in judged:
            todo.append(o)
    found = {}
    for o in todo:
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

