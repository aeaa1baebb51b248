"""``flight_recorder(run_dir)``: each rank dumps its Flight Recorder buffer into the run directory when the job
hangs or dies, where ``traceparse hang run_dir`` reads it.

The buffer itself is torch's: on by default for gloo in torch 2.13; for NCCL call ``enable(run_dir)`` before
``init_process_group`` (it sets ``TORCH_FR_BUFFER_SIZE`` and has NCCL's own watchdog dump into the run directory
on a collective timeout, as ``fr_rank<r>``). This rank writes ``fr_rank<r>.pkl`` (``_dump_fr_trace``: entries with
their stacks), ``fr_rank<r>.json`` (``_dump_fr_trace_json``) and ``fr_rank<r>.inflight.json`` (the call the
training thread is blocked in and its stack, ``traceparse.profiler.inflight``) once, atomically, at the first of:

- a step running longer than ``stall_s`` (a watchdog thread; a step is the time between two ``step()`` calls,
  from the first: start-up before it, however slow, is not watched): a hung collective;
- an exception leaving the ``with`` block (before it propagates);
- SIGABRT (gloo aborts a rank that receives a larger message than it posted): a C-level handler dumps, then the
  process dies as it would have.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from traceparse.profiler import inflight


def enable(run_dir, buffer_size: int = 2000) -> None:
    """Turn Flight Recorder on for the process groups created after this call (call it before
    ``init_process_group``), and have NCCL dump on a collective timeout into ``run_dir`` (``fr_rank<r>``, a pickle
    ``traceparse hang`` reads). Values already set in the environment are kept."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    for key, value in (("TORCH_FR_BUFFER_SIZE", buffer_size), ("TORCH_NCCL_TRACE_BUFFER_SIZE", buffer_size),
                       ("TORCH_NCCL_DUMP_ON_TIMEOUT", 1),
                       ("TORCH_FR_DUMP_TEMP_FILE", Path(run_dir).resolve() / "fr_rank"),
                       ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", Path(run_dir).resolve() / "fr_rank")):
        os.environ.setdefault(key, str(value))


def _set_abort_handler(handler: ctypes.c_void_p) -> int | None:
    """libc's signal(SIGABRT, handler), a C function pointer (Python's own handlers would run too late: abort()
    ends the process first); returns the previous one."""
    libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    return libc.signal(signal.SIGABRT, handler)


class flight_recorder:  # noqa: N801 (used as a context manager, like torch.profiler.profile)
    enable = staticmethod(enable)

    def __init__(self, run_dir, stall_s: float = 600.0, poll_s: float = 0.1):
        self.run_dir, self.stall_s, self.poll_s = Path(run_dir), stall_s, poll_s
        self.rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.lock = threading.Lock()
        self.dumped: str | None = None  # why, once a dump began
        self.written = threading.Event()  # set when the files are in place (symbolizing the stacks takes seconds)
        self.last_step = None  # monotonic time of the last step() call
        self.thread = threading.get_ident()  # the training thread, whose blocked call the dump describes
        self.closed = False
        self._abort_handler = None

    def __enter__(self):
        threading.Thread(target=self._watch, name="traceparse-fr-watchdog", daemon=True).start()
        handler = ctypes.CFUNCTYPE(None, ctypes.c_int)(lambda _sig: self.dump("SIGABRT"))
        self._abort_handler = handler  # kept alive until __exit__ puts the previous handler back
        self._previous_abort = _set_abort_handler(ctypes.cast(handler, ctypes.c_void_p))
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and not issubclass(exc_type, KeyboardInterrupt):
            self.dump(f"exception: {exc_type.__name__}: {exc}", tb)
        self.closed = True  # the watchdog stops
        if self._abort_handler is not None:
            _set_abort_handler(ctypes.c_void_p(self._previous_abort))
            self._abort_handler = None
        return False

    def step(self) -> None:
        self.last_step = time.monotonic()

    def _watch(self) -> None:
        while self.dumped is None and not self.closed:
            t = self.last_step
            if t is not None and time.monotonic() - t > self.stall_s:
                self.dump(f"watchdog: no step for {self.stall_s:g} s")
            time.sleep(self.poll_s)

    def dump(self, why: str, tb=None) -> None:
        """Write this rank's dumps (once; later calls do nothing). ``tb``: the traceback of the exception that
        ended the call (by default, the one being handled when called from the training thread)."""
        if tb is None and threading.get_ident() == self.thread:
            tb = sys.exc_info()[2]
        if not self.lock.acquire(timeout=10):
            return
        try:
            if self.dumped is not None:
                return
            self.dumped = why
            c10d = torch._C._distributed_c10d
            self.run_dir.mkdir(parents=True, exist_ok=True)
            where = inflight.record(self.rank, why, time.time_ns(), inflight.thread_frames(self.thread, tb))
            for ext, data in (("pkl", c10d._dump_fr_trace()), ("json", c10d._dump_fr_trace_json()),
                              ("inflight.json", json.dumps(where, default=str).encode())):
                path = self.run_dir / f"fr_rank{self.rank}.{ext}"
                tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                tmp.write_bytes(data)
                os.replace(tmp, path)
            self.written.set()
        finally:
            self.lock.release()
