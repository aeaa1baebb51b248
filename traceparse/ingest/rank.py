"""Parse one rank's trace file into staged Parquet tables plus a small summary.

This is the unit of parallel (and, later, distributed) work: it needs only
the file path and an output folder, and returns plain data.
"""

import os
import re
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from traceparse.errors import TraceError, shown
from traceparse.ingest.columns import (
    COMM_ARGS, EVENTS, MEMORY, NOTES, OP_ARGS, THREADS, device_kind_issues, device_kinds, event_tables,
)
from traceparse.ingest.plugin_metadata import read_metadata
from traceparse.ingest.split import TraceSplitter

SCHEMAS = {"events": EVENTS, "comm_args": COMM_ARGS, "op_args": OP_ARGS, "threads": THREADS, "memory": MEMORY}
RANK_IN_NAME = [re.compile(rf"{word}[-_]?(\d+)", re.IGNORECASE) for word in ("rank", "worker")]


def rank_from_name(path) -> int | None:
    """``rank-3``, ``rank3``, ``worker3``; a rank number wins over a worker number."""
    for pattern in RANK_IN_NAME:
        m = pattern.search(Path(path).name)
        if m:
            return int(m.group(1))
    return None


def parse_rank_file(path, out_dir) -> dict:
    """Parse ``path`` into ``out_dir/<table>.parquet``; return the file's summary."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    splitter = TraceSplitter(path, columns=True)
    writers = {name: pq.ParquetWriter(out_dir / f"{name}.parquet", schema, compression="none")
               for name, schema in SCHEMAS.items()}  # read once, by the task that wrote it
    n_all = n_complete = n_timed = 0
    max_ts = None
    steps = set()  # the trace's ProfilerStep#N: which profiled window of the job this file is
    last = None  # the last complete event in the file's order (kept_until)
    problems = splitter.problems  # load-issue text -> count, from the splitter and the columns alike
    kinds = Counter()  # device work and runtime calls by category (columns.device_kinds), said once per file
    try:
        for batch in splitter.batches():
            tables, n = event_tables(batch, n_complete, problems, steps)
            device_kinds(tables["events"], kinds)
            for name, table in tables.items():
                if table.num_rows:
                    writers[name].write_table(table)
            for name in ("events", "memory"):
                top = pc.max(tables[name]["ts_ns"]).as_py()
                if top is not None and (max_ts is None or top > max_ts):
                    max_ts = top
            n_all += len(batch)
            n_complete += n
            n_timed += pc.count(tables["events"]["dur_ns"]).as_py()
            if tables["events"].num_rows:
                last = tables["events"].slice(tables["events"].num_rows - 1).to_pylist()[0]
    finally:
        for w in writers.values():
            w.close()
    if n_complete and not n_timed:  # no event has an end: nothing of the rank can be placed in time (no window)
        raise TraceError(path, f"none of its {n_complete} complete (ph=X) events has a usable duration "
                               "(every dur is negative, missing or not a number)")
    summary = _summary(path, splitter, n_all, n_complete, out_dir, max_ts, steps, kinds)
    summary["kept_until_ns"] = kept_until(splitter.salvage, last)
    return summary


def kept_until(salvage, last: dict | None) -> int | None:
    """Up to when a file cut short inside traceEvents holds its rank's events (ns on the file's clock): the start of
    the last complete event it kept; None when nothing after an event was lost (a whole file, or one cut after
    traceEvents). Kineto writes each thread's events in time order, one thread after another: the thread it was
    writing is whole up to that event's start, the threads written before it are whole, those after it are lost.
    When the last event kept is Kineto's closing span (category ``Trace``, written after every thread's events),
    every event was kept. (The complete steps are those that end by then: vocabulary/complete_steps.sql.)"""
    if salvage is None or not salvage.inside_events or last is None or last.get("cat") == "Trace":
        return None
    return last["ts_ns"]


def _summary(path, splitter, n_all, n_complete, out_dir, max_ts=None, steps=(), kinds=None):
    h = splitter.header
    info = h.distributedInfo if isinstance(h.distributedInfo, dict) else {}
    issues = []
    world_size = _int_in(info.get("world_size"), 1, INT32)
    if "world_size" in info and world_size is None:
        issues.append(("warning", f"distributedInfo.world_size {_show(info['world_size'])} is not a world size; ignored", 1))
    rank, rank_source = _int_in(info.get("rank"), 0, world_size or INT32), "distributedInfo.rank"
    if rank is None:
        why = "no distributedInfo.rank" if "rank" not in info else \
            f"distributedInfo.rank {_show(info['rank'])} is not a rank of the job" + (f" (world size {world_size})" if world_size else "")
        rank, rank_source = rank_from_name(path), "file name"
        if rank is not None and _int_in(rank, 0, world_size or INT32) is None:
            issues.append(("warning", f"{why}; the file name's rank {_show(rank)} is not a rank of the job either", 1))
            rank = None
        elif rank is not None:
            issues.append(("warning", f"{why}; rank {rank} taken from the file name", 1))
        elif "rank" in info:
            issues.append(("warning", f"{why}; ignored", 1))
    base_time = _int_in(h.baseTimeNanoseconds, 0, 1 << 62)
    if h.baseTimeNanoseconds is not None and base_time is None:
        issues.append(("warning", f"baseTimeNanoseconds {_show(h.baseTimeNanoseconds)} is out of range; timestamps taken as written", 1))
    elif base_time is not None and max_ts is not None and base_time + max_ts >= 1 << 62:
        # the store adds the offset to every timestamp: the sum must stay where ends and differences fit int64
        issues.append(("warning", f"baseTimeNanoseconds {base_time} plus the latest timestamp is beyond 2^62 ns; "
                                  "timestamps taken as written", 1))
        base_time = None
    issues += [("info" if what in NOTES else "warning", f"{n} {what}", n) for what, n in splitter.problems.items()]
    issues += device_kind_issues(kinds or Counter())
    if splitter.salvage:
        s = splitter.salvage
        issues.append(
            ("warning", f"{s.reason}: kept {n_all} complete events, lost {s.lost_bytes} bytes "
             f"({s.lost_events} partial event(s)) at the end", max(s.lost_events, 1))
        )
    if n_all == 0 and splitter.salvage:
        raise TraceError(path, f"{splitter.salvage.reason}: no complete event to salvage")
    if n_complete == 0:
        issues.append(("warning", "no complete (ph=X) events", 1))
    devices = h.deviceProperties if isinstance(h.deviceProperties, list) else []
    versions = {
        k: getattr(h, k)
        for k in ("cupti_version", "cuda_runtime_version", "cuda_driver_version", "roctracer_version", "hip_runtime_version")
        if getattr(h, k) is not None
    }
    if info.get("nccl_version"):
        versions["nccl_version"] = info["nccl_version"]
    pgs = info.get("pg_config") if isinstance(info.get("pg_config"), list) else []
    return {
        "file": shown(Path(path).resolve()),  # for messages and the store: valid UTF-8, one line
        "file_bytes": os.path.getsize(path),
        "stage": str(out_dir),
        "rank": rank,
        "rank_source": rank_source if rank is not None else None,
        "world_size": world_size,
        "backend": _text(info.get("backend")),
        "device_name": _text(devices[0].get("name")) if devices and isinstance(devices[0], dict) else None,
        "host": _text(h.host_name or h.hostname),
        "base_time_ns": base_time,
        "schema_version": _int_in(h.schemaVersion, -INT32, INT32),
        "trace_id": h.trace_id if isinstance(h.trace_id, str) else None,
        "versions": versions,
        "profile_memory": bool(h.profile_memory),
        "record_shapes": bool(h.record_shapes),
        "pg_config": [_process_group(pg, world_size, issues) for pg in pgs if isinstance(pg, dict)],
        "n_events": n_all,
        "n_complete": n_complete,
        "cut_off": splitter.salvage is not None,
        "steps": [min(steps), max(steps)] if steps else None,  # first and last ProfilerStep#N (load.windows)
        "plugin": read_metadata(h.traceparse, world_size, issues),
        "issues": issues,
    }


INT32 = 1 << 31


def _text(value):
    """A header value for a text column: strings as they are, other JSON values as (short) JSON text."""
    if value is None or isinstance(value, str):
        return value
    return _show(value)


def _show(value) -> str:
    """A header value in a message: short (a huge number or string is cut)."""
    try:
        text = repr(value)
    except ValueError:  # an integer too long to print
        return "(a number of more than 4300 digits)"
    return text if len(text) <= 60 else text[:57] + "..."


def _int_in(value, low, high):
    """``value`` when it is an integer (not a bool) with low <= value < high, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and low <= value < high else None


def _process_group(pg: dict, world_size, issues) -> dict:
    """A pg_config entry with its size and member ranks kept only when they are valid ranks."""
    size = _int_in(pg.get("pg_size"), 1, INT32)
    members = pg.get("ranks")
    if isinstance(members, list) and all(_int_in(r, 0, world_size or INT32) is not None for r in members):
        ranks = members
    else:
        ranks = None
    if (pg.get("pg_size") is not None and size is None) or (members is not None and ranks is None):
        issues.append(("warning", f"process group {str(pg.get('pg_name'))[:40]!r}: size or member ranks are not "
                       "valid ranks; ignored", 1))
    return {**pg, "pg_name": _text(pg.get("pg_name")), "pg_desc": _text(pg.get("pg_desc")), "pg_size": size,
            "ranks": ranks}
