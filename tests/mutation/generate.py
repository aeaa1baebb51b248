"""Seeded mutation cases: damaged traces and command lines, each with the outcome it must get.

``generate_cases(n, seed)`` returns ``n`` cases spread over the classes (``CLASSES``: nine kinds of hostile
input, from huge exponents to bad command-line arguments, plus truncation and gzip damage, plus one damage to every
event of a file (``every_event``), plus the surface
classes of ``surfaces.py``: -o targets, run histories, argument checks, the API called at once; and hostile
Flight Recorder dumps, ``dumps.py``; and the hostile-input classes of ``hostile.py``: hostile stores, control
characters and Markdown in names, huge metadata numbers, odd path characters), each class's operators taken in a seeded order so that a small sample
still meets every operator, plus one ``control`` case (the unmutated input) per input arrangement the
cases use: the controls run first and give the load issues an unmutated input has, so that a
mutated case can tell a new load issue (the damage reported) from one the input always had.

A case is data: the files to write into its input folder, the CLI arguments (``{in}`` stands for
that folder), what to do (``run``; ``kill``: signal the main process mid-load; ``cache``: damage
the cache entry a first run made, then run again) and what is acceptable:

- ``accept``: ``load`` (exit 0/1 and a JSON document) and/or ``refuse`` (exit 2 and one line on
  stderr naming the file: one of ``names``, when given);
- ``events``: the complete (ph = X) events a plain JSON reader finds in the valid part; the tool may
  lose up to ``max_loss`` of them (the events the damage touched), and only with a load issue that
  the control does not have; ``min_events`` / ``max_events`` bound it where damage leaves the valid
  part uncertain (gzip);
- ``must_note``: the damage itself must show as a new load issue (a bad value costs that event or
  field, "counted in load_issues with its kind");
- ``ranks``: the ranks the run must report; ``rank_strict``: even with a load issue saying why not;
- ``max_rss_mb``, ``timeout``: memory and time bounds (decompression bombs scale them with size).
"""

from __future__ import annotations

import gzip
import json
import random
import struct
import zlib
from dataclasses import asdict, dataclass, field
from functools import cache

from .bases import BASES, REPO, Doc, Member, public_traces, scan, tiny_text

CLASSES = {
    "exponent": "numbers with huge negative exponents (1e-999999999) in ts/dur (class 1)",
    "bad_value": "NaN/Infinity literals, args not an object, invalid UTF-8, lone surrogates, a trailing comma "
                 "in one event or in a header after the events (class 2)",
    "odd_value": "values that load but may upset the checks: null/negative/string dur and ts, rank -1, "
                 "odd step names and communication args (class 3)",
    "out_of_range": "integers at or above 2^63 or 2^31, '1e400'/'inf' strings, huge timestamps and step "
                    "numbers, pg_size '' (class 4)",
    "nesting": "nesting deeper than 1,000 levels, under keys traceparse reads or ignores (class 5)",
    "bomb": "decompression bombs and pathological layout: whitespace runs, huge strings and numbers, "
            "many events or gzip members (class 6)",
    "kill": "SIGKILL/SIGTERM/SIGINT to the main process mid-load, then a second run (class 7)",
    "cache": "a damaged cache entry, then a run that must rebuild it (class 8)",
    "args": "command-line arguments and folders (class 9)",
    "truncation": "JSON cut off at any byte",
    "gzip": "damaged gzip bytes: cut, flipped bits, bad header or trailer, extra members, trailing bytes",
    "every_event": "one damage to every complete event of a file: no usable dur (negative, null, a string, missing: "
                   "refused), every dur 0, every ts one value, negated, null or missing",
}
# relative share of the cases (kill, cache and bombs cost two runs or big files)
CLASS_WEIGHT = {"kill": 0.5, "cache": 0.6, "bomb": 0.4}

MB = 1 << 20
DEFAULT_TIMEOUT = 120.0


@dataclass
class Case:
    cls: str
    op: str
    description: str
    files: dict = field(default_factory=dict)  # relative path -> bytes (None: a folder)
    args: list = field(default_factory=list)  # CLI arguments; "{in}" is the input folder
    accept: tuple = ("load",)
    events: int | None = None
    max_loss: int = 0
    min_events: int | None = None
    max_events: int | None = None
    must_note: bool = False
    names: tuple = ()
    ranks: list | None = None
    rank_strict: bool = False
    document: bool = True  # stdout is the analyze JSON document
    baseline: str | None = None  # the control whose load issues are the baseline
    action: str = "run"  # run | kill | cache
    action_args: dict = field(default_factory=dict)
    links: dict = field(default_factory=dict)  # relative path -> symlink target
    fifos: tuple = ()
    preserve: tuple = ()  # input files that must be unchanged afterwards
    timeout: float = DEFAULT_TIMEOUT
    max_rss_mb: int | None = None
    program: tuple = ()  # a script run (with this Python) instead of the CLI; args follow it
    nodes: dict = field(default_factory=dict)  # relative path -> "null"/"full" (char device) or "hardlink:REL"
    expect: dict = field(default_factory=dict)  # the surface checks of tests/mutation/surfaces.py
    id: str = ""

    def summary(self) -> dict:
        """The case without file contents (for reports and case.json)."""
        d = asdict(self)
        d["files"] = {k: (None if v is None else len(v)) for k, v in self.files.items()}
        return d


# --- registry ---------------------------------------------------------------------------

OPS: dict[str, list] = {c: [] for c in CLASSES}


def op(cls: str):
    def register(f):
        OPS[cls].append((f.__name__.removeprefix("op_"), f))
        return f

    return register


def generate_cases(n: int, seed: int, classes=None, big: bool = False) -> list[Case]:
    """``n`` mutation cases over ``classes`` (default all) and their controls (first).

    ``big`` lets decompression bombs reach 1.2 GiB (the full campaign); otherwise they stay at or
    under 256 MiB (the CI sample)."""
    classes = list(classes or CLASSES)
    unknown = set(classes) - set(CLASSES)
    if unknown:
        raise ValueError(f"unknown classes: {', '.join(sorted(unknown))} (known: {', '.join(CLASSES)})")
    counts = _shares(n, classes)
    order = {c: _op_order(c, seed) for c in classes}
    cases = []
    for c in classes:
        for k in range(counts[c]):
            rng = Rng(f"{seed}/{c}/{k}")
            rng.big = big
            name, f = order[c][k % len(order[c])]
            case = f(rng)
            case.cls, case.op, case.id = c, name, f"{c}-{k:04d}"
            cases.append(case)
    controls = []
    for key in dict.fromkeys(c.baseline for c in cases if c.baseline):
        ctl = control_case(key)
        ctl.id = f"control-{key.replace(':', '-')}"
        ctl.op, ctl.action_args = "unmutated", {"key": key}
        controls.append(ctl)
    return controls + cases


def _shares(n, classes):
    """Cases per class: by CLASS_WEIGHT, then raised to the class's number of operators where ``n``
    allows (taken from the classes with the most), so that a small sample meets every operator."""
    w = {c: CLASS_WEIGHT.get(c, 1.0) for c in classes}
    total = sum(w.values())
    counts = {c: int(n * w[c] / total) for c in classes}
    rest = n - sum(counts.values())
    for c in sorted(classes, key=lambda c: -(n * w[c] / total - counts[c]))[:rest]:
        counts[c] += 1
    need = {c: len(OPS[c]) for c in classes}
    if n >= sum(need.values()):
        for c in classes:
            while counts[c] < need[c]:
                donor = max(classes, key=lambda d: (counts[d] - need[d], counts[d]))
                counts[donor] -= 1
                counts[c] += 1
    return counts


def _op_order(cls, seed):
    ops = list(OPS[cls])
    random.Random(f"{seed}/{cls}/order").shuffle(ops)
    return ops


class Rng(random.Random):
    """The seeded generator an operator gets; ``big``: bombs may reach 1.2 GiB."""

    big = False


# --- arrangements: which files a case writes ----------------------------------------------

