"""Read a PyTorch Flight Recorder dump (pickle or JSON; NCCL or gloo) into plain rows.

A dump is ``{version, pg_config, pg_status, entries, ...}`` as ``torch._C._distributed_c10d._dump_fr_trace()``
(pickle) and ``_dump_fr_trace_json()`` write it (``TORCH_FR_DUMP_TEMP_FILE`` /
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` files hold the pickle). Pickles are read with an unpickler that refuses every
global: a dump holds only containers and scalars, so a crafted file cannot run code. Each entry becomes one row of
``fr_entries`` (``traceparse.store.schema``): its group's global ranks from ``pg_config`` (whose default group
gloo names ``''`` while the entries say ``'0'``: taken as the group of ``pg_id`` 0), the op and, for a send or a
receive, the peer's global rank from the profiling name (``nccl:send 0->1`` names group ranks).

Beside a dump, ``<name>.inflight.json`` (``INFLIGHT``; written by ``traceparse.profiler.flight_recorder``) says
what the rank's training thread was blocked in when it dumped, including sends and receives gloo does not record
(``traceparse.profiler.inflight``). It is read with its dump (``fr_inflight``); a damaged one is a load issue.
"""

import io
import json
import pickle
import re
from pathlib import Path

from ..errors import TraceError, shown

MAX_BYTES = 1 << 30
PICKLE = b"\x80"  # the first byte of a pickle of protocol 2 or later
INFLIGHT = ".inflight.json"
RANK_IN_NAME = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json))?$")
P2P_NAME = re.compile(r"^(send|recv) (\d+)(?:->|<-)(\d+)$")


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it asks for the Python object {module}.{name}; a Flight Recorder dump holds "
                                     "only containers and scalars, so it is not loaded (no code from it is run)")


def is_dump(path: Path) -> bool:
    """A pickle (protocol 2+ marker), or a JSON object with Flight Recorder keys (``pg_status``, entries'
    ``profiling_name``) and no ``traceEvents`` at its start."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False  # unreadable: loading reports it
    if head[:1] == PICKLE:
        return True
    return (head.lstrip()[:1] == b"{" and b'"traceEvents"' not in head
            and (b'"pg_status"' in head or b'"profiling_name"' in head))


def read_dump(path) -> dict:
    """``{file, format (pickle or json), rank, version, pg_status, entries: [...]}``; TraceError on a file that is
    not one."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise TraceError(path, f"Flight Recorder dump of {size} bytes is larger than {MAX_BYTES}")
    data = path.read_bytes()
    fmt = "pickle" if data[:1] == PICKLE else "json"
    try:
        dump = _NoGlobals(io.BytesIO(data)).load() if fmt == "pickle" else json.loads(data)
    except pickle.UnpicklingError as e:
        raise TraceError(path, f"not a Flight Recorder dump: {e}") from None
    except (ValueError, EOFError, RecursionError, MemoryError, IndexError, KeyError, TypeError) as e:
        raise TraceError(path, f"not a Flight Recorder dump: unreadable ({type(e).__name__})") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list) or not isinstance(dump.get("pg_config"), dict):
        raise TraceError(path, "not a Flight Recorder dump: no 'entries' list and 'pg_config' object")
    m = RANK_IN_NAME.search(path.name)
    rank = dump.get("rank") if isinstance(dump.get("rank"), int) else int(m.group(1)) if m else None
    if rank is None:
        raise TraceError(path, "Flight Recorder dump without a rank: name it <prefix><rank> (e.g. fr_rank3.pkl)")
    groups = {str(k): _group_ranks(k, v, path) for k, v in dump["pg_config"].items()}
    entries = [_entry(e, i, groups, path) for i, e in enumerate(dump["entries"])]
    status = dump.get("pg_status") if isinstance(dump.get("pg_status"), dict) else {}
    inflight, issue = read_inflight(path, rank)
    return {"file": shown(path.resolve()), "format": fmt, "rank": rank, "version": str(dump.get("version")),
            "pg_status": status, "entries": entries, "inflight": inflight, "issues": [issue] if issue else []}


def companion(path: Path) -> Path:
    """``fr_rank3.pkl``, ``fr_rank3.json`` and ``fr_rank3`` -> ``fr_rank3.inflight.json``."""
    stem = path.name[:-len(path.suffix)] if path.suffix in (".pkl", ".pickle", ".json") else path.name
    return path.with_name(stem + INFLIGHT)


