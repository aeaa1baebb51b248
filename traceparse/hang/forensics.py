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
  group diverges there. An all_to_all's sizes are compared only where its group's earlier all_to_alls show even
  splits (one size, as input and output, on every member: ``_even``); with uneven splits, which no dump records, in
  total (``_a2a_totals``: the elements all members send equal those all receive where they agree). A coalesced
  call (one entry, one sequence number, one size per tensor) has its tensors compared one by one
  (``_coalesced_differ``). A call every member entered and none is
  known to have completed is ``not_completed``;
- **sends and receives** are paired per direction in issue order (the k-th send from a to b with the k-th
  receive at b from a); the first one left without a partner is a ``p2p_mismatch`` (a send no one receives, or
  both sides receiving). gloo's Flight Recorder records none: the send or receive a rank was blocked in when it
  dumped (``fr_inflight``, from the plugin's dumper) is added, numbered among the rank's point-to-point calls on
  the group (its ``op_id`` less the collectives issued on the group before it).

**The root cause first.** Each rank's program is the order of its calls across all its groups: its steps (the
period of its calls, up to where the step that went wrong stops repeating), continued, place every call of any
group, issued or not (``_Program``). A divergence is a **root** when the call itself is wrong (an op, size or dtype
mismatch, ``not_completed``, a ``p2p_mismatch``), or when one rank missing from it went past it (a call of its, in
any group, that its program puts after this one: it ``skipped`` this one), left no dump, or stopped before it
without being blocked in any call a divergence holds and without missing an earlier one (stuck elsewhere). The
others are **consequences**, linked only to divergences already placed, roots first: each rank missing from one is
blocked in a call of a placed divergence that its program puts first (``explained_by``), or missing from a placed
one its program puts first (``never_reached``); a member that died (no dump) missing from the call whose members'
records disagree died of that mismatch, which stays the root (``died_of``). So the links (``links``, and ``roots``:
the root causes a consequence follows from) always point to an earlier divergence of the list and form no cycle;
divergences that follow only from one another (their ranks' programs order the calls each its own way) are taken
as roots, the first issued first. Roots come first (those a common missing rank would have reached first before the
others, else the one issued first), then the consequences in the order they were linked.

Each group is named by its ranks, its mesh dimension (from its description, ``mesh_tp``) and its strategy and
variant (the tags of the traces' operations on that group and op, when traces were loaded). A rank missing from it
is shown with its last call, the calls its dump holds not completed (``blocked_in``) and, when its dump has an
in-flight record, where its training thread was at the dump (``at_dump``). Dumps that contradict each other (or
themselves: a rank calling on a group its own ``pg_config`` lists without it) on a group's members are reported
(``contradictions``), never passed over.

**Membership before conclusions** (``_judgeable``, ``_unjudged``): a group some of whose members left no evidence
(no dump; from traces alone, no trace) and on which no divergence names exactly them cannot be judged
(``incomplete``; with no divergence, the verdict is ``incomplete``, not "no divergence"). **The op** of a dumped
collective comes from the best evidence (``_name_ops``): the traces' c10d op, else the sizes.
"""

import json
from collections import defaultdict
from statistics import median

from traceparse.store.query import rows, sql_file, table_rows

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
    con.execute(sql_file(__package__, "forensics.sql"))
    dumped = {r["rank"] for r in table_rows(con, "fr_dumps", columns="rank")}
    traced = {r["rank"] for r in table_rows(con, "ranks", columns="rank")}
    calls = _fr_calls(con) if dumped else _trace_calls(con)
    at_dump = {w["rank"]: w for w in table_rows(con, "fr_inflight")}
    calls += _inflight_p2p(calls, at_dump.values())
    reporting = dumped or traced
    cut_off = {r["rank"] for r in table_rows(con, "ranks", columns="rank", where="cut_off")}
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
            found += [d, *d.pop("_also", ())]  # a mismatch a dead member died of: the death, its consequence
    found = _root_causes(_judgeable(found, reporting, bool(dumped)), by_rank, programs)
    for d in found:
        _describe(con, d, by_rank, at_dump)
    contradictions = _contradictions(con)
    incomplete = _unjudged(con, found, reporting, "dump" if dumped else "trace")
    if dumped and traced - dumped:
        notes.append(f"ranks with a trace but no Flight Recorder dump: {sorted(traced - dumped)}")
    notes += _membership_notes(con) if dumped else []
    if not found and calls and dumped and not at_dump and not any(c["op"] in P2P for c in calls) and _has_p2p(con):
        notes.append(_p2p_unseen(con, calls, programs))
    notes += [f"{r['file']}: {r['what']}" for r in table_rows(con, "hang_empty_folders", "file")]
    return json.loads(json.dumps({
        "version": VERSION,
        "source": "flight_recorder" if dumped else "traces",
        "ranks": sorted(reporting),
        "verdict": ("divergence" if found else "contradiction" if contradictions else "incomplete" if incomplete
                    else "no_divergence"),
        "divergence": found[0] if found else None,
        "divergences": found,
        "contradictions": contradictions,
        "incomplete": incomplete,
        "last_completed": _last_completed(calls),
        "notes": notes,
    }, default=str))


# ------------------------------------------------------------------ calls and what is known of them
def _fr_calls(con) -> list[dict]:
    got = table_rows(con, "hang_fr_calls", "rank, ord")
    for c in got:
        c["frames"] = json.loads(c["frames"] or "[]")
        c["group"] = (c["pg_name"], tuple(c["group_ranks"] or ()))
        c["outcome"] = ("completed" if c["state"] == "completed" else "in_flight" if not c["retired"]
                        else "ended" if c["backend"] == "gloo" else "failed")
    _name_ops(con, got)
    return got


def _numel(sizes) -> int | None:
    try:
        shapes = json.loads(sizes) if isinstance(sizes, str) else sizes
        total = 0
        for shape in shapes:
            n = 1
            for x in shape:
                n *= int(x)
            total += n
        return total
    except (TypeError, ValueError):
        return None


def _name_ops(con, calls) -> None:
    """Name each dumped collective's op from the best evidence (``op_named_by``; the dump's op kept in
    ``op_recorded``): gloo runs a reduce-scatter as an all-reduce and its Flight Recorder names it ``all_reduce``.

    1. The traces: per rank and group, the trace's collectives (its c10d ops, in issue order) are aligned with the
       dump's by sequence number, else by the one offset at which their input sizes agree; an op the dump names
       otherwise than the trace, for a (group, op, input sizes, output sizes) that the traces name one way only, is
       renamed on every rank, in every step (the hung call is seldom in a profiled step).
    2. Else the sizes: an ``all_reduce`` (input = output) whose input is the group size times its output is a
       reduce-scatter, whose output is the group size times its input an all-gather."""
    traced = defaultdict(list)
    for t in table_rows(con, "hang_traced_collectives", "rank, host_ts_ns, op_id"):
        traced[(t["rank"], t["pg_name"], tuple(t["group_ranks"]))].append((t["op"], t["name"], t["in_nelems"]))
    mine = defaultdict(dict)
    for c in calls:
        if c["op"] not in P2P and c["seq"] is not None and c["group_ranks"]:
            mine[(c["rank"], c["pg_name"], tuple(c["group_ranks"]))][c["seq"]] = c
    seen = defaultdict(set)  # (group, dump op, input sizes, output sizes) -> {(trace op, its c10d name)}
    for key, ts in traced.items():
        fr = mine.get(key)
        if not fr:
            continue
        sizes = {s: _numel(c["input_sizes"]) for s, c in fr.items()}

        def agrees(o, ts=ts, sizes=sizes):
            pairs = [(sizes.get(o + i + 1), t[2]) for i, t in enumerate(ts) if o + i + 1 in sizes]
            return bool(pairs) and all(a == b for a, b in pairs)

        offsets = [0] if agrees(0) else [o for o in {s - 1 for s, n in sizes.items() if n is not None and n == ts[0][2]} if agrees(o)]
        if len(offsets) != 1:
            continue
        for i, (op, name, _) in enumerate(ts):
            if (c := fr.get(offsets[0] + i + 1)) is not None:
                seen[(c["group"], c["op"], c["input_sizes"], c["output_sizes"])].add((op, name))
    for c in calls:
        if c["op"] in P2P or not c["group_ranks"]:
            continue
        named = seen.get((c["group"], c["op"], c["input_sizes"], c["output_sizes"]), set())
        n, n_in, n_out = len(c["group_ranks"]), _numel(c["input_sizes"]), _numel(c["output_sizes"])
        if len(named) == 1 and (op := next(iter(named)))[0] != c["op"]:
            c["op_recorded"], c["op"] = c["op"], op[0]
            c["op_named_by"] = f"the trace's {op[1]}"
        elif not named and c["op"] == "all_reduce" and n > 1 and n_in and n_out and n_in != n_out:
            op = "reduce_scatter" if n_in == n * n_out else "all_gather" if n_out == n * n_in else None
            if op:
                c["op_recorded"], c["op"] = c["op"], op
                c["op_named_by"] = (f"the sizes: input {n_in:,} elements, output {n_out:,}, on a group of {n}")


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
    got = table_rows(con, "hang_trace_calls", "rank, time_ns")
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


def _steps(tokens, short: int) -> tuple[int, int | None]:
    """``(k, p)``: the calls ``tokens[:k]`` repeat every ``p`` (``_period``), for the largest ``k``: the last calls
    (of the step that went wrong) that break the pattern left out; ``(len(tokens), None)`` when they never repeat.
    Up to ``short`` calls every ``k`` down to half of them is tried (a pattern seen in fewer is no program);
    beyond, the period of the first half, followed as far as it holds (O(n))."""
    n = len(tokens)
    if (p := _period(tokens)) is not None:
        return n, p
    if n <= short:
        return next(((k, p) for k in range(n - 1, max(n // 2, 2) - 1, -1) if (p := _period(tokens[:k])) is not None),
                    (n, None))
    if (p := _period(tokens[:n // 2])) is None:
        return n, None
    k = n // 2
    while k < n and tokens[k] == tokens[k - p]:
        k += 1
    return (k, q) if (q := _period(tokens[:k])) is not None else (n, None)


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
    """A rank's program order of calls across all its groups: its steps (the calls it issued, up to where they stop
    repeating: the step that went wrong may skip or add a call), and where those steps, continued, put any call of
    any group (``pos``), issued or not. A call issued after the steps that repeat is placed where the steps put it,
    not where it was issued, so a call the rank skipped and the later calls it went on to are all placed in the
    order its program has them."""

    SHORT = 256  # up to this many calls, the steps are looked for with each number of last calls left out

    def __init__(self, cs):
        tokens = [_token(c) for c in cs]
        keep, self.p = _steps(tokens, self.SHORT)
        self.dropped = len(cs) - keep
        settled = cs[:keep]
        self.tokens = tokens[:keep]
        self.at = {(c["group"], c["op"] in P2P, c["seq"]): i for i, c in enumerate(settled)}
        self.last = {}
        for c in settled:
            key = (c["group"], c["op"] in P2P)
            self.last[key] = max(self.last.get(key, 0), c["seq"] or 0)

    def next_call(self) -> tuple | None:
        """(group, op, seq) of the call its own steps issue after the last it holds; None when they show none."""
        if not self.p or not self.tokens or self.dropped:
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
def _sizes_differ(here, even=None) -> bool:
    """Whether the members' sizes disagree, compared as torch's analyzer does (not an all_to_all's, whose splits may
    be uneven); an all_to_all's too where its group's earlier calls show even splits (``even``: ``_even``)."""
    op = here[0]["op"]
    for key, skip in (("input_sizes", NOT_SIZE_IN), ("output_sizes", NOT_SIZE_OUT)):
        known = {c[key] for c in here if c[key] not in (None, "null")}
        if (op not in skip or even is not None) and len(known) > 1:
            return True
    return False


def _even(per, present, seq, op) -> dict | None:
    """An all_to_all's splits are not recorded, and uneven splits give every member other sizes. Where every earlier
    call of ``op`` on the group that the members' records hold had one size, the same as input and as output, on every
    member, its splits are even: members that then differ at ``seq`` disagree. ``{"sizes", "seqs"}`` or None."""
    if op not in NOT_SIZE_IN:
        return None
    earlier = [c for m in present for s, c in per[m].items() if s < seq and c["op"] == op]
    shapes = {(c["input_sizes"], c["output_sizes"]) for c in earlier}
    if len(shapes) != 1 or len({*next(iter(shapes))}) != 1 or None in next(iter(shapes)):
        return None
    return {"sizes": next(iter(shapes))[0], "seqs": sorted({c["seq"] for c in earlier})}


def _a2a_totals(here) -> dict | None:
    """An all_to_all with uneven splits, which its members' records do not hold (gloo's and NCCL's dumps record each
    member's whole input and output): whatever the splits, every element one member sends another receives, so
    the elements all members send and all receive are equal where they agree. Unequal (every member recorded):
    some pair's splits disagree, which pair not recorded. ``{"sent", "received", "why"}`` or None."""
    if here[0]["op"] not in NOT_SIZE_IN or len(here) < 2:
        return None
    sent = [_numel(c["input_sizes"]) for c in here]
    got = [_numel(c["output_sizes"]) for c in here]
    if None in sent or None in got or sum(sent) == sum(got):
        return None
    return {"sent": sum(sent), "received": sum(got), "why": (
        f"the members send {sum(sent):,} elements in all and receive {sum(got):,}: some rank's input split to a peer "
        "differs from that peer's output split from it (uneven splits, compared in total: the dumps record each "
        "member's whole input and output, not its splits, so which pair disagrees is not recorded)")}


