"""comm_features, the table the tagging rules read: tiny traces through the full loader, every expected
value worked out by hand from the trace (traceparse/tagging/features.py defines the columns,
features.sql computes them).

Traces follow tests/rule_traces: the step is ProfilerStep#1 at 0-1000 µs on the main thread; times
below are µs.
"""

import pytest
from rule_traces import AUTOGRAD, Run, autograd, cpu, gloo, nccl, optimizer, per_rank
from traces import rows, step, x


def features(con, cols):
    """{(rank, start µs of the call, or of its kernel when it has no call): {col: value}}"""
    got = rows(con, f"SELECT f.rank, coalesce(c.host_ts_ns, c.exec_ts_ns) // 1000 AS t, {', '.join(cols)} "
                    "FROM comm_features f JOIN comm_ops c USING (rank, op_id)")
    out = {(r.pop("rank"), r.pop("t")): r for r in got}
    assert len(out) == len(got), "two operations start together on a rank"
    return out


# --- phase ---------------------------------------------------------------------------------

def test_phase_of_a_training_step(tmp_path):
    evs = [
        *gloo("all_reduce", 100),                             # before the first autograd frame (400)
        autograd(400, 100, "AddmmBackward0"),
        *gloo("all_reduce", 420),                             # inside an autograd frame
        *gloo("all_reduce", 550),                             # in no frame, but between the frames (400-700)
        autograd(600, 100, "MulBackward0", tid=AUTOGRAD),     # the step's last frame, on the autograd thread
        *gloo("all_reduce", 620, tid=AUTOGRAD),               # inside it
        *gloo("all_reduce", 750, tid=AUTOGRAD),               # after the frames, but on the autograd thread
        *gloo("all_reduce", 800),                             # after the frames (end 700), main thread
        optimizer(850, 100, "SGD"),
        *gloo("broadcast", 860, peer=0),                      # inside Optimizer.step
        step(2, 1000, 1000),
        *gloo("all_reduce", 1100),                            # step 2 has no autograd frame
        *gloo("all_reduce", 2100),                            # in no step, in a trace with backward
        x("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 3000, 10, cat="kernel",
          pid=0, tid=7, args={"stream": 7, "Collective name": "allreduce", "In msg nelems": 64,
                              "Out msg nelems": 64, "dtype": "Float", "Group size": 2}),  # no CPU call
    ]
    con = Run(2, {0: evs}).load(tmp_path)
    got = {k: (v["phase"], v["ctx"]) for k, v in features(con, ["phase", "ctx"]).items()}
    assert got == {
        (0, 100): ("forward", ""),
        (0, 420): ("backward", "autograd::engine::evaluate_function: AddmmBackward0"),
        (0, 550): ("backward", ""),
        (0, 620): ("backward", "autograd::engine::evaluate_function: MulBackward0"),
        (0, 750): ("backward", ""),
        (0, 800): ("after_backward", ""),
        (0, 860): ("optimizer", "Optimizer.step#SGD.step"),
        (0, 1100): ("forward", ""),
        (0, 2100): ("outside_step", ""),
        (0, 3000): ("unknown", ""),
    }


def test_ctx_lists_enclosing_frames_outermost_first(tmp_path):
    # ctx keeps only the frames whose names features.sql looks for (DDP, FSDP, pipeline, '##', all2all,
    # autograd, optimizer, ...): an annotation of another name is left out, as is an aten op
    evs = [x("DistributedDataParallel.forward", 10, 200, cat="user_annotation"),
           x("TransformerBlock.forward", 15, 150, cat="user_annotation"),
           x("## all2all_data:lengths ##", 20, 100, cat="user_annotation"),
           x("aten::linear", 30, 80),
           *gloo("all_to_all", 40)]
    con = Run(2, {0: evs}).load(tmp_path)
    assert features(con, ["ctx"]) == {(0, 40): {"ctx": "DistributedDataParallel.forward > ## all2all_data:lengths ##"}}


def test_phase_without_backward_is_forward_everywhere(tmp_path):
    # inference: no autograd frame in the trace, so no backward window and no outside_step
    con = Run(2, {0: [*gloo("all_reduce", 100), *gloo("all_reduce", 1500)]}).load(tmp_path)
    assert {k: v["phase"] for k, v in features(con, ["phase"]).items()} == {(0, 100): "forward", (0, 1500): "forward"}


# --- point-to-point shape ---------------------------------------------------------------------

def p2p(world, links, loaded=None):
    """The sends ``links`` [(src, dst), ...] in time order, 50 µs apart, each received by dst 10 µs later;
    default_pg of ``world`` ranks; only the ``loaded`` ranks' files (default all)."""
    evs = {r: [] for r in range(world)}
    for i, (src, dst) in enumerate(links):
        evs[src] += gloo("send", 100 + 50 * i, peer=dst, dur=5)
        evs[dst] += gloo("recv", 110 + 50 * i, peer=src, dur=5)
    return Run(world, {r: e for r, e in evs.items() if loaded is None or r in loaded})


