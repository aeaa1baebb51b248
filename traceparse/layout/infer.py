"""Infer the job's layout from the tagged communication, each value with its evidence.

Degrees (docs/parallelism.md 1): the size of the groups whose operations carry each
strategy. The convention is Megatron-Core's and torchtitan's: the world is
N_DP x N_TP x N_PP x N_CP x N_SP (CP: ring, SP: Ulysses, both the sequence split), so
DP is every rank that is not model-parallel, N / (N_TP x N_PP x N_CP x N_SP), and
expert parallelism is carved out of the data-parallel (x sequence-split) ranks: N_EP
divides N_DP x N_CP x N_SP and is no factor of the world. An MoE or recommendation job
whose dense gradients sync over all its ranks has dp = world; its experts (or
model-parallel embedding tables, variant embedding) report ep. The replica group the
DP collectives run in may be wider than N_DP (it spans the sequence split and the
experts' ranks, 5). dp_replicate x dp_shard = dp (torchtitan's HSDP names): dp_shard
is the size of the groups that shard state (ZeRO 1-3), dp_replicate the rest; plain
replication (ZeRO-0) is dp_replicate = dp. The ZeRO stage is the DP groups' variant
(3.1). Without a pipeline, m is the gradient accumulation: the forward/backward passes
per optimizer step (DDP / FSDP forward annotations, else the backward passes that
follow forward compute on the main thread). For a pipeline (3.2), with each group's
ranks in stage order: the first stage sends m x v activations to the second and
the last sends m x (v - 1) back around to the first, so m and v follow; the
schedule is interleaved when v > 1, else 1F1B when the last stage sends a
gradient before it has received every micro-batch, else GPipe. Schedule
annotations (PP:<stage><action><mb>, Forward i / Backward i) give m and v
directly when present, and name the zero-bubble schedules (3.2: backward split
into input-grad I and weight-grad W): I/W actions with looped stages (rank p
holds p, p + N_PP, ...) are interleaved zero bubble, with V-shaped stages (rank p
holds p and 2 N_PP - 1 - p) ZB-V, and V-shaped stages that also run fused
forward+backward pairs (PP:(<stage>F<mb>;<stage>B<mb>)OVERLAP_F_B) or full
backwards beside I/W are DualPipeV. Without annotations a zero-bubble schedule
cannot be told apart: W sends nothing, and a V's sends have the counts and sizes
of a chain with 2m micro-batches.
"""

from collections import Counter

from traceparse.axes import AXES, MODEL_AXES
from traceparse.store.query import sql_file, table_rows
from traceparse.vocabulary.modules import use
from traceparse.vocabulary.placement import placement

FORWARD_PASS = ("DistributedDataParallel.forward", "FSDP::root_pre_forward")


def infer_layout(con) -> dict:
    """{key: (value, evidence)} for every key in LAYOUT_KEYS."""
    out = {}
    world = _world(con)
    use(con, "name_totals")
    con.execute(sql_file(__package__, "infer.sql"))
    sizes = {}
    for t in table_rows(con, "layout_tagged_sizes"):
        sizes.setdefault(t["strategy"], Counter())[t["group_size"]] += t["n"]
    for axis in AXES[1:]:
        out[axis] = _degree(axis, sizes.get(axis), world)
    out["dp"] = _dp_degree(out, sizes.get("dp"), world)
    out["zero_stage"] = _zero_stage(con, out["dp"][0])
    out.update(_pipeline(con, out["pp"][0]))
    if out["pp"][0] == 1:
        out["microbatches"] = _accumulation(con)
    out.update(_dp_split(con, out))
    return out


def _world(con):
    """The job's rank count (vocabulary/world.sql: world_size; None where unknown)."""
    use(con, "world")
    return table_rows(con, "world")[0]["world_size"]


def _degree(axis, sizes, world):
    if not sizes:
        return 1, f"no operation tagged {axis}"
    known = Counter({s: n for s, n in sizes.items() if s})
    if not known:
        if axis == "ep" and world:
            return world, f"{sum(sizes.values())} {axis} operations name no group (custom kernels): assumed to span the world of {world}"
        return None, f"{sum(sizes.values())} operations tagged {axis}, none with a known group"
    size, n = known.most_common(1)[0]
    others = sorted(s for s in known if s != size)
    note = f"; other sizes seen: {others}" if others else ""
    return size, f"{n} operations tagged {axis} run in groups of {size} ranks{note}"


