"""Pipeline bubble: the share of each step in which a pipeline stage computes nothing (docs/parallelism.md 3.2).

Three numbers, each a fraction of the step: the notes' formula for the schedule (expected), the
reconstructed order of forward/backward work replayed with equal costs (simulated), and the trace
(measured). The reconstruction reads schedule annotations when the trace has them (`PP:<stage><F|B|I|W><mb>`
and `PP:(<stage>F<mb>;<stage>B<mb>)OVERLAP_F_B` of torch's multi-stage schedules, zero-bubble ones included,
`Forward i` / `Backward i` of GPipe), else cuts the main thread's compute into forward blocks (ops outside
autograd) and backward blocks (autograd frames: `is_autograd_frame`, store/macros.sql) at the pp send/recv calls.
"""

import bisect
import statistics
from collections import defaultdict

from traceparse.thresholds import check_thresholds
from traceparse.units import ms
from traceparse.vocabulary import compute, savings
from traceparse.store.query import row_groups
from traceparse.vocabulary.modules import use
from traceparse.vocabulary.placement import placement
from traceparse.analyzers.base import Result, Spec, grade, inline_p2p, not_applicable, sql
from traceparse.models.pipeline import FORMULAS, RAMP_FLOOR, ZERO_BUBBLE, expected_bubble, ramp_floor, simulate

SPEC = Spec(
    id="bubble",
    title="Pipeline bubble",
    definition=(
        "Per pipeline rank and profiled step: bubble = 1 - compute / step time, with compute and step time "
        "from the store's vocabulary (window_totals: the union of the rank's compute_intervals anchored in the "
        "step window; the window's length). measured = mean over every pipeline rank and step. expected = the "
        "notes' formula for the schedule: (N_PP - 1)/(m + N_PP - 1) for GPipe and 1F1B, (N_PP - 1)/(v m + N_PP - 1)"
        " interleaved, 0 for the zero-bubble schedules (interleaved zero bubble, ZB-V: the notes' '~0 in the "
        "ideal'), and for DualPipeV, for which the notes give no formula, the replay (simulated), a fraction of "
        "the step; expected_megatron = (N_PP - 1)/(v m), Megatron's bubble relative to the ideal (bubble-free) "
        "time (f / (1 - f) of the expected fraction f where the notes give no Megatron form). simulated = the "
        "reconstructed per-rank order of forward (F), backward (B) and, for zero-bubble schedules, input-grad (I) "
        "and weight-grad (W) work per micro-batch and virtual stage replayed with F = B = 1 time unit and "
        "I = W = B/2 (simulated_b2f: B = 2 F, so F = I = W), F of stage s after F of stage s-1, B or I of stage s "
        "after B or I of stage s+1 and F of stage s, W of stage s after its own B or I of the same micro-batch, "
        "no communication time; idle / makespan, mean over ranks. ramp_floor (zero-bubble schedules) = "
        "(N_PP - 1)/(3 v m + N_PP - 1), the least any order idles with F = I = W. excess = measured - expected. "
        "bottleneck_stage = "
        "the stage with the most compute floor per step (mean over its ranks), named when it computes at least "
        "[stages] heavy_over_mean times the stages' mean: the same stage, by the same threshold, as "
        "imbalance.heavy_stage."
    ),
    numerator="time in the step without compute on the stage's main thread (or GPU)",
    denominator="step time (ProfilerStep#N of that rank)",
    needs="pp-tagged send/recv in comm_ops with their groups, ProfilerStep annotations, CPU ops of the main "
          "thread (or GPU kernels); the layout's pp, schedule, m and v",
    notes=(
        "docs/parallelism.md 3.2 (bubble fraction with m + N_PP - 1 in the denominator, equal F/B cost; Megatron's "
        "(N_PP - 1)/m is relative to ideal time; the slowest stage sets the pace). Choices: the stage of a rank "
        "is its position in its pp group's group_ranks (interleaved: the rank holds stages p, p + N_PP, ...); "
        "schedule, m and v come from the inferred layout, else from what the user stated, else from the "
        "reconstruction; any time without compute counts as bubble, also Python overhead between ops and "
        "non-pp communication on the main thread (TP all-reduces, DP gradient sync), so the measured bubble "
        "bounds the schedule's from above; on CPU, compute is the main thread's ops (the fixtures run with "
        "torch.set_num_threads(1)). Compute blocks without annotations (backward = autograd frames, is_autograd_frame, on "
        "the main thread, as on CPU; on GPU, where autograd runs on its own thread, only annotations work): "
        "what precedes the first forward run and follows the last backward run (loss sums, gradient scaling) and runs shorter than [bubble] action_min_share (10%) of the upper quartile of their kind (a detach, a tensor_split) are not actions. "
        "Zero-bubble schedules (docs/parallelism.md 3.2, last row of the table: backward split into input-grad and "
        "weight-grad, W fills the bubbles, ~0 in the ideal): expected = 0 for interleaved zero bubble and ZB-V; "
        "the notes name no DualPipeV, so its expected is the replay of its reconstructed order (simulated, F = B). "
        "Stage placement comes from the annotations' stage numbers (looped: rank p holds p, p + N_PP, ...; "
        "V-shaped, ZB-V and DualPipeV: p and 2 N_PP - 1 - p); a fused PP:(aFi;bBj)OVERLAP_F_B is F then B on "
        "that rank. What the '~0' leaves: the rank holding stage N_PP - 1 cannot start before N_PP - 1 forwards "
        "and then has v m (F + I + W) to do, so no order idles less than ramp_floor; torch's three zero-bubble "
        "orders reach it with F = I = W (simulated_b2f; interleaved zero bubble from m >= N_PP, ZB-V from "
        "m >= 2 N_PP - 1, DualPipeV at every m torch accepts, m >= 2 N_PP), "
        "and with F = B, I = W = B/2 (simulated) interleaved zero bubble and DualPipeV reach (N_PP - 1)/"
        "(2 v m + N_PP - 1) while ZB-V, tuned for F = I = W, idles N_PP F per rank; a replay above ramp_floor "
        "with F = I = W is reported. Status from what the excess costs by replay (numbers.definitions.cost; [bubble] "
        "warn_saving_share/fail_saving_share), reported, not graded, where gloo's inline send/recv cannot be hidden; "
        "from the excess ([bubble] warn_excess/fail_excess) without a replay."
    ),
    example=(
        "pp4_1f1b_m4 (fixtures/runs: 4 pipeline stages on 4 gloo ranks, 1F1B, m = 4): the notes expect (4 - 1) / "
        "(4 + 4 - 1) = 3/7, 42.9% of the step idle on each stage; its stages' main threads compute for about a fifth "
        "of the step (measured 80.2%), and the replay prices the excess at about a third of the step, reported and "
        "not graded: gloo runs send/recv inline, so no schedule hides them."
    ),
)

