"""Every tag rule, end to end: a tiny trace the full loader tags with the rule, and a
near miss it does not.

The rule files' examples (tests/test_tagging.py) are one-row comm_features tables;
here each rule meets traces, written rank by rank as PyTorch records them
(tests/rule_traces), that go through parsing, comm_ops, comm_features and tagging.
Each run's whole tag table (op, rule, strategy, final variant) is worked out by hand
in its docstring and checked, so a near miss also says which rule, if any, takes the
operations instead. A rule file without traces here fails
``test_every_rule_has_traces``.
"""

from collections import Counter

import pytest
from rule_traces import (
    Run,
    annotation,
    autograd,
    cpu,
    gloo,
    nccl,
    optimizer,
    per_rank,
    same_on_2,
)
from traces import rows, x

from traceparse.tagging.rules import load_rules

RULES = load_rules()
ACCUMULATE = "torch::autograd::AccumulateGrad"


def _a(on, name, ts, dur):
    return [annotation(name, ts, dur)] if on else []


# --- all-reduce: TP vs DP --------------------------------------------------------

def tp_all_reduce():
    """Megatron TP on 2 ranks: a block's output all-reduced in forward (100), its
    input gradient in backward (420, in an autograd frame). The group all-reduces in
    forward: 4 x forward_all_reduce."""
    return same_on_2(*gloo("all_reduce", 100), autograd(400, 100),
                     *gloo("all_reduce", 420))


def ddp_all_reduce():
    """DDP on 2 ranks: a gradient bucket all-reduced from the AccumulateGrad frame
    (420, backward), the last one after backward (820 > the frame's end 500:
    after_backward). No forward all-reduce: 4 x gradient_all_reduce; a group of
    all-reduces only: zero0."""
    return same_on_2(autograd(400, 100, ACCUMULATE), *gloo("all_reduce", 420),
                     *gloo("all_reduce", 820))


def ddp_buffers(annotated=True):
    """DDP on 2 ranks broadcasting a buffer from rank 0 at the start of forward (10),
    inside DistributedDataParallel.forward when ``annotated``; gradients all-reduced
    in backward (420). Annotated: 2 x ddp_buffer_broadcast, 2 x gradient_all_reduce,
    all zero0 (no broadcast in the optimizer). Not: the broadcast (forward, no DDP
    frame) matches no rule: untagged."""
    return same_on_2(*_a(annotated, "DistributedDataParallel.forward", 0, 300),
                     *gloo("broadcast", 10, peer=0),
                     autograd(400, 100, ACCUMULATE), *gloo("all_reduce", 420))


# --- ZeRO / FSDP -----------------------------------------------------------------

def zero1_torch():
    """torch's ZeroRedundancyOptimizer on 2 ranks: gradients all-reduced in backward
    (420), then inside Optimizer.step#ZeroRedundancyOptimizer.step each shard's
    parameters broadcast from their owner (860 from rank 0, 900 from rank 1).
    4 x optimizer_param_sync, 2 x gradient_all_reduce; the group broadcasts in the
    optimizer: zero1."""
    return same_on_2(autograd(400, 100, ACCUMULATE), *gloo("all_reduce", 420),
                     optimizer(850, 100, "ZeroRedundancyOptimizer"),
                     *gloo("broadcast", 860, 32, peer=0),
                     *gloo("broadcast", 900, 32, peer=1))


def zero1_outside_optimizer():
    """ZeRO-1 whose parameter all-gather runs after the local Optimizer.step#Adam.step
    (850-900), outside it, as an engine wrapping the torch optimizer does: gradients
    all-reduced in backward (420), parameter shards all-gathered at 910
    (after_backward). 2 x gradient_all_reduce (zero0); the all-gathers match no
    rule: untagged."""
    return same_on_2(autograd(400, 100, ACCUMULATE), *gloo("all_reduce", 420),
                     optimizer(850, 50, "Adam"), *gloo("all_gather", 910, 32))


