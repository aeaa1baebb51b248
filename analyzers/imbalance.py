"""Load imbalance and stragglers across ranks (docs/parallelism.md 3.2, 3.4, 3.5, 4 "risk profile").

Per rank: step time, compute busy time and the wait at collectives; the same collective
matched across ranks to see who arrives last (the straggler); per strategy the load the
notes call out: pipeline stages, ring attention under a causal mask, tokens routed to
experts.
"""

import bisect
import json
import math
import statistics
from collections import defaultdict

from traceparse import stats
from traceparse.units import count, ms

from traceparse.vocabulary import compute, critical_path, savings
from traceparse.analyzers.base import Result, Spec, grade
from traceparse.status import worst

SPEC = Spec(
    id="imbalance",
    title="Load imbalance and stragglers",
    definition=(
        "Per rank, mean over its step windows (step_windows: one per ProfilerStep#N, the whole trace when it has "
        "none) of: step time (ProfilerStep#N); compute (compute_ns) = window_totals.compute_ns, the union of the "
        "rank's compute_intervals anchored in the window (GPU: kernels executing no communication, by their "
        "launch; CPU-only: main-thread cpu_ops overlapping no communication call or wait), the same number as "
        "bubble.per_stage[].compute_ns; compute_floor_ns, a variant = the main thread's compute cut into pieces "
        "(nested compute ops merged into their outermost, touching ones apart), per (outermost op name, input "
        "shapes) the piece count x the shortest such piece on any loaded rank, summed, per window (GPU: = compute_ns). Spread across "
        "ranks = max/mean and coefficient of variation "
        "(population std/mean). Waits and last arrivals select from the vocabulary's collective_arrivals (a "
        "collective matched across its group's members by comm_ops.seq, else by its order among the group's "
        "operations in the step; arrival = the execution start when every member has one, else the call's; "
        "traceparse schema): a rank's wait = last arrival - own arrival; wait_ns = its mean over the rank's "
        "matched collectives, total_wait_ns = their sum; per_step: per rank and step, wait_ns over the matched "
        "collectives of the rank in that step, with their count; last_arrivals = how often it arrived strictly "
        "last (a tie makes no one last); unmatched_collectives = collective operations of groups whose members "
        "are all loaded that could not be matched. "
        "Straggler (straggler_verdict named / not conclusive / none / unknown, straggler_rank when named, "
        "straggler = the evidence about the named rank, else the rank that costs the others most): lateness = "
        "arrival - the mean arrival of the collective's members; per rank and step its mean, less the step's mean "
        "over the ranks; the steps are the independent observations (collectives within a step are not: a rank "
        "held up early in a step stays behind). lateness_ns = its mean over the rank's steps; standard_error_ns "
        "from how much those values move from step to step (residual mean square pooled over the ranks, df = "
        "(ranks-1)(steps-1)); p = P(Student t_df >= lateness / standard error) x ranks (Bonferroni), the chance "
        "that some rank looks this late when none is (traceparse.stats.rank_outliers); one step: p unknown. "
        "lost_per_step_ns = per other member and step, the length of the union of the spans from the next latest "
        "member's arrival (or that member's own latest arrival at another collective before this one was released, "
        "if later: it was still working) to its arrival over the collectives it arrived last at (how much earlier "
        "that member could have gone on; collectives in flight together count once), summed, / (ranks - 1) / its "
        "steps: what each other rank loses per step on average; lost_share = that / the mean step time. A rank "
        "is named when material (lost_share >= warn_straggler_share) and conclusive: by arrivals (p <= 0.01 and "
        "lateness > 0) or by work (late on average, last more often than chance with last_by_chance_p <= 0.01, "
        "where last_by_chance_p = P(at least that many last arrivals) when each collective makes a member last "
        "with chance 1 / its size (Poisson-binomial), the latest in more than half of its steps, and the most "
        "compute floor of all ranks, at least warn_max_over_mean x their mean) or by work and path (too few "
        "collectives for chance to tell, e.g. one a step over two steps: late on average, the latest in more than "
        "half of its steps, the most compute floor, at least warn_max_over_mean x the mean, and the rank the "
        "critical path runs through most), and on the critical path: the "
        "rank the critical path (critical_path) runs through most over the steps (path_share: its share of the "
        "path; on_path), since the others' waits for it set the step's pace only then (a path through one rank "
        "alone never waited for another and is not asked); of several, the one "
        "costing most. not conclusive: the rank costing most is material or conclusive but not both, or both but "
        "not on the path (straggler_reason says which); unknown: no collective matched (straggler_reason says why: no process group known, "
        "members not loaded, copies that disagree). step_time_test: the slowest rank's step time against the "
        "step-to-step noise (rank_outliers on ProfilerStep durations): its excess_ns and p. Status: the worst of "
        "step time max/mean (graded only when step_time_test's p <= 0.01: in a synchronous job every rank's step "
        "lasts the same on average and the per-rank spread is where the step boundaries fell), the compute floor's "
        "max/mean, the EP hot share, and warn for a named straggler. "
        "PP: stage = position in the pp group, compute per micro-batch = compute per "
        "step / m; heavy_stage = the stage with the most compute floor (mean over its ranks), named when at least "
        "[stages] heavy_over_mean times the stages' mean (bubble.bottleneck_stage is the same stage, by the same "
        "threshold). critical_path: the rank the critical path runs through most over the steps and its share "
        "(ns on the path / the path's length), by_chance_p = the chance that one rank holds that large a share when "
        "each of the path's spells (its stretches on one rank) is put on one of the loaded ranks at random "
        "(stats.top_share_tail: 4,000 seeded draws; a path of a few long spells is concentrated by chance, so a "
        "share alone does not say a rank set the pace), and in a pipeline the stage whose ranks it runs through most "
        "(stage, stage_share). heavy_stage_cost, by replay on the step graph: per profiled step, the step's "
        "measured length - its length replayed with the heavy stage's ops at the mean stage's compute floor (each "
        "scaled by 1 / heavy_stage_over_mean; time in no op kept), and that over the steps' length (share). "
        "CP: compute per cp rank; heavy_rank = the cp rank (else the pp rank) with the most compute floor. EP: rows received by a rank per step = sum of "
        "out_split of its forward dispatch all-to-alls (of each pair of consecutive ep all-to-alls whose splits "
        "mirror each other, the first); hot_share = the hottest rank's rows / its EP group's rows. "
        "Cost (cost.per_step, cost.cause), by replay on the step graph (traceparse explain step_graph): per step, "
        "for the ranks with the most excess (the 3 whose time exceeds their peers' most, summed with sign over op "
        "names, and the one with the most compute floor beyond its peers'), saved_ns = the step's measured end - "
        "its end replayed with that rank's work (per op name, and time in no op) at the median of its peers' (the "
        "other ranks of its pipeline stage, else every other rank), ops its peers never run removed; share = "
        "saved_ns / the step's length; kind = where the excess lies: work (its compute floor in the step beyond its "
        "peers' median, at its own pace: x its ops' time / its floor), slower (the rest of its excess in ops: the "
        "same ops each taking longer, its host), stall (time in no op beyond its peers' stretched by its host's "
        "pace, its ops' time over their floor against theirs), input (the data loader's ops). cause = the "
        "rank that saves the most, at least warn_straggler_share of the step, in a majority of the profiled steps "
        "(the one, with one) or in any step where its excess is its own work (a balanced job's ranks have the same "
        "floor); saved_per_step_ns its mean over the steps, share its sum / the steps' lengths, steps_seen. Its own "
        "work, a stall or its input warns, and fails from fail_cost_share; slower is reported, not graded. The "
        "heavy stage's cost (heavy_stage_cost) is graded alike; where either is priced, the compute floor's "
        "max/mean is reported, not graded."
    ),
    numerator="cost: the step's measured length - its length replayed with the rank's work at its peers' median; "
              "max over ranks of step time, compute floor (busy time where none); EP: the hottest rank's rows; "
              "straggler: its lateness per step, and what the others lose per step waiting for it",
    denominator="cost: the step's measured length; "
                "mean over ranks; EP: its EP group's rows, against the fair share 1/N_EP; straggler: the lateness's "
                "step-to-step standard error (t test, p <= 0.01 over the ranks), and the mean step time (share >= "
                "warn_straggler_share)",
    needs="ProfilerStep annotations, CPU ops (main thread) or GPU kernels; comm_ops with groups and seq or group "
          "order for stragglers; pp/cp tags for stages and ring ranks; EP all-to-all split sizes for tokens",
    notes=(
        "docs/parallelism.md 3.2 (the slowest stage sets the pace; embedding and LM-head stages are heavier), 3.4 "
        "(ring attention with a causal mask is unbalanced), 3.5 (EP very prone to load imbalance), 4 (risk "
        "profile). Choices: wall-clock busy time on a shared or oversubscribed host is stretched by preemption "
        "and contention, which only ever lengthen an op, so the fastest instance of the same op with the same "
        "shapes estimates its work: the status and heavy_stage/heavy_rank use compute_floor; heavy_rank "
        "names the maximum even when the spread is small (its _over_mean ratio and the status say whether it "
        "matters); an interleaved "
        "pipeline's rank reports its v stages together; send/recv are not matched (no common arrival); "
        "all-to-alls with even splits carry no row counts and are skipped. The status warns at least when a "
        "straggler is named: its stalls stretch every rank's step alike, so step time and compute may not show "
        "it. Straggler, against the references: TraceLens's NcclAnalyser (TraceLens/NcclAnalyser/"
        "nccl_analyser.py) matches a collective's NCCL kernels across ranks by process group and order, wait = "
        "latest kernel start - own start, 'skew in start time' = the largest wait, 'skew in end time' = latest "
        "end - earliest end (near 0: kernels end together), and build_df_straggler_summary ranks the ranks by "
        "total wait, the least being the straggler, with how often each arrived last: a ranking, always a top "
        "rank; HTA's get_potential_stragglers (hta/analyzers/straggler.py, "
        "find_stragglers_with_late_start_comm_kernels) keeps communication kernels of at least 1% of the mean "
        "iteration, per rank, stream, iteration and kernel name the last one, picks the (stream, name) whose "
        "duration varies most across ranks and marks per iteration the num_candidates (default 2) ranks whose "
        "kernel starts latest, returning the ranks marked most often: always num_candidates ranks, even on a "
        "balanced run. Here the wait is TraceLens's (kernel starts, HTA's late start) on every matched "
        "collective, averaged per collective so ranks in more groups compare fairly, and a rank is named only with the evidence above (how late, against how much arrivals move "
        "from step to step, and what it costs), so a balanced run names none; an earlier rule here (last at more "
        "than half of the matched collectives, at least twice chance, waiting half the others' median) named "
        "ranks on 2 collectives in 2-rank groups (chance 1 in 4) and missed a rank last at 72% of 2-rank "
        "collectives."
    ),
    example=(
        "straggler_dp2_tp2 (fixtures/runs: dp2 x tp2, rank 3 made to run 32 extra matmuls in every block): rank 3's "
        "compute floor is 2.5x the ranks' mean, it is last at 24 of its 32 collectives (chance: half of them), the "
        "latest in both steps, and the critical path runs 86% through it: named (by its work and the path), the "
        "others losing about 31% of a step waiting for it: fail."
    ),
)

