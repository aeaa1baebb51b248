"""Each host's clock against the first rank's, estimated from the traces themselves.

Every cross-rank number (who arrived last, how long the others waited, the straggler, the critical path) compares
times taken on different hosts, whose clocks differ by as much as the waits being judged. The traces bound those
differences: a member of a blocking collective cannot leave it before its last member arrived, and a receive cannot
complete before its send began. Each such pair of moments bounds the difference of two clocks from one side; a run's
many collectives (in both directions) and a pipeline's transfers (forward and back) bound it from both.

The clocks are the hosts the traces name (``ranks.host``); where a rank names none, each rank is its own clock. The
first rank's clock is the run's. For each other clock the estimate is the shift that lines up the ends of its
collectives with the other members' (the members of a blocking collective leave it within a short tail of one
another), kept within the bounds; without collectives, the middle of the bounds. The clocks are estimated together
(each against the others as estimated, until none moves). The shifts are applied only where the traces prove the
clocks differ: when, as written, some member left a collective before another arrived, or a receive completed before
its send began, by more than the timestamps' resolution. Otherwise the run is consistent with one clock and nothing
moves (its bounds are still reported). Where matching the collectives itself needs the clocks (gloo's groups are
inferred from ends being together, which an offset breaks) and the bounds contradict every shift, or a clock shares
no operation with the others, a coarse estimate needs no matching (``coarse``); the store is built with it, then
estimated again (``settle``). ``traceparse explain clocks`` defines it.
"""

from __future__ import annotations

import numpy as np

# collectives where every member needs every other member's data: none can leave before the last arrives
BLOCKING = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
RESOLUTION_NS = 1_000  # Kineto writes microseconds: a bound broken by less than this is no evidence
ROUNDS = 200  # passes over the clocks at most, each against the others as estimated
ENDS = 4_096  # ends of each rank looked at (its first), which bounds the pairs compared
SETTLED_NS = 10  # a pass that moves no clock by more than this ends the estimate
BUILDS = 4  # builds of a store at most: as written, moved, moved further, as written again


def settle(con, shifts: dict, attempt: int) -> dict | None:
    """What the build on ``con`` (each rank's times moved by ``shifts``, its ``attempt``-th build) does about its
    clocks: the shifts to build again with, or None to keep it, its clocks rows and load issues written. As written
    (the first build): the estimate's shifts where the traces prove the clocks differ; where the collectives as
    matched contradict every shift, the coarse estimate's. Moved: the estimate's further shifts where they prove
    more (at most ``BUILDS`` builds); where the moved clocks contradict too, the times as written (a last build)."""
    found = estimate(con, moved=any(shifts.values()))
    if found is None:
        return None
    if attempt and not shifts:  # the last build, as written: no shift fits the traces
        return _keep(con, found, shifts, "the operations as matched contradict every offset between the clocks "
                                         "(their groups inferred from ends that a clock's offset moves): times as "
                                         "written (clocks)")
    if found["applied"] and attempt + 1 < BUILDS:
        return {r: shifts.get(r, 0) + s for r, _, s, *_ in found["rows"]}
    unseen = any(not (coll or xfer) for _, _, _, _, _, _, coll, xfer in found["rows"][1:])
    if found["contradicted"] or (unseen and not attempt):  # matched wrongly, or no operation shared with a clock
        first = coarse(con, found) if not attempt else None
        if first is not None:
            return {r: s for r, _, s, *_ in first["rows"]}
        if attempt:
            return {}
        if found["contradicted"]:
            return _keep(con, found, shifts, "the operations as matched contradict every offset between the "
                                             "clocks, and their ends name none: times as written (clocks)")
    return _keep(con, found, shifts, None)