# sends from each rank to its ring neighbours (next = (r + 1) % n, prev = (r - 1) % n) decide:
# ring when n > 2, every rank sends to next equally often (> 0), and to prev either never or as often
# (two ranks: below)
P2P_CASES = {
    # to next 1, 1, 1; to prev 0, 0, 0
    "ring": (3, [(0, 1), (1, 2), (2, 0)], None, "ring"),
    # to next 1, 1, 1; to prev 1, 1, 1
    "ring both ways": (3, [(0, 1), (1, 2), (2, 0), (0, 2), (1, 0), (2, 1)], None, "ring"),
    # to next 1, 1, 1; to prev 1, 0, 0: rank 0 alone also sends back
    "ring plus one back": (3, [(0, 1), (1, 2), (2, 0), (0, 2)], None, "chain"),
    # to next 1, 1, 0: stage 2 never sends to stage 0
    "pipeline": (3, [(0, 1), (1, 2), (2, 1), (1, 0)], None, "chain"),
    # to next 2, 2, 1: the interleaved schedule's wrap-around carries fewer micro-batches
    "interleaved": (3, [(0, 1), (1, 2), (2, 0), (0, 1), (1, 2)], None, "chain"),
    # two ranks without a backward: nothing tells K/V blocks from a pipeline's activations
    "two ranks both ways": (2, [(0, 1), (1, 0)], None, "chain"),
    # a ring, but only rank 0's file is loaded: ranks 1 and 2 send nothing the store knows of
    "ring seen from one rank": (3, [(0, 1), (1, 2), (2, 0)], [0], "chain"),
}


@pytest.mark.parametrize("world, links, loaded, shape", P2P_CASES.values(), ids=P2P_CASES.keys())
@pytest.mark.slow
def test_p2p_shape(tmp_path, world, links, loaded, shape):
    con = p2p(world, links, loaded).load(tmp_path)
    got = rows(con, "SELECT op, group_key, p2p_shape FROM comm_features")
    assert got and {(r["group_key"], r["p2p_shape"]) for r in got} == {(str(list(range(world))), shape)}
    assert {r["op"] for r in got} <= {"send", "recv"}


# two ranks are each other's both neighbours: they are a ring when both send to the other before
# their backward starts (K/V blocks in forward), a chain when one of them sends only in backward
TWO_RANK_CASES = {
    # both send at 100 / 150, both ranks' backward starts at 600
    "ring of two": ([(0, 1), (1, 0)], {0: 600, 1: 600}, "ring"),
    # rank 1 (the last stage) sends its gradient at 150, after its backward started at 120
    "two-stage pipeline": ([(0, 1), (1, 0)], {0: 600, 1: 120}, "chain"),
    # rank 0 sends twice, rank 1 once: uneven
    "ring of two, uneven": ([(0, 1), (1, 0), (0, 1)], {0: 600, 1: 600}, "chain"),
}


@pytest.mark.parametrize("links, backward, shape", TWO_RANK_CASES.values(), ids=TWO_RANK_CASES.keys())
@pytest.mark.slow
def test_p2p_shape_of_two_ranks(tmp_path, links, backward, shape):
    run = p2p(2, links)
    for r, ts in backward.items():
        run.events[r].append(autograd(ts, 50))
    got = rows(run.load(tmp_path), "SELECT DISTINCT p2p_shape FROM comm_features")
    assert got == [{"p2p_shape": shape}]


def test_p2p_shape_is_null_for_collectives(tmp_path):
    run = p2p(3, [(0, 1), (1, 2), (2, 0)])
    for r in run.events:
        run.events[r] += gloo("all_reduce", 500)
    con = run.load(tmp_path)
    got = {(r["op"], r["p2p_shape"]) for r in rows(con, "SELECT op, p2p_shape FROM comm_features")}
    assert got == {("send", "ring"), ("recv", "ring"), ("all_reduce", None)}


# --- group evidence: axis, geometry, group_key ---------------------------------------------------

# rank 0 of 8 GPUs, one all-reduce in each of its groups: (start µs, pg_name, pg_desc, ranks as the trace
# lists them) -> (axis, geometry, group_key)
GROUPS = {
    (100, "0", "default_pg", (0, 1, 2, 3, 4, 5, 6, 7)): (None, "world", "[0, 1, 2, 3, 4, 5, 6, 7]"),
    (150, "1", "mesh_tp", (0, 1, 2, 3)): ("tp", "contiguous", "[0, 1, 2, 3]"),
    (200, "2", "mesh_dp_shard", (4, 0)): ("dp", "strided", "[0, 4]"),
    (250, "3", "PIPELINE_MODEL_PARALLEL_GROUP", (0, 2, 4, 6)): ("pp", "strided", "[0, 2, 4, 6]"),
    (300, "context_parallel", "undefined", (0, 1)): ("cp", "contiguous", "[0, 1]"),
    (350, "5", "undefined", (0, 1, 5)): (None, "irregular", "[0, 1, 5]"),
    (400, "6", "undefined", (0,)): (None, "single", "[0]"),
    (450, "7", "mesh_ep", (0, 1)): ("ep", "contiguous", "[0, 1]"),
    (500, "8", "ulysses_sp", (0, 1)): ("sp", "contiguous", "[0, 1]"),
}