def _coalesced_differ(here) -> dict | None:
    """A coalesced call (``_coalescing_manager``, ``all_reduce_coalesced``: one entry, one sequence number, one
    size per tensor): the tensors whose sizes differ across members. ``{"tensors", "differ", "why"}`` or None."""
    try:
        per = {c["rank"]: json.loads(c["input_sizes"]) if isinstance(c["input_sizes"], str) else c["input_sizes"]
               for c in here}
    except (TypeError, ValueError):
        return None
    counts = {len(v) for v in per.values() if isinstance(v, list)}
    if len(counts) != 1 or (n := counts.pop()) < 2:
        return None
    differ = [i for i in range(n) if len({json.dumps(v[i]) for v in per.values()}) > 1]
    if not differ:
        return None
    said = "; ".join(f"tensor {i + 1}: " + ", ".join(f"rank {r} {v[i]}" for r, v in sorted(per.items()))
                     for i in differ)
    return {"tensors": n, "differ": [i + 1 for i in differ], "why": (
        f"one coalesced call of {n} tensors (the dumps record the block as one entry under one sequence number); "
        f"the tensors compared one by one: {said}")}


def _mismatch(here, even) -> str | None:
    """The kind of disagreement between the calls members entered at one sequence number, or None."""
    if len({c["op"] for c in here}) > 1:
        return "op_mismatch"
    if _sizes_differ(here, even):
        return "size_mismatch"
    if len({c["input_dtypes"] for c in here}) > 1:
        return "dtype_mismatch"
    return None


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
        even = _even(per, entered, seq, here[0]["op"]) if len({c["op"] for c in here}) == 1 else None
        wrong = _mismatch(here, even) if entered else None
        rows_ = _a2a_totals(here) if not wrong and not missing and even is None else None
        wrong = "size_mismatch" if rows_ else wrong
        kind = None
        if missing:
            kind = "rank_died" if set(missing) <= gone else "missing_rank"
        elif wrong:
            kind = wrong
        if kind:
            d = _divergence(members, kind, here, entered, sorted(missing), seq)
            if absent and never is not None and seq >= never:
                d["why"] = (f"ranks {absent} left no call on this group (no dump): they never entered " + (
                    "the earliest call the others are not known to have completed (a collective completes only when "
                    "every member joins it)" if open_ else "the others' last call (in their traces)"))
            if wrong == "size_mismatch" and even:
                why = (f"sizes compared as an even {here[0]['op']}'s: every earlier one on this group "
                       f"(#{', #'.join(map(str, even['seqs']))}) had input and output {even['sizes']} on every member "
                       "that holds it")
            if kind == "rank_died" and wrong:  # the members that left a record disagree: the dead died of it
                root = _divergence(members, wrong, here, entered, [], seq)
                if wrong == "size_mismatch" and even:
                    root["why"] = why
                d["why"] = (f"ranks {sorted(missing)} left no dump; what the others recorded: {here[0]['op']} #{seq}, "
                            f"the earliest call they are not known to have completed, is where their own calls "
                            f"disagree ({wrong})")
                d["_died_of"], root["_also"] = root, [d]
                return root
            if kind == wrong and wrong == "size_mismatch" and even:
                d["why"] = why
            if kind == wrong and rows_:
                d["why"], d["a2a_totals"] = rows_["why"], {k: v for k, v in rows_.items() if k != "why"}
            if kind == wrong == "size_mismatch" and (each := _coalesced_differ(here)):
                d["why"], d["coalesced"] = each["why"], {k: v for k, v in each.items() if k != "why"}
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
        "entered": entered, "missing": missing, "time_ns": first["time_ns"], "root": True, "links": [], "roots": [],
        "explained_by": [], "skipped": [], "never_reached": [], "died_of": [],
        "calls": {str(c["rank"]): {"op": c["op"], "peer": c["peer"], "input_sizes": c["input_sizes"],
                                   "output_sizes": c["output_sizes"], "input_dtypes": c["input_dtypes"],
                                   "state": c["state"], "outcome": c["outcome"],
                                   "frame": _user_frame(c["frames"])} for c in here},
        "_group": first["group"], "_p2p": first["op"] in P2P,
    }