SINGLE_BASES = ["tiny", "tiny_r3", "tiny_trailer", "cpu_only", "ddp2_rank0", "rank_unavailable", "sampled_rank0"]
# bases whose rank shows only in distributedInfo (not 0, not in the file name): a lost header shows
HEADER_BASES = ["tiny_r3", "tiny_trailer", "cpu_only"]
PAIR_BASES = ["tiny2", "ddp2_rank0", "sampled_rank0", "cpu_only"]


def pick_base(rng, allowed=None) -> str:
    names = [b for b in (allowed or SINGLE_BASES)]
    return rng.choices(names, weights=[BASES[b].weight if b in BASES else 4 for b in names])[0]


def base_data(name: str) -> bytes:
    if name == "tiny2":
        return tiny_text(rank=0, world=2)
    return BASES[name].data


_docs: dict = {}


def base_doc(name: str) -> Doc:
    if name not in _docs:
        _docs[name] = BASES[name].doc if name in BASES else scan(base_data(name))
    return _docs[name]


def base_rank(name: str):
    r = base_doc(name).info.get("rank")
    return r if isinstance(r, int) else 0


def single_name(name: str) -> str:
    return BASES[name].file_name if name in BASES else "rank0.json"


@cache
def partner(name: str) -> tuple[str, bytes, int]:
    """The other file of a two-rank arrangement: (file name, bytes, complete events)."""
    if name == "tiny2":
        data = tiny_text(rank=1, world=2)
        return "rank1.json", data, scan(data).complete()
    if name == "ddp2_rank0":
        data = (REPO / "fixtures/runs/ddp2/rank1.json.gz").read_bytes()
        return "rank1.json.gz", data, scan(gzip.decompress(data)).complete()
    if name == "sampled_rank0":
        data = public_traces.path("hta/trace_filter/sampled_rank-1.json.gz").read_bytes()
        return "sampled_rank-1.json.gz", data, scan(gzip.decompress(data)).complete()
    if name == "cpu_only":
        doc = base_doc(name)
        data = apply(doc.data, set_member(doc, info_start(doc), "rank", "35"))
        return "rank-35.json", data, doc.complete()
    raise ValueError(name)


def pair_name(name: str) -> str:
    return {"tiny2": "rank0.json", "ddp2_rank0": "rank0.json", "sampled_rank0": "sampled_rank-0.json",
            "cpu_only": "rank-34.json"}[name]


def arrange(rng, name: str, data: bytes, pair: bool, gz: bool | None = None, compresslevel=6) -> dict:
    """Files of a case: the (mutated) ``data`` of base ``name``, alone or beside its partner rank file.
    Returns {files, names, ranks, events_other, baseline}."""
    if gz is None:
        gz = rng.random() < 0.3
    fname = pair_name(name) if pair else single_name(name)
    if gz:
        fname += ".gz"
        data = gzip.compress(data, compresslevel=compresslevel, mtime=0)
    files = {fname: data}
    r = base_rank(name)
    ranks = [r]
    other = 0
    if pair:
        pname, pdata, other = partner(name)
        files[pname] = pdata
        ranks = [r, r + 1]
    return {"files": files, "names": (fname,), "ranks": ranks, "events_other": other,
            "baseline": f"{name}:{2 if pair else 1}"}


def analyze_args(extra=()):
    return ["analyze", "{in}", "--format", "json", "--no-cache", *extra]


def control_case(key: str) -> Case:
    """The unmutated arrangement ``key`` (``base:files``): must load every event with no surprise."""
    name, nfiles = key.split(":")
    if name == "tiny8":
        files = {f"rank{r}.json": tiny_text(rank=r, world=8) for r in range(8)}
        return Case("control", "unmutated", "tiny trace as all 8 ranks of an 8-rank job", files=files,
                    args=analyze_args(), events=21 * 8, ranks=list(range(8)), rank_strict=True, baseline=None)
    doc = base_doc(name)
    a = arrange(random.Random(0), name, doc.data, pair=nfiles == "2", gz=False)
    return Case("control", "unmutated", f"{name} unmutated ({nfiles} file(s))", files=a["files"],
                args=analyze_args(), events=doc.complete() + a["events_other"], ranks=a["ranks"],
                rank_strict=True, baseline=None)


# --- text edits ---------------------------------------------------------------------------

def apply(data: bytes, edits) -> bytes:
    """Apply (start, end, payload) edits (non-overlapping) to ``data``."""
    out = data
    for start, end, payload in sorted(edits, key=lambda e: e[0], reverse=True):
        if isinstance(payload, str):
            payload = payload.encode("utf-8", "surrogatepass")
        out = out[:start] + payload + out[end:]
    return out


def find(members: list[Member], key: str) -> Member | None:
    return next((m for m in members if m.key == key), None)


def set_member(doc: Doc, obj_start: int, key: str, raw) -> list:
    """Edits that make ``key`` of the object at ``obj_start`` hold the JSON text ``raw``."""
    ms = doc.object_members(obj_start)
    m = find(ms, key)
    if m is not None:
        return [(m.start, m.end, raw)]
    sep = ", " if ms else ""
    return [(obj_start + 1, obj_start + 1, b"".join([_b(json.dumps(key)), b": ", _b(raw), _b(sep)]))]


def remove_member(doc: Doc, obj_start: int, key: str) -> list:
    ms = doc.object_members(obj_start)
    i = next((k for k, m in enumerate(ms) if m.key == key), None)
    if i is None:
        return []
    if i + 1 < len(ms):
        return [(ms[i].key_start, ms[i + 1].key_start, b"")]
    if i > 0:
        return [(ms[i - 1].end, ms[i].end, b"")]
    return [(ms[i].key_start, ms[i].end, b"")]


def _b(x) -> bytes:
    return x if isinstance(x, bytes) else x.encode("utf-8", "surrogatepass")


def info_start(doc: Doc) -> int | None:
    m = doc.member("distributedInfo")
    return m.start if m is not None and doc.data[m.start : m.start + 1] == b"{" else None


def args_start(doc: Doc, i: int) -> int | None:
    m = find(doc.event_members(i), "args")
    return m.start if m is not None and doc.data[m.start : m.start + 1] == b"{" else None


def pick_event(rng, doc: Doc, pred=None, prefer=None) -> int:
    """A random event index; ``prefer`` narrows the choice when it matches any."""
    idx = doc.indices(pred or (lambda e: e.ph == "X")) or doc.indices(is_x)
    if prefer:
        better = [i for i in idx if prefer(doc.events[i])]
        idx = better or idx
    return rng.choice(idx)


def is_x(e):
    return e.ph == "X"


def name_has(*words):
    return lambda e: isinstance(e.name, str) and any(w in e.name for w in words)


def string_span(doc: Doc, m: Member) -> tuple[int, int]:
    """Inside of a string value's quotes."""
    assert doc.data[m.start : m.start + 1] == b'"'
    return m.start + 1, m.end - 1


def point_case(rng, name, edits_fn, *, pair=None, gz=None, **kw) -> Case:
    """A case damaging one point of base ``name`` (``edits_fn(doc) -> (edits, description, touched)``)."""
    doc = base_doc(name)
    edits, what, touched = edits_fn(doc)
    data = apply(doc.data, edits)
    a = arrange(rng, name, data, pair=bool(pair), gz=gz)
    desc = f"{what} ({single_name(name) if not pair else pair_name(name)} of {name}"
    desc += ", beside its partner rank file)" if pair else ")"
    c = Case("", "", desc, files=a["files"], args=analyze_args(), events=doc.complete() + a["events_other"],
             max_loss=touched, names=a["names"], ranks=a["ranks"], baseline=a["baseline"])
    for k, v in kw.items():
        setattr(c, k, v)
    return c


def event_value_case(rng, cls_kw, field_name, values, *, bases=None, pair_p=0.2, pred=None, prefer=None,
                     in_args=False, label=None):
    """Replace (or insert) ``field_name`` of one event with one of ``values``."""
    pair = rng.random() < pair_p
    name = pick_base(rng, PAIR_BASES if pair else (bases or SINGLE_BASES))
    if pair and bases and name not in bases:
        name = "tiny2"
    value = rng.choice(values)

    def edits(doc):
        i = pick_event(rng, doc, pred, prefer)
        obj = args_start(doc, i) if in_args else doc.events[i].start
        if obj is None:  # no args object: add one
            return (set_member(doc, doc.events[i].start, "args", "{" + json.dumps(field_name) + ": " + value + "}"),
                    f"{label or field_name} = {_show(value)} in args of event {i} ({doc.events[i].name!r})",
                    int(doc.events[i].ph == "X"))
        where = "args of event" if in_args else "event"
        return (set_member(doc, obj, field_name, value),
                f"{label or field_name} = {_show(value)} in {where} {i} ({doc.events[i].name!r})",
                int(doc.events[i].ph == "X"))

    return point_case(rng, name, edits, pair=pair, **cls_kw)