def run(ctx):
    ranks = [r for (r,) in ctx.con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
    steps = dict(ctx.con.execute(
        "SELECT rank, avg(dur_ns) FROM step_windows WHERE step IS NOT NULL GROUP BY rank").fetchall())
    busy = compute.mean_per_rank(compute.per_window(ctx))
    floor = compute.floor_per_rank(ctx, busy)
    path = critical_path.totals(ctx.critical_path)
    shares = {r: ns / path["length_ns"] for r, ns in path["by_rank"].items()} if path["length_ns"] else {}
    # a path that never leaves one rank never waited for another: it says nothing of whom the others waited for
    arrivals = _arrivals(ctx, steps, floor, shares if len(shares) > 1 else {})
    tokens, ep_groups = _ep_tokens(ctx)
    per_rank = [{
        "rank": r,
        "step_mean_ns": _ns(steps.get(r)),
        "compute_ns": _ns(busy.get(r)),
        "compute_floor_ns": _ns(floor.get(r)),
        "wait_ns": _ns(arrivals["wait"].get(r)),
        "total_wait_ns": _ns(arrivals["total_wait"].get(r)),
        "last_arrivals": arrivals["last"].get(r, 0),
    } for r in ranks]
    (pipeline, pp_heavy), (ring, cp_heavy) = _pipeline(ctx, busy, floor), _ring(ctx, busy, floor)
    numbers = {
        "straggler_rank": arrivals["rank"],
        "straggler_verdict": arrivals["verdict"],
        "straggler_reason": arrivals["reason"],
        "straggler": arrivals["evidence"],
        "matched_collectives": arrivals["matched"],
        "unmatched_collectives": arrivals["unmatched"],
        "per_rank": per_rank,
        "per_step": arrivals["per_step"],
        "step_time": _spread([p["step_mean_ns"] for p in per_rank]),
        "step_time_test": _step_test(ctx),
        "compute": _spread([p["compute_ns"] for p in per_rank]),
        "compute_floor": _spread([p["compute_floor_ns"] for p in per_rank]),
        "wait": _spread([p["wait_ns"] for p in per_rank]),
        **pipeline,
        **ring,
        "heavy_rank": cp_heavy if ring["cp_compute"] else pp_heavy,
        "critical_path": _on_path(shares, pipeline["pp_stages"], path["spells"], len(ranks)),
        **_experts(tokens, ep_groups),
        "cost": _cost(ctx) if len(ranks) > 1 else None,
    }
    findings = _findings(numbers, ctx.limits)
    if len(ranks) < 2 and not tokens:
        return Result("not_applicable", numbers, tables={"per_rank": per_rank}, findings=findings,
                      reason="only one rank is loaded and it has no all-to-all split sizes: nothing to compare")
    return Result(_status(ctx.limits, numbers), numbers, tables={"per_rank": per_rank}, findings=findings)


def _ns(v):
    return None if v is None else round(v)


def _spread(values) -> dict:
    vals = [v for v in values if v is not None]
    if len(vals) < 2 or not statistics.fmean(vals):
        return {"max_over_mean": None, "cv": None}
    mean = statistics.fmean(vals)
    return {"max_over_mean": round(max(vals) / mean, 4), "cv": round(statistics.pstdev(vals) / mean, 4)}


def _most(shares: dict):
    """The key of the largest share (ties: the lowest key)."""
    return max(shares, key=lambda k: (shares[k], -k))


def _on_path(shares: dict, stages: list | None, spells: list, n_ranks: int) -> dict | None:
    """The rank the critical path runs through most, over the steps, its share, and how likely a share this large
    is by chance on ranks alike (stats.top_share_tail over the path's spells); in a pipeline, the stage (its ranks'
    shares summed) too. None without a path."""
    if not shares:
        return None
    rank = _most(shares)
    out = {"rank": rank, "share": round(shares[rank], 4),
           "by_chance_p": _round(stats.top_share_tail(spells, n_ranks), 4), "stage": None, "stage_share": None}
    if stages:
        by_stage = defaultdict(float)
        for p in stages:
            by_stage[p["stage"]] += shares.get(p["rank"], 0)
        stage = _most(by_stage)
        out.update(stage=stage, stage_share=round(by_stage[stage], 4))
    return out


def _arrivals(ctx, steps: dict, floor: dict, shares: dict) -> dict:
    """Waits and last arrivals per rank from the vocabulary's collective_arrivals, and the straggler verdict
    (SPEC.definition); ``shares``: per rank, its share of the critical path."""
    rows = ctx.rows("""
        SELECT rank, match_key, step, basis, wait_ns, lateness_ns, is_last, len(group_ranks) AS size,
               arrival_ns, second_arrival_ns, last_arrival_ns
        FROM collective_arrivals ORDER BY match_key, rank""")
    waits, last, step_waits, basis = defaultdict(list), defaultdict(int), defaultdict(list), defaultdict(set)
    for r in rows:
        waits[r["rank"]].append(r["wait_ns"])
        last[r["rank"]] += bool(r["is_last"])
        basis[r["basis"]].add(r["match_key"])
        if r["step"] is not None:
            step_waits[(r["rank"], r["step"])].append(r["wait_ns"])
    per_step = [{"rank": r, "step": s, "wait_ns": round(statistics.fmean(w)), "collectives": len(w)}
                for (r, s), w in sorted(step_waits.items())]
    matched = len({r["match_key"] for r in rows})
    gaps = _unmatched(ctx)
    verdict = _straggler(rows, waits, last, steps, floor, ctx.limits, shares)
    if not matched:
        verdict.update(verdict="unknown", rank=None, reason=_unknown_reason(gaps))
    elif verdict["evidence"]:
        verdict["evidence"]["arrival"] = {k: len(v) for k, v in sorted(basis.items())}
    return {"wait": {r: statistics.fmean(v) for r, v in waits.items()},
            "total_wait": {r: sum(v) for r, v in waits.items()}, "last": dict(last), "per_step": per_step,
            "matched": matched, "unmatched": gaps["unmatched"], **verdict}


def _covered(spans: list) -> float:
    """The length of the union of the (start, end) spans: collectives in flight together (DDP's buckets, issued
    asynchronously) hold a member up once, not once each."""
    total, reach = 0.0, None
    for a, b in sorted(spans):
        if reach is None or a > reach:
            total, reach = total + b - a, b
        elif b > reach:
            total, reach = total + b - reach, b
    return total


def _unmatched(ctx) -> dict:
    """Collective operations that could not be matched, by why: no group known, members not loaded, or the
    members' copies disagree (missing on one, different kinds, no common arrival)."""
    loaded = [r for (r,) in ctx.con.execute("SELECT rank FROM ranks").fetchall()]
    row = ctx.con.execute("""
        SELECT count(*) FILTER (WHERE group_ranks IS NULL),
               count(*) FILTER (WHERE group_ranks IS NOT NULL AND len(group_ranks) >= 2
                                AND NOT list_has_all(?, group_ranks)),
               count(*) FILTER (WHERE len(group_ranks) >= 2 AND list_has_all(?, group_ranks)
                                AND (rank, op_id) NOT IN (SELECT (rank, op_id) FROM collective_arrivals)),
               count(*)
        FROM comm_ops WHERE is_collective(op)""", [loaded, loaded]).fetchone()
    return dict(zip(("no_group", "members_not_loaded", "unmatched", "collectives"), row, strict=True))


def _unknown_reason(gaps: dict) -> str:
    if not gaps["collectives"]:
        return "the traces hold no collective (all-reduce, all-gather, ...) to match across ranks"
    parts = []
    if gaps["no_group"]:
        parts.append(f"{gaps['no_group']} collective operations have no known process group (no pg_config or "
                     f"'Process Group' args in the traces, and none could be inferred)")
    if gaps["members_not_loaded"]:
        parts.append(f"{gaps['members_not_loaded']} belong to groups with members whose traces are not loaded")
    if gaps["unmatched"]:
        parts.append(f"{gaps['unmatched']} could not be paired with every member's copy (missing on a member, "
                     f"different kinds, or no arrival time common to all)")
    return "no collective could be matched across ranks: " + "; ".join(parts)


def _straggler(rows, waits: dict, last: dict, steps: dict, floor: dict, limits, shares: dict | None = None) -> dict:
    """``{verdict, rank, reason, evidence}``: the rank the others wait for, judged on how late it arrives
    against how much arrivals move by chance (traceparse.stats.rank_outliers over steps), on what it costs
    the others per step, and on whether the critical path runs through it most (``shares``: per rank, its share
    of the path; empty: no path, not asked). ``waits``: per rank its waits; ``last``: per rank how often it
    arrived last. SPEC.definition gives the rule."""
    late = defaultdict(lambda: defaultdict(list))  # step -> rank -> lateness at its collectives there
    chance, rank_steps, lost, others_wait = defaultdict(list), defaultdict(set), defaultdict(float), defaultdict(list)
    for r in rows:
        late[r["step"]][r["rank"]].append(r["lateness_ns"])
        chance[r["rank"]].append(1 / r["size"])
        rank_steps[r["rank"]].add(r["step"])
        if not r["is_last"]:
            others_wait[r["match_key"]].append(r["wait_ns"])
    last_at = defaultdict(list)  # per rank, the others' mean wait at each collective it arrived last at
    members, arrived, held = defaultdict(dict), defaultdict(list), defaultdict(list)
    for r in rows:
        members[r["match_key"]][r["rank"]] = r["arrival_ns"]
        arrived[(r["rank"], r["step"])].append(r["arrival_ns"])
    for mine in arrived.values():
        mine.sort()
    for r in rows:
        if not r["is_last"]:
            continue
        last_at[r["rank"]].append(statistics.fmean(others_wait[r["match_key"]]))
        for m, own in members[r["match_key"]].items():
            if m == r["rank"]:
                continue
            # held up from the next latest arrival on, but for as long as it still issued collectives (an
            # asynchronous operation's member works on meanwhile: DDP's buckets)
            mine = arrived[(m, r["step"])]
            before = bisect.bisect_left(mine, r["last_arrival_ns"]) - 1  # its latest arrival before the release
            busy = max(own, mine[before]) if before >= 0 else own
            held[(r["rank"], m, r["step"])].append((max(r["second_arrival_ns"], busy), r["last_arrival_ns"]))
    for (q, _, _), spans in held.items():
        lost[q] += _covered(spans)
    seen = {q: len(w) for q, w in waits.items()}
    if len(seen) < 2:
        return {"verdict": "none", "rank": None, "reason": None, "evidence": None}
    latest = defaultdict(int)  # steps in which the rank is the latest on average
    for per in late.values():
        top = max(statistics.fmean(v) for v in per.values())
        for r, v in per.items():
            latest[r] += statistics.fmean(v) == top
    tests = stats.rank_outliers(late)
    step_ns = statistics.fmean(v for v in steps.values() if v) if any(steps.values()) else None
    min_share = limits["warn_straggler_share"]
    stands_out = limits["warn_max_over_mean"]
    wait = {q: statistics.fmean(w) for q, w in waits.items()}

    def evidence(r):
        t = tests.get(r, {})
        lost_per_step = lost[r] / (len(seen) - 1) / len(rank_steps[r])  # per other rank and step
        # a rank cannot lose more than its step waiting: beyond it, the ranks' clocks disagree (their arrivals do not
        # compare); the loss is clipped to the step, the rank is not named, and the unclipped loss kept to say so
        beyond = {"lost_unclipped_ns": round(lost_per_step)} if step_ns and lost_per_step > step_ns else {}
        lost_per_step = min(lost_per_step, step_ns) if beyond else lost_per_step
        return {
            "rank": r, "collectives": seen[r], "last": last.get(r, 0),
            "last_fraction": round(last.get(r, 0) / seen[r], 4), "chance_fraction": round(statistics.fmean(chance[r]), 4),
            "last_by_chance_p": _round(stats.last_tail(chance[r], last.get(r, 0)), 6),
            "steps": t.get("steps"), "latest_in_steps": latest[r],
            "lateness_ns": round(t["effect"]) if t else None,
            "standard_error_ns": round(t["se"]) if t.get("se") is not None else None,
            "t": _round(t.get("t")), "df": t.get("df"), "p": _round(t.get("p"), 6),
            "lost_per_step_ns": round(lost_per_step),
            "lost_share": round(lost_per_step / step_ns, 4) if step_ns else None,
            "own_mean_wait_ns": round(wait[r]),
            "others_median_wait_ns": round(statistics.median(w for q, w in wait.items() if q != r)),
            "others_wait_when_last_ns": round(statistics.fmean(last_at[r])) if last_at[r] else None,
            **beyond,
        }

    candidates = {r: evidence(r) for r in seen}
    shares = shares or {}
    path_rank = _most(shares) if shares else None
    work = {r: floor[r] for r in seen if floor.get(r) is not None}
    heaviest = _most(work) if len(work) > 1 and statistics.fmean(work.values()) else None
    for e in candidates.values():
        late_ahead = e["lateness_ns"] is not None and e["lateness_ns"] > 0
        late_more = late_ahead and e["last_fraction"] > e["chance_fraction"]
        e["compute_floor_over_mean"] = round(work[e["rank"]] / statistics.fmean(work.values()), 4) \
            if heaviest is not None and e["rank"] in work else None
        e["by_arrivals"] = e["p"] is not None and e["p"] <= stats.ALPHA and e["lateness_ns"] > 0
        e["by_work"] = (late_more and e["rank"] == heaviest and e["compute_floor_over_mean"] >= stands_out
                        and e["last_by_chance_p"] <= stats.ALPHA and 2 * e["latest_in_steps"] > e["steps"])
        # the work, and the critical path through it, where arrivals alone are too few to tell (one collective a
        # step over two steps cannot be last beyond chance): the heaviest rank, latest in most of its steps, that
        # the path runs through most
        e["by_path"] = (bool(shares) and e["rank"] == path_rank and e["rank"] == heaviest and late_ahead
                        and e["compute_floor_over_mean"] >= stands_out and 2 * e["latest_in_steps"] > e["steps"])
        e["conclusive"] = (e["by_arrivals"] or e["by_work"] or e["by_path"]) and "lost_unclipped_ns" not in e
        e["material"] = e["lost_share"] is not None and e["lost_share"] >= min_share
        e["path_share"] = round(shares.get(e["rank"], 0), 4) if shares else None
        e["on_path"] = not shares or e["rank"] == path_rank
    named = [e for e in candidates.values() if e["conclusive"] and e["material"] and e["on_path"]]
    if named:
        top = max(named, key=lambda e: (e["lost_per_step_ns"], -e["rank"]))
        return {"verdict": "named", "rank": top["rank"], "reason": None, "evidence": top}
    top = max(candidates.values(), key=lambda e: (e.get("lost_unclipped_ns", e["lost_per_step_ns"]), -e["rank"]))
    if "lost_unclipped_ns" in top:
        return {"verdict": "not conclusive", "rank": None, "evidence": top, "reason": (
            f"the others would lose {ms(top['lost_unclipped_ns'])} per rank per step waiting for it, more than the "
            f"{ms(step_ns)} step: impossible (the ranks' clocks disagree, so their arrivals do not compare); the loss "
            "is clipped to the step and no straggler is named")}
    if not (top["conclusive"] or top["material"]):
        return {"verdict": "none", "rank": None, "reason": None, "evidence": top}
    why = []
    if top["conclusive"] and top["material"]:  # not on the path
        why.append(f"the critical path runs {shares[path_rank]:.0%} of the steps' time through rank {path_rank} and "
                   f"{top['path_share']:.0%} through it: the others' waits did not set the step's pace")
    if not top["conclusive"]:
        odds = f"with p = {top['p']:.2g}" if top["p"] is not None else \
            "too often to tell: with one step a one-off delay cannot be told from a steady one"
        why.append(f"chance gives a rank this late {odds} (a straggler needs p <= {stats.ALPHA} after correcting for "
                   f"the {len(seen)} ranks)")
    if not top["material"]:
        why.append(f"it costs the others {top['lost_share']:.1%} of the step (a straggler costs >= {min_share:.0%})"
                   if top["lost_share"] is not None else "the step time is unknown")
    return {"verdict": "not conclusive", "rank": None, "reason": "; ".join(why), "evidence": top}


def _round(x, digits=3):
    if x is None or math.isinf(x):
        return None if x is None else (1e9 if x > 0 else -1e9)
    return round(x, digits)


def _heaviest(loads: dict):
    """(key with the most load, its load / mean load); (None, None) with fewer than two keys."""
    if len(loads) < 2 or not statistics.fmean(loads.values()):
        return None, None
    top = _most(loads)
    return top, round(loads[top] / statistics.fmean(loads.values()), 4)


def _pipeline(ctx, busy, floor):
    """Compute per pipeline stage and micro-batch; (numbers, rank of the heaviest stage)."""
    stage_of = compute.stages(ctx)
    if not stage_of:
        return {"pp_stages": None, "heavy_stage": None, "heavy_stage_over_mean": None, "heavy_stage_cost": None}, None
    m = ctx.layout.get("microbatches")
    per_mb = lambda v: round(v / m) if m and v is not None else None  # noqa: E731
    out = [{"stage": stage, "rank": rank, "compute_ns": _ns(busy.get(rank)),
            "compute_per_microbatch_ns": per_mb(busy.get(rank)),
            "compute_floor_per_microbatch_ns": per_mb(floor.get(rank))}
           for rank, stage in sorted(stage_of.items(), key=lambda kv: (kv[1], kv[0]))]
    heavy, ratio, _ = compute.heavy_stage(stage_of, floor, ctx.heavy_over_mean)
    members = {r for r, s in stage_of.items() if s == heavy}
    rank = max(members, key=lambda r: floor[r], default=None)
    cost = savings.stage_cost(ctx.step_graphs, members, 1 / ratio) if members and ctx.step_graphs else None
    return {"pp_stages": out, "heavy_stage": heavy, "heavy_stage_over_mean": ratio, "heavy_stage_cost": cost}, rank


def _ring(ctx, busy, floor):
    """Compute per ring-attention rank; (numbers, the heaviest rank)."""
    cp = [r for (r,) in ctx.con.execute(
        "SELECT DISTINCT rank FROM comm_ops WHERE strategy = 'cp' ORDER BY rank").fetchall()]
    rows = [{"rank": r, "compute_ns": _ns(busy.get(r)), "compute_floor_ns": _ns(floor.get(r))} for r in cp]
    heavy, ratio = _heaviest({r: floor[r] for r in cp if floor.get(r) is not None})
    return {"cp_compute": rows or None, "cp_heavy_over_mean": ratio}, heavy


def _ep_tokens(ctx):
    """Rows received per rank per step by the forward dispatch all-to-alls of EP, and the EP groups."""
    rows = ctx.rows("""
        SELECT c.rank, c.step, c.in_split, c.out_split, list_sort(c.group_ranks) AS g, f.phase
        FROM comm_ops c LEFT JOIN comm_features f USING (rank, op_id)
        WHERE c.strategy = 'ep' AND c.op = 'all_to_all' AND c.out_split IS NOT NULL AND c.out_split <> '[]'
          AND ((c.rank, c.step) IN (SELECT (rank, step) FROM step_windows) OR c.rank NOT IN (SELECT rank FROM steps))
        ORDER BY c.rank, coalesce(c.host_ts_ns, c.exec_ts_ns)""")
    n_steps = dict(ctx.con.execute(
        "SELECT rank, count(*) FROM step_windows WHERE step IS NOT NULL GROUP BY rank").fetchall())
    per_rank = defaultdict(list)
    for r in rows:
        per_rank[r["rank"]].append(r)
    tokens, groups = {}, set()
    for rank, ops in per_rank.items():
        dispatch, i = [], 0
        while i < len(ops):  # a dispatch is followed by its mirror (the combine, or backward's pair)
            a, b = ops[i], ops[i + 1] if i + 1 < len(ops) else None
            dispatch.append(a)
            mirrored = b is not None and json.loads(b["in_split"] or "[]") == json.loads(a["out_split"]) \
                and json.loads(b["out_split"]) == json.loads(a["in_split"] or "[]")
            i += 2 if mirrored else 1
        if any(d["phase"] == "forward" for d in dispatch):
            dispatch = [d for d in dispatch if d["phase"] == "forward"]
        total = sum(sum(json.loads(d["out_split"])) for d in dispatch)
        per_step = total / n_steps.get(rank, 1)
        tokens[rank] = int(per_step) if per_step == int(per_step) else per_step
        groups.update(tuple(d["g"]) for d in dispatch if d["g"])
    return tokens, groups


def _experts(tokens, groups) -> dict:
    none = {"tokens_received_per_rank": None, "ep_ranks": None, "hot_rank": None, "hot_share": None,
            "hot_over_fair": None}
    if not tokens:
        return none
    hot = _most(tokens)
    group = next((g for g in groups if hot in g and set(g) <= set(tokens)), tuple(sorted(tokens)))
    total = sum(tokens[r] for r in group)
    share = tokens[hot] / total if total else None
    return {"tokens_received_per_rank": [tokens[r] for r in sorted(tokens)], "ep_ranks": sorted(tokens),
            "hot_rank": hot, "hot_share": round(share, 4) if share is not None else None,
            "hot_over_fair": round(share * len(group), 4) if share is not None else None}


def _step_test(ctx) -> dict | None:
    """The slowest rank's step time against the step-to-step noise (traceparse.stats.rank_outliers on the
    ProfilerStep durations): ``{rank, excess_ns, p}``, or None with fewer than two ranks or steps."""
    table = defaultdict(dict)
    for rank, step, dur in ctx.con.execute(
            "SELECT rank, step, dur_ns FROM step_windows WHERE step IS NOT NULL").fetchall():
        table[step][rank] = [dur]
    tests = stats.rank_outliers(table)
    if not tests or all(t["p"] is None for t in tests.values()):
        return None
    rank = max(tests, key=lambda r: (tests[r]["effect"], -r))
    return {"rank": rank, "excess_ns": round(tests[rank]["effect"]), "p": _round(tests[rank]["p"], 6)}


def _cost(ctx) -> dict:
    """What each step's costliest ranks cost it by replay, and the rank that is a cause (savings.rank_costs): peers
    are the other ranks of its pipeline stage, else every other rank."""
    stage = {r["rank"]: r["stage"] for r in compute.pipeline_stages(ctx)}
    return savings.rank_costs(ctx.step_graphs, stage, ctx.limits["warn_straggler_share"],
                              compute.floor_per_window(ctx.con))


def _cost_grade(limits, n) -> str:
    """A rank whose own work or stall costs the steps: graded by its share of the step; its host's slowness is
    reported, not graded (the job's ranks are alike)."""
    cause = (n.get("cost") or {}).get("cause")
    if cause is None or cause["kind"] == "slower":
        return "ok"
    return grade(cause["share"], limits["warn_straggler_share"], limits["fail_cost_share"])


def _cost_finding(n) -> str | None:
    cause = (n.get("cost") or {}).get("cause")
    if cause is None:
        return None
    seen = "once" if cause["steps"] == 1 else f"in {cause['steps_seen']} of {cause['steps']} steps"
    what = savings.KINDS.get(cause["kind"], "its work")
    return (f"Rank {cause['rank']} costs the step {ms(cause['saved_per_step_ns'])} ({cause['share']:.0%}) by replay: "
            f"{what}; its work at its peers' median would end the step that much sooner; seen {seen}.")


def _priced(n) -> bool:
    """Whether the replay priced the uneven compute (a rank's excess, a heavy stage): then that cost grades it, not
    the compute floor's max/mean, which is reported."""
    return n.get("cost") is not None or n.get("heavy_stage_cost") is not None


def _status(limits, n) -> str:
    """Step time when its spread is more than the step-to-step noise; what the replay prices (a rank's excess, a
    heavy stage's) by its share of the step, else the compute floor (busy time where there is none) against
    max/mean; EP hot share vs fair; a named straggler warns (its stall stretches every rank's step alike, so step
    time may not show it)."""
    warn, fail = limits["warn_max_over_mean"], limits["fail_max_over_mean"]
    compute = n["compute_floor"]["max_over_mean"] or n["compute"]["max_over_mean"]
    step = n["step_time_test"]
    stage = n.get("heavy_stage_cost")
    return worst([
        grade(n["step_time"]["max_over_mean"], warn, fail) if step and step["p"] <= stats.ALPHA else "ok",
        "ok" if _priced(n) else grade(compute, warn, fail),
        grade(stage["share"], limits["warn_straggler_share"], limits["fail_cost_share"]) if stage else "ok",
        grade(n["hot_over_fair"], limits["warn_hot_over_fair"], limits["fail_hot_over_fair"]),
        "ok" if n["straggler_rank"] is None else "warn",
        _cost_grade(limits, n),
    ])


def _straggler_finding(n) -> str | None:
    e, verdict = n["straggler"], n["straggler_verdict"]
    if verdict == "unknown":  # said when there were collectives to match; a run without any has no finding
        return f"Stragglers: unknown, {n['straggler_reason']}." if n["unmatched_collectives"] is not None and \
            "hold no collective" not in n["straggler_reason"] else None
    seen = verdict == "named" or (verdict == "not conclusive" and e["lateness_ns"] > 0
                                  and e["last_fraction"] > e["chance_fraction"])
    if not seen:
        return None
    seen = (f"rank {e['rank']} arrives {ms(e['lateness_ns'])} after its groups' mean arrival per collective "
            f"(over {count(e['steps'], 'step')}, the latest in {e['latest_in_steps']}; last at {e['last_fraction']:.0%} of "
            f"its {e['collectives']} matched collectives, chance {e['chance_fraction']:.0%}) and the other ranks lose "
            f"{ms(e['lost_per_step_ns'])} per rank per step on average waiting for it"
            + (f" ({e['lost_share']:.1%} of the step)" if e["lost_share"] is not None else ""))
    if verdict == "not conclusive":
        return f"No straggler named: {seen}, but {n['straggler_reason']}."
    why = []
    if e["by_arrivals"]:
        why.append(f"chance gives a rank this late with p = {e['p']:.2g}")
    if e["by_work"] or e["by_path"]:
        why.append(f"it does the most work ({e['compute_floor_over_mean']:.2f}x the mean compute floor)")
    if e["path_share"] is not None:
        why.append(f"the critical path runs {e['path_share']:.0%} of the steps' time through it, more than through "
                   f"any other rank")
    return (f"Rank {e['rank']} is a straggler: {seen[len(str(e['rank'])) + 6:]}; " + " and ".join(why)
            + ". Look for extra work, a slower device or host, or data it alone loads.")


def _stage_on_path(n) -> str:
    """What the critical path says of the heavy stage: it runs mostly through it, or through another stage."""
    path = n["critical_path"]
    if not path or path["stage"] is None:
        return ""
    if path["stage"] == n["heavy_stage"]:
        return f" The critical path runs {path['stage_share']:.0%} of the steps' time through it."
    return (f" But the critical path runs most through stage {path['stage']} ({path['stage_share']:.0%} of the "
            f"steps' time): there the step waited longest, whatever the stages' work.")


def _findings(n, limits) -> list:
    stands_out, hot_warn = limits["warn_max_over_mean"], limits["warn_hot_over_fair"]
    out = [f for f in [_cost_finding(n), _straggler_finding(n)] if f]
    busy, floor = n["compute"]["max_over_mean"], n["compute_floor"]["max_over_mean"]
    if floor is not None and floor >= stands_out:
        top = max(n["per_rank"], key=lambda p: p["compute_floor_ns"] or 0)
        out.append(f"Compute differs across ranks: rank {top['rank']}'s compute floor is "
                   f"{ms(top['compute_floor_ns'])} per step, {floor:.2f}x the mean rank (max/mean): uneven work "
                   f"per rank, e.g. unbalanced pipeline stages, a causal mask or routed tokens"
                   + ("; graded by what it costs the step by replay, not by this ratio." if _priced(n) else "."))
    elif busy is not None and busy >= stands_out:
        out.append(f"Compute busy time differs across ranks (max/mean {busy:.2f}) but the compute floor (the same "
                   f"ops at their fastest) does not: the ops were stretched unevenly (preemption or contention on "
                   f"the host), the work itself is even.")
    step = n["step_time_test"]
    if step and step["p"] > stats.ALPHA and (n["step_time"]["max_over_mean"] or 0) >= stands_out:
        out.append(f"Step time differs across ranks (max/mean {n['step_time']['max_over_mean']:.2f}) no more than "
                   f"it differs from step to step (p = {step['p']:.2g}): not graded.")
    if n["heavy_stage"] is not None:
        stage = [p for p in n["pp_stages"] if p["stage"] == n["heavy_stage"]]
        per_mb = statistics.fmean(p["compute_floor_per_microbatch_ns"] for p in stage) \
            if all(p["compute_floor_per_microbatch_ns"] is not None for p in stage) else None
        out.append(f"Pipeline stage {n['heavy_stage']} has the most work: its compute floor (the same ops at their "
                   f"fastest, the pipeline stages table's 'compute floor' column; busy time stretches with contention)"
                   + (f" is {ms(per_mb)} per micro-batch," if per_mb is not None else "")
                   + f" {n['heavy_stage_over_mean']:.2f}x the mean stage: the slowest stage sets the pipeline's "
                   f"pace (docs/parallelism.md 3.2); move layers off it." + _stage_on_path(n)
                   + (f" By replay, its ops at the mean stage's compute would save {ms(c['saved_per_step_ns'])} a "
                      f"step ({c['share']:.0%})." if (c := n["heavy_stage_cost"]) and c["share"] is not None else ""))
    if n["cp_compute"] and n["heavy_rank"] is not None and n["cp_heavy_over_mean"] >= stands_out:
        out.append(f"Ring attention: rank {n['heavy_rank']} computes {n['cp_heavy_over_mean']:.2f}x the mean rank "
                   f"(compute floor), as a causal mask over contiguous chunks gives later ranks more blocks to attend "
                   f"(docs/parallelism.md 3.4); zig-zag sharding evens it.")
    if n["hot_over_fair"] is not None and n["hot_over_fair"] >= hot_warn:
        out.append(f"Expert parallelism: rank {n['hot_rank']} receives {n['hot_share']:.1%} of the routed tokens, "
                   f"{n['hot_over_fair']:.1f}x its fair share: the router favours its experts (docs/parallelism.md 3.5).")
    return out
