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
(``traceparse.profiler.inflight``). It is read with its dump (``fr_inflight``); a damaged one is a load issue, one
holding impossible values (a rank beyond 2^31 - 1, a negative peer) is refused like a dump.

A dump is not trusted (README, "Reliability", class ``dump``). The unpickler is the pure-Python one with only the
opcodes of dicts, lists, tuples, strings, numbers, booleans and None: a set, bytes, BUILD, REDUCE or any global is
refused, APPEND(S) must target a list and SETITEM(S) a dict, with string keys, each once (a key twice would let the
later value win unseen). Reading counts opcodes, and the result is measured before anything expands it, shared
parts counted each time they appear as the JSON text of it would hold them: a cycle, nesting past ``MAX_DEPTH``, more
than ``MAX_VALUES`` values or ``MAX_TEXT`` bytes of JSON refuse it (a 3 KB pickle of shared lists 40 deep is 2^40
values; one 8 MiB string listed 1,024 times is 8 GiB). The limits come from what real dumps hold: a ring buffer of
``TORCH_NCCL_TRACE_BUFFER_SIZE`` entries (2,000 by default; 20,000 is a large setting), each about 20 fields and a
stack of tens of frames, a few KB as JSON, nested 5 deep: 20,000 entries of 64 frames is 5.7 million values, 122 MB
of JSON, a 106 MB pickle read in about 8 s and 770 MB of memory. Every number the store keeps is an integer in its
column's range (ranks from 0 to 2^31 - 1; sequence numbers, ids and times from 0 to 2^63 - 1), shapes are lists of
lists of sizes, stacks lists of frames; a dump that contradicts itself (a collective numbered twice on one group, a
record id twice) is refused, naming what.
"""

import io
import json
import pickle
import pickletools
import re
from pathlib import Path

from traceparse.errors import TraceError, shown

MAX_BYTES = 256 << 20  # a dump's file (real ones: a few MB, tens at most)
MAX_VALUES = 8_000_000  # values in a dump, shared ones counted each time they appear (a large one: 5.7 million)
MAX_TEXT = 256 << 20  # bytes of the dump as JSON text (about), shared parts counted each time
MAX_DEPTH = 32  # nesting (real dumps: 5)
MAX_OPCODES = 4 * MAX_VALUES  # pickle opcodes (real dumps: about 3 per value, a memo put and a mark among them)
INT64 = 1 << 63
RANKS = 1 << 31  # ranks are INTEGER in the store
PICKLE = b"\x80"  # the first byte of a pickle of protocol 2 or later
INFLIGHT = ".inflight.json"
RANK_IN_NAME = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json))?$")
P2P_NAME = re.compile(r"^(send|recv) (\d+)(?:->|<-)(\d+)$")


class _Refused(Exception):
    """What makes a dump unreadable or impossible; read_dump names the file."""


class _Unpickler(pickle._Unpickler):
    """The pure-Python unpickler with the opcodes of containers and scalars only (``_ALLOWED``), each counted, and
    APPEND(S) / SETITEM(S) / DICT checked (a list; a dict with string keys, each once)."""

    dispatch: dict = {}

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.budget = MAX_OPCODES
        self.created = 0

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it asks for the Python object {module}.{name}; a Flight Recorder dump holds "
                                     "only containers and scalars, so it is not loaded (no code from it is run)")


def _opcode_refused(name):
    def refuse(_self):
        raise _Refused(f"it holds the pickle opcode {name}; a Flight Recorder dump holds only dicts, lists, tuples, "
                       "strings, numbers, booleans and None, so it is not loaded")
    return refuse


def _counted(load, kind: str = ""):
    """``load`` counted: every opcode against MAX_OPCODES; one that makes a value (``new``) against MAX_VALUES (each
    value of a real dump is made once, then shared); the memo (``memo``) holds no more than the values made, and
    marks (``mark``) nest no deeper than MAX_DEPTH, as in real dumps. Memory stays near what the largest dump
    accepted needs (about 1 GB)."""
    def counted(self):
        self.budget -= 1
        if self.budget < 0:
            raise _Refused(f"more than {MAX_OPCODES:,} pickle opcodes (real dumps: about 3 per value)")
        load(self)
        if kind == "new":
            self.created += 1
            if self.created > MAX_VALUES:
                raise _Refused(f"more than {MAX_VALUES:,} values (a large dump, 20,000 entries of 64 frames: 5.7 "
                               "million)")
        elif kind == "memo" and len(self.memo) > self.created + 16:
            raise _Refused(f"its pickle memoizes {len(self.memo):,} objects, more than the {self.created:,} values it "
                           "makes")
        elif kind == "mark" and len(self.metastack) > MAX_DEPTH:
            raise _Refused(f"it is nested more than {MAX_DEPTH} deep (pickle marks within marks; real dumps: 5)")
    return counted


def _target(self, kind, op):
    """The list or dict an APPENDS / SETITEMS (below the mark) or APPEND / SETITEM (on the stack) adds to."""
    if op.endswith("S"):
        below = self.metastack[-1] if self.metastack else []
        obj = below[-1] if below else None
    else:
        obj = self.stack[-3 if kind is dict else -2] if len(self.stack) >= (3 if kind is dict else 2) else None
    if type(obj) is not kind:
        raise _Refused(f"its pickle opcode {op} adds to {_kind(obj)}, not to a {kind.__name__}")
    return obj


def _keys(target: dict, keys, op):
    seen = set()
    for k in keys:
        if type(k) is not str:
            raise _Refused(f"its pickle opcode {op} gives a dict {_brief(k)} as a key: a Flight Recorder dump's keys "
                           "are strings")
        if k in target or k in seen:
            raise _Refused(f"a dict in it holds the key {_brief(k)} twice (the later value would win unseen)")
        seen.add(k)


def _append(self):
    _target(self, list, "APPEND")
    pickle._Unpickler.load_append(self)


def _appends(self):
    _target(self, list, "APPENDS")
    pickle._Unpickler.load_appends(self)


def _setitem(self):
    _keys(_target(self, dict, "SETITEM"), [self.stack[-2]], "SETITEM")
    pickle._Unpickler.load_setitem(self)


def _setitems(self):
    _keys(_target(self, dict, "SETITEMS"), self.stack[::2], "SETITEMS")
    pickle._Unpickler.load_setitems(self)


def _dict(self):
    _keys({}, self.stack[::2], "DICT")
    pickle._Unpickler.load_dict(self)


_ALLOWED = {"PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP", "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT",
            "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT", "STRING", "BINSTRING",
            "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "EMPTY_LIST", "LIST",
            "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_DICT", "GET", "BINGET", "LONG_BINGET", "PUT",
            "BINPUT", "LONG_BINPUT", "MEMOIZE",
            "GLOBAL", "STACK_GLOBAL", "INST"}  # the last three ask find_class, which refuses naming the object
_CHECKED = {"APPEND": _append, "APPENDS": _appends, "SETITEM": _setitem, "SETITEMS": _setitems, "DICT": _dict}
_KIND = {**dict.fromkeys(["PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"], "memo"), "MARK": "mark",
         **dict.fromkeys(["NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1",
                          "LONG4", "FLOAT", "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE",
                          "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "EMPTY_LIST", "LIST", "EMPTY_TUPLE",
                          "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_DICT", "DICT"], "new")}
for _op in pickletools.opcodes:
    _code = _op.code.encode("latin-1")[0]
    if _op.name in _CHECKED:
        _Unpickler.dispatch[_code] = _counted(_CHECKED[_op.name], _KIND.get(_op.name, ""))
    elif _op.name in _ALLOWED and _code in pickle._Unpickler.dispatch:
        _Unpickler.dispatch[_code] = _counted(pickle._Unpickler.dispatch[_code], _KIND.get(_op.name, ""))
    else:
        _Unpickler.dispatch[_code] = _opcode_refused(_op.name)
for _code in range(256):  # a byte that is no opcode
    _Unpickler.dispatch.setdefault(_code, _opcode_refused(f"0x{_code:02x} (no such opcode)"))


def _unpickle(data: bytes):
    """The dump in ``data``: containers and scalars only (_Unpickler), measured (``_measure``) before use."""
    return _Unpickler(data).load()


def _measure(root) -> None:
    """Refuse ``root`` if it holds a cycle, nests past MAX_DEPTH, or would be more than MAX_VALUES values or
    MAX_TEXT bytes as JSON, shared parts counted each time they appear; or holds a value a dump cannot (an integer
    past 64 bits, a string that is not Unicode, a type other than dict, list, tuple, str, int, float, bool, None).

    One pass over the distinct objects (iterative: no recursion), each container's JSON size computed once from its
    children's, so a DAG of shared lists costs its size in the file, not its expansion."""
    sizes: dict = {}  # id -> (values, text bytes)
    path: list = []  # keys from the root to the container being read
    entered: set = set()
    todo = [(root, "", False)]
    while todo:
        obj, key, done = todo.pop()
        t = type(obj)
        if t is dict or t is list or t is tuple:
            i = id(obj)
            if done:
                values, text = 1, 2
                items = obj.items() if t is dict else enumerate(obj)
                for k, v in items:
                    n, b = sizes[id(v)] if type(v) in (dict, list, tuple) else _leaf(v, path, k)
                    values, text = values + n, text + b + 1 + (_leaf(k, path, k)[1] + 1 if t is dict else 0)
                if values > MAX_VALUES or text > MAX_TEXT:
                    raise _Refused(f"{_where(path)} would be {_amount(values, text)} as JSON, shared parts counted "
                                   f"each time they appear (at most {MAX_VALUES:,} values and {MAX_TEXT >> 20} MiB: "
                                   "real dumps hold tens of MiB)")
                sizes[i] = (values, text)
                entered.discard(i)
                path.pop()
            elif i in sizes:
                continue
            elif i in entered:
                raise _Refused(f"{_where(path + [key])} holds itself (a cycle)")
            else:
                path.append(key)
                if len(path) > MAX_DEPTH:
                    raise _Refused(f"{_where(path[:6])}... is nested more than {MAX_DEPTH} deep (real dumps: 5)")
                entered.add(i)
                todo.append((obj, key, True))
                items = obj.items() if t is dict else enumerate(obj)
                todo.extend((v, k, False) for k, v in items if type(v) in (dict, list, tuple) and id(v) not in sizes)