# ------------------------------------------------------------------ which divergence explains which
def _root_causes(found, by_rank, programs) -> list[dict]:
    """``found`` ordered root causes first, then the divergences that follow from them, each linked to the ones it
    follows from (the module's docstring). A divergence is linked only to divergences already placed (the roots, then
    the consequences in the order they were linked), so ``links`` and ``roots`` (indices into the result) are always
    smaller than its own index: the links form no cycle, by construction."""
    held = {}  # (rank, group, p2p, seq) -> the divergence in which that rank entered that call
    for d in found:
        if d["seq"] is not None and "_died_of" not in d:
            for r in d["entered"]:
                held.setdefault((r, d["_group"], d["_p2p"], d["seq"]), d)
    roots, pending = [], []
    for d in found:
        d["_reasons"] = {m: _reasons(m, d, found, held, by_rank, programs) for m in d["missing"]}
        for why in d["_reasons"].values():
            if "skipped" in why:
                d["skipped"].append(why["skipped"])
        follows = "_died_of" in d or (d["kind"] in ("missing_rank", "rank_died") and d["missing"] and all(
            why.get("candidates") for why in d["_reasons"].values()))
        (pending if follows else roots).append(d)
    linked, consequences = {id(d) for d in roots}, []
    pending.sort(key=lambda d: d["time_ns"] or 0)
    while pending:
        d = next((d for d in pending if _link(d, linked)), None)
        if d is None:  # what is left follows only from itself (its ranks' programs order the calls each its own way)
            d = pending[0]
            d["why"] = " ".join(filter(None, [d.get("why"), (
                "taken as a root cause: its missing ranks wait in divergences that wait on it (their programs order "
                "these calls differently), and it was issued first")]))
            roots.append(d)
        else:
            consequences.append(d)
        linked.add(id(d))
        pending.remove(d)
    ordered = []
    pending = sorted(roots, key=lambda d: (d["kind"] == "not_completed", d["time_ns"] or 0))
    while pending:  # a root a common missing rank reaches before another comes before it
        first = next((d for d in pending if not any(_before(e, d, programs) for e in pending if e is not d)),
                     pending[0])
        ordered.append(first)
        pending = [d for d in pending if d is not first]
    out = ordered + consequences
    index = {id(d): i for i, d in enumerate(out)}
    for d in out:
        targets = d.pop("_links", [])
        d["root"] = not targets
        d["links"] = sorted({index[id(t)] for t in targets})
        d["roots"] = sorted({r for t in targets for r in (t["roots"] or [index[id(t)]])})
        d.pop("_reasons", None)
        d.pop("_died_of", None)
    return out