def test_group_axis_geometry_and_key(tmp_path):
    evs = {0: [e for (ts, name, desc, ranks) in GROUPS
               for e in nccl("all_reduce", ts, group=ranks, pg_name=name, pg_desc=desc)],
           # rank 4's view of the dp group lists its ranks sorted
           4: nccl("all_reduce", 200, group=(0, 4), pg_name="2", pg_desc="mesh_dp_shard")}
    groups = [(name, desc, sorted(ranks)) for (_, name, desc, ranks) in GROUPS if name != "0"]
    con = Run(8, evs, groups=groups, backend="nccl").load(tmp_path)
    got = features(con, ["axis", "geometry", "group_key", "world_size"])
    want = {(0, k[0]): v for k, v in GROUPS.items()} | {(4, 200): ("dp", "strided", "[0, 4]")}
    assert {k: (v["axis"], v["geometry"], v["group_key"]) for k, v in got.items()} == want
    assert {v["world_size"] for v in got.values()} == {8}


def test_geometry_is_null_without_group_ranks(tmp_path):
    # a kernel without CPU call or group args: no group, so no geometry nor group_key
    k = x("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 100, 10, cat="kernel", pid=0,
          tid=7, args={"stream": 7})
    con = Run(8, {0: [k]}, backend="nccl").load(tmp_path)
    got = rows(con, "SELECT op, axis, geometry, group_key FROM comm_features")
    assert got == [{"op": "all_reduce", "axis": None, "geometry": None, "group_key": None}]


# --- all-to-all: uneven splits, attention between -------------------------------------------------

def test_uneven_split(tmp_path):
    # (in_split, out_split) per rank and call, rows sent to / received from rank 0 and rank 1; a call's
    # split lists are uneven when either holds two different sizes
    calls = {
        100: {0: ([3, 1], [3, 2]), 1: ([2, 2], [1, 2])},  # rank 0 both uneven; rank 1 sends evenly, receives not
        200: {0: ([2, 2], [2, 2]), 1: ([2, 3], [2, 3])},  # rank 0 even on its side; rank 1 uneven
        300: {0: None, 1: None},                           # no split sizes (even by construction): '[]'
    }
    con = Run(2, per_rank(2, lambda r: [e for ts, c in calls.items()
                                        for e in gloo("all_to_all", ts, 4, splits=c[r])]
                                       + gloo("all_reduce", 400))).load(tmp_path)
    got = {k: (v["uneven_split"], v["group_uneven_all_to_all"])
           for k, v in features(con, ["uneven_split", "group_uneven_all_to_all"]).items()}
    assert got == {
        (0, 100): (True, True), (1, 100): (True, True),
        (0, 200): (False, True), (1, 200): (True, True),
        (0, 300): (False, True), (1, 300): (False, True),
        (0, 400): (False, True), (1, 400): (False, True),  # a group trait: every op of the group carries it
    }


def test_attention_between(tmp_path):
    a, b = dict(group=[0, 1], pg_name="1", pg_desc="undefined"), dict(group=[0, 2], pg_name="2", pg_desc="undefined")
    evs = [
        *nccl("all_to_all", 100, **a),
        cpu("aten::_scaled_dot_product_flash_attention", 140, 30),  # between A@100 and A@200: yes
        *nccl("all_to_all", 200, **a),
        cpu("aten::mm", 240, 10),
        *nccl("all_to_all", 260, **b),                               # B's only all-to-all: no next one
        cpu("aten::scaled_dot_product_attention", 300, 30),          # between A@200 and A@400 (B@260 is another group)
        *nccl("all_to_all", 400, **a),
        cpu("aten::_scaled_dot_product_flash_attention", 450, 30, tid=AUTOGRAD),  # another thread: not between
        *nccl("all_to_all", 600, **a),
        cpu("aten::_scaled_dot_product_flash_attention", 650, 30),   # after A@600, whose next one is in no step
        *nccl("all_to_all", 1050, **a),
    ]
    groups = [("1", "undefined", [0, 1]), ("2", "undefined", [0, 2])]
    con = Run(4, {0: evs}, groups=groups, backend="nccl").load(tmp_path)
    got = {k: (v["attention_between"], v["group_attention_all_to_all"])
           for k, v in features(con, ["attention_between", "group_attention_all_to_all"]).items()}
    assert got == {
        (0, 100): (True, True), (0, 200): (True, True), (0, 400): (False, True), (0, 600): (False, True),
        (0, 1050): (False, True), (0, 260): (False, False),
    }