def _show(v) -> str:
    v = v.decode("latin-1") if isinstance(v, bytes) else str(v)
    return v if len(v) <= 40 else f"{v[:20]}...({len(v)} chars)"


# --- 1. exponents -------------------------------------------------------------------------

EXPONENTS = ["1e-999999999", "1e-1000", "-1e-999999999", "1E-2147483649", "0.5e-99999999999", "1e-400",
             "123.456e-99999", "1e-9223372036854775808"]
EXPO_KW = {"accept": ("load", "refuse"), "must_note": True}


@op("exponent")
def op_ts_exponent(rng):
    return event_value_case(rng, EXPO_KW, "ts", EXPONENTS, pair_p=0.3)


@op("exponent")
def op_dur_exponent(rng):
    return event_value_case(rng, EXPO_KW, "dur", EXPONENTS, pair_p=0.3)


@op("exponent")
def op_step_ts_exponent(rng):
    return event_value_case(rng, EXPO_KW, rng.choice(["ts", "dur"]), EXPONENTS, prefer=name_has("ProfilerStep#"))


@op("exponent")
def op_memory_ts_exponent(rng):
    c = event_value_case(rng, EXPO_KW, "ts", EXPONENTS, bases=["tiny", "tiny_trailer"], pair_p=0,
                         pred=lambda e: e.name == "[memory]")
    return c


@op("exponent")
def op_exponent_in_pair(rng):
    return event_value_case(rng, EXPO_KW, rng.choice(["ts", "dur"]), EXPONENTS, pair_p=1.0)


# --- 2. bad values in a complete file -------------------------------------------------------

NONFINITE = ["NaN", "Infinity", "-Infinity"]
BAD_KW = {"accept": ("load",), "must_note": True, "rank_strict": True}


@op("bad_value")
def op_nonfinite_field(rng):
    return event_value_case(rng, BAD_KW, rng.choice(["ts", "dur", "pid", "tid"]), NONFINITE, pair_p=0.2)


@op("bad_value")
def op_nonfinite_arg(rng):
    key = rng.choice(["External id", "correlation", "Sequence number", "Fwd thread id", "zz_unknown"])
    return event_value_case(rng, BAD_KW, key, NONFINITE, in_args=True)


@op("bad_value")
def op_nonfinite_unknown_key(rng):
    return event_value_case(rng, BAD_KW, "zz_unknown", NONFINITE, pred=lambda _: True)


@op("bad_value")
def op_args_not_object(rng):
    return event_value_case(rng, BAD_KW, "args", ["5", "[1, 2]", '"text"', "true", "-0.5", "[]"],
                            prefer=lambda e: isinstance(e.value, dict) and "args" in e.value)


INVALID_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xf4\x90\x80\x80"]
SURROGATES = ["\\ud800", "\\udfff", "\\ud83dx", "\\udc00\\ud800", "\\uDBFF"]
CONTROL = [b"\x01", b"\x1f", b"\n", b"\t", b"\x00"]


def _name_insert(rng, kinds, label):
    pair = rng.random() < 0.2
    name = pick_base(rng, PAIR_BASES if pair else SINGLE_BASES)
    payload = rng.choice(kinds)

    def edits(doc):
        i = pick_event(rng, doc, lambda e: isinstance(e.name, str) and e.name != "", lambda e: e.ph == "X")
        m = find(doc.event_members(i), "name")
        a, b = string_span(doc, m)
        pos = rng.randint(a, b)
        return [(pos, pos, payload)], f"{label} {_show(payload)!r} in the name of event {i}", int(doc.events[i].ph == "X")

    return point_case(rng, name, edits, pair=pair, **BAD_KW)


@op("bad_value")
def op_invalid_utf8_name(rng):
    return _name_insert(rng, INVALID_UTF8, "invalid UTF-8")


@op("bad_value")
def op_lone_surrogate_name(rng):
    return _name_insert(rng, SURROGATES, "lone surrogate escape")


@op("bad_value")
def op_control_char_name(rng):
    return _name_insert(rng, CONTROL, "raw control character")


@op("bad_value")
def op_trailing_comma(rng):
    name = pick_base(rng)

    def edits(doc):
        i = pick_event(rng, doc)
        end = doc.events[i].end - 1
        return [(end, end, ",")], f"a trailing comma inside event {i} ({doc.events[i].name!r})", 1

    return point_case(rng, name, edits, **BAD_KW)


@op("bad_value")
def op_bad_value_in_trailer_info(rng):
    """A distributedInfo written after traceEvents with a NaN (or a lone surrogate) in one of its keys: the rank
    must still be read from it, and a NaN said as a load issue."""
    value = rng.choice(NONFINITE + ['"\\ud800"'])
    key = rng.choice(["nccl_version", "pg_count", "zz_unknown"])

    def edits(doc):
        return set_member(doc, info_start(doc), key, value), f"distributedInfo.{key} = {value} (after traceEvents)", 0

    # a NaN breaks the JSON grammar: it must be said; a lone surrogate escape in a key nothing reads need not
    return point_case(rng, "tiny_trailer", edits, **dict(BAD_KW, must_note=value in NONFINITE))


@op("bad_value")
def op_bad_value_in_header(rng):
    name = pick_base(rng, HEADER_BASES)
    value = rng.choice(NONFINITE + ['"\\udfff"', b'"\xff\xfe"'])
    where = rng.choice(["info", "top"])

    def edits(doc):
        if where == "info" and info_start(doc) is not None:
            return set_member(doc, info_start(doc), "zz_unknown", value), f"distributedInfo.zz_unknown = {_show(value)}", 0
        return set_member(doc, 0 if doc.data[:1] == b"{" else doc.data.index(b"{"), "zz_unknown", value), \
            f"top-level zz_unknown = {_show(value)} (before the events)", 0

    return point_case(rng, name, edits, **dict(BAD_KW, must_note=value in NONFINITE))


# --- 3. values that load but may upset the checks --------------------------------------------

ODD_KW = {"accept": ("load", "refuse"), "must_note": False}


@op("odd_value")
def op_dur_odd(rng):
    return event_value_case(rng, ODD_KW, "dur", ["null", '"abc"', "-5", "true", "{}", "[]", '""', "0", "-0.001"],
                            prefer=lambda e: isinstance(e.value, dict) and e.value.get("cat") in ("cpu_op", "user_annotation"),
                            pair_p=0.4)


@op("odd_value")
def op_ts_odd(rng):
    return event_value_case(rng, ODD_KW, "ts", ["null", '"abc"', "-1000", "true", "{}", '"1e3"'], pair_p=0.3)


@op("odd_value")
def op_missing_field(rng):
    pair = rng.random() < 0.3
    name = pick_base(rng, PAIR_BASES if pair else None)
    key = rng.choice(["ts", "dur", "name", "pid", "tid", "cat"])

    def edits(doc):
        i = pick_event(rng, doc, lambda e: is_x(e) and key in e.value)
        return remove_member(doc, doc.events[i].start, key), f"event {i} ({doc.events[i].name!r}) without {key}", 1

    return point_case(rng, name, edits, pair=pair, **ODD_KW)


@op("odd_value")
def op_name_odd(rng):
    return event_value_case(rng, ODD_KW, "name", ["null", "5", "{}", "[]", '""', "true"], pair_p=0.2)


@op("odd_value")
def op_pid_tid_odd(rng):
    return event_value_case(rng, ODD_KW, rng.choice(["pid", "tid"]),
                            ["null", '"abc"', "-1", "1.5", '"stream 7"', "true", "[]"], pair_p=0.2)