def fsdp_zero3(annotated=True):
    """FSDP2 (ZeRO-3) on 2 ranks: parameters all-gathered before forward (20) and
    again in backward (410, in the autograd frame at 400), gradients reduce-scattered
    in backward (510). Annotated (FSDP::all_gather, FSDP::post_backward_reduce):
    4 all-gathers + 2 reduce-scatters x fsdp_annotation. Not annotated: the group
    reduce-scatters in backward only, so gradient_reduce_scatter takes them. Either
    way the group all-gathers in backward: zero3."""
    return same_on_2(
        *_a(annotated, "FSDP::pre_forward", 10, 60),
        *_a(annotated, "FSDP::all_gather", 15, 40),
        *gloo("all_gather", 20, 32),
        autograd(400, 60, "AddBackward0"),
        *_a(annotated, "FSDP::pre_backward", 402, 53),
        *_a(annotated, "FSDP::all_gather", 405, 40),
        *gloo("all_gather", 410, 32),
        autograd(500, 80, "RegisterPostBackwardFunctionBackward"),
        *_a(annotated, "FSDP::post_backward_reduce", 505, 65),
        *gloo("reduce_scatter", 510, 64))


def zero2():
    """ZeRO-2 without FSDP annotations (DeepSpeed-style) on 2 ranks: gradients
    reduce-scattered in backward (420), updated parameter shards all-gathered after
    the optimizer step (910). The group reduce-scatters in backward, never in
    forward: 2 + 2 x gradient_reduce_scatter; no all-gather in backward: zero2."""
    return same_on_2(autograd(400, 100), *gloo("reduce_scatter", 420, 64),
                     optimizer(850, 50, "Adam"), *gloo("all_gather", 910, 32))


def megatron_sp():
    """Megatron TP with sequence parallelism on 2 ranks: activations reduce-scattered
    to sequence shards (100) and all-gathered at the next block (150) in forward, the
    reverse in backward (410, 450). The group reduce-scatters in forward:
    4 + 4 x sequence_parallel, megatron_sp."""
    return same_on_2(*gloo("reduce_scatter", 100, 64), *gloo("all_gather", 150, 32),
                     autograd(400, 100), *gloo("all_gather", 410, 32),
                     *gloo("reduce_scatter", 450, 64))


# --- process groups named for their axis (NCCL, DeviceMesh) ------------------------

def mesh_2x2(named=True):
    """dp2 x tp2 on 4 GPUs (DeviceMesh groups: dp '1' [0, 2], '2' [1, 3]; tp '3'
    [0, 1], '4' [2, 3]): each rank all-reduces activations in its TP group in forward
    (100) and gradients in its DP group in backward (420). Described mesh_tp /
    mesh_dp: 4 x group_axis_tp (megatron) + 4 x group_axis_dp (zero0). Described
    'undefined' (as vLLM's groups are): the pattern decides, 4 x forward_all_reduce
    (the TP groups all-reduce in forward) + 4 x gradient_all_reduce."""
    tp_desc, dp_desc = ("mesh_tp", "mesh_dp") if named else ("undefined", "undefined")
    groups = [("1", dp_desc, [0, 2]), ("2", dp_desc, [1, 3]),
              ("3", tp_desc, [0, 1]), ("4", tp_desc, [2, 3])]

    def rank(r):
        tp, dp = [r - r % 2, r - r % 2 + 1], [r % 2, r % 2 + 2]
        tp_name, dp_name = ("3" if r < 2 else "4"), ("1" if r % 2 == 0 else "2")
        return [*nccl("all_reduce", 100, group=tp, pg_name=tp_name, pg_desc=tp_desc),
                autograd(400, 100, ACCUMULATE),
                *nccl("all_reduce", 420, group=dp, pg_name=dp_name, pg_desc=dp_desc)]
    return Run(4, per_rank(4, rank), groups=groups, backend="nccl")


def p2p_named(desc):
    """Two ranks exchanging point to point in a group ('1') described ``desc``:
    rank 0 sends at 100 and receives at 500, rank 1 receives at 110 and, after its
    backward, sends at 450. Two ranks look the same as a pipeline or a ring: the
    name decides. mesh_pp: 4 x group_axis_pp; mesh_cp: 4 x group_axis_cp."""
    g = {"group": [0, 1], "pg_name": "1", "pg_desc": desc}
    return Run(2, {0: [*nccl("send", 100, peer=1, **g),
                       *nccl("recv", 500, peer=1, **g)],
                   1: [*nccl("recv", 110, peer=0, **g), autograd(300, 100),
                       *nccl("send", 450, peer=0, **g)]},
               groups=[("1", desc, [0, 1])], backend="nccl")


def a2a_named(desc):
    """Two ranks all-to-all twice (100, 200) with even splits in a group ('1')
    described ``desc``. mesh_sp: 4 x group_axis_sp (ulysses); mesh_ep:
    4 x group_axis_ep (moe)."""
    g = {"group": [0, 1], "pg_name": "1", "pg_desc": desc,
         "splits": ([32, 32], [32, 32])}
    return same_on_2(*nccl("all_to_all", 100, **g), *nccl("all_to_all", 200, **g),
                     groups=[("1", desc, [0, 1])], backend="nccl")


