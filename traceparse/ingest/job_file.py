"""A job file (``traceparse export``, ``traceparse/job_export.py``) read back as its ranks' traces.

The file is written one value a line: the header's keys (its own, ``KEY``, first: what each rank's trace header
said), then ``"traceEvents": [``, then one event a line. Each rank's events (pid = its rank) are written out as a
trace of their own, with their original pid and tid (kept among their args) and the rank's header; the export's
own events (``OWN``: names, flows, the critical path, the causes) are left out. What traceparse reads of an event
is what the export wrote, so a job file loads to the same analysis of the events it kept.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import msgspec

from traceparse.errors import TraceError

KEY = "traceparseExport"  # the top-level key that marks a job file, first in it
STREAM_TID = 1_000_000_000  # a GPU stream's thread in its rank's process: this + the stream
PATH_PID = -1  # the process of the critical path and the causes (no rank)
OWN = "traceparse"  # the category of the export's own events
START = b'{\n"' + KEY.encode() + b'":'
EVENTS = b'"traceEvents": ['


class _Event(msgspec.Struct, gc=False):
    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | None = None
    tid: int | None = None
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: msgspec.Raw = msgspec.Raw(b"")
    s: str | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


class _Original(msgspec.Struct, gc=False):
    pid: int | None = msgspec.field(name="original pid", default=None)
    tid: int | None = msgspec.field(name="original tid", default=None)


_EVENT = msgspec.json.Decoder(_Event)
_ORIGINAL = msgspec.json.Decoder(_Original)


def _open(path: Path):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")


def is_job_file(path: Path) -> bool:
    try:
        with _open(path) as f:
            return f.read(len(START)) == START
    except (OSError, EOFError, zlib.error):  # no job file; what is wrong with it is the parse's to say
        return False


def split(path: Path, folder: Path) -> list[Path]:
    """Write each rank of the job file ``path`` as a trace of its own in ``folder``; their paths, by rank."""
    header, per_rank, n = {}, {}, 0
    try:
        with _open(path) as f:
            for line in f:
                n += 1
                if line.rstrip() == EVENTS:
                    break
                if line.strip() in (b"{", b""):
                    continue
                header.update(msgspec.json.decode(b"{" + line.rstrip().rstrip(b",") + b"}"))
            ranks = {r["rank"]: r for r in header[KEY]["ranks"]}
            for line in f:
                n += 1
                text = line.rstrip().rstrip(b",")
                if text in (b"]}", b""):
                    continue
                e = _EVENT.decode(text)
                if e.cat == OWN or e.pid not in ranks or e.ph in ("s", "f"):
                    continue
                original = _ORIGINAL.decode(e.args) if e.args else _Original()
                event = {"ph": e.ph, "cat": e.cat, "name": e.name, "pid": original.pid if original.pid is not None
                         else e.pid, "tid": original.tid if original.tid is not None else e.tid}
                for key, raw in (("ts", e.ts), ("dur", e.dur), ("args", e.args)):
                    if raw:
                        event[key] = raw
                if e.s is not None:
                    event["s"] = e.s
                per_rank.setdefault(e.pid, []).append(msgspec.json.encode({k: v for k, v in event.items()
                                                                           if v is not None}))
    except (msgspec.DecodeError, KeyError, TypeError) as e:
        raise TraceError(path, f"a traceparse job file whose line {n} is not as traceparse writes it ({e}): "
                               "export the job again") from None
    except (OSError, EOFError, zlib.error) as e:
        raise TraceError(path, f"cannot read: {e}") from None
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for r, x in sorted(ranks.items()):
        info = {k: v for k, v in (("backend", x["backend"]), ("rank", r), ("world_size", x["world_size"]),
                                  ("pg_config", x["pg_config"])) if v not in (None, [])}  # what the trace said
        head = {"schemaVersion": x["schema_version"], "distributedInfo": info, "host_name": x["host"],
                "deviceProperties": [{"name": x["device_name"]}] if x["device_name"] else [],
                "trace_id": x["trace_id"], "record_shapes": int(bool(x["record_shapes"])),
                "profile_memory": int(bool(x["profile_memory"])),
                **({"traceparse": x["plugin"]} if x["plugin"] else {})}
        target = folder / f"{path.name}.rank{r}.json"
        with open(target, "wb") as f:
            f.write(msgspec.json.encode(head)[:-1] + b',"traceEvents":[\n')
            f.write(b",\n".join(per_rank.get(r, [])))
            f.write(b"\n]}\n")
        out.append(target)
    return out