SMALL_RUN = check_thresholds()["bubble"]["action_min_share"]  # shorter compute runs are not actions (thresholds.toml)


def _status(limits, excess, cost, cannot) -> str:
    """By what the bubble beyond the schedule costs the step (replayed), unless nothing can be done about it here
    (``cannot``: reported, not graded; a heavy stage is the imbalance check's); by the excess without a replay."""
    if excess is None:
        return "ok"
    if cost is None or cost["share"] is None:
        return grade(excess, limits["warn_excess"], limits["fail_excess"])
    return "ok" if cannot else grade(cost["share"], limits["warn_saving_share"], limits["fail_saving_share"])


def _per_step(per: list, steps: list, cost) -> list[dict]:
    """Per profiled step: the measured bubble over the pipeline ranks (mean), and the part of it the replay does not
    price (``unpriced``: measured - the step's cost share), when the step was replayed."""
    shares = {p["step"]: p["share"] for p in (cost or {}).get("per_step") or ()}
    out = []
    for s in steps:
        mine = [p["measured"] for p in per if p["step"] == s]
        if mine:
            m = statistics.fmean(mine)
            out.append({"step": s, "measured": m,
                        **({"unpriced": m - shares[s]} if shares.get(s) is not None else {})})
    return out


def _priced(cost, bottleneck, cannot) -> str:
    """What the finding adds of the replay: what the pipeline at its schedule's pace would save, and whether it can
    be had here."""
    if not cost or cost["share"] is None:
        return ""
    what = "the send/recv transfers free" + (f" and stage {bottleneck} at the stages' mean compute" if bottleneck
                                              is not None else "")
    return (f" By replay, with {what}, each step would be {ms(cost['saved_per_step_ns'])} ({cost['share']:.0%}) "
            f"shorter"
            + (f"; the transfers cannot be hidden here: {cannot} (reported, not graded)." if cannot else "."))


