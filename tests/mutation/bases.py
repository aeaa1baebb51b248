"""The inputs mutations start from, and where every event and field sits in their JSON text.

A base is the decompressed JSON text of a small real trace (fixture rank files, public traces) or
of a hand-made one. Mutations work on bytes, so the text is scanned as latin-1 (one character per
byte: offsets are byte offsets, and any UTF-8 in names passes through untouched); the scanner uses
``json.JSONDecoder.raw_decode`` to find the exact span of each top-level key, each event and each
member of an event, so a mutation can replace one value, insert one member or cut at one byte.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from fixtures import public_traces  # noqa: E402 -- the public traces' one locator
_DEC = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")


@dataclass
class Member:
    key: str
    key_start: int  # offset of the key's opening quote
    start: int  # offset of the value
    end: int  # offset after the value


@dataclass
class Event:
    start: int
    end: int
    value: object  # the decoded event (strings as latin-1)

    @property
    def ph(self):
        return self.value.get("ph") if isinstance(self.value, dict) else None

    @property
    def name(self):
        return self.value.get("name") if isinstance(self.value, dict) else None


@dataclass
class Doc:
    """A trace's JSON text with the spans of its top-level members and events."""

    data: bytes
    members: list[Member]
    events: list[Event]
    array_open: int  # offset of the traceEvents '['
    array_close: int  # offset of its ']'
    _obj_members: dict = field(default_factory=dict, repr=False)

    @property
    def text(self) -> str:
        return self.data.decode("latin-1")

    def member(self, key) -> Member | None:
        return next((m for m in self.members if m.key == key), None)

    def object_members(self, start: int) -> list[Member]:
        """Members of the JSON object whose '{' is at ``start``."""
        if start not in self._obj_members:
            self._obj_members[start] = object_members(self.text, start)
        return self._obj_members[start]

    def event_members(self, i: int) -> list[Member]:
        return self.object_members(self.events[i].start)

    def complete(self) -> int:
        """Complete (ph = X) events: what traceparse counts in ``run.events``."""
        return sum(1 for e in self.events if e.ph == "X")

    def complete_before(self, cut: int) -> int:
        """Complete events whose whole text lies before byte ``cut``."""
        return sum(1 for e in self.events if e.ph == "X" and e.end <= cut)

    def indices(self, pred) -> list[int]:
        return [i for i, e in enumerate(self.events) if pred(e)]

    @property
    def info(self) -> dict:
        m = self.member("distributedInfo")
        if m is None:
            return {}
        v = _DEC.raw_decode(self.text, m.start)[0]
        return v if isinstance(v, dict) else {}


def skip_ws(text: str, i: int) -> int:
    return _WS.match(text, i).end()


def object_members(text: str, start: int) -> list[Member]:
    """Top-level members of the object at ``text[start] == '{'``, with their spans."""
    assert text[start] == "{", text[start : start + 20]
    out = []
    i = skip_ws(text, start + 1)
    if text[i] == "}":
        return out
    while True:
        key, j = _DEC.raw_decode(text, i)
        j = skip_ws(text, j)
        assert text[j] == ":"
        j = skip_ws(text, j + 1)
        _, k = _DEC.raw_decode(text, j)
        out.append(Member(key, i, j, k))
        k = skip_ws(text, k)
        if text[k] == "}":
            return out
        assert text[k] == ",", text[k : k + 20]
        i = skip_ws(text, k + 1)


def scan(data: bytes) -> Doc:
    """Find the top-level members and the traceEvents elements of a trace (an object)."""
    text = data.decode("latin-1")
    i = skip_ws(text, 0)
    assert text[i] == "{", "bases are objects"
    members, events = [], []
    array_open = array_close = -1
    i = skip_ws(text, i + 1)
    while text[i] != "}":
        key, j = _DEC.raw_decode(text, i)
        j = skip_ws(text, j)
        assert text[j] == ":"
        j = skip_ws(text, j + 1)
        if key == "traceEvents":
            array_open = j
            k = skip_ws(text, j + 1)
            while text[k] != "]":
                value, end = _DEC.raw_decode(text, k)
                events.append(Event(k, end, value))
                k = skip_ws(text, end)
                if text[k] == ",":
                    k = skip_ws(text, k + 1)
            array_close = k
            end = k + 1
        else:
            _, end = _DEC.raw_decode(text, j)
        members.append(Member(key, i, j, end))
        k = skip_ws(text, end)
        if text[k] == ",":
            k = skip_ws(text, k + 1)
        i = k
    return Doc(data, members, events, array_open, array_close)


# --- the hand-made trace ---------------------------------------------------------------