def _leaf(v, path, k) -> tuple[int, int]:
    """(1, bytes of ``v`` as JSON, about) for a scalar a dump may hold; refuses any other."""
    t = type(v)
    if t is str:
        if not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise _Refused(f"{_where(path + [k])} is a string that is not valid Unicode (a lone surrogate)") from None
        return 1, len(v) + 2
    if t is int:
        if v.bit_length() > 64:
            raise _Refused(f"{_where(path + [k])} is an integer of {v.bit_length()} bits (at most 64)")
        return 1, 20
    if t is float:
        return 1, 24
    if v is None or t is bool:
        return 1, 5
    raise _Refused(f"{_where(path + [k])} is {_kind(v)}")


def _where(path) -> str:
    """``entries[3].input_sizes[0]`` from the keys of ``path`` (the root's first)."""
    out = ""
    for k in path[1:]:
        out += f"[{k}]" if isinstance(k, int) else f".{k[:30]}" if out else k[:30]
    return out or "the dump"


def _amount(values, text) -> str:
    return f"{values:,} values" if values > MAX_VALUES else f"{text / (1 << 20):,.0f} MiB"


def _kind(v) -> str:
    name = type(v).__name__
    return "None" if v is None else f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _brief(v, n: int = 40) -> str:
    """``v`` for a message: short, one line; an integer too long to print as its size."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 128:
        return f"an integer of {v.bit_length()} bits"
    if isinstance(v, str):
        return repr(v[:n]) + ("..." if len(v) > n else "")
    if isinstance(v, (int, float, bool)) or v is None:
        return repr(v)
    return _kind(v)


def is_dump(path: Path) -> bool:
    """Recognized by content, whatever the name (torch writes ``TORCH_FR_DUMP_TEMP_FILE`` + rank, no suffix): a
    pickle (protocol 2+ marker) naming a dump's keys (``pg_config``, ``entries``) in its first 64 KiB, or a JSON
    object with ``entries`` and another Flight Recorder key (``pg_status``, ``pg_config``, entries'
    ``profiling_name``) and no ``traceEvents`` at its start."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False  # unreadable: loading reports it
    if head[:1] == PICKLE:  # and the dump's first keys (torch writes version, pg_config, ..., entries)
        return b"pg_config" in head or b"entries" in head
    return (head.lstrip()[:1] == b"{" and b'"traceEvents"' not in head and b'"entries"' in head
            and (b'"pg_status"' in head or b'"pg_config"' in head or b'"profiling_name"' in head))