@op("odd_value")
def op_rank_odd(rng):
    name = pick_base(rng, ["tiny_r3", "ddp2_rank0", "cpu_only", "sampled_rank0", "tiny_trailer"])
    value = rng.choice(["-1", "-2147483648", '"0"', "1.5", "null", "true", "[]", "-0"])

    def edits(doc):
        return set_member(doc, info_start(doc), "rank", value), f"distributedInfo.rank = {value}", 0

    kw = dict(ODD_KW, must_note=value != "-0", ranks=None)
    return point_case(rng, name, edits, **kw)


@op("odd_value")
def op_world_size_odd(rng):
    name = pick_base(rng, ["tiny_r3", "ddp2_rank0", "cpu_only", "sampled_rank0", "tiny_trailer"])
    rank = base_rank(name)
    value = rng.choice(["0", "-1", '"x"', "null", str(rank), "1.5"])

    def edits(doc):
        return set_member(doc, info_start(doc), "world_size", value), f"distributedInfo.world_size = {value} (rank {rank})", 0

    return point_case(rng, name, edits, **dict(ODD_KW, must_note=value in ("0", "-1", str(rank))))


@op("odd_value")
def op_step_name_odd(rng):
    pair = rng.random() < 0.3
    name = pick_base(rng, PAIR_BASES if pair else ["tiny", "tiny_trailer", "cpu_only", "ddp2_rank0", "sampled_rank0"])
    value = rng.choice(['"ProfilerStep#"', '"ProfilerStep#abc"', '"ProfilerStep#-1"', '"ProfilerStep#1.5"',
                        '"ProfilerStep#0"', "dup", '"ProfilerStep# 7"'])

    def edits(doc):
        steps = doc.indices(lambda e: is_x(e) and isinstance(e.name, str) and e.name.startswith("ProfilerStep#"))
        if not steps:
            steps = doc.indices(is_x)
        i = rng.choice(steps)
        v = value
        if value == "dup":
            others = [doc.events[k].name for k in steps if k != i]
            v = json.dumps(others[0] if others else "ProfilerStep#1")
        return set_member(doc, doc.events[i].start, "name", v), f"event {i} ({doc.events[i].name!r}) renamed {v}", 1

    return point_case(rng, name, edits, pair=pair, **ODD_KW)


COMM_ODD = {
    "In msg nelems": ["-1", '"abc"', "null", "1.5"],
    "Out msg nelems": ["-1", '"abc"'],
    "Group size": ["0", "-1", '"2"', "null"],
    "Process Group Ranks": ['"[0, x]"', '"["', "[0, 1]", '""', '"[-1]"'],
    "Seq": ['"abc"', "-1", "null"],
    "In split size": ['"[1, 2"', '"abc"', "[1, 2]"],
    "dtype": ["5", "null", '"NoSuchType"'],
    "Collective name": ["5", '""', '"no_such_collective"'],
    "Input Dims": ['"x"', "[[[-1]]]", "[[[1.5]]]", "[null]", "{}"],
    "Concrete Inputs": ['["", "abc", "", ""]', '"x"', "[[]]"],
}


@op("odd_value")
def op_comm_args_odd(rng):
    key = rng.choice(sorted(COMM_ODD))
    return event_value_case(rng, ODD_KW, key, COMM_ODD[key], in_args=True, pair_p=0.3,
                            prefer=name_has("record_param_comms", "c10d::", "nccl", "gloo:"))


# --- 4. numbers out of range ------------------------------------------------------------------

HUGE_IDS = ["9223372036854775808", "18446744073709551616", "-9223372036854775809", "1e400", "-1e400",
            '"1e400"', '"inf"', '"-inf"', '"nan"', '"9223372036854775808"', "99999999999999999999999999999999999999",
            "9.3e18"]
RANGE_KW = {"accept": ("load", "refuse"), "must_note": False}


@op("out_of_range")
def op_id_huge(rng):
    key = rng.choice(["pid", "tid"])
    return event_value_case(rng, RANGE_KW, key, HUGE_IDS, pair_p=0.3)


@op("out_of_range")
def op_arg_id_huge(rng):
    key = rng.choice(["External id", "correlation", "stream", "device", "Seq", "In msg nelems", "Group size"])
    return event_value_case(rng, RANGE_KW, key, HUGE_IDS + ['""'], in_args=True, pair_p=0.2)


@op("out_of_range")
def op_base_time_huge(rng):
    name = pick_base(rng, ["tiny_r3", "tiny_trailer", "ddp2_rank0", "cpu_only"])
    value = rng.choice(["9223372036854775000", "9223372036854775807", "18446744073709551616",
                        "-9223372036854775809", "1e400", '"x"', "9.2e18", "-9223372036854775808"])

    def edits(doc):
        m = doc.member("baseTimeNanoseconds")
        return [(m.start, m.end, value)], f"baseTimeNanoseconds = {value}", 0

    return point_case(rng, name, edits, **RANGE_KW)


@op("out_of_range")
def op_rank_world_huge(rng):
    name = pick_base(rng, ["tiny_r3", "tiny_trailer", "ddp2_rank0", "cpu_only", "sampled_rank0"])
    key = rng.choice(["rank", "world_size", "both"])
    value = rng.choice(["2147483648", "4294967296", "9223372036854775808", "1e30", "1" + "0" * 30])

    def edits(doc):
        s = info_start(doc)
        if key == "both":
            e = set_member(doc, s, "world_size", value)
            return e + set_member(doc, s, "rank", "2147483647"), f"distributedInfo world_size {value}, rank 2^31-1", 0
        return set_member(doc, s, key, value), f"distributedInfo.{key} = {value}", 0

    return point_case(rng, name, edits, **dict(RANGE_KW, ranks=None))


@op("out_of_range")
def op_step_number_huge(rng):
    pair = rng.random() < 0.3
    name = pick_base(rng, PAIR_BASES if pair else ["tiny", "tiny_trailer", "cpu_only", "ddp2_rank0", "sampled_rank0"])
    n = rng.choice(["99999999999999999999", "9223372036854775808", "2147483648", "1e400", "9" * 400])

    def edits(doc):
        steps = doc.indices(lambda e: is_x(e) and isinstance(e.name, str) and e.name.startswith("ProfilerStep#"))
        i = rng.choice(steps or doc.indices(is_x))
        return set_member(doc, doc.events[i].start, "name", json.dumps(f"ProfilerStep#{n}")), \
            f"event {i} renamed ProfilerStep#{_show(n)}", 1

    return point_case(rng, name, edits, pair=pair, **RANGE_KW)


@op("out_of_range")
def op_pg_config_odd(rng):
    name = pick_base(rng, ["tiny_r3", "tiny_trailer", "ddp2_rank0"])
    key = rng.choice(["pg_size", "pg_size", "ranks"])
    value = rng.choice({"pg_size": ['""', '"abc"', "2147483648", "-1", "1e400", "9223372036854775808"],
                        "ranks": ["[0, 9223372036854775808]", '["a"]', "[0, -1]", '"0,1"', "[1e400]"]}[key])

    def edits(doc):
        m = find(doc.object_members(info_start(doc)), "pg_config")
        pg = doc.data.index(b"{", m.start)
        return set_member(doc, pg, key, value), f"distributedInfo.pg_config[0].{key} = {value}", 0

    return point_case(rng, name, edits, **RANGE_KW)


@op("out_of_range")
def op_time_huge(rng):
    values = ["1e30", "99999999999999999999999", "-1e30", "9223372036854775.807", "1e400", "1" + "0" * 5000,
              "0." + "1" * 5000, "-9223372036854775.809"]
    return event_value_case(rng, RANGE_KW, rng.choice(["ts", "dur"]), values, pair_p=0.3)


@op("out_of_range")
def op_memory_huge(rng):
    key = rng.choice(["Bytes", "Total Allocated", "Total Reserved", "Device Id", "Device Type"])
    return event_value_case(rng, RANGE_KW, key, ["18446744073709551616", "1e400", '"inf"', "-9223372036854775809"],
                            bases=["tiny", "tiny_trailer"], pair_p=0, pred=lambda e: e.name == "[memory]", in_args=True)


# --- 5. deep nesting --------------------------------------------------------------------------

