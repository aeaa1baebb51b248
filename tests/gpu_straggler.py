"""Multi-rank GPU runs with a known straggler, made from one real rank's trace.

The source is one rank of a real 8-GPU recommendation job (HTA's ``trace_diff/control``: NCCL
all-to-alls for the embeddings, all-reduces for the dense gradients, six ProfilerSteps). ``write_run``
writes N copies of it as ranks 0..N-1 of one N-rank process group, then plays out a stall schedule:
``stalls[k][r]`` microseconds by which rank r's process is held up just before it calls collective k
(k counts the trace's NCCL kernels in launch order: 60 collectives, 10 per step). A copy with no stalls
is a perfectly balanced run.

How the copies stay consistent, as a real run would be:

* CPU (every thread, instants, the profiler span): a time warp. A stall of rank r before call k adds
  its length to every timestamp at or after the call's start (the outermost of its c10d::* /
  record_param_comms / nccl:* events), so the call starts later and the ops around it stretch; events
  keep their nesting. A rank that did not stall runs ahead (NCCL calls do not block the CPU) until it
  blocks on the device: at the first blocking call after a collective's call (cudaStreamSynchronize,
  or a cudaMemcpyAsync whose copy is device-to-host: the job reads all-to-all split sizes and the loss
  this way) and at the end of each ProfilerStep, every rank's accumulated delay is brought up to the
  largest one (the blocking call, and the ops around it, last longer), so the ranks go on together.
* GPU (kernels, memcpy, memset on their streams): an activity starts at its original time plus the
  larger of its launch's delay (the runtime call with its correlation id) and the delay its stream
  already carries (what the previous activity on the stream was pushed back by, gaps kept); it keeps
  its duration. So nothing overlaps on a stream and nothing starts before its launch.
* NCCL kernels of one collective end together on every rank: each starts as above and lasts until
  the last rank's kernel has run its original duration. The ranks that arrive early wait inside the
  kernel (a longer kernel); the last one's kernel keeps its length.

The stalled rank's kernels therefore start last and are the shortest, its calls start last, and the
others wait for it, unless the GPU queue absorbs the stall (a kernel already queued behind earlier
work that has not finished when the stall ends): then its kernel starts with the others'.

Everything is derived from how the run is built, never from traceparse: ``write_run`` returns each
rank's NCCL kernels as written, ``nccl_kernels`` reads them from a document.
"""

from __future__ import annotations

import bisect
import gzip
import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

SOURCE = "hta/trace_diff/control/control.json.gz"  # a public trace (fixtures/public_traces.py)
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
COMM_CALL = ("c10d::", "record_param_comms", "nccl:")
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize")


def is_nccl_kernel(e) -> bool:
    return e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")


def load_source(path: Path) -> dict:
    with gzip.open(path) as fh:
        return json.load(fh)


class _Warp:
    """shift(t) = total length of the gaps placed at or before t (a monotone time warp)."""

    def __init__(self, gaps):
        gaps = sorted((p, s) for p, s in gaps if s)
        self.points = [p for p, _ in gaps]
        self.totals, run = [], 0
        for _, s in gaps:
            run += s
            self.totals.append(run)

    def shift(self, t) -> int:
        i = bisect.bisect_right(self.points, t)
        return self.totals[i - 1] if i else 0


def collective_calls(events) -> list[dict]:
    """Per NCCL kernel in launch order: the kernel, its launch and the start of its CPU call."""
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    comm = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["name"].startswith(COMM_CALL):
            comm[e["tid"]].append(e)
    out = []
    for k in sorted((e for e in events if is_nccl_kernel(e)), key=lambda e: launches[e["args"]["correlation"]]["ts"]):
        launch = launches[k["args"]["correlation"]]
        around = [c for c in comm[launch["tid"]] if c["ts"] <= launch["ts"] and launch["ts"] + launch["dur"] <= c["ts"] + c["dur"]]
        assert around, f"NCCL kernel {k['name']} launched outside a communication call"
        out.append({"kernel": k, "launch": launch, "call_ts": min(c["ts"] for c in around)})
    return out