def read_dump(path) -> dict:
    """``{file, format (pickle or json), rank, version, pg_status, entries: [...]}``; TraceError on a file that is
    not one, or that expands past the limits, holds impossible values or contradicts itself (module docstring)."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise TraceError(path, f"Flight Recorder dump of {size} bytes is larger than {MAX_BYTES} (real dumps: a few "
                               "MB)")
    data = path.read_bytes()
    fmt = "pickle" if data[:1] == PICKLE else "json"
    try:
        dump = _unpickle(data) if fmt == "pickle" else _json_dump(data)
        _measure(dump)
    except _Refused as e:
        raise TraceError(path, f"Flight Recorder dump: {e}") from None
    except pickle.UnpicklingError as e:
        raise TraceError(path, f"not a Flight Recorder dump: {shown(e)[:300]}") from None
    except RecursionError:
        raise TraceError(path, "not a Flight Recorder dump: nested too deep to read (RecursionError)") from None
    except Exception as e:  # noqa: BLE001 (decoding data: whatever fails, the file is unreadable)
        raise TraceError(path, f"not a Flight Recorder dump: unreadable ({type(e).__name__})") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list) or not isinstance(dump.get("pg_config"), dict):
        raise TraceError(path, "not a Flight Recorder dump: no 'entries' list and 'pg_config' object")
    try:
        rank = _dump_rank(dump, path)
        status = dump.get("pg_status")
        status = {} if status is None else status
        if not isinstance(status, dict):
            raise _Refused(f"pg_status is {_kind(status)}, not an object")
        _json(status, "pg_status")
        version = dump.get("version")
        if not (version is None or type(version) in (str, int, float)):
            raise _Refused(f"version is {_kind(version)}")
    except _Refused as e:
        raise TraceError(path, f"Flight Recorder dump: {e}") from None
    groups = {str(k): _group_ranks(k, v, path) for k, v in dump["pg_config"].items()}
    entries = [_entry(e, i, groups, path) for i, e in enumerate(dump["entries"])]
    try:
        _numbered_once(dump["entries"], entries)
    except _Refused as e:
        raise TraceError(path, f"Flight Recorder dump: {e}") from None
    inflight, issue = read_inflight(path, rank)
    return {"file": shown(path.resolve()), "format": fmt, "rank": rank, "version": str(version),
            "pg_status": status, "entries": entries, "inflight": inflight, "issues": [issue] if issue else []}


def _json_dump(data: bytes):
    """A JSON dump: at most MAX_VALUES values (counted before parsing), each object's keys once; NaN and Infinity
    parse (as floats) for the checks to name."""
    if data.count(b",") + data.count(b"[") + data.count(b"{") > MAX_VALUES:
        raise _Refused(f"more than {MAX_VALUES:,} values (real dumps: a few million at most)")
    return json.loads(data, object_pairs_hook=_object)


def _object(pairs):
    d = dict(pairs)
    if len(d) < len(pairs):
        seen: set = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _Refused(f"an object in it holds the key {_brief(twice)} twice (the later value would win unseen)")
    return d


def _dump_rank(dump, path) -> int:
    """The rank the dump declares (``rank``), else the number ending its name: from 0 to 2^31 - 1."""
    if dump.get("rank") is not None:
        return _count(dump["rank"], "its rank", 0, RANKS)
    m = RANK_IN_NAME.search(path.name)
    if m is None:
        raise TraceError(path, "Flight Recorder dump without a rank: name it <prefix><rank> (e.g. fr_rank3.pkl)")
    if len(m.group(1)) > 10 or int(m.group(1)) >= RANKS:
        raise _Refused(f"the rank its name gives, {m.group(1)[:30]}{'...' if len(m.group(1)) > 30 else ''}, is not "
                       "from 0 to 2^31 - 1")
    return int(m.group(1))


def _numbered_once(raw: list, rows: list[dict]):
    """Each record id once, and each collective number (collective_seq_id) once per group: a number twice is a dump
    contradicting itself, which would pair the wrong calls across ranks (the later entry hiding the earlier)."""
    records, collectives = {}, {}
    for i, (e, row) in enumerate(zip(raw, rows, strict=True)):
        if row["record_id"] in records:
            raise _Refused(f"entries {records[row['record_id']]} and {i} both have record_id {row['record_id']}")
        records[row["record_id"]] = i
        p2p = e.get("is_p2p") if isinstance(e.get("is_p2p"), bool) else row["op"] in ("send", "recv")
        key = (row["pg_name"], row["seq"])
        if not p2p and key in collectives:
            raise _Refused(f"entries {collectives[key]} and {i} are both collective_seq_id {row['seq']} of group "
                           f"{_brief(row['pg_name'])} ({_brief(row['pg_desc'])}): one collective numbered twice")
        if not p2p:
            collectives[key] = i


def companion(path: Path) -> Path:
    """``fr_rank3.pkl``, ``fr_rank3.json`` and ``fr_rank3`` -> ``fr_rank3.inflight.json``."""
    stem = path.name[:-len(path.suffix)] if path.suffix in (".pkl", ".pickle", ".json") else path.name
    return path.with_name(stem + INFLIGHT)


def read_inflight(path: Path, rank: int) -> tuple[dict | None, tuple | None]:
    """The dump's companion record as one ``fr_inflight`` row, or None; and a load issue when it is damaged (cut,
    not JSON, another version or rank). One that reads but holds what cannot be (a peer or group rank beyond 2^31 - 1
    or negative, a time or op_id that is not an integer of 64 bits, a key twice, odd shapes or frames) is refused:
    TraceError naming it."""
    side = companion(path)
    if not side.is_file():
        return None, None
    try:
        if side.stat().st_size > 1 << 24:
            raise ValueError("larger than 16 MiB")
        d = json.loads(side.read_bytes(), object_pairs_hook=_object)
        if not isinstance(d, dict) or d.get("traceparse_inflight") != 1 or d.get("rank", rank) != rank:
            raise ValueError("not a version-1 record of this rank")
        call = d.get("call") or {}
        if not isinstance(call, dict):
            raise ValueError("'call' is not an object")
        row = {
            "why": str(d.get("why")), "time_ns": _int(d.get("time_ns"), "time_ns"), "op": _str(call.get("op")),
            "peer": _int(call.get("peer"), "peer", RANKS), "pg_name": _str(call.get("pg_name")),
            "pg_desc": _str(call.get("pg_desc")), "group_ranks": _ranks(call.get("group_ranks"), "group_ranks"),
            "op_id": _int(call.get("op_id"), "op_id"), "input_sizes": _sizes(call.get("input_sizes"), "input_sizes"),
            "input_dtypes": _dtypes(call.get("input_dtypes"), "input_dtypes"),
            "frames": _frames(d.get("frames")),
        }
    except _Refused as e:
        raise TraceError(side, f"in-flight record: {e}") from None
    except (OSError, ValueError, RecursionError, TypeError, AttributeError) as e:
        return None, (shown(side), "warning", f"in-flight record not read: {str(e)[:120]}", 1)
    return row, None


def _int(v, what: str, hi: int = INT64) -> int | None:
    """None, or ``v`` as an integer from 0 to ``hi`` - 1 (``_count``)."""
    return None if v is None else _count(v, what, 0, hi)


def _str(v) -> str | None:
    return v if isinstance(v, str) else None


DECIMAL = re.compile(r"-?[0-9]{1,20}")


def _count(v, what: str, lo: int = 0, hi: int = INT64) -> int:
    """``v`` as an integer from ``lo`` to ``hi`` - 1 (the store's column): an int, or its decimal text (JSON dumps
    write some counters as text); else _Refused naming ``what`` (a bool, a float, Infinity, 2^63 are not)."""
    if type(v) is str and DECIMAL.fullmatch(v):
        v = int(v)
    if type(v) is not int or not lo <= v < hi:
        raise _Refused(f"{what} is {_brief(v)}, not an integer from {lo} to {_bound(hi)}")
    return v


def _bound(hi: int) -> str:
    return {INT64: "2^63 - 1", RANKS: "2^31 - 1"}.get(hi, str(hi - 1))


def _ranks(v, what: str) -> list[int] | None:
    """None (unknown: also an empty list, as gloo lists a group it does not know), or distinct ranks, sorted."""
    if v is None:
        return None
    if type(v) not in (list, tuple):
        raise _Refused(f"{what} is {_kind(v)}, not a list of ranks")
    seen: set = set()
    for r in v:
        if type(r) is not int or not 0 <= r < RANKS:
            raise _Refused(f"{what} lists the rank {_brief(r)}, not an integer from 0 to 2^31 - 1")
        if r in seen:
            raise _Refused(f"{what} lists rank {r} twice")
        seen.add(r)
    return sorted(v) or None


def _name(v, what: str) -> str:
    if type(v) not in (str, int):
        raise _Refused(f"{what} is {_kind(v)}, not a name")
    return str(v)


def _json(v, what: str) -> str:
    try:
        return json.dumps(v, allow_nan=False)
    except ValueError:
        raise _Refused(f"{what} holds a number that is not finite (NaN or Infinity)") from None


def _sizes(v, what: str) -> str:
    """None or a list of shapes (lists of sizes from 0 to 2^63 - 1), as JSON text."""
    ok = v is None or (type(v) in (list, tuple) and all(
        type(s) in (list, tuple) and all(type(n) is int and 0 <= n < INT64 for n in s) for s in v))
    if not ok:
        raise _Refused(f"{what} is not a list of shapes (lists of sizes from 0 to 2^63 - 1)")
    return json.dumps(v)


def _dtypes(v, what: str) -> str:
    if not (v is None or (type(v) in (list, tuple) and all(type(t) is str for t in v))):
        raise _Refused(f"{what} is not a list of dtype names")
    return json.dumps(v)


def _frames(v) -> str:
    """A stack: a list of frames, ``{name, filename, line}`` (strings and an integer; any may be null), as JSON."""
    ok = v is None or (type(v) in (list, tuple) and all(
        type(f) is dict and type(f.get("name")) in (str, type(None)) and type(f.get("filename")) in (str, type(None))
        and (f.get("line") is None or (type(f.get("line")) is int and -INT64 <= f["line"] < INT64)) for f in v))
    if not ok:
        raise _Refused("frames is not a list of frames ({name, filename, line})")
    return _json(v or [], "frames")


def _group_ranks(key, cfg, path) -> list[int] | None:
    try:
        ranks = cfg["ranks"]
        ranks = json.loads(ranks) if isinstance(ranks, str) else ranks
        if not isinstance(ranks, list):
            raise TypeError
    except (TypeError, KeyError, ValueError, AttributeError, RecursionError):
        raise TraceError(path, f"Flight Recorder dump: pg_config entry {_brief(key)} has no list of ranks") from None
    try:
        return _ranks(ranks, f"pg_config entry {_brief(key)}")  # gloo may list a group with no ranks: unknown here
    except _Refused as e:
        raise TraceError(path, f"Flight Recorder dump: {e}") from None


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
            "record_id": _count(e.get("record_id", i), "record_id"), "pg_name": _name(name, "process_group's name"),
            "pg_desc": _name(desc, "process_group's description"), "group_ranks": ranks,
            "pg_id": _int(e.get("pg_id"), "pg_id"),  # the group's number in this process (not the same across ranks)
            "seq": _count(e["collective_seq_id"], "collective_seq_id"),
            "p2p_seq": _count(e.get("p2p_seq_id") or 0, "p2p_seq_id"),
            "op_id": _int(e.get("op_id"), "op_id"),
            "op": op, "backend": backend, "peer": peer,
            "input_sizes": _sizes(e.get("input_sizes"), "input_sizes"),
            "output_sizes": _sizes(e.get("output_sizes"), "output_sizes"),
            "input_dtypes": _dtypes(e.get("input_dtypes"), "input_dtypes"),
            "output_dtypes": _dtypes(e.get("output_dtypes"), "output_dtypes"),
            "state": str(e.get("state")), "retired": bool(e.get("retired")),
            "time_created_ns": _count(e["time_created_ns"], "time_created_ns") if e.get("time_created_ns") else None,
            "timeout_ms": _count(e["timeout_ms"], "timeout_ms") if e.get("timeout_ms") else None,
            "frames": _frames(e.get("frames")),
        }
    except _Refused as x:
        raise TraceError(path, f"Flight Recorder dump: entry {i}: {x}") from None
    except (TypeError, KeyError, ValueError, AttributeError):
        raise TraceError(path, f"Flight Recorder dump: entry {i} lacks process_group, profiling_name, "
                               "collective_seq_id or op_id in the expected form") from None