def read_inflight(path: Path, rank: int) -> tuple[dict | None, tuple | None]:
    """The dump's companion record as one ``fr_inflight`` row, or None; and a load issue when it is damaged."""
    side = companion(path)
    if not side.is_file():
        return None, None
    try:
        if side.stat().st_size > 1 << 24:
            raise ValueError("larger than 16 MiB")
        d = json.loads(side.read_bytes())
        if not isinstance(d, dict) or d.get("traceparse_inflight") != 1 or d.get("rank", rank) != rank:
            raise ValueError("not a version-1 record of this rank")
        call = d.get("call") or {}
        if not isinstance(call, dict):
            raise ValueError("'call' is not an object")
        ranks = call.get("group_ranks")
        row = {
            "why": str(d.get("why")), "time_ns": _int(d.get("time_ns")), "op": _str(call.get("op")),
            "peer": _int(call.get("peer")), "pg_name": _str(call.get("pg_name")), "pg_desc": _str(call.get("pg_desc")),
            "group_ranks": sorted(ranks) if isinstance(ranks, list) and all(_int(r) is not None for r in ranks)
            and ranks else None,
            "op_id": _int(call.get("op_id")), "input_sizes": json.dumps(call.get("input_sizes")),
            "input_dtypes": json.dumps(call.get("input_dtypes")),
            "frames": json.dumps([f for f in d.get("frames") or [] if isinstance(f, dict)]),
        }
    except (OSError, ValueError, RecursionError, TypeError, AttributeError) as e:
        return None, (shown(side), "warning", f"in-flight record not read: {str(e)[:120]}", 1)
    return row, None


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 63) else None


def _str(v) -> str | None:
    return v if isinstance(v, str) else None


def _group_ranks(key, cfg, path) -> list[int] | None:
    try:
        ranks = cfg["ranks"]
        ranks = json.loads(ranks) if isinstance(ranks, str) else ranks
        if not (isinstance(ranks, list) and all(isinstance(r, int) and r >= 0 for r in ranks)):
            raise TypeError
        return sorted(ranks) or None  # gloo may list a group with no ranks: unknown here
    except (TypeError, KeyError, ValueError, AttributeError):
        raise TraceError(path, f"Flight Recorder dump: pg_config entry {str(key)[:40]!r} has no list of ranks") from None


def _entry(e, i, groups, path) -> dict:
    try:
        name, desc = e["process_group"]
        backend, _, what = e["profiling_name"].partition(":")
        p2p = P2P_NAME.match(what)
        op = p2p.group(1) if p2p else what.split(" ")[0]
        ranks = groups.get(str(name)) or (groups.get("") if e.get("pg_id") == 0 else None)
        peer = None
        if p2p and ranks:  # "send 0->1" and "recv 1<-0": the second number is the peer's group rank
            local = int(p2p.group(3))
            peer = ranks[local] if local < len(ranks) else None
        return {
            "record_id": int(e.get("record_id", i)), "pg_name": str(name), "pg_desc": str(desc), "group_ranks": ranks,
            "seq": int(e["collective_seq_id"]), "p2p_seq": int(e.get("p2p_seq_id") or 0),
            "op_id": int(e["op_id"]) if e.get("op_id") is not None else None,
            "op": op, "backend": backend, "peer": peer,
            "input_sizes": json.dumps(e.get("input_sizes")), "output_sizes": json.dumps(e.get("output_sizes")),
            "input_dtypes": json.dumps(e.get("input_dtypes")), "output_dtypes": json.dumps(e.get("output_dtypes")),
            "state": str(e.get("state")), "retired": bool(e.get("retired")),
            "time_created_ns": int(e["time_created_ns"]) if e.get("time_created_ns") else None,
            "timeout_ms": int(e["timeout_ms"]) if e.get("timeout_ms") else None,
            "frames": json.dumps(e.get("frames") or []),
        }
    except (TypeError, KeyError, ValueError, AttributeError):
        raise TraceError(path, f"Flight Recorder dump: entry {i} lacks process_group, profiling_name, "
                               "collective_seq_id or op_id in the expected form") from None
