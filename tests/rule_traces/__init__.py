"""Tiny multi-rank traces of communication, for the tag rule and comm_features tests.

Each call below writes the events PyTorch's profiler records for one communication
call, as the fixtures (fixtures/runs, gloo) and the public GPU traces (NCCL)
show them:

- ``gloo(...)``: the ``c10d::<op>`` cpu_op with "Input Dims", "Input type" and
  "Concrete Inputs" following the c10d op schemas (peer, root and split sizes among
  them), and the ``gloo:<op>`` annotation that executes it: on a worker thread for a
  collective (reduce-scatter runs as an all-reduce of the full input), inline on the
  calling thread for a send or receive.
- ``nccl(...)``: ``record_param_comms`` with its args ("Collective name", "In msg
  nelems", "Process Group Name/Description/Ranks", split sizes), wrapped in the c10d
  op for a send or receive (which states the peer), the runtime launch and the NCCL
  kernel.

Times are in µs; a run's step is ``step(1, 0, 1000)``: forward before 400, autograd
frames from 400, the optimizer at 850-950. Tensors are float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traces import load, step, thread_name, trace, write, x

MAIN, WORKER, AUTOGRAD = 1, 2, 3  # calling, gloo worker, autograd engine threads
STREAM = 7

# --- gloo ------------------------------------------------------------------------

# op -> (c10d op, "Input type"; "Concrete Inputs" without the peer/root), as in Ops.cpp
C10D = {
    "all_reduce": ("allreduce_", ["TensorList", "", "", "", "Scalar", "Scalar"],
                   ["", "", "", "", "False", "-1"]),
    "broadcast": ("broadcast_",
                  ["TensorList", "", "Scalar", "Scalar", "Scalar", "Scalar"],
                  ["", "", None, "0", "False", "-1"]),
    "all_gather": ("_allgather_base_", ["float", "float", "", "Scalar", "Scalar"],
                   ["", "", "", "False", "-1"]),
    "reduce_scatter": ("_reduce_scatter_base_",
                       ["float", "float", "", "", "Scalar", "Scalar"],
                       ["", "", "", "", "False", "-1"]),
    "all_to_all": ("alltoall_base_",
                   ["float", "float", "", "ScalarList", "ScalarList", "Scalar",
                    "Scalar"],
                   ["", "", "", None, None, "False", "-1"]),
    "send": ("send", ["TensorList", "", "Scalar", "Scalar"], ["", "", None, "0"]),
    "recv": ("recv_", ["TensorList", "", "Scalar", "Scalar"], ["", "", None, "0"]),
}


def gloo(op, ts, n=64, *, peer=None, splits=None, group_size=2, dur=20, tid=MAIN):
    """One gloo call of ``n`` input elements: the c10d op on ``tid`` and its
    gloo:<op> execution. ``peer``: destination or source of a send/recv, root of a
    broadcast (within the group). ``splits``: (in_split, out_split) of an
    all-to-all, in elements."""
    name, types, concrete = C10D[op]
    concrete = list(concrete)
    if op == "all_reduce":
        dims = [[[n]], [], [], [], [], []]
    elif op == "broadcast":
        dims, concrete[2] = [[[n]], [], [], [], [], []], str(peer)
    elif op == "all_gather":  # (output, input shard, ...)
        dims = [[n * group_size], [n], [], [], []]
    elif op == "reduce_scatter":  # (output shard, full input, ...)
        dims = [[n // group_size], [n], [], [], [], []]
    elif op == "all_to_all":  # (output, input, pg, output splits, input splits, ...)
        in_split, out_split = splits or ([], [])
        n, n_out = (sum(in_split), sum(out_split)) if splits else (n, n)
        dims = [[n_out], [n], [], [], [], [], []]
        concrete[3], concrete[4] = str(out_split), str(in_split)
    else:  # send, recv
        dims, concrete[2] = [[[n]], [], [], []], str(peer)
    args = {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete}
    call = x(f"c10d::{name}", ts, dur, tid=tid, args=args)
    run_args = {"Input Dims": [[n]], "Input type": ["float"], "Concrete Inputs": [""]}
    run_op = "all_reduce" if op == "reduce_scatter" else op
    if op in ("send", "recv"):  # inline, when the call waits
        run = x(f"gloo:{run_op}", ts + dur, 5, cat="user_annotation", tid=tid,
                args=run_args)
    else:
        run = x(f"gloo:{run_op}", ts + 1, dur, cat="user_annotation", tid=WORKER,
                args=run_args)
    return [call, run]


# --- NCCL ------------------------------------------------------------------------

NCCL = {  # op -> (record_param_comms "Collective name", kernel)
    "all_reduce": ("allreduce", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    "all_gather": ("_allgather_base", "ncclDevKernel_AllGather_RING_LL"),
    "reduce_scatter": ("_reduce_scatter_base",
                       "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"),
    "broadcast": ("broadcast", "ncclDevKernel_Broadcast_RING_LL"),
    "all_to_all": ("all_to_allv", "ncclDevKernel_SendRecv"),
    "send": ("send", "ncclDevKernel_SendRecv"),
    "recv": ("recv", "ncclDevKernel_SendRecv"),
}


def nccl(op, ts, n=64, *, group=(0, 1), pg_name="0", pg_desc="default_pg", peer=None,
         splits=None, dur=20, tid=MAIN):
    """One NCCL call of ``n`` input elements in process group ``group`` (global
    ranks as the trace lists them). ``peer``: the send/recv peer within the group.
    ``splits``: (in_split, out_split) of an all-to-all."""
    coll, kernel = NCCL[op]
    in_split, out_split = splits or ([], [])
    n_out = {"all_gather": n * len(group), "reduce_scatter": n // len(group)}.get(op, n)
    if splits:
        n, n_out = sum(in_split), sum(out_split)
    wrapped = op in ("send", "recv")  # inside the c10d op, which states the peer
    rpc = x("record_param_comms", ts + wrapped, dur - 2 * wrapped, tid=tid, args={
        "Collective name": coll, "In msg nelems": n, "Out msg nelems": n_out,
        "dtype": "Float", "Group size": len(group), "Process Group Name": pg_name,
        "Process Group Description": pg_desc, "Process Group Ranks": str(list(group)),
        "In split size": str(in_split), "Out split size": str(out_split),
    })
    corr = ts  # calls on a rank start at different times: a unique correlation id
    evs = [rpc,
           x("cudaLaunchKernel", ts + 2, 1, cat="cuda_runtime", tid=tid,
             correlation=corr),
           x(f"{kernel}(ncclDevKernelArgsStorage<4096ul>)", ts + 5, dur, cat="kernel",
             pid=0, tid=STREAM, correlation=corr, stream=STREAM, device=0)]
    if wrapped:
        name, types, concrete = C10D[op]
        args = {"Input Dims": [[[n]], [], [], []], "Input type": types,
                "Concrete Inputs": [*concrete[:2], str(peer), *concrete[3:]]}
        evs.insert(0, x(f"c10d::{name}", ts, dur, tid=tid, args=args))
    return evs


# --- frames around the calls -----------------------------------------------------

def annotation(name, ts, dur, tid=MAIN):
    return x(name, ts, dur, cat="user_annotation", tid=tid)


def autograd(ts, dur, fn="AddmmBackward0", tid=MAIN):
    """An autograd engine frame, as the profiler records each backward function."""
    return x(f"autograd::engine::evaluate_function: {fn}", ts, dur, tid=tid)


def optimizer(ts=850, dur=100, name="SGD"):
    return annotation(f"Optimizer.step#{name}.step", ts, dur)


def cpu(name, ts, dur=10, tid=MAIN):
    return x(name, ts, dur, tid=tid)


# --- a run: one file per rank ------------------------------------------------------

@dataclass
class Run:
    """A job of ``world`` ranks; ``events[r]`` is what rank r's file holds (only
    those ranks are written). ``groups``: process groups beside default_pg, as
    (pg_name, pg_desc, ranks); each rank's pg_config lists default_pg and the groups
    it belongs to."""

    world: int
    events: dict
    groups: list = field(default_factory=list)
    backend: str = "gloo"

    def pg_config(self, rank):
        pgs = [("0", "default_pg", list(range(self.world)))]
        pgs += [g for g in self.groups if rank in g[2]]
        cfg = "cpu:gloo" if self.backend == "gloo" else "cuda:nccl"
        return [{"pg_name": n, "pg_desc": d, "backend_config": cfg, "pg_size": len(rs),
                 "ranks": sorted(rs)} for n, d, rs in pgs]

    def write(self, folder):
        files = []
        for r, evs in sorted(self.events.items()):
            meta = [thread_name(1, MAIN, f"thread {MAIN} (python)"),
                    thread_name(1, WORKER, f"thread {WORKER} (pt_gloo_runloop)"),
                    thread_name(1, AUTOGRAD, f"thread {AUTOGRAD} (pt_autograd_0)")]
            info = {"backend": self.backend, "pg_config": self.pg_config(r)}
            doc = trace(meta + [step(1, 0, 1000), *evs], rank=r, world_size=self.world,
                        info=info)
            files.append(write(folder / f"rank{r}.json", doc))
        return files

    def load(self, folder):
        """Write the files and load them with the full loader
        (traceparse.load.run.load_run); a read-only connection to the store."""
        return load(self.write(folder), folder / "store.duckdb", workers=1)


def per_rank(world, fn):
    """{rank: fn(rank)} for every rank of the world."""
    return {r: fn(r) for r in range(world)}


def every_rank(world, events):
    """The same events on every rank of the world."""
    return {r: list(events) for r in range(world)}


def same_on_2(*events, **kw):
    """A run of 2 ranks whose files hold the same ``events``."""
    return Run(2, every_rank(2, events), **kw)
