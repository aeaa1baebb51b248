"""``flight_recorder(run_dir)``: each rank dumps its Flight Recorder buffer into the run directory when the job
hangs or dies, where ``traceparse hang run_dir`` reads it.

The buffer itself is torch's (on by default for gloo in torch 2.13; for NCCL set ``TORCH_FR_BUFFER_SIZE``, e.g.
2000, before ``init_process_group``). This rank writes ``fr_rank<r>.pkl`` (``_dump_fr_trace``: entries with
their stacks) and ``fr_rank<r>.json`` (``_dump_fr_trace_json``) once, atomically, at the first of:

- a step running longer than ``stall_s`` (a watchdog thread; a step is the time between two ``step()`` calls,
  from the first: start-up before it, however slow, is not watched): a hung collective;
- an exception leaving the ``with`` block (before it propagates);
- SIGABRT (gloo aborts a rank that receives a larger message than it posted): a C-level handler dumps, then the
  process dies as it would have.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist


class flight_recorder:  # noqa: N801 (used as a context manager, like torch.profiler.profile)
    def __init__(self, run_dir, stall_s: float = 600.0, poll_s: float = 0.1):
        self.run_dir, self.stall_s, self.poll_s = Path(run_dir), stall_s, poll_s
        self.rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.lock = threading.Lock()
        self.dumped: str | None = None  # why, once a dump began
        self.written = threading.Event()  # set when the files are in place (symbolizing the stacks takes seconds)
        self.last_step = None  # monotonic time of the last step() call
        self.closed = False
        self._abort_handler = None

    def __enter__(self):
        threading.Thread(target=self._watch, name="traceparse-fr-watchdog", daemon=True).start()
        handler = ctypes.CFUNCTYPE(None, ctypes.c_int)(lambda _sig: self.dump("SIGABRT"))
        libc = ctypes.CDLL(None)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, type(handler)]
        libc.signal(signal.SIGABRT, handler)
        self._abort_handler = handler  # kept alive as long as this object
        return self

    def __exit__(self, exc_type, exc, _tb):
        if exc_type is not None and not issubclass(exc_type, KeyboardInterrupt):
            self.dump(f"exception: {exc_type.__name__}: {exc}")
        self.closed = True  # the watchdog stops
        return False

    def step(self) -> None:
        self.last_step = time.monotonic()

    def _watch(self) -> None:
        while self.dumped is None and not self.closed:
            t = self.last_step
            if t is not None and time.monotonic() - t > self.stall_s:
                self.dump(f"watchdog: no step for {self.stall_s:g} s")
            time.sleep(self.poll_s)

    def dump(self, why: str) -> None:
        """Write this rank's dumps (once; later calls do nothing)."""
        if not self.lock.acquire(timeout=10):
            return
        try:
            if self.dumped is not None:
                return
            self.dumped = why
            c10d = torch._C._distributed_c10d
            self.run_dir.mkdir(parents=True, exist_ok=True)
            for ext, data in (("pkl", c10d._dump_fr_trace()), ("json", c10d._dump_fr_trace_json())):
                path = self.run_dir / f"fr_rank{self.rank}.{ext}"
                tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                tmp.write_bytes(data)
                os.replace(tmp, path)
            self.written.set()
        finally:
            self.lock.release()
