"""Each host's clock against the first rank's, estimated from the traces themselves.

Every cross-rank number (who arrived last, how long the others waited, the straggler, the critical path) compares
times taken on different hosts, whose clocks differ by as much as the waits being judged. The traces bound those
differences: a member of a blocking collective cannot leave it before its last member arrived, and a receive cannot
complete before its send began. Each such pair of moments bounds the difference of two clocks from one side; a run's
many collectives (in both directions) and a pipeline's transfers (forward and back) bound it from both.

The clocks are the hosts the traces name (``ranks.host``); where a rank names none, each rank is its own clock. The
first rank's clock is the run's. The bounds are closed over every chain of clocks and the clocks placed one by one,
the best bounded first (``_Evidence.solve``): a clock whose bounds hold 0 stays there, one they exclude goes to the
middle of its bounds. So the shifts are applied only where the traces prove the clocks differ: when, as written,
some member left a collective before another arrived, or a receive completed before its send began, by more than
the timestamps' resolution. Otherwise the run is consistent with one clock and nothing
moves (its bounds are still reported). Where matching the collectives itself needs the clocks (gloo's groups are
inferred from ends being together, which an offset breaks) and the bounds contradict every shift, or a clock shares
no operation with the others, a coarse estimate needs no matching (``coarse``); the store is built with it, then
estimated again (``settle``). ``traceparse explain clocks`` defines it.
"""

from __future__ import annotations

import numpy as np

from traceparse.vocabulary.modules import use

# collectives where every member needs every other member's data: none can leave before the last arrives
BLOCKING = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
RESOLUTION_NS = 1_000  # Kineto writes microseconds: a bound broken by less than this is no evidence
MAX_CLOCKS = 512  # clocks estimated at most (a bound per pair of them: 512 hosts, or ranks that name none)
ENDS = 4_096  # ends of each rank looked at (its first), which bounds the pairs compared
BUILDS = 4  # builds of a store at most: as written, moved, moved further, as written again


def settle(con, shifts: dict, attempt: int) -> dict | None:
    """What the build on ``con`` (each rank's times moved by ``shifts``, its ``attempt``-th build) does about its
    clocks: the shifts to build again with, or None to keep it, its clocks rows and load issues written. As written
    (the first build): the estimate's shifts where the traces prove the clocks differ; where the collectives as
    matched contradict every shift, the coarse estimate's. Moved: the estimate's further shifts where they prove
    more (at most ``BUILDS`` builds); where the moved clocks contradict too, the times as written (a last build)."""
    found = estimate(con, moved={r for r, s in shifts.items() if s})
    if found is None:
        return None
    if found.get("too_many"):
        return _keep(con, found, shifts, f"{found['too_many']} clocks (ranks that name no host): more than "
                                         f"{MAX_CLOCKS}, not estimated: times as written (clocks)")
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


