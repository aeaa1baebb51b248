"""``traceparse.profiler.profile``: ``torch.profiler.profile`` that writes each rank's trace with its metadata."""

from __future__ import annotations

import json

import torch
from torch.profiler import ProfilerAction, ProfilerActivity

from traceparse.profiler.flight_recorder import flight_recorder
from traceparse.profiler.metadata import METADATA_KEY, metadata_function
from traceparse.profiler.writer import TraceWriter

class profile(torch.profiler.profile):  # noqa: N801 (a drop-in for torch.profiler.profile)
    """``torch.profiler.profile`` writing ``out_dir/rank<r>.json.gz`` (``rank<r>.step<k>.json.gz`` for several
    windows) with the run's metadata embedded under the ``traceparse`` key.

    ``model`` (the module as wrapped: DDP, FSDP, a pipeline stage ...), ``mesh`` (its DeviceMesh), ``groups``
    (``{"tp": pg, ...}`` without a mesh), ``optimizer``; ``seq``, ``micro_batch``, ``microbatches``,
    ``pp_schedule``, ``virtual_stages``; ``layout={...}`` and ``model_facts={...}`` for anything else the module
    cannot tell. Every other keyword goes to ``torch.profiler.profile`` (default: CPU and, when present, CUDA
    activities, ``record_shapes=True``, which the analyzer reads message sizes from).

    ``dump_on_hang_s=600``: for as long as the ``with`` block runs, this rank's Flight Recorder buffer is dumped
    into ``out_dir`` (``traceparse.profiler.flight_recorder``) when a step (between two ``step()`` calls) runs
    longer than that, when an exception leaves the block, or on SIGABRT; ``traceparse hang out_dir`` reads it.
    With NCCL, call ``flight_recorder.enable(out_dir)`` before ``init_process_group``.
    """

    def __init__(self, out_dir, *, model=None, mesh=None, groups=None, optimizer=None, compresslevel=6,
                 seq=None, micro_batch=None, microbatches=None, pp_schedule=None, virtual_stages=None,
                 layout=None, model_facts=None, dump_on_hang_s=None, **kwargs):
        if "on_trace_ready" in kwargs:
            raise TypeError("traceparse.profiler.profile writes the traces itself: use torch.profiler.profile with "
                            "on_trace_ready=traceparse.profiler.trace_handler(...) for a handler of your own")
        if kwargs.get("activities") is None:
            kwargs["activities"] = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        kwargs.setdefault("record_shapes", True)
        facts = {"seq": seq, "micro_batch": micro_batch, "microbatches": microbatches, "pp_schedule": pp_schedule,
                 "virtual_stages": virtual_stages, "layout": layout, "model_facts": model_facts}
        self.writer = TraceWriter(out_dir, metadata_function(model, mesh, groups, optimizer, facts), compresslevel)
        self.fr = None if dump_on_hang_s is None else flight_recorder(out_dir, stall_s=dump_on_hang_s)
        super().__init__(on_trace_ready=self.writer, **kwargs)

    def __enter__(self):
        if self.fr is not None:
            self.fr.__enter__()
            self.fr.step()
        return super().__enter__()

    def __exit__(self, exc_type, exc, tb):
        if self.fr is not None:
            self.fr.__exit__(exc_type, exc, tb)
        return super().__exit__(exc_type, exc, tb)

    def start(self):
        super().start()
        self._embed()

    def step(self):
        if self.fr is not None:
            self.fr.step()
        super().step()
        self._embed()

    def _embed(self):
        """Once per window, as soon as the profiler collects (Kineto keeps metadata only while it does)."""
        if not self.writer.embedded and self.current_action != ProfilerAction.NONE:
            self.add_metadata_json(METADATA_KEY, json.dumps(self.writer.metadata()))
            self.writer.embedded = True
