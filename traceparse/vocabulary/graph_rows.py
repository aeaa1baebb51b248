"""What the step graph (step_graph.py) is built from: the rows of vocabulary/step_graph.sql (where each CPU thread
blocked, what released each communication operation) and each rank's lanes read from them, in one total order."""

import bisect
import sys

from traceparse.store.query import rows
from traceparse.vocabulary.modules import use

SCAN = 10_000  # a guard: events looked at back from a moment for the op holding it


def graph_tables(con):
    """The tables and macros of vocabulary/step_graph.sql, after what they read (p2p_pairs.sql), made once per
    connection."""
    use(con, "cp_completions", "cp_cpu_ops", "cp_blocking")


def rank_rows(con, rank: int) -> dict:
    """Rank ``rank``'s rows of the graph, each in one total order (the same document whatever order the store holds
    its rows in): ``ops`` (its threads' outermost ops), ``blocking``, ``done`` (its communication completions) and
    ``acts`` (its GPU activities, with the communication operation each executes). Names are interned (one string
    per distinct name, not one per row: a rank's thousands of launches of one kernel)."""
    got = {
        "ops": rows(con, "SELECT * FROM cp_cpu_ops(?) ORDER BY s, e, tid, name", [rank]),
        "blocking": rows(con, "SELECT * FROM cp_blocking(?) ORDER BY s, e, tid, kind, op_id, name", [rank]),
        "done": rows(con, "SELECT * FROM cp_completions WHERE rank = ? ORDER BY done_ns, op_id", [rank]),
        "acts": rows(con, """SELECT a.stream, a.name, a.kind, a.start_ns, a.end_ns, a.launch_tid, a.launch_ns,
                                    a.launch_end_ns, c.op_id
                             FROM gpu_activity a
                             LEFT JOIN comm_intervals c ON c.rank = a.rank AND c.ev_id = a.ev_id AND c.part = 'exec'
                             WHERE a.rank = ? ORDER BY a.start_ns, a.end_ns, a.stream, a.name, c.op_id""", [rank]),
    }
    for part in ("ops", "blocking", "acts"):
        for row in got[part]:
            if row["name"] is not None:
                row["name"] = sys.intern(row["name"])
    return got


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
