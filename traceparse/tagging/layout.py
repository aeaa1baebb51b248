"""Infer the job's layout from the tagged communication, each value with its evidence.

Degrees (docs/parallelism.md 1): the size of the groups whose operations carry each
strategy; DP is what is left of the world, N / (N_TP x N_PP x N_CP x N_SP x N_EP),
since other axes' gradient replicas also sync with DP collectives (5). The ZeRO
stage is the DP groups' variant (3.1). For a pipeline (3.2), with each group's
ranks in stage order: the first stage sends m x v activations to the second and
the last sends m x (v - 1) back around to the first, so m and v follow; the
schedule is interleaved when v > 1, else 1F1B when the last stage sends a
gradient before it has received every micro-batch, else GPipe. Schedule
annotations (PP:<stage><action><mb>, Forward i / Backward i) give m and v
directly when present.
"""

import re
from collections import Counter

AXES = ("tp", "pp", "cp", "sp", "ep")
KEYS = ("dp", "tp", "pp", "cp", "sp", "ep", "zero_stage", "pp_schedule", "microbatches", "virtual_stages")
PP_ANNOTATION = re.compile(r"^PP:(\d+)[A-Z_]*?(\d+)$")
GPIPE_ANNOTATION = re.compile(r"^(Forward|Backward) (\d+)$")


def infer_layout(con) -> dict:
    """{key: (value, evidence)} for every key in KEYS."""
    out = {}
    world = con.execute("SELECT coalesce(max(world_size), count(*)) FROM ranks").fetchone()[0]
    tagged = con.execute(
        "SELECT strategy, group_size, count(*) FROM comm_ops WHERE strategy IS NOT NULL GROUP BY ALL"
    ).fetchall()
    sizes = {}
    for strategy, size, n in tagged:
        sizes.setdefault(strategy, Counter())[size] += n
    for axis in AXES:
        out[axis] = _degree(axis, sizes.get(axis), world)
    out["dp"] = _dp_degree(out, sizes.get("dp"), world)
    out["zero_stage"] = _zero_stage(con, out["dp"][0])
    out.update(_pipeline(con, out["pp"][0]))
    return out


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
    others = [out[a][0] for a in AXES]
    if world is None or any(d is None for d in others):
        return None, "world size or another degree unknown"
    product = 1
    for d in others:
        product *= d
    if world % product:
        return None, f"world {world} is not a multiple of tp x pp x cp x sp x ep = {product}"
    dp = world // product
    why = f"world {world} / (tp x pp x cp x sp x ep = {product})"
    if dp_sizes:
        size = Counter({s: n for s, n in dp_sizes.items() if s}).most_common(1)
        if size and size[0][0] != dp:
            why += (f"; the data-parallel collectives span {size[0][0]} ranks: the replicas of other axes "
                    "(sequence split, experts) sync with them (docs/parallelism.md 5)")
        else:
            why += "; matches the groups of the data-parallel collectives"
    return dp, why


def _zero_stage(con, dp):
    variants = con.execute(
        "SELECT variant, count(*) FROM comm_ops WHERE strategy = 'dp' GROUP BY variant ORDER BY variant DESC"
    ).fetchall()
    if dp is None:
        return None, "data-parallel degree unknown"
    if dp == 1:
        return None, "no data parallelism (dp = 1)" + (
            f"; replica groups still sync with {', '.join(v for v, _ in variants)} patterns" if variants else "")
    if not variants:
        return None, "no data-parallel collectives found"
    stage = max(int(v[-1]) for v, _ in variants)
    return stage, "data-parallel groups: " + ", ".join(f"{n} operations {v}" for v, n in variants)


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
    if v > 1:
        schedule, s_why = "interleaved_1f1b", f"{v} virtual stages per rank"
    else:
        schedule, s_why = _one_f_one_b_or_gpipe(con)
    return {"pp_schedule": (schedule, s_why), "microbatches": (m, why), "virtual_stages": (v, why)}


def _from_annotations(con, pp):
    names = [n for (n,) in con.execute(
        "SELECT DISTINCT name FROM events WHERE cat = 'user_annotation' AND (name LIKE 'PP:%' OR regexp_matches(name, '^(Forward|Backward) \\d+$'))"
    ).fetchall()]
    stages, mbs = set(), set()
    for n in names:
        if m := PP_ANNOTATION.match(n):
            stages.add(int(m.group(1)))
            mbs.add(int(m.group(2)))
        elif m := GPIPE_ANNOTATION.match(n):
            mbs.add(int(m.group(2)))
    if not mbs:
        return None
    m = max(mbs) + 1
    v = (max(stages) + 1) // pp if stages and (max(stages) + 1) % pp == 0 else 1
    return m, v, f"schedule annotations name micro-batches 0..{m - 1}" + (
        f" and stages 0..{max(stages)} on {pp} ranks" if stages else "")


def _from_sends(con):
    rows = con.execute(
        """
        SELECT list_sort(group_ranks) AS g, group_ranks, rank, peer, count(*) // count(DISTINCT step) AS per_step
        FROM comm_ops
        WHERE strategy = 'pp' AND op = 'send' AND peer IS NOT NULL AND group_ranks IS NOT NULL AND step IS NOT NULL
        GROUP BY ALL
        """
    ).fetchall()
    if not rows:
        return None
    ranks = rows[0][1]
    group = [r for r in rows if r[1] == ranks]
    n = len(ranks)
    links = {(r[2], r[3]): r[4] for r in group}
    first_to_second = links.get((ranks[0], ranks[1]), 0)
    wrap = links.get((ranks[-1], ranks[0]), 0) if n > 2 else 0
    m = first_to_second - wrap
    if m <= 0 or first_to_second % m:
        return None
    v = first_to_second // m
    return m, v, (f"per step the first stage (rank {ranks[0]}) sends {first_to_second} activations to the second "
                  f"and the last (rank {ranks[-1]}) sends {wrap} around to the first: m = {m}, v = {v}")


def _one_f_one_b_or_gpipe(con):
    rows = con.execute(
        """
        WITH last AS (SELECT rank, group_ranks[len(group_ranks)] AS last_rank, group_ranks[len(group_ranks) - 1] AS prev
                      FROM comm_ops WHERE strategy = 'pp' AND group_ranks IS NOT NULL LIMIT 1)
        SELECT c.op FROM comm_ops c, last
        WHERE c.strategy = 'pp' AND c.rank = last.last_rank AND c.peer = last.prev
          AND c.step = (SELECT min(step) FROM comm_ops WHERE strategy = 'pp')
        ORDER BY c.host_ts_ns
        """
    ).fetchall()
    ops = [op for (op,) in rows]
    if "send" not in ops or "recv" not in ops:
        return None, "cannot see the last stage's receives and sends"
    first_send = ops.index("send")
    later_recvs = ops[first_send:].count("recv")
    if later_recvs:
        return "1f1b", f"the last stage sends its first gradient before {later_recvs} of its activations arrive"
    return "gpipe", "the last stage receives every micro-batch's activations before it sends any gradient"