def nested(rng, depth: int) -> str:
    kind = rng.choice(["array", "object", "mixed"])
    if kind == "array":
        return "[" * depth + "]" * depth
    if kind == "object":
        return '{"a":' * depth + "1" + "}" * depth
    return '[{"a":' * (depth // 2) + "0" + "}]" * (depth // 2)


DEPTHS = [1001, 1500, 5000, 100000, 1000000]
NEST_KW = {"accept": ("load", "refuse"), "must_note": False, "rank_strict": True}


@op("nesting")
def op_nested_unknown_event_key(rng):
    return event_value_case(rng, NEST_KW, "zz_unknown", [nested(rng, rng.choice(DEPTHS))], label="zz_unknown (nested)")


@op("nesting")
def op_nested_unknown_arg(rng):
    return event_value_case(rng, NEST_KW, "zz_unknown", [nested(rng, rng.choice(DEPTHS))], in_args=True,
                            label="args.zz_unknown (nested)")


@op("nesting")
def op_nested_read_arg(rng):
    key = rng.choice(["Input Dims", "Concrete Inputs", "External id", "Process Group Ranks", "name"])
    pred = (lambda e: e.ph == "M" and e.name == "thread_name") if key == "name" else None
    return event_value_case(rng, NEST_KW, key, [nested(rng, rng.choice(DEPTHS))], in_args=True, pred=pred,
                            pair_p=0.2, label=f"args.{key} (nested)")


@op("nesting")
def op_nested_event_field(rng):
    key = rng.choice(["name", "cat", "pid", "ts"])
    return event_value_case(rng, NEST_KW, key, [nested(rng, rng.choice(DEPTHS))], label=f"{key} (nested)")


@op("nesting")
def op_nested_header(rng):
    name = pick_base(rng)
    where = rng.choice(["top", "info", "deviceProperties", "trailer"])
    payload = nested(rng, rng.choice(DEPTHS))

    def edits(doc):
        if where == "info" and info_start(doc) is not None:
            return set_member(doc, info_start(doc), "zz_unknown", payload), "distributedInfo.zz_unknown (nested)", 0
        if where == "deviceProperties" and doc.member("deviceProperties"):
            m = doc.member("deviceProperties")
            return [(m.start, m.end, payload)], "deviceProperties (nested)", 0
        if where == "trailer":
            return [(doc.array_close + 1, doc.array_close + 1, ', "zz_unknown": ' + payload)], \
                "zz_unknown (nested) after traceEvents", 0
        start = doc.data.index(b"{")
        return set_member(doc, start, "zz_unknown", payload), "top-level zz_unknown (nested) before traceEvents", 0

    return point_case(rng, name, edits, **dict(NEST_KW, rank_strict=where != "info"))


@op("nesting")
def op_nested_array_element(rng):
    name = pick_base(rng)
    payload = nested(rng, rng.choice(DEPTHS))

    def edits(doc):
        i = rng.randrange(len(doc.events))
        return [(doc.events[i].end, doc.events[i].end, ", " + payload)], f"a nested element after event {i}", 0

    return point_case(rng, name, edits, **NEST_KW)


# --- 6. bombs and pathological layout ------------------------------------------------------------

SMALL_SIZES = [128 * MB]
BIG_SIZES = [128 * MB, 256 * MB, 512 * MB, 1229 * MB]
# peak RSS of the main process: an unmutated tiny trace peaks near 220 MB, a streaming parse adds a few
# 8 MB batches whatever the file's size; holding a 128 MiB run of whitespace (twice, to concatenate) does not fit
RSS_BOUND_MB = 450


def gzip_with_run(before: bytes, fill: bytes, size: int, after: bytes) -> bytes:
    """gzip of ``before + fill * (size // len(fill)) + after``, built without holding the run:
    the run is compressed as one 1 MiB piece after a full flush and the same compressed bytes are
    repeated (a full flush resets the compressor, so each piece compresses alike)."""
    piece = (fill * (MB // len(fill) + 1))[:MB]
    n = size // MB
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(before) + c.flush(zlib.Z_FULL_FLUSH)
    first = c.compress(piece) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(piece) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.compress(after) + c.flush()
    if n == 0:
        first = again = b""
    crc = zlib.crc32(before)
    for _ in range(n):
        crc = zlib.crc32(piece, crc)
    crc = zlib.crc32(after, crc)
    total = len(before) + n * MB + len(after)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return b"".join([header, head, first, again * max(n - 1, 0), tail, struct.pack("<II", crc, total & 0xFFFFFFFF)])


def _bomb_case(what, before, fill, size, after, doc, rss_extra=0, rate=8 * MB, file_name="rank0.json.gz"):
    """A gzip file holding ``before``, ``size`` bytes of ``fill`` and ``after``; given by path (a folder
    scan may skip a file whose first megabytes show no event). Time: 60 s plus ``rate`` bytes a second."""
    data = gzip_with_run(before, fill, size, after)
    return Case("", "", f"{what}: {size // MB} MiB inflated from {len(data) // 1024} KiB of gzip", files={file_name: data},
                args=["analyze", "{in}/" + file_name, "--format", "json", "--no-cache"], accept=("load", "refuse"),
                events=doc.complete(), names=(file_name,), ranks=[base_rank_of(doc)],
                baseline="tiny:1" if doc is base_doc("tiny") else None, timeout=60 + size / rate,
                max_rss_mb=RSS_BOUND_MB + rss_extra)


def base_rank_of(doc):
    r = doc.info.get("rank")
    return r if isinstance(r, int) else 0


def _size(rng):
    return rng.choice(BIG_SIZES if rng.big else SMALL_SIZES)


@op("bomb")
def op_whitespace_in_array(rng):
    doc = base_doc("tiny")
    i = rng.randrange(len(doc.events) - 1)
    cut = doc.events[i].end + 1  # after the comma
    fill = rng.choice([b" ", b"\n", b" \t\r\n"])
    return _bomb_case(f"whitespace between events {i} and {i + 1}", doc.data[:cut], fill, _size(rng),
                      doc.data[cut:], doc)


@op("bomb")
def op_whitespace_in_header(rng):
    doc = base_doc("tiny")
    cut = doc.data.index(b"{") + 1
    return _bomb_case("whitespace before the first key", doc.data[:cut], b" ", _size(rng),
                      doc.data[cut:], doc)


@op("bomb")
def op_whitespace_in_event(rng):
    doc = base_doc("tiny")
    i = pick_event(rng, doc)
    m = find(doc.event_members(i), rng.choice(["ts", "name", "args"]))
    return _bomb_case(f"whitespace inside event {i} before {m.key}'s value", doc.data[: m.start], b" ",
                      _size(rng), doc.data[m.start :], doc)


@op("bomb")
def op_whitespace_after_array(rng):
    doc = base_doc("tiny")
    cut = doc.array_close + 1
    return _bomb_case("whitespace after traceEvents", doc.data[:cut], b"\n", _size(rng),
                      doc.data[cut:], doc)


@op("bomb")
def op_huge_string(rng):
    doc = base_doc("tiny")
    i = pick_event(rng, doc)
    m = find(doc.event_members(i), rng.choice(["name", "cat"]))
    size = min(_size(rng), 64 * MB)
    return _bomb_case(f"a {size // MB} MiB string as event {i}'s {m.key}", doc.data[: m.start] + b'"', b"a",
                      size, b'"' + doc.data[m.end :], doc, rss_extra=24 * size // MB)


@op("bomb")
def op_huge_ignored_array(rng):
    doc = base_doc("tiny")
    i = pick_event(rng, doc)
    s = doc.events[i].start + 1
    return _bomb_case(f"a huge array under an unknown key of event {i}", doc.data[:s] + b'"zz": [', b"0,",
                      _size(rng), b'0], ' + doc.data[s:], doc)


@op("bomb")
def op_many_small_events(rng):
    doc = base_doc("tiny")
    cut = doc.array_close
    fill = rng.choice([b', {"ph": "i"}', b",{}", b', {"ph": "M", "name": "x", "args": {}}'])
    size = rng.choice([8 * MB, 16 * MB, 32 * MB])  # a million events or so: each costs a decoded struct
    return _bomb_case(f"{size // len(fill) // 1000}k tiny non-X events ({fill.decode()!r})", doc.data[:cut],
                      fill, size, doc.data[cut:], doc, rate=MB // 4)


@op("bomb")
def op_long_number(rng):
    doc = base_doc("tiny")
    i = pick_event(rng, doc)
    m = find(doc.event_members(i), rng.choice(["ts", "dur"]))
    digits = rng.choice([10**5, 10**6, 10**7])
    frac = rng.random() < 0.5
    text = doc.data[: m.start] + (b"1." if frac else b"1") + b"0" * digits + doc.data[m.end :]
    data = gzip.compress(text, compresslevel=6, mtime=0)
    c = Case("", "", f"event {i}'s {m.key} with {digits} digits{' after the point' if frac else ''}",
             files={"rank0.json.gz": data}, args=["analyze", "{in}/rank0.json.gz", "--format", "json", "--no-cache"],
             accept=("load", "refuse"), events=doc.complete(),
             max_loss=1, names=("rank0.json.gz",), ranks=[0], baseline="tiny:1", timeout=90, max_rss_mb=RSS_BOUND_MB)
    return c


@op("bomb")
def op_many_gzip_members(rng):
    name = rng.choice(["tiny", "cpu_only", "ddp2_rank0"])
    doc = base_doc(name)
    members = rng.choice([1000, 10000, 50000])
    step = max(1, -(-len(doc.data) // members))
    c = zlib.compressobj(1, zlib.DEFLATED, -15)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    parts = []
    for k in range(0, len(doc.data), step):
        piece = doc.data[k : k + step]
        c = zlib.compressobj(1, zlib.DEFLATED, -15)
        parts.append(header + c.compress(piece) + c.flush() + struct.pack("<II", zlib.crc32(piece), len(piece)))
    data = b"".join(parts)
    return Case("", "", f"{name} as {len(parts)} gzip members of {step} byte(s)",
                files={single_name(name) + ".gz": data}, args=analyze_args(), accept=("load", "refuse"),
                events=doc.complete(), names=(single_name(name) + ".gz",), ranks=[base_rank(name)],
                baseline=f"{name}:1", timeout=120, max_rss_mb=RSS_BOUND_MB)


# --- 7. signals mid-load -----------------------------------------------------------------------

@op("kill")
def op_sigkill_pool(rng):
    return _kill_case(rng, 9, cache=rng.random() < 0.7)


@op("kill")
def op_sigkill_single_file(rng):
    return _kill_case(rng, 9, cache=True, single=True)


@op("kill")
def op_sigterm_pool(rng):
    return _kill_case(rng, 15, cache=rng.random() < 0.5)


@op("kill")
def op_sigint_pool(rng):
    return _kill_case(rng, 2, cache=rng.random() < 0.5)


@cache
def _run_files(run: str) -> tuple[dict, list]:
    """A fixture run's rank files and the complete events of each."""
    files = {p.name: p.read_bytes() for p in sorted((REPO / "fixtures/runs" / run).glob("rank*.json.gz"))}
    return files, [scan(gzip.decompress(d)).complete() for d in files.values()]


def _kill_case(rng, sig, cache, single=False):
    run = rng.choice(["ddp2", "ddp2", "ddp4"])
    files, counts = _run_files(run)
    if single:
        files, counts = dict(list(files.items())[:1]), counts[:1]
    n = sum(counts)
    mode = rng.choice(["after_helpers", "after_helpers", "fixed"])
    delay = round(rng.uniform(0.0, 1.5) if mode == "after_helpers" else rng.uniform(0.2, 4.0), 2)
    args = ["analyze", "{in}", "--format", "json"] + ([] if cache else ["--no-cache"])
    what = {9: "SIGKILL", 15: "SIGTERM", 2: "SIGINT"}[sig]
    when = f"{delay}s after the worker processes appear" if mode == "after_helpers" else f"{delay}s after start"
    return Case("", "", f"{what} to the main process {when}, loading {len(files)} file(s) of {run} "
                        f"({'cache' if cache else '--no-cache'}); then the same command again",
                files=files, args=args, events=n, ranks=list(range(len(files))), action="kill",
                action_args={"signal": sig, "mode": mode, "delay": delay, "grace": 3.0}, accept=("load",),
                timeout=180)


# --- 8. damaged cache entries ---------------------------------------------------------------------

CACHE_DAMAGE = ["truncate_zero", "truncate_part", "garbage_header", "garbage_block", "text_file", "directory",
                "dangling_symlink", "stale_wal", "empty_duckdb", "foreign_store", "stale_tmp_dead_pid", "zero_block"]


def _cache_case(rng, damage):
    name = rng.choice(["tiny", "tiny", "cpu_only"])
    doc = base_doc(name)
    fname = single_name(name)
    return Case("", "", f"cache entry of {name} damaged: {damage}; the next run must rebuild it",
                files={fname: doc.data}, args=["analyze", "{in}", "--format", "json"], events=doc.complete(),
                ranks=[base_rank(name)], names=(fname,), action="cache",
                action_args={"damage": damage, "seed": rng.randrange(1 << 30)},
                accept=("load", "refuse") if damage == "directory" else ("load",))


def _cache_op(damage):
    def f(rng):
        return _cache_case(rng, damage)

    f.__name__ = f"op_{damage}"
    return f


for _d in CACHE_DAMAGE:
    op("cache")(_cache_op(_d))


# --- 9. command-line arguments ----------------------------------------------------------------------

def _tiny_files(n=1, world=1, names=None):
    return {(names[r] if names else f"rank{r}.json"): tiny_text(rank=r, world=world) for r in range(n)}


def _args_case(desc, args, accept, files=None, names=(), document=True, **kw):
    files = _tiny_files() if files is None else files
    return Case("", "", desc, files=files, args=args, accept=accept, names=names, document=document, **kw)


@op("args")
def op_empty_argument(rng):
    args = rng.choice([["analyze", ""], ["analyze", "", "{in}/rank0.json"], ["layout", ""], ["tags", ""]])
    return _args_case(f"an empty path argument: {args}", args + ["--format", "json", "--no-cache"], ("refuse",),
                      document=False)


@op("args")
def op_folder_empty_and_not_json(rng):
    files = {"traces/empty.json": b"", "traces/bad.json": rng.choice([b"not json at all\n", b"\x00\x01\x02", b"<html>"])}
    return _args_case("a folder holding an empty .json beside a non-JSON bad.json",
                      analyze_args()[:1] + ["{in}/traces"] + analyze_args()[2:], ("refuse",), files=files,
                      names=("empty.json", "bad.json"))


@op("args")
def op_db_is_directory(rng):
    files = _tiny_files()
    files["adir"] = None
    cmd = rng.choice(["analyze", "sql"])
    args = (["analyze", "{in}/rank0.json", "--format", "json", "--db", "{in}/adir"] if cmd == "analyze"
            else ["sql", "SELECT count(*) FROM events", "--db", "{in}/adir"])
    return _args_case(f"{cmd} --db naming a directory", args, ("refuse",), files=files, names=("adir",),
                      document=False)


@op("args")
def op_sql_without_query(rng):
    path = rng.choice(["{in}/rank0.json", "{in}"])
    return _args_case(f"traceparse sql {path} (no query; stdin is empty)", ["sql", path, "--no-cache"],
                      ("load", "refuse"), names=("rank0.json", "in", "query", "QUERY"), document=False)


@op("args")
def op_layout_file_missing(rng):
    name = rng.choice(["nofile.toml", "{in}/nofile.toml", "{in}/sub/layout.toml"])
    return _args_case(f"--layout {name} (no such file)", analyze_args(["--layout", name]), ("refuse",),
                      names=("nofile.toml", "layout.toml"))


@op("args")
def op_layout_file_bad(rng):
    content = rng.choice([b"dp = \n", b"dp = 'x'\n", b"[model]\nheads = 0\nkv_heads = 0\n", b"\xff\xfe\x00",
                          b"tp = 99999999999999999999\n", b"[model]\nhidden = inf\nlayers = -1\n",
                          b"[model]\nparams = 1e400\n", b"dp = 0\ntp = 0\n", b"dp = -4\n", b"[model\n"])
    files = _tiny_files()
    files["layout.toml"] = content
    return _args_case(f"--layout FILE.toml holding {content[:40]!r}", analyze_args(["--layout", "{in}/layout.toml"]),
                      ("load", "refuse"), files=files, names=("layout.toml",), events=21, ranks=[0])


@op("args")
def op_layout_string_bad(rng):
    text = rng.choice(["dp", "=", "dp=x", "dp=0", "dp=-1", "dp=99999999999999999999", "zz=2", "dp=2,,tp=",
                       "dp=2,dp=4", ",", "dp=1e400", "pp=inf", "dp=٣"])
    accept = ("refuse",) if text in ("dp", "=", "dp=x", "zz=2", "pp=inf") else ("load", "refuse")
    return _args_case(f"--layout {text!r}", analyze_args(["--layout", text]), accept, events=21, ranks=[0])


@op("args")
def op_part_of_a_job(rng):
    k = rng.choice([1, 2, 4, 7])
    ranks = sorted(random.Random(rng.random()).sample(range(8), k))
    files = {f"rank{r}.json": tiny_text(rank=r, world=8) for r in ranks}
    return Case("", "", f"ranks {ranks} of an 8-rank job (world_size 8): the missing ranks must be reported",
                files=files, args=analyze_args(), accept=("load",), events=21 * k, ranks=ranks, rank_strict=True,
                must_note=True, baseline="tiny8:8")


@op("args")
def op_missing_path(rng):
    arg = rng.choice(["{in}/nope.json", "{in}/nope/*.json", "{in}/rank[9].json"])
    return _args_case(f"a path that does not exist: {arg}", analyze_args()[:1] + [arg] + analyze_args()[2:],
                      ("refuse",), names=("nope", "rank[9]"), document=False)


@op("args")
def op_odd_file_name(rng):
    fname = rng.choice(["rank0-\udcff.json", "rank0\nx.json", "rank0 \u00e9.json", "-rank0.json", "rank0\r.json"])
    broken = rng.random() < 0.5
    files = {fname: b"" if broken else tiny_text()}
    return _args_case(f"a file named {fname!r} ({'empty' if broken else 'valid'})", analyze_args(),
                      ("refuse",) if broken else ("load",), files=files, names=(fname.split("\n")[0][:5],),
                      events=None if broken else 21, ranks=None if broken else [0])


@op("args")
def op_db_not_a_store(rng):
    target = rng.choice(["notes.txt", "rank1.json", "empty.duckdb"])
    files = _tiny_files()
    files["notes.txt"] = b"my notes\n"
    files["rank1.json"] = tiny_text(rank=1, world=2)
    files["empty.duckdb"] = b""
    return _args_case(f"--db naming an existing file that is not a store ({target}): refuse, leave it as it was",
                      ["analyze", "{in}/rank0.json", "--format", "json", "--db", f"{{in}}/{target}"],
                      ("refuse",) if target != "empty.duckdb" else ("load", "refuse"),
                      files=files, names=(target,), preserve=(target,) if target != "empty.duckdb" else (),
                      events=21, ranks=[0])


@op("args")
def op_db_in_new_folder(rng):
    db = rng.choice(["{in}/new/run.duckdb", "{in}/new/sub/run.duckdb", "{in}/rank0.json/run.duckdb"])
    accept = ("refuse",) if "rank0.json/" in db else ("load", "refuse")
    return _args_case(f"--db {db} (its folder does not exist{', and is a file' if 'json/' in db else ''})",
                      ["analyze", "{in}/rank0.json", "--format", "json", "--db", db], accept,
                      names=("run.duckdb", "new", "rank0.json"), events=21, ranks=[0], preserve=("rank0.json",))


@op("args")
def op_sql_bad_query(rng):
    q = rng.choice(["SELEC 1", "SELECT 1/0", "SELECT * FROM nope", "SELECT CAST('x' AS INTEGER)", "", ";",
                    "SELECT 9223372036854775807 + 1"])
    return _args_case(f"sql {q!r}", ["sql", q, "{in}/rank0.json", "--no-cache"], ("load", "refuse"),
                      document=False)


@op("args")
def op_top_odd(rng):
    n = rng.choice(["-1", "0", "99999999999999999999", "9223372036854775807", "x"])
    return _args_case(f"--top {n}", analyze_args(["--top", n]), ("load", "refuse"), events=21, ranks=[0])


@op("args")
def op_same_file_twice(rng):
    files = _tiny_files()
    way = rng.choice(["twice", "link", "dir_and_file"])
    links = {"again.json": "rank0.json"} if way == "link" else {}
    paths = {"twice": ["{in}/rank0.json", "{in}/rank0.json"], "link": ["{in}/rank0.json", "{in}/again.json"],
             "dir_and_file": ["{in}", "{in}/rank0.json"]}[way]
    return Case("", "", f"the same file given twice ({way})", files=files, links=links,
                args=["analyze", *paths, "--format", "json", "--no-cache"], accept=("load", "refuse"), events=21,
                ranks=[0])


@op("args")
def op_folder_with_loop_and_fifo(rng):
    files = {"run/rank0.json": tiny_text()}
    fifo = rng.choice(["run/x.json", "run/x.json.gz", "run/sub/y.pt.trace.json"])
    return Case("", "", f"a folder holding a trace, symlink loops and a FIFO ({fifo})", files=files,
                links={"run/loop": ".", "run/sub/up": ".."}, fifos=(fifo,),
                args=analyze_args()[:1] + ["{in}/run"] + analyze_args()[2:], accept=("load", "refuse"), events=21,
                ranks=[0], timeout=60)


@op("args")
def op_fifo_argument(rng):
    name = rng.choice(["pipe.json", "pipe.json.gz", "/dev/null", "/dev/zero"])
    path = name if name.startswith("/") else "{in}/" + name
    return Case("", "", f"{name} given as the trace", fifos=() if name.startswith("/") else (name,),
                args=analyze_args()[:1] + [path] + analyze_args()[2:], accept=("refuse",),
                names=(name.rsplit("/", 1)[-1],), document=False, timeout=60)


# --- truncation -----------------------------------------------------------------------------------

TRUNC_KW = {"accept": ("load",)}


@op("truncation")
def op_cut_in_events(rng):
    name = pick_base(rng)
    doc = base_doc(name)
    return _cut_case(rng, name, doc, rng.randrange(doc.array_open + 1, doc.array_close))


@op("truncation")
def op_cut_at_event_boundary(rng):
    name = pick_base(rng)
    doc = base_doc(name)
    e = rng.choice(doc.events)
    return _cut_case(rng, name, doc, e.end + rng.choice([0, 1]))


@op("truncation")
def op_cut_in_header(rng):
    name = pick_base(rng)
    doc = base_doc(name)
    return _cut_case(rng, name, doc, rng.randrange(1, doc.array_open + 1))


@op("truncation")
def op_cut_in_trailer(rng):
    name = pick_base(rng, ["tiny", "tiny_trailer", "tiny_r3", "cpu_only", "ddp2_rank0"])
    doc = base_doc(name)
    return _cut_case(rng, name, doc, rng.randrange(doc.array_close, len(doc.data)))


@op("truncation")
def op_cut_near_end(rng):
    name = pick_base(rng)
    doc = base_doc(name)
    return _cut_case(rng, name, doc, len(doc.data) - rng.randint(1, 4))


def _cut_case(rng, name, doc: Doc, cut: int) -> Case:
    rest = doc.data[cut:]
    whole = not rest.strip()
    n = doc.complete_before(cut) if cut <= doc.array_close else doc.complete()
    any_complete = sum(1 for e in doc.events if e.end <= cut)
    a = arrange(rng, name, doc.data[:cut], pair=False)
    info = doc.member("distributedInfo")
    rank_kept = info is not None and info.end <= cut
    if whole:
        accept = ("load",)
    elif cut <= doc.array_open:
        accept = ("refuse",)
    elif any_complete == 0:
        accept = ("refuse", "load")
    else:
        accept = ("load",)
    where = ("in the header" if cut <= doc.array_open else "in traceEvents" if cut <= doc.array_close
             else "after traceEvents")
    return Case("", "", f"{name} cut at byte {cut} of {len(doc.data)} ({where}; {len(rest)} bytes lost)",
                files=a["files"], args=analyze_args(), accept=accept, events=n, max_loss=0, must_note=not whole,
                names=a["names"], ranks=a["ranks"] if rank_kept else None, rank_strict=rank_kept,
                baseline=a["baseline"])


# --- gzip damage ---------------------------------------------------------------------------------

def gunzip_prefix(data: bytes) -> tuple[bytes, str | None]:
    """What a reader gets out of possibly damaged gzip bytes: the output up to the damage, and the
    problem (None when the stream is whole; trailing zero bytes are allowed, as gzip allows them)."""
    out = []
    if data[:2] != b"\x1f\x8b":
        return data, "not gzip"
    while True:
        d = zlib.decompressobj(wbits=31)
        try:
            out.append(d.decompress(data))
        except zlib.error as e:
            return b"".join(out), str(e)
        if not d.eof:
            try:
                out.append(d.flush())
            except zlib.error as e:
                return b"".join(out), str(e)
            return b"".join(out), "gzip stream ends early"
        data = d.unused_data
        if not data.strip(b"\x00"):
            return b"".join(out), None


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on equal prefixes
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _gz_source(rng):
    name = pick_base(rng, ["tiny", "cpu_only", "ddp2_rank0", "rank_unavailable", "sampled_rank0"])
    b = BASES[name]
    data = b.gz if b.gz is not None else gzip.compress(b.data, mtime=0)
    return name, data


def _gz_case(rng, what, damage):  # damage(gz bytes) -> damaged bytes
    name, gz = _gz_source(rng)
    doc = base_doc(name)
    bad = damage(gz)
    prefix, problem = gunzip_prefix(bad)
    if problem == "not gzip":
        prefix = b""
    common = _common_prefix(prefix, doc.data)
    intact = doc.complete_before(common) if common < len(doc.data) else doc.complete()
    fname = single_name(name) + ".gz"
    whole = problem is None and prefix == doc.data
    info = doc.member("distributedInfo")
    rank_kept = info is not None and info.end <= common
    return Case("", "", f"{what} ({fname} of {name}, {len(gz)} bytes; the first {common} of {len(doc.data)} "
                        f"inflated bytes are intact; {problem or 'no gzip error'})",
                files={fname: bad}, args=analyze_args(), accept=("load",) if intact else ("load", "refuse"),
                events=doc.complete() if whole else None, min_events=None if whole else intact,
                max_events=doc.complete(), must_note=common < len(doc.data), names=(fname,),
                ranks=[base_rank(name)] if rank_kept else None, baseline=f"{name}:1")


@op("gzip")
def op_gz_cut(rng):
    where = rng.choice(["body", "body", "body", "header", "trailer"])

    def damage(gz):
        cut = {"body": lambda: rng.randrange(10, len(gz) - 8), "header": lambda: rng.randrange(1, 10),
               "trailer": lambda: rng.randrange(len(gz) - 8, len(gz))}[where]()
        return gz[:cut]

    return _gz_case(rng, f"gzip cut in its {where}", damage)


@op("gzip")
def op_gz_flip_bit(rng):
    def damage(gz):
        k = rng.randrange(10, len(gz) - 8)
        return gz[:k] + bytes([gz[k] ^ (1 << rng.randrange(8))]) + gz[k + 1 :]

    return _gz_case(rng, "one flipped bit in the deflate data", damage)


@op("gzip")
def op_gz_garble(rng):
    zero = rng.random() < 0.4

    def damage(gz):
        n = rng.randint(1, 4096 if zero else 64)
        k = rng.randrange(10, max(11, len(gz) - 8 - n))
        fill = bytes(n) if zero else rng.randbytes(n)
        return gz[:k] + fill + gz[k + n :]

    return _gz_case(rng, "a run of " + ("zeroed" if zero else "random") + " bytes in the deflate data", damage)


@op("gzip")
def op_gz_bad_trailer(rng):
    part = rng.choice(["crc", "isize"])

    def damage(gz):
        k = len(gz) - (8 if part == "crc" else 4) + rng.randrange(4)
        return gz[:k] + bytes([gz[k] ^ 0xFF]) + gz[k + 1 :]

    return _gz_case(rng, f"a wrong {part} in the gzip trailer", damage)


@op("gzip")
def op_gz_bad_header(rng):
    part = rng.choice(["magic", "method", "flags", "fextra"])

    def damage(gz):
        b = bytearray(gz)
        if part == "magic":
            b[rng.randrange(2)] ^= 0x40
        elif part == "method":
            b[2] = 7
        elif part == "flags":
            b[3] |= 0xE0
        else:
            b[3] |= 0x04  # FEXTRA without an extra field: the deflate data is read as its length
        return bytes(b)

    return _gz_case(rng, f"a damaged gzip header ({part})", damage)


@op("gzip")
def op_gz_trailing_bytes(rng):
    kind = rng.choice(["zeros", "garbage", "text", "member_of_garbage", "member_of_whitespace"])

    def damage(gz):
        return gz + {"zeros": lambda: bytes(rng.randint(1, 4096)), "garbage": lambda: rng.randbytes(rng.randint(1, 64)),
                     "text": lambda: b"# appended by hand\n",
                     "member_of_garbage": lambda: gzip.compress(b"garbage after the document", mtime=0),
                     "member_of_whitespace": lambda: gzip.compress(b"\n\n  \n", mtime=0)}[kind]()

    return _gz_case(rng, f"{kind.replace('_', ' ')} after the gzip member", damage)


@op("gzip")
def op_gz_split_members(rng):
    name, _ = _gz_source(rng)
    doc = base_doc(name)
    cuts = sorted(rng.sample(range(1, len(doc.data)), rng.randint(1, 4)))
    parts = [doc.data[a:b] for a, b in zip([0, *cuts], [*cuts, len(doc.data)], strict=True)]
    fname = single_name(name) + ".gz"
    return Case("", "", f"{name} split into {len(parts)} gzip members (valid)",
                files={fname: b"".join(gzip.compress(p, mtime=0) for p in parts)}, args=analyze_args(),
                events=doc.complete(), names=(fname,), ranks=[base_rank(name)], rank_strict=True,
                baseline=f"{name}:1")


# --- every event: one damage to all of a file's complete events ------------------------------

def every_event_case(rng, key, values, **kw) -> Case:
    """``key`` of every complete event of one base (alone or beside its partner rank file) set to one of ``values``:
    JSON text, ``"negated"`` (each value made negative, 0 as -1) or ``None`` (the member removed)."""
    pair = rng.random() < 0.3
    name = pick_base(rng, PAIR_BASES if pair else None)
    value = rng.choice(values)

    def edits(doc):
        out = []
        for i in doc.indices(is_x):
            start, old = doc.events[i].start, doc.events[i].value.get(key)
            if value is None:
                out += remove_member(doc, start, key)
            elif value == "negated":
                out += set_member(doc, start, key, f"-{json.dumps(old)}" if isinstance(old, int | float) and old > 0
                                  else "-1")
            else:
                out += set_member(doc, start, key, value)
        what = f"without {key}" if value is None else f"{key} = {_show(value)}"
        return out, f"every complete event {what}", doc.complete()

    return point_case(rng, name, edits, pair=pair, **kw)


@op("every_event")
def op_every_dur_unusable(rng):
    """No event has a duration, so no event has an end: nothing of the rank can be placed in time; refused."""
    return every_event_case(rng, "dur", ["negated", "null", '"abc"', "true", "[]", None], accept=("refuse",))


@op("every_event")
def op_every_dur_zero(rng):
    return every_event_case(rng, "dur", ["0", "0.0"], max_loss=0, rank_strict=True)


@op("every_event")
def op_every_ts_odd(rng):
    value = rng.choice(["0", "1000", "negated", "null", '"abc"', None])
    lost = value in ("null", '"abc"', None)  # an event without a time is not kept, and said
    kw = {"must_note": True} if lost else {"max_loss": 0}
    return every_event_case(rng, "ts", [value], accept=("load", "refuse"), **kw)


# the newer surfaces (-o targets, run histories, argument checks, the API at once): their classes and operators
from . import surfaces  # noqa: E402, F401

# hostile Flight Recorder dumps for hang (class "dump")
from . import dumps  # noqa: E402, F401

# hostile stores, control characters and Markdown in names, huge metadata numbers, odd path characters
from . import hostile  # noqa: E402, F401