def _op_time(tops, starts, s, e):
    """Time of the non-communication top-level ops within [s, e) (``starts``: the tops' start times, sorted)."""
    total, j = 0, max(bisect.bisect_left(starts, s) - 1, 0)
    while j < len(tops) and tops[j]["s"] < e:
        t = tops[j]
        if not t["comm"]:
            total += max(min(e, t["e"]) - max(s, t["s"]), 0)
        j += 1
    return total


def _marks(rows, tops, position):
    """(actions, their compute) from the schedule annotations (pipeline_marks rows; a Forward/Backward <mb> names no
    stage: the rank's ``position``): the op time within each annotation (not its length, which holds the waits of
    its send/recv); a fused pair's parts have no compute of their own."""
    acts, durs = [], []
    starts = [t["s"] for t in tops]
    for row in rows:
        acts.append((row["action"], position if row["stage"] is None else row["stage"], row["microbatch"]))
        durs.append(None if row["fused"] else _op_time(tops, starts, row["s"], row["e"]))
    return acts, durs


def _blocks(tops, opts, position):
    """(forward/backward blocks of compute between the pp send/recv calls, numbered in order; their op time)."""
    runs = []  # [kind, duration], "C" = a pp boundary
    for t in tops:
        if any(o["s"] <= t["s"] and t["e"] <= o["e"] for o in opts):
            continue  # optimizer
        kind = "C" if t["pp"] else None if t["comm"] else "B" if t["backward"] else "F"
        if kind is None:
            continue  # other communication does not end a block
        if runs and runs[-1][0] == kind and kind != "C":
            runs[-1][1] += t["e"] - t["s"]
        else:
            runs.append([kind, t["e"] - t["s"]])
    kinds = [k for k, _ in runs]
    if "B" in kinds:  # a step's schedule starts with a forward and ends with a backward (then loss sums, scaling)
        runs = runs[kinds.index("F") if "F" in kinds else 0:len(kinds) - kinds[::-1].index("B")]
    ref = {k: sorted([d for kk, d in runs if kk == k], reverse=True) for k in "FB"}
    ref = {k: d[len(d) // 4] if d else 0 for k, d in ref.items()}  # upper quartile: robust to one slow outlier
    merged = []
    for k, d in runs:
        if k != "C" and d < SMALL_RUN * ref[k]:
            continue
        if merged and merged[-1][0] == k != "C":
            merged[-1][1] += d
        else:
            merged.append([k, d])
    count, acts, durs = defaultdict(int), [], []
    for k, d in merged:
        if k != "C":
            acts.append((k, position, count[k]))
            durs.append(d)
            count[k] += 1
    return acts, durs


def _kind(orders, v):
    kinds = {a[0] for acts in orders.values() for a in acts}
    if kinds & {"I", "W"}:  # split backward: a zero-bubble schedule; its placement names which
        stages = [{a[1] for a in acts} for acts in orders.values()]
        if placement(stages, len(stages)) == "v":
            return "dualpipe_v" if "B" in kinds else "zbv_zero_bubble"  # V-shaped: rank p holds p, 2 N_PP - 1 - p
        return "interleaved_zero_bubble"
    if v > 1:
        return "interleaved_1f1b"
    gpipe = all(max((j for j, a in enumerate(acts) if a[0] == "F"), default=-1)
                < min((j for j, a in enumerate(acts) if a[0] == "B"), default=len(acts)) for acts in orders.values())
    return "gpipe" if gpipe else "1f1b"


def _actions(rows: list, position) -> tuple:
    """One rank's step (``rows``: its rows of bubble.sql) as (actions, their durations, source): from its schedule
    annotations where it has them, else from its compute blocks between pp send/recv (``position``: its stage)."""
    by = defaultdict(list)
    for row in rows:
        by[row["grp"]].append(row)
    acts, durs = _marks(by["mark"], by["top"], position)
    if acts:
        return acts, durs, ("PP:<stage><action><mb> annotations" if by["mark"][0]["name"].startswith("PP:")
                            else "Forward i / Backward i annotations")
    return *_blocks(by["top"], by["opt"], position), "compute blocks between pp send/recv"


NO_ROWS = ([], [], "compute blocks between pp send/recv")  # a rank's step without rows: _actions of none


def _reconstruct(actions, groups, steps):
    """{(group, step): {rank: actions}} (``actions``: {(group, rank, step): ``_actions``}), the source, (schedule,
    m, v) when every group agrees, and {(stage, kind): [durations in ns]} of the actions."""
    out, sources, shapes, durations = {}, set(), set(), defaultdict(list)
    for group in groups:
        for step in steps:
            orders = {}
            for rank in group:
                acts, durs, source = actions.get((group, rank, step), NO_ROWS)
                sources.add(source)
                orders[rank] = acts
                for (k, st, _), d in zip(acts, durs, strict=True):
                    if d is not None:
                        durations[(st, k)].append(d)
            out[(group, step)] = orders
            # per rank: forwards and stages (equal on every rank); every forward has its B or I, every I its W
            # (DualPipeV mixes full B and split I + W, differently on each rank)
            per_rank = [(sum(a[0] == "F" for a in acts), len({a[1] for a in acts})) for acts in orders.values()]
            paired = all(sum(a[0] == "F" for a in acts) == sum(a[0] in "BI" for a in acts)
                         and sum(a[0] == "I" for a in acts) == sum(a[0] == "W" for a in acts)
                         for acts in orders.values())
            if per_rank and len(set(per_rank)) == 1 and paired and per_rank[0][1]:
                f, v = per_rank[0]
                shapes.add((_kind(orders, v), f // v, v) if f % v == 0 else None)
            else:
                shapes.add(None)
    shape = shapes.pop() if len(shapes) == 1 else None
    return out, " and ".join(sorted(sources)), shape, durations


def run(ctx):
    pp = ctx.layout.get("pp") or ctx.stated.get("pp")
    if not pp or pp == 1:
        return not_applicable("pp = 1: no pipeline parallelism in the layout")
    stage_rows = compute.pipeline_stages(ctx)  # every member of each pp group (groups unknown: the pp ranks)
    if not stage_rows:
        return not_applicable("no pp-tagged communication (send/recv between pipeline stages)")
    stage_in = {(tuple(r["group_ranks"]), r["rank"]): r["stage"] for r in stage_rows}
    groups = sorted({g for g, _ in stage_in})
    stage_of = {rank: stage_in[(g, rank)] for g in groups for rank in g}
    groups_of = defaultdict(list)
    for g, rank in sorted(stage_in):
        groups_of[rank].append(g)

    windows = compute.per_window(ctx)
    use(ctx.con, "optimizer_spans", "main_thread_ops")
    actions = {}  # (group, rank, step) -> (actions, their durations, source), each rank's rows reduced as they come
    for (rank, step), rows in row_groups(ctx.con, sql("bubble"), ("rank", "step")):
        for g in groups_of.get(rank, ()):
            actions[(g, rank, step)] = _actions(rows, stage_in[(g, rank)])
    steps = sorted({s for (rank, s) in windows if rank in stage_of and s is not None})
    if not steps:
        return not_applicable("no ProfilerStep#N windows on the pipeline ranks")

    # measured: compute per step window, from the vocabulary
    per = [{"stage": stage_of[rank], "rank": rank, "step": step, "compute_ns": w["compute_ns"],
            "step_ns": w["window_ns"], "measured": 1 - w["compute_ns"] / w["window_ns"]}
           for (rank, step), w in sorted(windows.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))
           if rank in stage_of and step is not None and w["window_ns"]]
    measured = statistics.fmean(p["measured"] for p in per)
    per_stage = []
    for rank in sorted(stage_of):
        mine = [p for p in per if p["rank"] == rank]
        if mine:
            per_stage.append({"stage": stage_of[rank], "rank": rank,
                              "measured": statistics.fmean(p["measured"] for p in mine),
                              "compute_ns": round(statistics.fmean(p["compute_ns"] for p in mine)),
                              "step_ns": round(statistics.fmean(p["step_ns"] for p in mine))})
    floor = compute.floor_per_rank(ctx, compute.mean_per_rank(windows))
    bottleneck, spread, _ = compute.heavy_stage(stage_of, floor, ctx.heavy_over_mean)

    # reconstructed schedule and its ideal replay
    orders, source, shape, durations = _reconstruct(actions, groups, steps)
    sims = {b: [simulate(o, b) if o and all(o.values()) else None for o in orders.values()] for b in (1, 2)}
    simulated = {b: float(sum(sum(s.values()) / len(s) for s in sims[b]) / len(sims[b])) if all(sims[b]) else None
                 for b in sims}

    # expected: inferred layout, else stated, else reconstructed
    rec = dict(zip(("pp_schedule", "microbatches", "virtual_stages"), shape or (None, None, None), strict=True))
    chosen, origin = {}, {}
    for k in rec:
        for where, src in (("inferred", ctx.layout), ("given", ctx.stated), ("reconstructed", rec)):
            if src.get(k) is not None:
                chosen[k], origin[k] = src[k], ctx.given(k) if where == "given" else where
                break
        else:
            chosen[k], origin[k] = None, "unknown"
    schedule, m, v = chosen["pp_schedule"], chosen["microbatches"], chosen["virtual_stages"] or 1
    expected = expected_bubble(schedule, pp, m, v, replay=simulated[1])
    if schedule in ZERO_BUBBLE:
        megatron = expected / (1 - expected) if expected is not None and expected < 1 else None
    else:
        megatron = (pp - 1) / (v * m) if expected is not None else None
    floor = float(ramp_floor(pp, m, v)) if schedule in ZERO_BUBBLE and m else None
    excess = measured - expected if expected is not None else None
    heavy = {r for r, st in stage_of.items() if st == bottleneck} if bottleneck is not None else set()
    cost = (savings.pipeline_cost(ctx.step_graphs, heavy, 1 / spread if heavy else 1.0)
            if excess is not None and ctx.step_graphs else None)
    gpu_ranks = {r for (r,) in ctx.con.execute("SELECT DISTINCT rank FROM gpu_activity").fetchall()}
    cannot = inline_p2p(stage_of, gpu_ranks)
    status = _status(ctx.limits, excess, cost, cannot)
    per_step = _per_step(per, steps, cost)
    findings = []
    if excess is not None and grade(excess, ctx.limits["warn_excess"], ctx.limits["fail_excess"]) != "ok":
        why = (f"stage {bottleneck} has {spread:.2f}x the stages' mean compute floor (the same ops at their "
               f"fastest; imbalance.pp_stages) and sets the pace: move layers off it" if bottleneck is not None else
               f"the stages compute about equally (compute floor: the most {spread or 1:.2f}x the mean), so the "
               f"excess is waiting "
               f"in send/recv beyond the schedule (point-to-point latency, CPU contention, exposed non-pipeline "
               f"communication)")
        basis = ("replay" if schedule == "dualpipe_v" else "ideal" if schedule in ZERO_BUBBLE else "formula")
        findings.append(f"The measured bubble {measured:.1%} exceeds the {schedule} {basis}'s {expected:.1%} "
                        f"(N_PP={pp}, m={m}{f', v={v}' if v > 1 else ''}) by {excess:.1%}: {why}."
                        + _priced(cost, bottleneck, cannot))
    if shape and any(origin[k] != "reconstructed" and chosen[k] != rec[k] and not (k == "virtual_stages"
                     and (chosen[k] or 1) == rec[k]) for k in rec):
        findings.append(f"The reconstructed schedule ({rec['pp_schedule']}, m={rec['microbatches']}, "
                        f"v={rec['virtual_stages']}) differs from the layout's ({schedule}, m={m}, v={v}): "
                        f"the expected bubble may use the wrong formula.")
    if floor is not None and simulated[2] is not None and simulated[2] > floor + 1e-9:
        findings.append(f"Replayed with F = I = W (the cost model zero-bubble schedules are built for), the "
                        f"reconstructed order idles {simulated[2]:.1%} of the step, more than the {floor:.1%} no "
                        f"order avoids (the rank holding stage {pp - 1} waits {pp - 1} forwards for its first "
                        f"input): W does not fill every bubble (too few micro-batches for the schedule, e.g. ZB-V "
                        f"with m < 2 N_PP - 1, or not the textbook {schedule} order).")
    if (schedule not in ZERO_BUBBLE and expected is not None and simulated[1] is not None
            and abs(simulated[1] - expected) > 1e-9):
        findings.append(f"Replayed with equal costs, the reconstructed order idles {simulated[1]:.1%} of the step, "
                        f"not the formula's {expected:.1%}: the schedule is not the textbook {schedule}.")
    if shape is None:
        findings.append("The forward/backward order could not be reconstructed consistently on every stage "
                        f"(from {source}), so there is no simulated bubble.")

    return Result(
        status=status,
        numbers={
            "expected": expected,
            "expected_formula": FORMULAS.get(schedule, "unknown schedule"),
            "expected_megatron": megatron,
            "ramp_floor": floor,
            "simulated": simulated[1],
            "simulated_b2f": simulated[2],
            "measured": measured,
            "per_step": per_step,
            "unpriced": statistics.fmean(p["unpriced"] for p in per_step)
            if per_step and all("unpriced" in p for p in per_step) else None,
            "excess": excess,
            "cost": cost,
            "cannot_fix": cannot,
            "per_stage": per_stage,
            "action_ns": [{"stage": st, "kind": k, "actions": len(d), "mean_ns": statistics.fmean(d)}
                          for (st, k), d in sorted(durations.items())],
            "order": next(([[list(a) for a in acts] for acts in o.values()] for o in orders.values()
                           if o and all(o.values())), None) if shape else None,
            "bottleneck_stage": bottleneck,
            "bottleneck_over_mean": spread,
            "schedule": schedule,
            "microbatches": m,
            "virtual_stages": v,
            "n_pp": pp,
            "source": origin,
            "reconstructed": {**rec, "from": source},
            "definitions": {
                "expected": f"{FORMULAS.get(schedule, '?')} with N_PP={pp}, m={m}, v={v}: idle share of the step "
                            "(m + N_PP - 1 in the denominator), equal F/B cost (docs/parallelism.md 3.2); zero-bubble "
                            "schedules: 0, the notes' '~0 in the ideal' (interleaved zero bubble, ZB-V), or the "
                            "replay where the notes give no formula (DualPipeV)",
                "expected_megatron": "(N_PP - 1) / (v m): Megatron's bubble relative to the ideal time, not a "
                                     "share of the step (zero-bubble schedules: expected / (1 - expected))",
                "ramp_floor": f"{RAMP_FLOOR} (zero-bubble schedules only): the least idle share any order reaches "
                              "with F = I = W, the ramp of the first micro-batch through N_PP - 1 forwards, which "
                              "the notes' '~0' neglects; compare simulated_b2f",
                "simulated": "reconstructed F/B (and I/W) order per rank replayed with F = B = 1, I = W = 1/2, no "
                             "communication time: idle / makespan, mean over ranks (share of the step)",
                "simulated_b2f": "the same with B = 2 F (F = I = W, the zero-bubble schedules' cost model)",
                "measured": "1 - compute / step time per rank and step, mean over ranks and steps; compute = "
                            "window_totals.compute_ns (the union of the rank's compute_intervals in the step)",
                "per_step": "per profiled step, measured over the pipeline ranks (mean), and its unpriced part: "
                            "the step-to-step variation compare judges a change of the bubble against",
                "unpriced": "the bubble the replay does not price: per profiled step, measured - cost's share of "
                            "the step (the bubble left with the pp transfers free and the bottleneck stage at the "
                            "stages' mean: the schedule's own ramp and whatever else idles the stages), mean over "
                            "the steps; none without a replay. compare lets a bubble that grew pass when this did "
                            "not: its transfers took longer or a stage got heavier, which exposed_comm.pp, "
                            "cost.pp and cost.stage judge",
                "excess": "measured - expected (share of the step)",
                "cost": "what the bubble beyond the schedule costs, by replay on the step graph: the step's measured "
                        "end - its end replayed with the pp transfers taken as nothing and the bottleneck stage's ops "
                        "at the stages' mean compute floor (savings.pipeline_cost), per profiled step; share = the "
                        "savings / the steps' length. It grades the check ([bubble] warn_saving_share, "
                        "fail_saving_share) unless the send/recv cannot be hidden here (cannot_fix: gloo runs them "
                        "inline), when it is reported; without a replay the excess grades it (warn_excess, "
                        "fail_excess)",
                "action_ns": "per (virtual) stage and kind (F, B, I, W): the reconstructed actions' mean duration "
                             "over ranks and steps: the op time of the main thread's top-level non-communication ops "
                             "within the action's annotation, or of its compute block",
                "order": "the reconstructed order of the first pipeline group and profiled step, per rank in "
                         "stage order: [kind, stage, micro-batch] per action (none when the order is not "
                         "consistent on every stage)",
                "per_stage": "per rank: its stage (position in its pp group), measured bubble, compute and step "
                             "time (mean over steps, ns)",
                "bottleneck_stage": "the stage with the most compute floor per step (mean over its ranks), named "
                                    "when it is at least [stages] heavy_over_mean times the stages' mean; "
                                    "imbalance.heavy_stage is the same stage",
            },
        },
        tables={
            "per_rank_step": per,
            "schedule": [{"rank": rank, "stage": stage_of[rank], "step": step,
                          "order": " ".join(f"{k}{i}" + (f"@{s}" if rec["virtual_stages"] and rec["virtual_stages"] > 1
                                                           else "") for k, s, i in acts)}
                         for (group, step), o in orders.items() for rank, acts in o.items()],
        },
        findings=findings,
    )