# --- custom kernels ----------------------------------------------------------------

DEEPEP = [
    "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, bool*)",
    "void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, long*, int*)",
    "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*)",
    "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*)",
]


def deepep():
    """Rank 0 of 2 with DeepEP (as in the DeepSeek-V3 trace): under dispatch(F) the
    layout kernel (moves nothing: no operation), notify_dispatch and dispatch; under
    combine(F) combine. The three communication kernels are all_to_all operations of
    their own: 3 x deepep_kernels (ep, moe)."""
    evs = [annotation("dispatch(F)", 100, 60), annotation("combine(F)", 300, 30)]
    for i, (ts, name) in enumerate(zip((105, 120, 140, 305), DEEPEP, strict=True)):
        evs += [x("cudaLaunchKernel", ts, 5, cat="cuda_runtime", correlation=100 + i),
                x(name, ts + 100, 50, cat="kernel", pid=0, tid=27, correlation=100 + i,
                  stream=27, device=0)]
    return Run(2, {0: evs}, backend="nccl")


def nccl_a2a_kernel_only():
    """Rank 0 of 2: an NCCL all-to-all seen only as its kernel (no CPU call, no
    phase), even splits. No DeepEP kernel and no other evidence: 1 untagged."""
    args = {"stream": 7, "Collective name": "all_to_allv", "In msg nelems": 64,
            "Out msg nelems": 64, "dtype": "Float", "Group size": 2,
            "Process Group Ranks": "[0, 1]", "In split size": "[32, 32]",
            "Out split size": "[32, 32]"}
    kernel = x("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 200, 40,
               cat="kernel", pid=0, tid=7, args=args)
    return Run(2, {0: [kernel]}, backend="nccl")


# --- point to point (gloo, default_pg) ----------------------------------------------

def pipeline_2(annotated=True):
    """torch.distributed.pipelining, 2 stages, 1 micro-batch: stage 0 sends its
    activation (100), stage 1 receives it (100), runs backward and sends the gradient
    back (450), stage 0 receives it (500); each inside the schedule's
    PP:<stage><action><mb> annotation when ``annotated``. Annotated:
    4 x pipeline_annotation. Not: a 2-rank group is a chain: 4 x p2p_chain."""
    return Run(2, {
        0: [*_a(annotated, "PP:0SEND_F0", 95, 40), *gloo("send", 100, peer=1),
            *_a(annotated, "PP:0RECV_B0", 495, 40), *gloo("recv", 500, peer=1)],
        1: [*_a(annotated, "PP:1RECV_F0", 95, 40), *gloo("recv", 100, peer=0),
            autograd(300, 100),
            *_a(annotated, "PP:1SEND_B0", 445, 40), *gloo("send", 450, peer=0)],
    })


def ring_attention_3():
    """Ring attention over 3 ranks: at each of the 2 ring steps (100, 200) a rank
    sends its K/V block to the next rank ((r + 1) % 3), receives the previous one's,
    and runs attention. Every rank sends twice to its next neighbour, never to the
    previous: a ring. 6 sends + 6 receives x p2p_ring (cp)."""
    def rank(r):
        nxt, prv = (r + 1) % 3, (r - 1) % 3
        return [*gloo("send", 100, peer=nxt), *gloo("recv", 130, peer=prv),
                cpu("aten::_scaled_dot_product_flash_attention", 160, 20),
                *gloo("send", 200, peer=nxt), *gloo("recv", 230, peer=prv)]
    return Run(3, per_rank(3, rank))


def interleaved_3():
    """An interleaved pipeline over 3 ranks, the forward of 1 micro-batch through 2
    virtual stages: 0 -> 1 -> 2 (chunk 0), 2 -> 0, 0 -> 1 -> 2 (chunk 1). Links 0->1
    and 1->2 carry 2 sends, the wrap-around 2->0 one (m x (v - 1)): not every member
    sends to its next neighbour equally often, a chain. 5 + 5 x p2p_chain."""
    return Run(3, {
        0: [*gloo("send", 100, peer=1), *gloo("recv", 300, peer=2),
            *gloo("send", 330, peer=1)],
        1: [*gloo("recv", 150, peer=0), *gloo("send", 180, peer=2),
            *gloo("recv", 350, peer=0), *gloo("send", 380, peer=2)],
        2: [*gloo("recv", 200, peer=1), *gloo("send", 230, peer=0),
            *gloo("recv", 400, peer=1)],
    })


