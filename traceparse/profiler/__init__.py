"""The profiler plugin: ``torch.profiler`` in a training job, with what the analyzer needs written into every
rank's trace (the ``torch`` extra; ``import traceparse`` and the CLI never import torch).

    from traceparse import profiler as tp_profiler

    with tp_profiler.profile("runs/exp1", model=model, mesh=mesh, optimizer=opt, microbatches=8,
                             schedule=torch.profiler.schedule(wait=1, warmup=1, active=2)) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

or, around a ``torch.profiler.profile`` of your own, ``on_trace_ready=tp_profiler.trace_handler("runs/exp1", ...)``.
Each rank writes ``runs/exp1/rank<r>.json.gz`` (``rank<r>.step<k>.json.gz`` once there are several profiled
windows), atomically. The metadata sits under the trace's top-level key ``traceparse`` (``METADATA_KEY``),
versioned (``VERSION``); its fields are described in ``traceparse.profiler.metadata``. ``flight_recorder(run_dir)``
(or ``profile(..., dump_on_hang_s=600)``) dumps each rank's Flight Recorder buffer there when the job hangs or
raises (``traceparse hang``); ``flight_recorder.enable(run_dir)`` before ``init_process_group`` turns the buffer on
for NCCL and has NCCL's own watchdog dump there on a collective timeout.
"""

from traceparse.profiler.flight_recorder import flight_recorder
from traceparse.profiler.metadata import METADATA_KEY, VERSION, collect
from traceparse.profiler.profile import profile
from traceparse.profiler.writer import TraceWriter, trace_handler

__all__ = ["METADATA_KEY", "VERSION", "TraceWriter", "collect", "flight_recorder", "profile", "trace_handler"]