def estimate(con, moved=frozenset()) -> dict | None:
    """``{"by": "host" | "rank", "applied": bool, "rows": [clocks rows]}`` for a run of two clocks or more, None for
    a run on one host (or of one rank). ``applied``: the traces prove the clocks differ (``moved``: the ranks moved
    already, by a first estimate: where their estimate lies further than the timestamps' resolution), and
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
    if len(clocks) > MAX_CLOCKS:  # a bound per pair of clocks: beyond this many, said, not estimated
        rows = [(r, clocks[clock_of[r]], 0, None, None, None, 0, 0) for r, _ in ranks]
        return {"by": by, "applied": False, "rows": rows, "contradicted": False, "wait_ns": None,
                "too_many": len(clocks)}
    evidence = _Evidence(con, clock_of, len(clocks))
    got = evidence.solve({clock_of[r] for r in moved})
    shift = got["shift"] if not got["contradicted"] else np.zeros(len(clocks))
    rows = []
    for r, _ in ranks:
        c = clock_of[r]
        rows.append((r, clocks[c], round(shift[c]), _finite(got["low"][c]), _finite(got["high"][c]),
                     _finite(got["estimate"][c]), int(evidence.collectives[c]), int(evidence.transfers[c])))
    wait = con.execute("SELECT median(wait_ns) FROM collective_arrivals WHERE NOT is_last").fetchone()[0]
    return {"by": by, "applied": any(abs(row[2]) > RESOLUTION_NS for row in rows), "rows": rows,
            "contradicted": got["contradicted"], "wait_ns": None if wait is None else round(wait)}


def coarse(con, found: dict) -> dict | None:
    """Where the collectives as matched contradict every shift (matched wrongly: the process groups of gloo
    operations are inferred from their ends being together, which a clock's offset breaks), a first estimate that
    needs no matching: each clock placed against the clocks placed before it (the first rank's first), at the offset
    at which most of their ranks' blocking operations end together (the densest ``tail_ns`` of the differences of
    their ends within ``reach_ns``), where that peak is not chance (its count against a uniform spread of the
    differences, ``chance``: rules/thresholds.toml [clocks]); the clock with the least likely peak first, a peak
    within the tail of 0 placing it at 0 (one clock). ``found`` with those shifts, or None where none moves."""
    from scipy.special import pdtrc  # P(X >= k) of a Poisson count, as 1 - its CDF at k - 1

    from traceparse.thresholds import check_thresholds

    limits = check_thresholds()["clocks"]
    tail, reach, chance = limits["tail_ns"], limits["reach_ns"], limits["chance"]
    ends = {}
    for r, e in con.execute(f"""
            SELECT rank, comm_done_ns(exec_ts_ns, exec_dur_ns, host_ts_ns, host_dur_ns) AS e FROM comm_ops
            WHERE op IN {BLOCKING} AND e IS NOT NULL ORDER BY rank, e""").fetchall():
        ends.setdefault(r, []).append(e)
    clock = {row[0]: row[1] for row in found["rows"]}
    own = {c: np.sort(np.concatenate([np.array(v[:ENDS], np.int64) for r, v in ends.items() if clock[r] == c]
                                     or [np.zeros(0, np.int64)])) for c in set(clock.values())}
    placed = {found["rows"][0][1]: 0}

    def peak(c):
        """(chance of its peak, offset) of clock c against the placed clocks' ends."""
        ref = np.sort(np.concatenate([own[p] + placed[p] for p in placed]))
        lo, hi = np.searchsorted(ref, own[c] - reach), np.searchsorted(ref, own[c] + reach)
        d = np.sort(np.concatenate([ref[a:b] - e for e, a, b in zip(own[c], lo, hi, strict=True)] or
                                   [np.zeros(0, np.int64)]))
        if len(d) < 2:
            return 1.0, 0
        inside = np.searchsorted(d, d + tail, side="right") - np.arange(len(d))
        at = int(inside.argmax())
        offset = int(np.median(d[at:at + inside[at]]))
        return float(pdtrc(int(inside[at]) - 1, len(d) * tail / (2 * reach))), 0 if abs(offset) <= tail else offset

    while len(placed) < len(own):
        p, offset, c = min((*peak(c), c) for c in sorted(own) if c not in placed)
        if p >= chance:
            break
        placed[c] = offset
    if not any(placed.values()):
        return None
    rows = [(r, c, placed.get(c, 0), None, None, None, 0, 0) for r, c, *_ in found["rows"]]
    return {**found, "rows": rows, "applied": True, "contradicted": False}


def issues(found: dict) -> list[tuple]:
    """The load issues of clocks whose shifts were applied: one per clock moved, a warning where the shift is as
    large as the median wait in a collective (the waits it changes), else info."""
    from traceparse.units import bound, duration, first_of

    by_clock = {}
    for r, clock, shift, low, high, _, coll, xfer in found["rows"]:
        by_clock.setdefault((clock, shift, low, high, coll, xfer), []).append(r)
    out = []
    wait = found["wait_ns"]
    for (clock, shift, low, high, coll, xfer), ranks in by_clock.items():
        if not shift:
            continue
        bounds = f"{bound(low)} to {bound(high)}"
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
        use(con, "cp_p2p")
        pairs = con.execute("""
            SELECT p.partner, comm_arrival_ns(s.op, s.exec_ts_ns, s.host_ts_ns), p.rank, r.exec_ts_ns + r.exec_dur_ns
            FROM cp_p2p p
            JOIN comm_ops r ON r.rank = p.rank AND r.op_id = p.op_id AND r.op = 'recv'
            JOIN comm_ops s ON s.rank = p.partner AND s.op_id = p.partner_op
            WHERE r.exec_dur_ns IS NOT NULL AND comm_arrival_ns(s.op, s.exec_ts_ns, s.host_ts_ns) IS NOT NULL""").fetchall()
        # a send began by its call at the latest: gloo's worker annotation of a small send can start after the data
        # was received (a recv of pp4_1f1b_m4 completed 3.2 ms before its send's annotation began)
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

    def constraints(self):
        """L[i, j]: the least ``shift_i - shift_j`` the traces allow (-inf: no bound): a member of clock i left a
        collective no earlier than the last member of clock j arrived; a receive of clock i completed no earlier
        than its send, of clock j, began."""
        low = np.full((self.n, self.n), -np.inf)
        np.fill_diagonal(low, 0.0)
        if len(self.c):
            order = np.argsort(self.c, kind="stable")
            bounds = np.flatnonzero(np.diff(self.c[order])) + 1
            for rows in np.split(order, bounds):
                h = self.h[rows]
                got = self.arrive[rows][None, :] - self.end_min[rows][:, None]  # [i, j]: j's arrival - i's end
                np.maximum.at(low, (np.repeat(h, len(h)), np.tile(h, len(h))), got.ravel())
        np.maximum.at(low, (self.recv_clock, self.send_clock), self.sent - self.got)
        return low

    def lag(self, k: int, shift, fixed) -> float:
        """The shift that ends clock k's collectives with the members of ``fixed`` clocks (their ends moved by
        ``shift``): the median over the collectives they share of their mean end less its own; NaN without one."""
        if not len(self.c):
            return np.nan
        mine = self.h == k
        theirs = fixed[self.h]
        end = self.end_mean + shift[self.h]
        total = np.bincount(self.c, weights=np.where(theirs, end, 0.0))
        count = np.bincount(self.c, weights=theirs.astype(float))
        shared = mine & (count[self.c] > 0)
        return float(np.median(total[self.c[shared]] / count[self.c[shared]] - self.end_mean[shared])) \
            if shared.any() else np.nan

    def solve(self, moved=()) -> dict:
        """Every clock's shift, the first's 0, by the bounds closed over every chain of them (a clock bounded against
        another that is bounded against the first), the best bounded clock first, each fixed before the next is
        looked at: a clock whose bounds hold where it stands (0) stays there unless ``moved`` already (nothing
        proves it off: a rank of the first host, where each rank is a clock, is not moved by its collectives'
        spread of ends); one they exclude at its estimate within them: the middle of its bounds (the least error
        in the worst case; gloo's members leave a collective up to half a millisecond apart, which lining up their
        ends would carry), else, bounded on one side, where its collectives end with the others' (``lag``), else
        the bound it has. ``{shift, low, high, estimate, contradicted}``: per clock its bounds and estimate when
        it was fixed; contradicted: the bounds contradict one another (operations matched wrongly)."""
        d = _closed(self.constraints())
        contradicted = bool((np.diag(d) > RESOLUTION_NS).any())
        shift, low, high, est = (np.zeros(self.n) for _ in range(4))
        fixed = np.zeros(self.n, bool)
        fixed[0] = True
        while not fixed.all():
            lo, hi = d[:, 0], -d[0, :]
            width = np.where(fixed, np.inf, np.where(np.isfinite(hi - lo), hi - lo, np.finfo(float).max))
            k = int(width.argmin())
            lag = self.lag(k, shift, fixed)
            bounded = np.isfinite(lo[k]) and np.isfinite(hi[k])  # the middle: the least error the bounds allow
            middle = (lo[k] + hi[k]) / 2 if bounded else lo[k] if np.isfinite(lo[k]) else \
                hi[k] if np.isfinite(hi[k]) else 0.0
            est[k] = middle if bounded or not np.isfinite(lag) else lag
            low[k], high[k] = lo[k], hi[k]
            off = k in moved or lo[k] > RESOLUTION_NS or hi[k] < -RESOLUTION_NS
            v = float(np.clip(est[k], lo[k], hi[k])) if off and lo[k] <= hi[k] else middle if off else 0.0
            shift[k], fixed[k] = round(v), True
            d[k, 0], d[0, k] = max(d[k, 0], shift[k]), max(d[0, k], -shift[k])
            for via in (k, 0):  # the new bounds, closed again through the clocks they name
                d = np.maximum(d, d[:, via:via + 1] + d[via:via + 1, :])
        return {"shift": shift, "low": low, "high": high, "estimate": est, "contradicted": contradicted}


def _closed(low):
    """The tightest bounds every chain of ``low``'s gives (the longest paths: Floyd and Warshall's, in max-plus)."""
    d = low.copy()
    for k in range(len(d)):
        d = np.maximum(d, d[:, k:k + 1] + d[k:k + 1, :])
    return d