def pipeline_3():
    """A 3-stage pipeline (GPipe, 1 micro-batch): activations 0 -> 1 -> 2 in forward,
    gradients 2 -> 1 -> 0 after the last stage's backward. Rank 2 never sends to its
    ring neighbour 0: a chain. 4 sends + 4 receives x p2p_chain."""
    return Run(3, {
        0: [*gloo("send", 100, peer=1), *gloo("recv", 600, peer=1)],
        1: [*gloo("recv", 150, peer=0), *gloo("send", 180, peer=2),
            *gloo("recv", 500, peer=2), *gloo("send", 530, peer=0)],
        2: [*gloo("recv", 200, peer=1), autograd(300, 100), *gloo("send", 450, peer=1)],
    })


# --- all-to-all (gloo, default_pg) ---------------------------------------------------

# (in_split, out_split) per rank: rank 0 sends 3 elements to itself and 1 to rank 1,
# rank 1 sends 2 and 2; so rank 0 receives 3 + 2, rank 1 1 + 2; combine sends back.
DISPATCH = {0: ([3, 1], [3, 2]), 1: ([2, 2], [1, 2])}
COMBINE = {0: ([3, 2], [3, 1]), 1: ([1, 2], [2, 2])}
EVEN = ([2, 2], [2, 2])


def recsys(annotated=True):
    """A recommendation model (torchrec-style) on 2 ranks: sharded embedding lookups
    exchanged by two all-to-alls, the bag lengths (100, even) and the values (150,
    uneven: DISPATCH), inside '## all2all_data:lengths ##' / '## all2all_data:values
    ##' when ``annotated``. Annotated: 4 x embedding_all_to_all (before
    uneven_all_to_all in priority). Not: the group has an uneven all-to-all:
    4 x uneven_all_to_all (moe)."""
    return Run(2, per_rank(2, lambda r: [
        *_a(annotated, "## all2all_data:lengths ##", 95, 30),
        *gloo("all_to_all", 100, splits=EVEN),
        *_a(annotated, "## all2all_data:values ##", 145, 30),
        *gloo("all_to_all", 150, splits=DISPATCH[r])]))


def moe(uneven=True):
    """Expert parallelism on 2 ranks (the ep4 fixture's pattern): the router's token
    counts exchanged (100, one count per rank: even), tokens dispatched to their
    experts' ranks (150), the experts' mm, results combined back (250). ``uneven``:
    dispatch and combine split by the router (DISPATCH, COMBINE): 6 x
    uneven_all_to_all, the even count exchange included (a group trait). Not: all
    even, no attention between: 6 untagged."""
    return Run(2, per_rank(2, lambda r: [
        *gloo("all_to_all", 100, splits=([1, 1], [1, 1])),
        *gloo("all_to_all", 150, splits=DISPATCH[r] if uneven else EVEN),
        cpu("aten::mm", 200, 20),
        *gloo("all_to_all", 250, splits=COMBINE[r] if uneven else EVEN)]))


def ulysses(attention=True):
    """DeepSpeed-Ulysses on 2 ranks: q/k/v switched from sequence shards to head
    shards by an all-to-all (100, even), attention (140), the output switched back
    (200). 4 x attention_all_to_all. Without attention (an mm between): even
    all-to-alls with nothing around them: 4 untagged."""
    between = "aten::scaled_dot_product_attention" if attention else "aten::mm"
    return same_on_2(*gloo("all_to_all", 100), cpu(between, 140, 30),
                     *gloo("all_to_all", 200))


# --- runs and their tags, worked out by hand ----------------------------------------

def tagged(n, op, rule, strategy, variant):
    return {(op, rule, strategy, variant): n}


UNTAGGED = (None, None, None)