def tiny_events(world: int = 1) -> list[dict]:
    """21 complete events (two profiler steps of a gloo all-reduce training loop), thread
    metadata and one memory record: every kind of event traceparse reads."""
    group = list(range(world))
    ev = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 7, "args": {"name": "python main"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 9, "args": {"name": "gloo worker"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 7, "tid": 7, "ts": 990.125, "dur": 2.5,
         "args": {"External id": 1, "Input Dims": [[]], "Input type": [""]}},
    ]
    eid = 2
    for s, t0 in ((1, 1000), (2, 1500)):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 7, "tid": 7,
                   "ts": t0, "dur": 400, "args": {"External id": eid}})
        ops = [
            ("cpu_op", "aten::linear", 10, 60, 7),
            ("cpu_op", "aten::addmm", 20, 40, 7),
            ("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", 80, 90, 7),
            ("cpu_op", "c10d::allreduce_", 180, 100, 7),
            ("cpu_op", "record_param_comms", 185, 20, 7),
            ("user_annotation", "gloo:all_reduce", 200, 70, 9),
            ("user_annotation", "Optimizer.step#SGD.step", 300, 60, 7),
            ("cpu_op", "aten::add_", 310, 30, 7),
        ]
        for cat, name, off, dur, tid in ops:
            eid += 1
            args = {"External id": eid}
            if name == "c10d::allreduce_":
                args.update({"Input Dims": [[[64]], [], [], []], "Input type": ["TensorList", "", "", ""],
                             "Concrete Inputs": ["", "", "", ""]})
            if name == "record_param_comms":
                args.update({"Collective name": "allreduce", "In msg nelems": 64, "Out msg nelems": 64,
                             "Group size": world, "dtype": "Float", "Process Group Name": "0",
                             "Process Group Description": "default_pg", "Process Group Ranks": str(group),
                             "Seq": s, "In split size": "[]", "Out split size": "[]"})
            ev.append({"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": t0 + off + 0.375,
                       "dur": dur, "args": args})
        if s == 1:
            ev.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 7, "tid": 7, "s": "t",
                       "ts": t0 + 15, "args": {"Device Type": 0, "Device Id": -1, "Addr": 94000000, "Bytes": 4096,
                                               "Total Allocated": 4096, "Total Reserved": 0}})
    ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::to", "pid": 7, "tid": 7, "ts": 1950, "dur": 3,
               "args": {"External id": eid + 1}})
    ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 7, "tid": 7, "ts": 1951, "dur": 1,
               "args": {"External id": eid + 2}})
    assert sum(e["ph"] == "X" for e in ev) == 21
    return ev


def tiny_text(rank: int | None = 0, world: int = 1, info_after: bool = False) -> bytes:
    """The hand-made trace as Kineto writes it: header, one event per line, trailer."""
    info = {"backend": "gloo", "world_size": world, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo",
                           "pg_size": world, "ranks": list(range(world))}]}
    if rank is not None:
        info = {"backend": "gloo", "rank": rank, **{k: v for k, v in info.items() if k != "backend"}}
    head = {"schemaVersion": 1, "deviceProperties": [], "record_shapes": 1,
            "trace_id": "0123456789ABCDEF0123456789ABCDEF"}
    if not info_after:
        head["distributedInfo"] = info
    head["baseTimeNanoseconds"] = 1790000000000000000
    tail = {"traceName": "tiny.json"}
    if info_after:
        tail = {"distributedInfo": info, **tail}
    lines = ["{"] + [f'  "{k}": {json.dumps(v)},' for k, v in head.items()]
    lines.append('  "traceEvents": [')
    lines.append(",\n".join("  " + json.dumps(e) for e in tiny_events(world)))
    lines.append("  ],")
    lines.append(",\n".join(f'  "{k}": {json.dumps(v)}' for k, v in tail.items()))
    lines.append("}")
    return ("\n".join(lines) + "\n").encode()


# --- the bases -------------------------------------------------------------------------

@dataclass(frozen=True)
class Base:
    name: str
    file_name: str  # the name it is written under in a single-file case
    source: str  # where it comes from (a fixture path, a public trace or 'hand-made')
    weight: int  # relative chance of being picked
    gz_path: str | None = None  # a path in the repository, or "public:<name>" for a public trace

    @property
    def file(self) -> Path | None:
        """The original gzipped file, if any (a public trace is read from fixtures/public_traces.py's folder)."""
        if self.gz_path is None:
            return None
        if self.gz_path.startswith("public:"):
            return public_traces.path(self.gz_path.removeprefix("public:"))
        return REPO / self.gz_path

    @property
    def data(self) -> bytes:
        return _data(self.name)

    @property
    def doc(self) -> Doc:
        return _doc(self.name)

    @property
    def gz(self) -> bytes | None:
        """The original compressed bytes (real fixtures), else None."""
        return self.file.read_bytes() if self.file else None

    @property
    def rank(self):
        r = self.doc.info.get("rank")
        return r if isinstance(r, int) else None


BASES = {
    b.name: b
    for b in [
        Base("tiny", "rank0.json", "hand-made (tests/mutation/bases.py)", 6),
        Base("tiny_r3", "trace.json", "hand-made, rank 3 of 4 (a name without the rank)", 3),
        Base("tiny_trailer", "trace.json", "hand-made, distributedInfo (rank 3 of 4) after traceEvents", 2),
        Base("cpu_only", "cpu_only.pt.trace.json", "public trace hta/cpu_only (rank 34 of 300)", 3,
             "public:hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"),
        Base("ddp2_rank0", "rank0.json", "fixtures/runs/ddp2/rank0.json.gz", 1, "fixtures/runs/ddp2/rank0.json.gz"),
        Base("rank_unavailable", "rank_not_found.json", "public trace hta/rank_unavailable", 1,
             "public:hta/rank_unavailable/rank_not_found.json.gz"),
        Base("sampled_rank0", "sampled_rank-0.json", "public trace hta/trace_filter/sampled_rank-0.json.gz", 1,
             "public:hta/trace_filter/sampled_rank-0.json.gz"),
    ]
}


# the public traces the bases and their partner files are read from
PUBLIC_NEEDED = sorted({b.gz_path.removeprefix("public:") for b in BASES.values() if (b.gz_path or "").startswith("public:")}
                       | {"hta/trace_filter/sampled_rank-1.json.gz"})


@cache
def _data(name: str) -> bytes:
    if name == "tiny":
        return tiny_text()
    if name == "tiny_r3":
        return tiny_text(rank=3, world=4)
    if name == "tiny_trailer":
        return tiny_text(rank=3, world=4, info_after=True)
    return gzip.decompress(BASES[name].gz)


@cache
def _doc(name: str) -> Doc:
    return scan(_data(name))
