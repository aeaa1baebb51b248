"""The columns of ``comm_features``, the table tagging rules are written against."""

from importlib.resources import files

# name -> (DuckDB type, definition)
COLUMNS = {
    "rank": ("INTEGER", "rank of the operation"),
    "op_id": ("BIGINT", "the operation (comm_ops.op_id)"),
    "step": ("BIGINT", "ProfilerStep#N it starts in"),
    "op": ("VARCHAR", "all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, send, recv, ..."),
    "source": ("VARCHAR", "how the operation shows in the trace (comm_ops.source)"),
    "kernel": ("VARCHAR", "executing kernel or worker annotation"),
    "bytes_in": ("BIGINT", "input bytes on this rank"),
    "bytes_out": ("BIGINT", "output bytes on this rank"),
    "group_size": ("INTEGER", "ranks in the group"),
    "group_ranks": ("INTEGER[]", "global ranks of the group"),
    "group_key": ("VARCHAR", "the sorted group ranks as text: equal for every member's view of one group"),
    "pg_name": ("VARCHAR", "process group name"),
    "pg_desc": ("VARCHAR", "process group description"),
    "peer": ("INTEGER", "global peer rank of a send or recv"),
    "world_size": ("INTEGER", "ranks in the job"),
    "axis": ("VARCHAR", "the parallelism axis the group's description or name states (dp, tp, pp, cp, sp, ep), else NULL"),
    "geometry": ("VARCHAR", "the group's ranks: world, contiguous, strided, irregular, single; NULL when unknown"),
    "ctx": ("VARCHAR", "enclosing annotations and autograd/optimizer frames on the calling thread, outermost first, ' > ' between"),
    "phase": ("VARCHAR", "optimizer (inside Optimizer.step); backward (in an autograd frame or thread, or within a backward pass: between the first and last autograd frame of one forward/backward pass of the step, passes split by forward compute outside autograd frames on the step's thread, so the forwards of gradient accumulation's later micro-batches are forward); after_backward (later in the step); forward (earlier in the step, or anywhere in a trace without backward, such as inference); outside_step; unknown (no CPU call)"),
    "dtensor": ("BOOLEAN", "the call is a DTensor / functional collective (_c10d_functional::*): a redistribution of tensor-parallel activations or parameters, never an FSDP or DDP gradient sync"),
    "before_backward": ("BOOLEAN", "the call starts before the first autograd frame of its step (false without a backward)"),
    "uneven_split": ("BOOLEAN", "an all_to_all whose split sizes differ between ranks (data-dependent routing)"),
    "attention_between": ("BOOLEAN", "an attention op runs between this all_to_all and the next one of its group on the rank"),
    "p2p_shape": ("VARCHAR", "for send/recv: ring (every member sends to its ring neighbours equally often) or chain (anything else)"),
    "group_forward_all_reduce": ("BOOLEAN", "the group all-reduces during forward on some rank (activations, not gradients)"),
    "group_forward_reduce_scatter": ("BOOLEAN", "the group reduce-scatters during forward on some rank (activations: sequence parallelism)"),
    "group_backward_reduce_scatter": ("BOOLEAN", "the group reduce-scatters during backward on some rank (gradients)"),
    "group_uneven_all_to_all": ("BOOLEAN", "the group has an all_to_all with uneven split sizes"),
    "group_attention_all_to_all": ("BOOLEAN", "the group has an all_to_all next to attention"),
}


def build_features(con):
    from traceparse.store.schema import features_comments

    from traceparse.layout.infer import FORWARD_OPS

    sql = files("traceparse.tagging").joinpath("features.sql").read_text()
    con.execute(sql.replace("__FORWARD_OPS__", ", ".join(f"'{n}'" for n in FORWARD_OPS)))
    con.execute(features_comments())