def _dp_degree(out, dp_sizes, world):
    model = [out[a][0] for a in MODEL_AXES]
    if world is None:
        return None, "world size unknown: no trace gives it (distributedInfo) and the ranks communicate"
    if any(d is None for d in model):
        unknown = [a for a in MODEL_AXES if out[a][0] is None]
        return None, f"world {world}, but {' and '.join(unknown)} unknown"
    tp, pp, cp, sp = model
    product = tp * pp * cp * sp
    if world % product:
        return None, f"world {world} is not a multiple of tp x pp x cp x sp = {product}"
    dp = world // product
    why = (f"world {world} / (tp x pp x cp x sp = {product}): every rank that is not model-parallel is "
           "data-parallel (Megatron-Core, torchtitan; docs/parallelism.md 1, 5)")
    ep = out["ep"][0]
    if ep and ep > 1:
        if (dp * cp * sp) % ep == 0:
            why += f"; ep = {ep} is carved out of the {dp * cp * sp} data-parallel x sequence-split ranks"
        else:
            why += (f"; ep = {ep} does not divide the {dp * cp * sp} data-parallel x sequence-split ranks "
                    "(not the Megatron-Core / torchtitan carving)")
    known = Counter({s: n for s, n in (dp_sizes or {}).items() if s})
    if known:
        spans = sorted(known)
        if spans == [dp]:
            why += "; matches the groups of the data-parallel collectives"
        else:
            why += f"; the data-parallel collectives run in groups of {' and '.join(map(str, spans))} ranks"
            if max(spans) > dp:
                why += (": the replica group spans the sequence split too (its replicated weights sync "
                        "with DP, docs/parallelism.md 5)")
            if min(spans) < dp:
                why += (": some sync only part of the data-parallel ranks (HSDP's shard and replicate "
                        "groups, or replicated experts across their expert-parallel copies)")
    return dp, why


def _zero_stage(con, dp):
    variants = [(v["variant"], v["n"]) for v in table_rows(con, "layout_dp_variants", "variant DESC")]
    if dp is None:
        return None, "data-parallel degree unknown"
    if dp == 1:
        return None, "no data parallelism (dp = 1)" + (
            f"; replica groups still sync with {', '.join(v for v, _ in variants)} patterns" if variants else "")
    if not variants:
        return None, "no data-parallel collectives found"
    stage = max(int(v[-1]) for v, _ in variants)
    return stage, "data-parallel groups: " + ", ".join(f"{n} operations {v}" for v, n in variants)