def _reasons(m, d, found, held, by_rank, programs) -> dict:
    """Where rank ``m``, missing from ``d``, is instead, from its own calls and its program (``_Program``):
    ``{"skipped": call}`` when it went past ``d`` (a call of its, in any group, that its steps put after ``d``: the
    last such); else ``{"candidates": [(link, divergence, entry)]}``, what ``d`` may follow from: a divergence in
    which it entered a call it is blocked in (not completed) and that its steps put before ``d`` or whose place they
    do not show (``explained_by``), or one it is missing from too that its steps put before ``d``
    (``never_reached``). No candidate (it is in no call, or in one no divergence holds, and missing from nothing
    earlier; or it left no dump): ``d`` is where it stopped."""
    prog = programs.get(m)

    def place(group, p2p, seq):
        return prog.pos(group, p2p, seq) if prog and seq is not None else None

    here = place(d["_group"], d["_p2p"], d["seq"])
    mine = sorted(by_rank.get(m, ()), key=lambda c: c["ord"])
    if here is not None:
        past = [c for c in mine if (t := place(c["group"], c["op"] in P2P, c["seq"])) is not None and t > here]
        if past:
            return {"skipped": _entry(m, past[-1], past[-1]["outcome"])}
    out = []
    for c in mine:
        e = held.get((m, c["group"], c["op"] in P2P, c["seq"]))
        if c["outcome"] not in ("completed", "in_trace") and e is not None and e is not d:
            out.append(("explained_by", e, _entry(m, c, c["outcome"])))
    for e in found:
        if e is not d and m in e["missing"] and _before(e, d, programs, m):
            out.append(("never_reached", e, _entry(m, e, "never_issued")))
    return {"candidates": out}