def _keep(con, found: dict, shifts: dict, why: str | None):
    """Write the clocks rows (shifts and bounds in all: ``shifts`` plus this build's) and their load issues."""
    def moved(v, r):
        return None if v is None else v + shifts.get(r, 0)

    rows = [(r, clock, shifts.get(r, 0), moved(low, r), moved(high, r), moved(est, r), coll, xfer)
            for r, clock, _, low, high, est, coll, xfer in found["rows"]]
    con.executemany("INSERT INTO clocks VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    said = issues({**found, "rows": rows}) + ([(None, "info", why, 1)] if why else [])
    if said:
        con.executemany("INSERT INTO load_issues VALUES (?, ?, ?, ?)", said)


def estimate(con, moved: bool = False) -> dict | None:
    """``{"by": "host" | "rank", "applied": bool, "rows": [clocks rows]}`` for a run of two clocks or more, None for
    a run on one host (or of one rank). ``applied``: the traces prove the clocks differ (``moved``: the clocks were
    moved already, by a first estimate: where the estimate lies further than the timestamps' resolution), and
    ``rows``' shift_ns is what each rank's times move by; otherwise every shift_ns is 0."""
    ranks = con.execute("SELECT rank, host FROM ranks ORDER BY rank").fetchall()
    if len(ranks) < 2:
        return None
    by = "host" if all(h for _, h in ranks) else "rank"
    names = [f"host {h}" if by == "host" else f"rank {r}" for r, h in ranks]
    clocks = sorted(set(names), key=names.index)  # the first rank's clock first: the run's
    if len(clocks) < 2:
        return None
    clock_of = {r: clocks.index(n) for (r, _), n in zip(ranks, names, strict=True)}
    evidence = _Evidence(con, clock_of, len(clocks))
    at_zero = evidence.bounds(np.zeros(len(clocks)))
    proven = bool(((at_zero[0] > RESOLUTION_NS) | (at_zero[1] < -RESOLUTION_NS)).any())
    shift = evidence.solve() if proven or moved else np.zeros(len(clocks))
    proven = proven or bool((np.abs(shift) > RESOLUTION_NS).any())
    low, high, est = evidence.bounds(shift)
    low[0] = high[0] = est[0] = 0.0  # the first rank's clock is the run's
    contradicted = bool((low > high + RESOLUTION_NS).any())  # no shift fits every bound: operations matched wrongly
    if contradicted:
        shift = np.zeros(len(clocks))
    rows = []
    for r, _ in ranks:
        c = clock_of[r]
        rows.append((r, clocks[c], round(shift[c]), _finite(low[c]), _finite(high[c]),
                     _finite(est[c]), int(evidence.collectives[c]), int(evidence.transfers[c])))
    wait = con.execute("SELECT median(wait_ns) FROM collective_arrivals WHERE NOT is_last").fetchone()[0]
    return {"by": by, "applied": proven and not contradicted and any(row[2] for row in rows), "rows": rows,
            "contradicted": contradicted, "wait_ns": None if wait is None else round(wait)}


def coarse(con, found: dict) -> dict | None:
    """Where the collectives as matched contradict every shift (matched wrongly: the process groups of gloo
    operations are inferred from their ends being together, which a clock's offset breaks), a first estimate that
    needs no matching: the offset of each clock against the first rank's at which most of their ranks' blocking
    operations end together (the densest ``tail_ns`` of the differences of their ends within ``reach_ns``), where
    that peak is not chance (its count against a uniform spread of the differences, ``chance``: rules/thresholds.toml
    [clocks]). ``found`` with
    those shifts, or None where no clock has such a peak further from 0 than the tail."""
    from scipy.special import pdtrc  # P(X >= k) of a Poisson count, as 1 - its CDF at k - 1

    from traceparse.thresholds import check_thresholds

    limits = check_thresholds()["clocks"]
    tail, reach, chance = limits["tail_ns"], limits["reach_ns"], limits["chance"]
    ends = {}
    for r, e in con.execute(f"""
            SELECT rank, coalesce(exec_ts_ns + exec_dur_ns, host_ts_ns + host_dur_ns) AS e FROM comm_ops
            WHERE op IN {BLOCKING} AND e IS NOT NULL ORDER BY rank, e""").fetchall():
        ends.setdefault(r, []).append(e)
    clock = {row[0]: row[1] for row in found["rows"]}
    first = found["rows"][0][1]
    ref = np.concatenate([np.array(v[:ENDS], np.int64) for r, v in ends.items() if clock[r] == first] or
                         [np.zeros(0, np.int64)])
    ref.sort()
    shift = {}
    for name in sorted({c for c in clock.values() if c != first}):
        diffs = []
        for r, v in ends.items():
            if clock[r] != name:
                continue
            own = np.array(v[:ENDS], np.int64)
            lo, hi = np.searchsorted(ref, own - reach), np.searchsorted(ref, own + reach)
            for e, a, b in zip(own, lo, hi, strict=True):
                diffs.append(ref[a:b] - e)
        d = np.sort(np.concatenate(diffs)) if diffs else np.zeros(0, np.int64)
        if len(d) < 2:
            continue
        inside = np.searchsorted(d, d + tail, side="right") - np.arange(len(d))
        at = int(inside.argmax())
        expected = len(d) * tail / (2 * reach)
        offset = int(np.median(d[at:at + inside[at]]))
        if pdtrc(int(inside[at]) - 1, expected) < chance and abs(offset) > tail:  # within the tail: one clock
            shift[name] = offset
    if not shift:
        return None
    rows = [(r, c, shift.get(c, 0), None, None, None, 0, 0) for r, c, *_ in found["rows"]]
    return {**found, "rows": rows, "applied": True, "contradicted": False}


def issues(found: dict) -> list[tuple]:
    """The load issues of clocks whose shifts were applied: one per clock moved, a warning where the shift is as
    large as the median wait in a collective (the waits it changes), else info."""
    from traceparse.units import duration, first_of

    by_clock = {}
    for r, clock, shift, low, high, _, coll, xfer in found["rows"]:
        by_clock.setdefault((clock, shift, low, high, coll, xfer), []).append(r)
    out = []
    wait = found["wait_ns"]
    for (clock, shift, low, high, coll, xfer), ranks in by_clock.items():
        if not shift:
            continue
        bounds = f"{duration(low, sign=True) if low is not None else 'unbounded'} to " \
                 f"{duration(high, sign=True) if high is not None else 'unbounded'}"
        material = wait is not None and abs(shift) >= wait
        out.append((None, "warning" if material else "info",
                    f"clock of {clock} (rank {first_of(ranks)}) differs from the first rank's: its times moved by "
                    f"{duration(shift, sign=True)} (the traces allow {bounds}; from {coll} collectives and {xfer} "
                    f"transfers shared with other clocks), against a median wait in a collective of "
                    f"{duration(wait) if wait is not None else 'unknown'} (clocks)", len(ranks)))
    return out


def _finite(v) -> int | None:
    return round(v) if np.isfinite(v) else None


class _Evidence:
    """The moments that bound the clocks: per collective and clock, its members' latest arrival, earliest end and
    mean end; per transfer, when the send began and the receive completed, with their clocks."""

    def __init__(self, con, clock_of: dict, n: int):
        self.n = n
        coll = con.execute(f"""
            SELECT a.match_key, a.rank, c.exec_ts_ns, c.exec_ts_ns + c.exec_dur_ns
            FROM collective_arrivals a JOIN comm_ops c USING (rank, op_id)
            WHERE a.basis = 'execution' AND a.op IN {BLOCKING} AND c.exec_dur_ns IS NOT NULL
            ORDER BY a.match_key, a.rank""").fetchall()
        keys, clock, arrive, end = [], [], [], []
        index = {}
        for k, r, a, e in coll:
            keys.append(index.setdefault(k, len(index)))
            clock.append(clock_of[r])
            arrive.append(a)
            end.append(e)
        self.base = min(arrive, default=0)  # times less this one: exact in float64 (below 2^53 ns, 104 days)
        self._collectives(np.array(keys, np.int64), np.array(clock, np.int64), self._times(arrive), self._times(end))
        con.execute(_p2p_sql())
        pairs = con.execute("""
            SELECT p.partner, coalesce(s.exec_ts_ns, s.host_ts_ns), p.rank, r.exec_ts_ns + r.exec_dur_ns
            FROM cp_p2p p
            JOIN comm_ops r ON r.rank = p.rank AND r.op_id = p.op_id AND r.op = 'recv'
            JOIN comm_ops s ON s.rank = p.partner AND s.op_id = p.partner_op
            WHERE r.exec_dur_ns IS NOT NULL AND coalesce(s.exec_ts_ns, s.host_ts_ns) IS NOT NULL""").fetchall()
        pairs = [(clock_of[s], sent, clock_of[r], got) for s, sent, r, got in pairs if clock_of[s] != clock_of[r]]
        if not coll and pairs:
            self.base = min(p[1] for p in pairs)
        self.send_clock = np.array([p[0] for p in pairs], np.int64)
        self.sent = self._times([p[1] for p in pairs])
        self.recv_clock = np.array([p[2] for p in pairs], np.int64)
        self.got = self._times([p[3] for p in pairs])
        self.transfers = np.bincount(np.concatenate([self.send_clock, self.recv_clock]), minlength=n)

    def _times(self, ns: list):
        return (np.array(ns, np.int64) - self.base).astype(np.float64)

    def _collectives(self, keys, clock, arrive, end):
        """One row per collective and clock, of collectives with members on two clocks or more."""
        if not len(keys):
            self.c = self.h = np.zeros(0, np.int64)
            self.arrive = self.end_min = self.end_mean = np.zeros(0)
            self.collectives = np.zeros(self.n, np.int64)
            return
        pair = keys * self.n + clock
        u, inv = np.unique(pair, return_inverse=True)
        c, h = u // self.n, u % self.n
        last = np.full(len(u), -np.inf)
        np.maximum.at(last, inv, arrive)
        first_end = np.full(len(u), np.inf)
        np.minimum.at(first_end, inv, end)
        mean_end = np.bincount(inv, weights=end) / np.bincount(inv)
        spread = np.bincount(c)  # clocks per collective
        keep = spread[c] >= 2
        self.c, self.h = np.unique(c[keep], return_inverse=True)[1], h[keep]
        self.arrive, self.end_min, self.end_mean = last[keep], first_end[keep], mean_end[keep]
        self.collectives = np.bincount(self.h, minlength=self.n)

    def bounds(self, shift) -> tuple:
        """(low, high, estimate) of each clock's shift, the others' at ``shift``."""
        low, high = np.full(self.n, -np.inf), np.full(self.n, np.inf)
        est = np.full(self.n, np.nan)
        if len(self.c):
            a, e, m = self.arrive + shift[self.h], self.end_min + shift[self.h], self.end_mean + shift[self.h]
            others_last = _others(a, self.c, np.maximum, -np.inf)
            others_first_end = _others(e, self.c, np.minimum, np.inf)
            # its members' earliest end after the others' last arrival; its latest arrival before their first end
            np.maximum.at(low, self.h, others_last - self.end_min)
            np.minimum.at(high, self.h, others_first_end - self.arrive)
            total, count = np.bincount(self.c, weights=m), np.bincount(self.c)
            others_mean = (total[self.c] - m) / (count[self.c] - 1)
            est = _medians(others_mean - self.end_mean, self.h, self.n)  # the shift that ends it with the others
        if len(self.sent):  # a receive completes after its send began: the receiver's clock no earlier, the sender's
            np.maximum.at(low, self.recv_clock, self.sent + shift[self.send_clock] - self.got)  # no later
            np.minimum.at(high, self.send_clock, self.got + shift[self.recv_clock] - self.sent)
        with np.errstate(invalid="ignore"):
            middle = np.where(np.isfinite(low) & np.isfinite(high), (low + high) / 2,
                              np.where(np.isfinite(low), low, np.where(np.isfinite(high), high, 0.0)))
        est = np.where(np.isnan(est), middle, est)
        return low, high, est

    def solve(self):
        """Every clock's shift, the first's 0: each at its estimate within its bounds (their middle where they
        contradict each other), the others' as estimated, until none moves."""
        shift = np.zeros(self.n)
        for _ in range(ROUNDS):
            low, high, est = self.bounds(shift)
            new = np.where(low <= high, np.clip(est, low, high), (low + high) / 2)
            new = np.where(np.isfinite(new), new, shift)
            new[0] = 0.0
            moved = np.abs(new - shift).max()
            shift = new
            if moved <= SETTLED_NS:
                break
        return np.round(shift)


def _medians(v, group, n: int):
    """The median of ``v`` per group (NaN for a group without rows), as numpy.median computes each."""
    order = np.lexsort((v, group))
    count = np.bincount(group, minlength=n)
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    out = np.full(n, np.nan)
    has = count > 0
    lo, hi = first[has] + (count[has] - 1) // 2, first[has] + count[has] // 2
    out[has] = (v[order][lo] + v[order][hi]) / 2
    return out


def _others(v, group, reduce, empty):
    """Per row, ``reduce`` of ``v`` over the other rows of its group (the group's best, else its second best)."""
    n = group.max() + 1
    best = np.full(n, empty)
    reduce.at(best, group, v)
    is_best = v == best[group]
    first = np.zeros(len(v), bool)  # the first row at the group's best stands for it; a tie leaves the best to others
    order = np.flatnonzero(is_best)
    _, at = np.unique(group[order], return_index=True)
    first[order[at]] = True
    second = np.full(n, empty)
    reduce.at(second, group[~first], v[~first])
    return np.where(first, second[group], best[group])


def _p2p_sql() -> str:
    from traceparse.store.query import sql_file

    return sql_file("traceparse.vocabulary", "p2p_pairs.sql")
