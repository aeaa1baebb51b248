#!/usr/bin/env python
"""Profiler plugin overhead: traceparse.profiler.profile vs plain torch.profiler, side by side, on a real run.

Runs the fixture ``ddp2`` training job (tiny transformer, DDP, 2 processes, gloo, CPU; needs the ``torch``
extra) and, on every rank, alternates profiled windows of three kinds, ``--reps`` times each, in an order
rotated every repetition:

  none       no profiler (the step itself)
  torch      torch.profiler.profile(CPU, record_shapes=True, schedule, on_trace_ready=
             torch.profiler.tensorboard_trace_handler(dir, use_gzip=True)), the usual way
  traceparse traceparse.profiler.profile(dir, model=, optimizer=, seq=, micro_batch=, same schedule): the
             metadata embedded and the atomic gzipped file

Each window is schedule(wait=1, warmup=1, active=--active). Reported per kind (rank 0; every rank runs the
same): the median and 90th percentile wall time of an active step (``step(); prof.step()``, the steps that
do not end the window), the time of the step that ends the window minus the median step (export and write),
and, for traceparse, the metadata collection done once before the window (``construct_ms``).

    python bench/profiler_overhead.py                 # 5 repetitions x 10 active steps
    python bench/profiler_overhead.py --reps 10 --json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KINDS = ("none", "torch", "traceparse")


def _window(kind, step, out, active):
    import torch
    from torch.profiler import ProfilerActivity, schedule

    from fixtures.configs import CONFIGS
    from traceparse import profiler

    sched = schedule(wait=1, warmup=1, active=active, repeat=1)
    n = 2 + active
    t0 = time.perf_counter()
    if kind == "none":
        prof = None
    elif kind == "torch":
        prof = torch.profiler.profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=sched,
                                      on_trace_ready=torch.profiler.tensorboard_trace_handler(str(out), use_gzip=True))
    else:
        d = CONFIGS["ddp2"].dims
        prof = profiler.profile(out, **step.plugin, seq=d.seq, micro_batch=d.micro_batch,
                                activities=[ProfilerActivity.CPU], record_shapes=True, schedule=sched)
    construct = time.perf_counter() - t0
    times = []
    if prof is not None:
        prof.start()
    for _ in range(n):
        t = time.perf_counter()
        step()
        if prof is not None:
            prof.step()
        times.append(time.perf_counter() - t)
    if prof is not None:
        prof.stop()
    active_steps = times[2:-1]  # the steps recorded, the last excluded: it ends the window and writes
    return {"steps": active_steps, "save": times[-1] - statistics.median(active_steps), "construct": construct}


def _worker(rank, world, port, reps, active, result_path):
    import torch
    import torch.distributed as dist

    from fixtures.configs import CONFIGS
    from fixtures.dp import build

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    step = build(CONFIGS["ddp2"], rank)
    for _ in range(3):  # warm-up: lazy init, DDP bucket rebuild
        step()
    got = {k: {"steps": [], "save": [], "construct": []} for k in KINDS}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps):
            for i in range(len(KINDS)):
                kind = KINDS[(i + rep) % len(KINDS)]
                dist.barrier()
                w = _window(kind, step, Path(tmp) / f"{kind}{rep}", active)
                got[kind]["steps"] += w["steps"]
                got[kind]["save"].append(w["save"])
                got[kind]["construct"].append(w["construct"])
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        Path(result_path).write_text(json.dumps(got))


def summarize(got) -> dict:
    out = {}
    for kind, g in got.items():
        steps = sorted(g["steps"])
        out[kind] = {"active_steps": len(steps), "step_ms": 1e3 * statistics.median(steps),
                     "step_p90_ms": 1e3 * steps[int(0.9 * (len(steps) - 1))],
                     "save_ms": 1e3 * statistics.median(g["save"]),
                     "construct_ms": 1e3 * statistics.median(g["construct"])}
    base = out["torch"]["step_ms"]
    for kind in out:
        out[kind]["step_vs_torch"] = out[kind]["step_ms"] / base
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="windows of each kind")
    ap.add_argument("--active", type=int, default=10, help="active steps per window")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        mp.spawn(_worker, args=(2, port, a.reps, a.active, str(result)), nprocs=2, join=True)
        res = summarize(json.loads(result.read_text()))
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"ddp2 (2 ranks, gloo, CPU), {a.reps} windows x {a.active} active steps per kind; rank 0")
    print(f"{'kind':<11} {'step ms':>8} {'p90 ms':>7} {'vs torch':>8} {'save ms':>8} {'setup ms':>8}")
    for kind, r in res.items():
        extra = "       -        -" if kind == "none" else f"{r['save_ms']:8.1f} {r['construct_ms']:8.1f}"
        print(f"{kind:<11} {r['step_ms']:8.2f} {r['step_p90_ms']:7.2f} {r['step_vs_torch']:8.3f} {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