def _entry(rank, c, outcome) -> dict:
    return {"rank": rank, "op": c["op"], "group_ranks": c["group_ranks"], "pg_name": c["pg_name"],
            "pg_desc": c["pg_desc"], "seq": c["seq"], "outcome": outcome}


def _link(d, linked) -> bool:
    """Link ``d`` to divergences already placed (``linked``: their ids) when each of its missing ranks has one
    (``_reasons``), or to the mismatch its dead member died of; False, leaving ``d`` as it is, when one has none."""
    if "_died_of" in d:
        root = d["_died_of"]
        if id(root) not in linked:
            return False
        d["died_of"] = [{**_entry(m, root, None), "kind": root["kind"]} for m in d["missing"]]
        d["_links"] = [root]
        return True
    chosen = {}
    for m, why in d["_reasons"].items():
        chosen[m] = next((c for c in why["candidates"] if id(c[1]) in linked), None)
        if chosen[m] is None:
            return False
    for link, _, entry in chosen.values():
        d[link].append(entry)
    d["_links"] = [e for _, e, _ in chosen.values()]
    return True


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
    """Mesh dimension, strategy and variant of the group; which evidence named the op; what each missing rank did
    instead."""
    group, p2p = d.pop("_group"), d.pop("_p2p")
    named = next((c for r in d["entered"] for c in by_rank.get(r, ()) if c["group"] == group and c["seq"] == d["seq"]
                  and (c["op"] in P2P) == p2p and c.get("op_named_by")), None)
    d["op_named_by"], d["op_recorded"] = (named["op_named_by"], named["op_recorded"]) if named else (None, None)
    desc = d["pg_desc"] or ""
    d["mesh_dim"] = desc[len("mesh_"):] if desc.startswith("mesh_") else None
    tag = rows(con, "FROM hang_group_tag(?, ?, ?)", [d["group_ranks"], d["pg_name"], d["op"]])
    if tag:
        d["strategy"], d["variant"], d["strategy_source"] = tag[0]["strategy"], tag[0]["variant"], \
            "tags of the traces' operations"
    else:
        axis = rows(con, "FROM hang_axis(?, ?)", [d["pg_desc"], d["pg_name"]])[0]["axis"]
        d["strategy"], d["strategy_source"] = axis, ("group description" if axis else "unknown: no traces of this group")
    last = {r: max(by_rank[r], key=lambda c: (c["ord"], c["time_ns"] or 0)) for r in d["missing"] if by_rank.get(r)}
    for r in d["missing"]:
        if r not in last:  # no dump: the last operation its trace holds, if it has one
            got = rows(con, "FROM hang_last_traced(?)", [r])
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
        if "/torch/" not in (f.get("filename") or "") and not (f.get("filename") or "").endswith("/contextlib.py"):
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
    they share a rank, a rank calling on a group another dump's pg_config lists without it, a rank calling on a group
    its own dump's pg_config lists without it, a pg_config and the traces' process groups disagreeing."""
    declared = table_rows(con, "hang_declared_groups", "pg_name, dumped_by")
    out = []
    for i, a in enumerate(declared):
        for b in declared[i + 1:]:
            if a["pg_name"] == b["pg_name"] and set(a["group_ranks"]) & set(b["group_ranks"]):
                out.append({"what": "dumps list different ranks for one group", "pg_name": a["pg_name"],
                            "pg_desc": a["pg_desc"], "declared": {
                                f"ranks {a['dumped_by']}": a["group_ranks"], f"ranks {b['dumped_by']}": b["group_ranks"]}})
    outsiders = table_rows(con, "hang_outsider_calls", "pg_name")
    for o in outsiders:
        out.append({"what": f"ranks {o['callers']} call on a group whose members rank {o['dumped_by']}'s dump lists "
                            f"without them", "pg_name": o["pg_name"], "pg_desc": o["pg_desc"],
                    "declared": {f"ranks [{o['dumped_by']}]": o["group_ranks"]}, "callers": o["callers"]})
    traced = table_rows(con, "hang_dump_against_trace", "pg_name, rank")
    for t in traced:
        out.append({"what": f"rank {t['rank']}'s dump and its trace list different ranks for one group",
                    "pg_name": t["pg_name"], "pg_desc": t["pg_desc"],
                    "declared": {"dump": t["group_ranks"], "trace": t["traced"]}})
    own = table_rows(con, "hang_own_outsiders", "pg_name, callers")
    for o in own:  # a process only holds (and records calls on) the groups it is a member of
        out.append({"what": f"ranks {o['callers']} call on a group their own dumps list without them",
                    "pg_name": o["pg_name"], "pg_desc": o["pg_desc"],
                    "declared": {f"ranks {o['callers']}": o["group_ranks"]}, "callers": o["callers"]})
    return out


def _judgeable(found, reporting, from_dumps) -> list[dict]:
    """Only what the evidence holds is concluded of a rank. A member that left no dump (or, from traces alone, no
    trace) and is said to be missing: with dumps, where every rank said missing left none, it is the documented
    inference (``rank_died``: the others wait in a call it never joined, and a rank that dies leaves no dump); where
    ranks that did leave one are missing too, they are the finding and the others are ``unseen`` (not known either
    way). From traces alone a rank without a trace is not known to have stopped (the others' traces end where the
    profiler stopped): no divergence is concluded of it, and its groups are ``incomplete``."""
    out = []
    for d in found:
        unseen = [m for m in d["missing"] if m not in reporting]
        seen = [m for m in d["missing"] if m in reporting]
        if unseen and not seen and not from_dumps:
            continue
        if unseen and seen:
            d["missing"], d["unseen"] = seen, unseen
            d["why"] = (f"ranks {unseen} left no {'dump' if from_dumps else 'trace'}: whether they entered it is not "
                        "known")
        out.append(d)
    return out


def _unjudged(con, found, reporting, what) -> list[dict]:
    """The groups that cannot be judged: some of their members left no ``what`` (dump, or trace when there are no
    dumps), and no divergence found on the group names exactly those members as the ones that never entered. Groups
    are every group a dump, a trace's process groups or a traced operation names with its ranks."""
    groups = {}
    for g in table_rows(con, "hang_groups"):
        groups.setdefault((g["pg_name"], tuple(g["members"])), g["pg_desc"])
    judged = {(d["pg_name"], tuple(sorted(d["group_ranks"]))): set(d["missing"]) for d in found if not d.get("unseen")}
    out = []
    for (name, ranks), desc in sorted(groups.items(), key=lambda g: (len(g[0][1]), g[0][1], g[0][0] or "")):
        unseen = [r for r in ranks if r not in reporting]
        if unseen and not set(unseen) <= judged.get((name, ranks), set()):
            out.append({"group_ranks": list(ranks), "pg_name": name, "pg_desc": desc, "members": len(ranks),
                        "unseen": unseen, "why": f"{len(unseen)} of its {len(ranks)} members left no {what}"})
    return out


def _membership_notes(con) -> list[str]:
    got = [(g["pg_name"], g["pg_desc"], g["group_ranks"]) for g in table_rows(con, "hang_dump_only_groups", "pg_name")]
    return [f"members of group {ranks} ({desc or name}) are the ranks whose dumps call on it (no pg_config lists "
            "it, no trace names it): a member that left no dump is not seen; pass the traces too"
            for name, desc, ranks in got]


def _p2p_unseen(con, calls, programs) -> str:
    """Why nothing shows, and what the dumps and traces do show: each rank's last collective and what it had in
    flight, and the sends and receives its last traced step posted."""
    text = ("every recorded collective matches; the traces show sends and receives, which this backend's Flight "
            "Recorder does not record (gloo): a point-to-point deadlock would not show here")
    posted = defaultdict(list)
    for p in table_rows(con, "hang_last_step_p2p", "rank, host_ts_ns"):
        r, op, peer = p["rank"], p["op"], p["peer"]
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
    return table_rows(con, "comm_ops", columns="count(*) > 0 AS any", where="op IN ('send', 'recv')")[0]["any"]