def _catch_up_points(events, calls) -> list[int]:
    """Where the ranks that ran ahead wait for the slowest one (see the module doc), in time order."""
    copies = {e["args"]["correlation"]: e["name"] for e in events if e.get("cat") == "gpu_memcpy"}
    blocking = sorted(e["ts"] + e["dur"] // 2 for e in events if e.get("cat") == "cuda_runtime" and (
        e["name"] in SYNCS or (e["name"] == "cudaMemcpyAsync" and "DtoH" in copies.get(e["args"].get("correlation"), ""))))
    starts = [c["call_ts"] for c in calls] + [float("inf")]
    points = set()
    for a, b in pairwise(starts):  # the first blocking call after each collective's call, if any
        i = bisect.bisect_left(blocking, a)
        if i < len(blocking) and blocking[i] < b:
            points.add(blocking[i])
    points.update(e["ts"] + e["dur"] for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#"))
    return sorted(points)


def build(doc: dict, stalls: list[dict[int, int]], n_ranks: int) -> list[dict]:
    """The N rank documents; ``stalls[k]`` maps rank -> microseconds stalled before collective k."""
    events = doc["traceEvents"]
    calls = collective_calls(events)
    assert len(stalls) <= len(calls), f"{len(stalls)} stall entries for {len(calls)} collectives"
    gaps = {r: [] for r in range(n_ranks)}
    for k, c in enumerate(calls):
        for r, us in (stalls[k] if k < len(stalls) else {}).items():
            gaps[r].append((c["call_ts"], int(us)))
    for p in _catch_up_points(events, calls):  # bring every rank up to the slowest one's delay
        ahead = {r: sum(s for q, s in g if q <= p) for r, g in gaps.items()}
        top = max(ahead.values())
        for r in gaps:
            gaps[r].append((p, top - ahead[r]))
    warps = {r: _Warp(g) for r, g in gaps.items()}

    # GPU activity, stream by stream, all ranks at once (the copies share their streams and order)
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events
                 if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    streams = defaultdict(list)
    for i, e in enumerate(events):
        if e.get("ph") == "X" and e.get("cat") in GPU_CATS:
            streams[(e["pid"], e["tid"])].append(i)
    placed = {r: {} for r in range(n_ranks)}  # event index -> (ts, dur)
    for idx in streams.values():
        idx.sort(key=lambda i: events[i]["ts"])
        carry = dict.fromkeys(range(n_ranks), 0)
        for i in idx:
            e = events[i]
            launch = launch_ts.get(e["args"].get("correlation"), e["ts"])
            start = {r: e["ts"] + max(warps[r].shift(launch), carry[r]) for r in range(n_ranks)}
            end = {r: start[r] + e["dur"] for r in range(n_ranks)}
            if is_nccl_kernel(e):  # one collective: every rank's kernel ends with the last one
                end = dict.fromkeys(range(n_ranks), max(start.values()) + e["dur"])
            for r in range(n_ranks):
                placed[r][i] = (start[r], end[r] - start[r])
                carry[r] = end[r] - (e["ts"] + e["dur"])
    gpu_of_corr = {events[i]["args"]["correlation"]: i for idx in streams.values() for i in idx}
    gpu_pids = {pid for pid, _ in streams}

    docs = []
    for r in range(n_ranks):
        w = warps[r]
        out = []
        for i, e in enumerate(events):
            e = dict(e)
            if i in placed[r]:
                e["ts"], e["dur"] = placed[r][i]
            elif e.get("ph") == "f" and e.get("pid") in gpu_pids and e.get("id") in gpu_of_corr:
                j = gpu_of_corr[e["id"]]
                e["ts"] += placed[r][j][0] - events[j]["ts"]
            elif isinstance(e.get("ts"), int) and e.get("ph") != "M":
                end = e["ts"] + e["dur"] if "dur" in e else None
                e["ts"] += w.shift(e["ts"])
                if end is not None:
                    e["dur"] = end + w.shift(end) - e["ts"]
            out.append(e)
        info = {"backend": "nccl", "rank": r, "world_size": n_ranks, "pg_count": 1,
                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                               "pg_size": n_ranks, "ranks": list(range(n_ranks))}]}
        docs.append({**{k: v for k, v in doc.items() if k not in ("traceEvents", "distributedInfo")},
                     "distributedInfo": info, "traceEvents": out})
    return docs


GROUP_ARGS = ("Seq", "Process Group Name", "Process Group Description", "Process Group Ranks")


def strip_metadata(doc: dict) -> dict:
    """The document as PyTorch 2.0 and older write it: no ``pg_config``/``pg_count`` (world size and rank
    stay), no ``Seq`` or ``Process Group *`` args on any event."""
    info = {k: v for k, v in doc["distributedInfo"].items() if k not in ("pg_config", "pg_count")}
    events = [{**e, "args": {k: v for k, v in e["args"].items() if k not in GROUP_ARGS}}
              if isinstance(e.get("args"), dict) else e for e in doc["traceEvents"]]
    return {**doc, "distributedInfo": info, "traceEvents": events}


def nccl_kernels(doc: dict) -> list[tuple[int, int]]:
    """(start, end) of each NCCL kernel of a rank's document, in launch order (one per collective)."""
    return [(c["kernel"]["ts"], c["kernel"]["ts"] + c["kernel"]["dur"]) for c in collective_calls(doc["traceEvents"])]


def write_run(out: Path, stalls: list[dict[int, int]], n_ranks: int = 4, *, doc: dict, metadata: bool = True):
    """Write rank<r>.json.gz for r in 0..n_ranks-1 of the source ``doc`` (``load_source``) into ``out`` (without process-group metadata,
    ``strip_metadata``, when ``metadata`` is false).

    Returns the paths and, per rank, its NCCL kernels' (start, end) in launch order, read from the
    documents as written (plain json, not traceparse).
    """
    out.mkdir(parents=True, exist_ok=True)
    paths, kernels = [], {}
    for r, d in enumerate(build(doc, stalls, n_ranks)):
        d = d if metadata else strip_metadata(d)
        p = out / f"rank{r}.json.gz"
        p.write_bytes(gzip.compress(json.dumps(d).encode(), compresslevel=1))
        paths.append(p)
        kernels[r] = nccl_kernels(d)
    return paths, kernels