def _dp_split(con, out) -> dict:
    """dp_replicate and dp_shard (torchtitan's names; their product is dp): dp_shard is the size of the
    data-parallel groups that shard state (ZeRO 1-3), within the sequence split they may span. Derived from
    the inferred zero_stage, so the two say the same: stage 0 is plain replication, stage 1-3 sharding over
    the sharded groups' size (unknown when no sharded group names its size), no stage an unknown split."""
    (dp, _), (zero, zero_why) = out["dp"], out["zero_stage"]
    if dp is None:
        return {k: (None, "data-parallel degree unknown") for k in ("dp_replicate", "dp_shard")}
    if dp == 1:
        return {k: (1, "no data parallelism (dp = 1)") for k in ("dp_replicate", "dp_shard")}
    if zero is None:
        why = (f"ZeRO stage unknown ({zero_why}): how the {dp} data-parallel ranks split into replicas and "
               "shards is unknown")
        return {"dp_replicate": (None, why), "dp_shard": (None, why)}
    if zero == 0:
        why = f"plain replication (ZeRO-0) over the {dp} data-parallel ranks"
        return {"dp_replicate": (dp, why), "dp_shard": (1, why)}
    groups = table_rows(con, "layout_dp_groups", "n DESC")
    sharded = Counter()
    for g in groups:
        if g["variant"] and g["variant"] != "zero0":
            sharded[g["group_size"]] += g["n"]
    if not sharded:
        why = (f"state sharded (ZeRO-{zero}), in groups whose size the trace does not give: how the {dp} "
               "data-parallel ranks split into replicas and shards is unknown")
        return {"dp_replicate": (None, why), "dp_shard": (None, why)}
    s = sharded.most_common(1)[0][0]
    seq = (out["cp"][0] or 1) * (out["sp"][0] or 1)
    if s > dp and s % seq == 0:
        s //= seq  # the sharding group spans the sequence split too (torchtitan's dp_shard_cp)
    if s < dp and dp % s == 0:
        replicas = sorted({g["group_size"] for g in groups if g["variant"] == "zero0"})
        why = (f"hybrid sharding (HSDP): state sharded (ZeRO-{zero}) over groups of {s} ranks, replicated across "
               f"{dp // s} of them" + (f" (all-reduce groups of {replicas} ranks)" if replicas else ""))
        return {"dp_replicate": (dp // s, why), "dp_shard": (s, why)}
    why = f"state sharded (ZeRO-{zero}) over all {dp} data-parallel ranks"
    return {"dp_replicate": (1, why), "dp_shard": (dp, why)}


def _accumulation(con):
    """(m, evidence): gradient accumulation without a pipeline, the forward/backward passes per optimizer
    step on every rank: DDP's / FSDP's forward annotations, else the backward passes on the thread
    that runs the steps that each follow forward compute (matmuls, embeddings) there."""
    per = table_rows(con, "layout_forward_passes(?)", params=[list(FORWARD_PASS)])
    source = "forward passes (" + " / ".join(FORWARD_PASS) + ")"
    if not per:
        per = _backward_passes(con)
        source = "backward passes after forward compute"
    counts = Counter(p["n"] for p in per if p["n"])
    if not counts:
        return 1, "no pipeline and no backward pass seen: no gradient accumulation"
    m, seen = counts.most_common(1)[0]
    if m == 1:
        return 1, f"no pipeline; one forward/backward pass per optimizer step ({source}): no gradient accumulation"
    others = sorted(set(counts) - {m})
    return m, (f"no pipeline; {m} {source} per step on {seen} of {len(per)} rank-steps: gradient accumulation "
               f"over m = {m} micro-batches (docs/parallelism.md 1, 3.1)" + (f"; also seen: {others}" if others else ""))


def _backward_passes(con):
    """[{rank, step, n: passes}] per rank-step with forward compute or autograd frames on the main thread: the
    vocabulary's backward passes (traceparse/vocabulary/phases.sql) that follow forward compute and have autograd
    frames on the main thread."""
    return table_rows(con, "layout_backward_passes")


def _pipeline(con, pp):
    none = {
        "pp_schedule": (None, "no pipeline"),
        "microbatches": (1, "no pipeline; micro-batching (gradient accumulation) is not inferred and taken as 1"),
        "virtual_stages": (1, "no pipeline"),
    }
    if pp is None:
        return {k: (None, "pipeline degree unknown") for k in none}
    if pp == 1:
        return none
    annotated = _from_annotations(con, pp)
    counted = _from_sends(con)
    if annotated is None and counted is None:
        return {k: (None, "pipeline sends without known groups and peers") for k in none}
    m, v, why = annotated or counted
    zero_bubble = _zero_bubble(con, pp) if annotated else None
    if zero_bubble:
        schedule, s_why = zero_bubble
    elif v > 1:
        schedule, s_why = "interleaved_1f1b", f"{v} virtual stages per rank"
    else:
        schedule, s_why = _one_f_one_b_or_gpipe(con)
    return {"pp_schedule": (schedule, s_why), "microbatches": (m, why), "virtual_stages": (v, why)}


def _zero_bubble(con, pp):
    """(schedule, evidence) when the schedule annotations (pipeline_marks) show split backwards (I, W), else None."""
    rows = table_rows(con, "layout_stage_actions")
    stages = {r["rank"]: set(r["stages"]) for r in rows}
    kinds = {k for r in rows for k in r["actions"]}
    if not kinds & {"I", "W"}:
        return None
    n_stages = max(max(s) for s in stages.values()) + 1
    shape = placement(list(stages.values()), pp)
    split = "backward split into input-grad (I) and weight-grad (W) actions"
    if shape == "v" and kinds & {"OVERLAP_F_B", "B"}:
        return "dualpipe_v", (f"{split}, V-shaped stages (rank p holds p and {n_stages - 1} - p) and "
                              + ("fused forward+backward pairs (OVERLAP_F_B)" if "OVERLAP_F_B" in kinds
                                 else "full backwards (B)") + ": DualPipeV")
    if shape == "v":
        return "zbv_zero_bubble", f"{split} and V-shaped stages (rank p holds p and {n_stages - 1} - p): ZB-V"
    if all(len({x % pp for x in s}) == 1 for s in stages.values()):
        return "interleaved_zero_bubble", (f"{split} and looped stages (rank p holds p, p + {pp}, ...): "
                                           "interleaved zero bubble")
    return None


def _from_annotations(con, pp):
    [marked] = table_rows(con, "layout_marked")
    stages, mbs = set(marked["stages"]), set(marked["microbatches"])
    stages.discard(None)
    mbs.discard(None)
    if not mbs:
        return None
    m = max(mbs) + 1
    v = (max(stages) + 1) // pp if stages and (max(stages) + 1) % pp == 0 else 1
    return m, v, f"schedule annotations name micro-batches 0..{m - 1}" + (
        f" and stages 0..{max(stages)} on {pp} ranks" if stages else "")


def _from_sends(con):
    rows = table_rows(con, "layout_pp_sends", "g, rank, peer")
    if not rows:
        return None
    ranks = rows[0]["group_ranks"]
    n = len(ranks)
    links = {(r["rank"], r["peer"]): r["per_step"] for r in rows if r["group_ranks"] == ranks}
    first_to_second = links.get((ranks[0], ranks[1]), 0)
    wrap = links.get((ranks[-1], ranks[0]), 0) if n > 2 else 0
    m = first_to_second - wrap
    if m <= 0 or first_to_second % m:
        return None
    v = first_to_second // m
    return m, v, (f"per step the first stage (rank {ranks[0]}) sends {first_to_second} activations to the second "
                  f"and the last (rank {ranks[-1]}) sends {wrap} around to the first: m = {m}, v = {v}")


def _one_f_one_b_or_gpipe(con):
    ops = [r["op"] for r in table_rows(con, "layout_last_stage_ops", "host_ts_ns", columns="op")]
    if "send" not in ops or "recv" not in ops:
        return None, "cannot see the last stage's receives and sends"
    first_send = ops.index("send")
    later_recvs = ops[first_send:].count("recv")
    if later_recvs:
        return "1f1b", f"the last stage sends its first gradient before {later_recvs} of its activations arrive"
    return "gpipe", "the last stage receives every micro-batch's activations before it sends any gradient"
