"""``trace_handler`` / ``TraceWriter``: the ``on_trace_ready`` that writes each rank's window atomically.

The trace is exported next to its final name under a hidden temporary name, gzipped (mtime 0) under another,
flushed to disk and renamed: a reader or a crash never sees a half file under the final name. The first window
is ``rank<r>.json.gz``; when a second one comes, the first is renamed ``rank<r>.step<k>.json.gz`` and every
window is ``rank<r>.step<k>.json.gz``, ``k`` the profiler step at which it ended (``prof.step_num``). When the
metadata was not embedded with ``add_metadata_json`` (a ``torch.profiler.profile`` of the caller's own, which
calls this only after the window closed), it is written as the first key of the trace's JSON object.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import torch.distributed as dist

from traceparse.profiler.metadata import METADATA_KEY, collect, metadata_function

CHUNK = 1 << 20


class TraceWriter:
    """Call it with the profiler at the end of each window (``on_trace_ready``)."""

    def __init__(self, out_dir, metadata=None, compresslevel=6):
        self.out_dir = Path(out_dir)
        self.metadata = metadata or (lambda: collect())
        self.compresslevel = compresslevel
        self.rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.embedded = False  # set by traceparse.profiler.profile once add_metadata_json ran in this window
        self.written: list[Path] = []

    def __call__(self, prof) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if len(self.written) == 1 and self.written[0].name == f"rank{self.rank}.json.gz":
            first = self.written[0].with_name(f"rank{self.rank}.step{self._first_step}.json.gz")
            os.replace(self.written[0], first)
            self.written[0] = first
        name = f"rank{self.rank}.json.gz" if not self.written else f"rank{self.rank}.step{prof.step_num}.json.gz"
        if not self.written:
            self._first_step = prof.step_num
        final = self.out_dir / name
        tmp_json = self.out_dir / f".{name}.{os.getpid()}.json.tmp"
        tmp_gz = self.out_dir / f".{name}.{os.getpid()}.tmp"
        head = None if self.embedded else json.dumps({METADATA_KEY: self.metadata()})[:-1] + ","
        try:
            prof.export_chrome_trace(str(tmp_json))
            _gzip(tmp_json, tmp_gz, head, self.compresslevel)
            os.replace(tmp_gz, final)
        finally:
            for t in (tmp_json, tmp_gz):
                t.unlink(missing_ok=True)
        self.written.append(final)
        self.embedded = False


def _gzip(src: Path, dst: Path, head: str | None, level: int) -> None:
    """Gzip ``src`` to ``dst`` (fsynced); ``head`` (``{"key": value,``) replaces the JSON object's opening brace."""
    with open(src, "rb") as f, open(dst, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=level) as out:
            block = f.read(CHUNK)
            if head is not None:
                at = block.find(b"{")
                if at < 0:
                    raise ValueError(f"{src}: the exported trace is not a JSON object")
                block = block[:at] + head.encode() + block[at + 1:]
            while block:
                out.write(block)
                block = f.read(CHUNK)
        raw.flush()
        os.fsync(raw.fileno())


def trace_handler(out_dir, *, model=None, mesh=None, groups=None, optimizer=None, compresslevel=6, **facts):
    """An ``on_trace_ready`` for a ``torch.profiler.profile`` of your own: writes ``out_dir/rank<r>.json.gz``
    with the metadata (``facts``: ``seq``, ``micro_batch``, ``microbatches``, ``pp_schedule``,
    ``virtual_stages``, ``layout={...}``, ``model_facts={...}``; see ``traceparse.profiler.profile``)."""
    return TraceWriter(out_dir, metadata_function(model, mesh, groups, optimizer, facts), compresslevel)
