"""Where a rank's training thread is when its Flight Recorder buffer is dumped: the ``torch.distributed`` call it
is blocked in (op, group, peer, tensor, the group's op counter) and its Python stack.

gloo's Flight Recorder records no send or receive, and no backend records what a rank does outside collectives;
this record, written beside the dump as ``fr_rank<r>.inflight.json``, fills both gaps for ``traceparse hang``:
two ranks each blocked in a receive from the other is a point-to-point deadlock, and a rank missing from a
collective shows the code it is stuck in. Format (``VERSION``)::

    {"traceparse_inflight": 1, "rank": 0, "why": "...", "time_ns": ...,
     "call": {"op": "recv", "peer": 1, "pg_name": "0", "pg_desc": "default_pg", "group_ranks": [0, 1],
              "op_id": 10, "input_sizes": [[2, 16, 32]], "input_dtypes": ["Float"]} | null,
     "frames": [{"name": ..., "filename": ..., "line": ...}, ...]}     # innermost first, as Flight Recorder's

``op_id`` is the group's counter of calls issued so far, collectives and point-to-point alike, the number Flight
Recorder gives its entries (the blocked call included).
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

VERSION = 1
C10D = ("distributed", "distributed_c10d.py")
OP = {"isend": "send", "irecv": "recv"}
PEER = {"send": ("dst", "group_dst"), "recv": ("src", "group_src")}


def thread_frames(thread_id: int | None, tb=None) -> list:
    """The thread's frames, innermost first: from a traceback when one is given (an exception that left the
    call), else the thread's current stack."""
    if tb is not None:
        frames = []
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        return frames[::-1]
    f = sys._current_frames().get(thread_id)
    frames = []
    while f is not None:
        frames.append(f)
        f = f.f_back
    return frames


def record(rank: int, why: str, time_ns: int, frames: list) -> dict:
    api = None
    for f in frames:  # the outermost distributed_c10d frame: the public call the training code made
        if f.f_code.co_filename.replace("\\", "/").endswith("/".join(C10D)):
            api = f
    return {"traceparse_inflight": VERSION, "rank": rank, "why": why, "time_ns": time_ns,
            "call": _call(api) if api is not None else None,
            "frames": [{"name": f.f_code.co_name, "filename": f.f_code.co_filename, "line": f.f_lineno}
                       for f in frames]}


def _call(frame) -> dict | None:
    try:
        loc = dict(frame.f_locals)
        op = OP.get(frame.f_code.co_name, frame.f_code.co_name)
        pg = loc.get("group") or dist.distributed_c10d._get_default_group()
        ranks = dist.get_process_group_ranks(pg)
        peer = None
        if op in PEER:
            glob, local = (loc.get(k) for k in PEER[op])
            peer = glob if isinstance(glob, int) else ranks[local] if isinstance(local, int) else None
        tensors = [t for t in (loc.get("tensor"), loc.get("input_tensor"), loc.get("input")) if torch.is_tensor(t)]
        return {"op": op, "peer": peer, "pg_name": dist.distributed_c10d._get_process_group_name(pg),
                "pg_desc": getattr(pg, "group_desc", None), "group_ranks": sorted(ranks),
                "op_id": pg._get_sequence_number_for_group(),
                "input_sizes": [list(t.shape) for t in tensors[:1]],
                "input_dtypes": [t.type().removeprefix("torch.").removesuffix("Tensor") for t in tensors[:1]]}
    except Exception:  # noqa: BLE001 (a dump of a broken job must not fail on its description)
        return None