# name: (run, {(op, rule_id, strategy, variant): count over every rank})
RUNS = {
    "tp_all_reduce": (tp_all_reduce,
                      tagged(4, "all_reduce", "forward_all_reduce", "tp", "megatron")),
    "ddp_all_reduce": (ddp_all_reduce,
                       tagged(4, "all_reduce", "gradient_all_reduce", "dp", "zero0")),
    "ddp_buffers": (ddp_buffers, {
        ("broadcast", "ddp_buffer_broadcast", "dp", "zero0"): 2,
        ("all_reduce", "gradient_all_reduce", "dp", "zero0"): 2}),
    "ddp_buffers_unannotated": (lambda: ddp_buffers(annotated=False), {
        ("broadcast", *UNTAGGED): 2,
        ("all_reduce", "gradient_all_reduce", "dp", "zero0"): 2}),
    "zero1_torch": (zero1_torch, {
        ("broadcast", "optimizer_param_sync", "dp", "zero1"): 4,
        ("all_reduce", "gradient_all_reduce", "dp", "zero1"): 2}),
    "zero1_outside_optimizer": (zero1_outside_optimizer, {
        ("all_gather", *UNTAGGED): 2,
        ("all_reduce", "gradient_all_reduce", "dp", "zero0"): 2}),
    "fsdp_zero3": (fsdp_zero3, {
        ("all_gather", "fsdp_annotation", "dp", "zero3"): 4,
        ("reduce_scatter", "fsdp_annotation", "dp", "zero3"): 2}),
    "fsdp_zero3_unannotated": (lambda: fsdp_zero3(annotated=False), {
        ("all_gather", "gradient_reduce_scatter", "dp", "zero3"): 4,
        ("reduce_scatter", "gradient_reduce_scatter", "dp", "zero3"): 2}),
    "zero2": (zero2, {
        ("all_gather", "gradient_reduce_scatter", "dp", "zero2"): 2,
        ("reduce_scatter", "gradient_reduce_scatter", "dp", "zero2"): 2}),
    "megatron_sp": (megatron_sp, {
        ("all_gather", "sequence_parallel", "tp", "megatron_sp"): 4,
        ("reduce_scatter", "sequence_parallel", "tp", "megatron_sp"): 4}),
    "mesh_2x2": (mesh_2x2, {
        ("all_reduce", "group_axis_tp", "tp", "megatron"): 4,
        ("all_reduce", "group_axis_dp", "dp", "zero0"): 4}),
    "mesh_2x2_undescribed": (lambda: mesh_2x2(named=False), {
        ("all_reduce", "forward_all_reduce", "tp", "megatron"): 4,
        ("all_reduce", "gradient_all_reduce", "dp", "zero0"): 4}),
    "p2p_mesh_pp": (lambda: p2p_named("mesh_pp"), {
        ("send", "group_axis_pp", "pp", "p2p"): 2,
        ("recv", "group_axis_pp", "pp", "p2p"): 2}),
    "p2p_mesh_cp": (lambda: p2p_named("mesh_cp"), {
        ("send", "group_axis_cp", "cp", "ring"): 2,
        ("recv", "group_axis_cp", "cp", "ring"): 2}),
    "a2a_mesh_sp": (lambda: a2a_named("mesh_sp"),
                    tagged(4, "all_to_all", "group_axis_sp", "sp", "ulysses")),
    "a2a_mesh_ep": (lambda: a2a_named("mesh_ep"),
                    tagged(4, "all_to_all", "group_axis_ep", "ep", "moe")),
    "deepep": (deepep, tagged(3, "all_to_all", "deepep_kernels", "ep", "moe")),
    "nccl_a2a_kernel_only": (nccl_a2a_kernel_only, {("all_to_all", *UNTAGGED): 1}),
    "pipeline_2": (pipeline_2, {
        ("send", "pipeline_annotation", "pp", "p2p"): 2,
        ("recv", "pipeline_annotation", "pp", "p2p"): 2}),
    "pipeline_2_unannotated": (lambda: pipeline_2(annotated=False), {
        ("send", "p2p_chain", "pp", "p2p"): 2, ("recv", "p2p_chain", "pp", "p2p"): 2}),
    "ring_attention_3": (ring_attention_3, {
        ("send", "p2p_ring", "cp", "ring"): 6, ("recv", "p2p_ring", "cp", "ring"): 6}),
    "interleaved_3": (interleaved_3, {
        ("send", "p2p_chain", "pp", "p2p"): 5, ("recv", "p2p_chain", "pp", "p2p"): 5}),
    "pipeline_3": (pipeline_3, {
        ("send", "p2p_chain", "pp", "p2p"): 4, ("recv", "p2p_chain", "pp", "p2p"): 4}),
    "recsys": (recsys,
               tagged(4, "all_to_all", "embedding_all_to_all", "ep", "embedding")),
    "recsys_unannotated": (lambda: recsys(annotated=False),
                           tagged(4, "all_to_all", "uneven_all_to_all", "ep", "moe")),
    "moe": (moe, tagged(6, "all_to_all", "uneven_all_to_all", "ep", "moe")),
    "moe_even": (lambda: moe(uneven=False), {("all_to_all", *UNTAGGED): 6}),
    "ulysses": (ulysses,
                tagged(4, "all_to_all", "attention_all_to_all", "sp", "ulysses")),
    "ulysses_without_attention": (lambda: ulysses(attention=False),
                                  {("all_to_all", *UNTAGGED): 4}),
}

# rule id: (runs it tags, the first with the rule's own strategy and variant;
#           near misses: runs it does not tag)
CASES = {
    "group_axis_tp": (["mesh_2x2"], ["mesh_2x2_undescribed"]),
    "group_axis_pp": (["p2p_mesh_pp"], ["p2p_mesh_cp"]),
    "group_axis_cp": (["p2p_mesh_cp"], ["p2p_mesh_pp"]),
    "group_axis_sp": (["a2a_mesh_sp"], ["a2a_mesh_ep"]),
    "group_axis_ep": (["a2a_mesh_ep"], ["a2a_mesh_sp", "moe_even"]),
    "group_axis_dp": (["mesh_2x2"], ["mesh_2x2_undescribed"]),
    "deepep_kernels": (["deepep"], ["nccl_a2a_kernel_only"]),
    "pipeline_annotation": (["pipeline_2"], ["pipeline_2_unannotated"]),
    "p2p_ring": (["ring_attention_3"], ["interleaved_3"]),
    "p2p_chain": (["pipeline_3", "interleaved_3", "pipeline_2_unannotated"],
                  ["ring_attention_3"]),
    "embedding_all_to_all": (["recsys"], ["recsys_unannotated"]),
    "uneven_all_to_all": (["moe", "recsys_unannotated"], ["moe_even"]),
    "attention_all_to_all": (["ulysses"], ["ulysses_without_attention"]),
    "fsdp_annotation": (["fsdp_zero3"], ["fsdp_zero3_unannotated"]),
    "sequence_parallel": (["megatron_sp"], ["zero2"]),
    "forward_all_reduce": (["tp_all_reduce"], ["ddp_all_reduce"]),
    "optimizer_param_sync": (["zero1_torch"], ["zero1_outside_optimizer"]),
    "gradient_all_reduce": (["ddp_all_reduce"], ["tp_all_reduce"]),
    "ddp_buffer_broadcast": (["ddp_buffers"], ["ddp_buffers_unannotated"]),
    "gradient_reduce_scatter": (["zero2", "fsdp_zero3_unannotated"], ["megatron_sp"]),
}


@pytest.fixture(scope="session")
def tags(tmp_path_factory):
    """tags(name) -> the comm_ops rows (rank, op, phase, rule_id, strategy, variant)
    of run ``name``, loaded once per session."""
    loaded = {}

    def get(name):
        if name not in loaded:
            con = RUNS[name][0]().load(tmp_path_factory.mktemp(name))
            loaded[name] = rows(con, "SELECT c.rank, c.op, f.phase, c.rule_id, "
                                     "c.strategy, c.variant FROM comm_ops c "
                                     "JOIN comm_features f USING (rank, op_id) "
                                     "ORDER BY ALL")
            con.close()
        return loaded[name]

    return get


def test_every_rule_has_traces():
    assert set(CASES) == {r.id for r in RULES}
    assert {n for match, miss in CASES.values() for n in match + miss} == set(RUNS)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
@pytest.mark.slow
def test_rule_on_its_traces(rule, tags):
    match, near_miss = CASES[rule.id]
    for i, name in enumerate(match):
        ops = [o for o in tags(name) if o["rule_id"] == rule.id]
        assert ops, f"{name}: nothing tagged by {rule.id}"
        assert {o["strategy"] for o in ops} == {rule.strategy}, name
        if i == 0:  # in the other runs the group's pattern may settle another variant
            assert {o["variant"] for o in ops} == {rule.variant}, name
    for name in near_miss:
        ops = tags(name)
        assert ops, f"{name}: no communication at all, no near miss"
        assert all(o["rule_id"] != rule.id for o in ops), name


@pytest.mark.parametrize("name", RUNS)
@pytest.mark.slow
def test_tags_of_each_run_as_worked_out(name, tags):
    got = Counter((o["op"], o["rule_id"], o["strategy"], o["variant"])
                  for o in tags(name))
    assert got == Counter(RUNS[name][1])
