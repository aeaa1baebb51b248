"""The ``dump`` class: hostile Flight Recorder dumps given to ``traceparse hang`` (docs/reliability.md).

Each case starts from the real dumps of one job of ``fixtures/hangs/`` (every rank's ``fr_rank<r>.pkl`` and its
``fr_rank<r>.inflight.json``) and makes one rank's dump (or its in-flight record, or its JSON form) hostile: a
payload that expands exponentially (a DAG of shared lists, one big string listed many times), nesting 200,000 deep,
pickle opcodes aimed at the wrong type (APPENDS to a dict, ADDITEMS to a list, BUILD, REDUCE, a set, a tuple DAG as
a dict key: hashing it takes 2^depth steps), a dict key twice, non-finite or out-of-range numbers in every field
the store keeps (ranks, sequence numbers, ids, times, group ranks, the in-flight peer), stacks that are not lists of
frames, a cyclic or tuple-keyed ``pg_status``, a collective numbered twice on one group, negative ranks. Every
such case must be refused: exit 2 and one line naming the file, within its time and memory bounds; exit 0 ("no
divergence") is a silent pass. Two operators keep the dumps valid (re-pickled with other protocols and sharing,
unknown fields of moderate size): they must load and report the job's divergence (exit 1).

The builders are plain functions of a ``random.Random`` and optional fixed choices, so that
``tests/test_hang_hostile.py`` builds the same dumps by name.
"""

from __future__ import annotations

import copy
import io
import json
import pickle
import random
from functools import cache

from .bases import REPO
from .generate import CLASS_WEIGHT, CLASSES, OPS, Case, op

HANGS = REPO / "fixtures" / "hangs"
JOBS = ["optype_mismatch", "pp_deadlock", "rank_dies", "size_mismatch", "skip_allreduce", "tp_hang_in_dp_tp"]
MiB = 1 << 20
TIMEOUT = 60.0
RSS_BOUND_MB = 600  # an idle hang over a few dumps peaks near 200 MB; a refused bomb must stay near that

CLASSES["dump"] = ("hostile Flight Recorder dumps for hang: bombs by depth and by sharing, deep nesting, pickle "
                   "opcodes on the wrong type, non-finite and out-of-range numbers, odd stacks and pg_status, "
                   "contradictions (a collective twice, negative ranks)")
OPS["dump"] = []
CLASS_WEIGHT["dump"] = 1.0


# --- writing pickles with any opcodes ------------------------------------------------------------------------


class Raw:
    """Pickle opcodes that push exactly one value, written as they are where the object sits."""

    def __init__(self, data: bytes):
        self.data = data


class Pairs(list):
    """A dict written as these (key, value) pairs, a key twice if it is listed twice."""


class _Pickler(pickle._Pickler):
    dispatch = dict(pickle._Pickler.dispatch)

    def save_raw(self, obj):
        self.write(obj.data)

    def save_pairs(self, obj):
        self.write(pickle.EMPTY_DICT + pickle.MARK)
        for k, v in obj:
            self.save(k)
            self.save(v)
        self.write(pickle.SETITEMS)

    dispatch[Raw] = save_raw
    dispatch[Pairs] = save_pairs


def pickled(obj, protocol: int = 2) -> bytes:
    """``obj`` as a pickle (protocol 2, as torch writes dumps); shared objects are written once (memo)."""
    f = io.BytesIO()
    _Pickler(f, protocol).dump(obj)
    return f.getvalue()


def nested_list(n: int) -> Raw:
    """A list nested ``n`` deep, built without recursion: n EMPTY_LIST, then n - 1 APPEND."""
    return Raw(b"]" * n + b"a" * (n - 1))


def tuple_dag_key(depth: int) -> Raw:
    """A dict whose key is t_depth, t_{i+1} = (t_i, t_i): the file is tiny, hashing the key takes 2^depth steps."""
    return Raw(b"}" + b")" + b"2\x86" * depth + b"K\x00s")


def deep_tuple_key(n: int) -> Raw:
    """A dict whose key is a tuple nested ``n`` deep (hashing it recurses n levels in C)."""
    return Raw(b"}" + b")" + b"\x85" * n + b"K\x00s")


OPCODES = {  # each pushes one value, built with an opcode the restricted unpickler must refuse or check
    "APPENDS to a dict": Raw(b"}(K\x01e"),
    "APPEND to an int": Raw(b"K\x01K\x02a"),
    "ADDITEMS to a list": Raw(b"](K\x01\x90"),
    "BUILD on a list": Raw(b"]}b"),
    "SETITEMS on a list": Raw(b"](K\x00K\x01u"),
    "REDUCE calling a list": Raw(b"])R"),
    "a set (EMPTY_SET, ADDITEMS)": Raw(b"\x8f(K\x01\x90"),
    "a frozenset": Raw(b"(K\x01\x91"),
    "bytes (SHORT_BINBYTES)": Raw(b"C\x03abc"),
    "a persistent id": Raw(b"P1\n"),
    "an extension code (EXT1)": Raw(b"\x82\x01"),
    "an out-of-band buffer (NEXT_BUFFER)": Raw(b"\x97"),
    "a 5,000-digit LONG": Raw(b"L" + b"9" * 5000 + b"L\n"),
    "a 40-level tuple DAG as a dict key": tuple_dag_key(40),
    "a tuple nested 200,000 deep as a dict key": deep_tuple_key(200_000),
    "10 million MARKs": Raw(b"(" * 10_000_000 + b"1" * 10_000_000 + b"N"),
    "10 million MEMOIZEs of one value": Raw(b"N" + b"\x94" * 10_000_000),
}


# --- the real dumps ------------------------------------------------------------------------------------------


@cache
def _fixture(job: str) -> dict:
    """rank -> {"pkl": the dump's object, "json": its JSON dump's object, "inflight": the record's object}."""
    out = {}
    for p in sorted((HANGS / job).glob("fr_rank*.pkl")):
        r = int(p.stem.removeprefix("fr_rank"))
        side = p.with_name(p.stem + ".inflight.json")
        out[r] = {"pkl": pickle.loads(p.read_bytes()), "json": json.loads(p.with_suffix(".json").read_bytes()),
                  "inflight": json.loads(side.read_bytes()) if side.exists() else None}
    return out


def ranks(job: str) -> list[int]:
    return sorted(_fixture(job))


def dump(job: str, rank: int, fmt: str = "pkl"):
    """A copy of one rank's dump (``pkl``), JSON dump (``json``) or in-flight record (``inflight``)."""
    return copy.deepcopy(_fixture(job)[rank][fmt])


def files_of(job: str, changed: dict) -> tuple[dict, list[str]]:
    """Every rank's pickle and in-flight record with ``changed`` (name -> bytes; a ``fr_rank<r>.json`` replaces
    that rank's pickle, a name ending ``.drop`` removes that file) over them; and the dumps, as ``hang`` arguments."""
    files = {}
    for r in ranks(job):
        files[f"fr_rank{r}.pkl"] = (HANGS / job / f"fr_rank{r}.pkl").read_bytes()
        side = HANGS / job / f"fr_rank{r}.inflight.json"
        if side.exists():
            files[side.name] = side.read_bytes()
    for name, data in changed.items():
        if name.endswith(".drop"):
            files.pop(name.removesuffix(".drop"), None)
            continue
        if name.endswith(".json") and not name.endswith(".inflight.json"):
            files.pop(name.removesuffix(".json") + ".pkl", None)
        files[name] = data
    dumps = [n for n in sorted(files) if not n.endswith(".inflight.json")]
    return files, dumps


def json_text(obj, raw: dict) -> bytes:
    """``obj`` as JSON text with each string ``"@RAWk@"`` replaced by ``raw[k]`` as it is (Infinity, 1e400...)."""
    text = json.dumps(obj)
    for k, v in raw.items():
        text = text.replace(json.dumps(f"@RAW{k}@"), v)
    return text.encode()


# --- where values go ------------------------------------------------------------------------------------------

SHAPE_FIELDS = ["input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "frames"]
INT_FIELDS = ["collective_seq_id", "p2p_seq_id", "op_id", "record_id", "time_created_ns", "timeout_ms"]
HUGE = [1 << 63, (1 << 63) + 1, 1 << 64, -(1 << 63) - 1, 10 ** 30]
NONFINITE = ["Infinity", "-Infinity", "NaN", "1e400", "-1e400"]
RANK_VALUES = [-1, -2, 1 << 31, (1 << 31) + 5, 1 << 63, 1 << 64]


def _pick_entry(rng, d, collective=None) -> int:
    ks = [k for k, e in enumerate(d["entries"]) if collective is None or e.get("is_p2p") is not collective]
    return rng.choice(ks)


def _put(d, where: str, value, rng):
    """Set ``where`` in dump ``d``: an entry field (``entry.F``), ``pg_status``, ``version``, ``unknown`` (a key
    traceparse never reads) or ``pg_config``'s ranks."""
    if where.startswith("entry."):
        d["entries"][_pick_entry(rng, d)][where[6:]] = value
    elif where == "unknown":
        d["x_extra"] = value
    elif where == "pg_config":
        next(iter(d["pg_config"].values()))["ranks"] = value
    else:
        d[where] = value


# --- builders: each returns (changed files, the file names the refusal may name, what it is) ------------------


def _target(rng, job, rank):
    job = job or rng.choice(JOBS)
    rank = rank if rank is not None else rng.choice(ranks(job))
    return job, rank


def dag(depth: int, width: int = 2, leaf=0):
    x = leaf
    for _ in range(depth):
        x = [x] * width
    return x


def bomb_depth(rng, job=None, rank=None, where=None, depth=None):
    """A DAG of shared lists ``depth`` deep: a few hundred bytes, 2^depth values as JSON."""
    job, rank = _target(rng, job, rank)
    where = where or rng.choice([f"entry.{f}" for f in SHAPE_FIELDS] + ["pg_status", "version", "unknown"])
    depth = depth or rng.choice([33, 40, 64])
    d = dump(job, rank)
    _put(d, where, dag(depth), rng)
    name = f"fr_rank{rank}.pkl"
    return {name: pickled(d)}, (name,), f"{job}: {where} of {name} is a DAG of lists {depth} deep (2^{depth} values)"


def bomb_sharing(rng, job=None, rank=None, where=None, string_mib=None, times=None, width=None):
    """Shallow but wide: one big string listed ``times`` times, or 3 levels of ``width`` shared lists."""
    job, rank = _target(rng, job, rank)
    where = where or rng.choice([f"entry.{f}" for f in SHAPE_FIELDS] + ["pg_status", "unknown"])
    d = dump(job, rank)
    if string_mib is None and width is None:
        if rng.random() < 0.5:
            string_mib = rng.choice([1, 2, 8])
        else:
            width = rng.choice([300, 1000])  # 27 million values and more: past MAX_VALUES
    if string_mib:
        times = times or 1024
        value = ["x" * (string_mib * MiB)] * times
        what = f"one {string_mib} MiB string listed {times} times ({string_mib * times} MiB as JSON)"
    else:
        value = dag(3, width, leaf="frame")
        what = f"3 levels of {width} shared lists ({width ** 3:,} strings as JSON)"
    _put(d, where, value, rng)
    name = f"fr_rank{rank}.pkl"
    return {name: pickled(d)}, (name,), f"{job}: {where} of {name} is {what}"


def deep_nesting(rng, job=None, rank=None, where=None, depth=None, fmt=None):
    """A list nested ``depth`` deep (pickle: built without recursion; JSON: brackets)."""
    job, rank = _target(rng, job, rank)
    where = where or rng.choice([f"entry.{f}" for f in SHAPE_FIELDS] + ["pg_status", "unknown"])
    depth = depth or rng.choice([200_000, 1_000_000, 5_000])
    fmt = fmt or rng.choice(["pkl", "pkl", "json"])
    if fmt == "json":
        d = dump(job, rank, "json")
        _put(d, where, "@RAW0@", rng)
        name = f"fr_rank{rank}.json"
        data = json_text(d, {0: "[" * depth + "]" * depth})
    else:
        d = dump(job, rank)
        _put(d, where, nested_list(depth), rng)
        name = f"fr_rank{rank}.pkl"
        data = pickled(d)
    return {name: data}, (name,), f"{job}: {where} of {name} is a list nested {depth:,} deep"


def opcode(rng, job=None, rank=None, where=None, which=None):
    job, rank = _target(rng, job, rank)
    where = where or rng.choice([f"entry.{f}" for f in SHAPE_FIELDS + ["process_group"]]
                                + ["pg_status", "entries", "unknown", "version"])
    which = which or rng.choice(sorted(OPCODES))
    d = dump(job, rank)
    if where == "entries":
        d["entries"].insert(rng.randrange(len(d["entries"]) + 1), OPCODES[which])
    else:
        _put(d, where, OPCODES[which], rng)
    name = f"fr_rank{rank}.pkl"
    return {name: pickled(d)}, (name,), f"{job}: {where} of {name} is {which}"


def duplicate_key(rng, job=None, rank=None, key=None):
    """An entry (a pickle dict) holding one key twice: the later one would silently win."""
    job, rank = _target(rng, job, rank)
    d = dump(job, rank)
    k = _pick_entry(rng, d)
    e = d["entries"][k]
    key = key or rng.choice(["collective_seq_id", "input_sizes", "process_group", "op_id"])
    other = {"collective_seq_id": e["collective_seq_id"] + 1, "op_id": e["op_id"] + 1, "input_sizes": [[1]],
             "process_group": ("999", "other")}[key]
    d["entries"][k] = Pairs(list(e.items()) + [(key, other)])
    name = f"fr_rank{rank}.pkl"
    return {name: pickled(d)}, (name,), f"{job}: entry {k} of {name} holds {key!r} twice"


def frames_odd(rng, job=None, rank=None, value=None):
    job, rank = _target(rng, job, rank)
    choices = [["a frame"], [1, 2], [None], "all_reduce (x.py:3)", {"name": "f"}, [["f", "x.py", 3]], 7,
               [{"name": 1, "filename": 2, "line": "x"}], [{"filename": ["x.py"], "name": "f", "line": 1}],
               [{"filename": "x.py", "name": "f", "line": float("inf")}]]
    value = value if value is not None else rng.choice(choices)
    d = dump(job, rank)
    k = _pick_entry(rng, d)
    d["entries"][k]["frames"] = value
    name = f"fr_rank{rank}.pkl"
    return {name: pickled(d)}, (name,), f"{job}: entry {k}'s frames in {name} are {value!r:.60}"


def nonfinite(rng, job=None, rank=None, field=None, value=None, fmt=None):
    """Infinity, NaN or 1e400 where an integer must be (JSON text; or a float in the pickle)."""
    job, rank = _target(rng, job, rank)
    field = field or rng.choice(INT_FIELDS)
    value = value or rng.choice(NONFINITE)
    fmt = fmt or rng.choice(["json", "pkl"])
    if fmt == "json":
        d = dump(job, rank, "json")
        k = _pick_entry(rng, d)
        d["entries"][k][field] = "@RAW0@"
        name = f"fr_rank{rank}.json"
        data = json_text(d, {0: value})
    else:
        d = dump(job, rank)
        k = _pick_entry(rng, d)
        d["entries"][k][field] = float(value.replace("Infinity", "inf"))
        name = f"fr_rank{rank}.pkl"
        data = pickled(d)
    return {name: data}, (name,), f"{job}: {field} of entry {k} in {name} is {value}"


def out_of_range(rng, job=None, rank=None, field=None, value=None):
    """An integer beyond what the store holds (INT32 ranks, INT64 ids and times), or negative where it cannot be."""
    job, rank = _target(rng, job, rank)
    field = field or rng.choice(INT_FIELDS + ["rank", "pg_config", "name"])
    d = dump(job, rank)
    name = f"fr_rank{rank}.pkl"
    if field == "rank":
        value = value if value is not None else rng.choice(RANK_VALUES)
        d["rank"] = value
    elif field == "pg_config":
        value = value if value is not None else rng.choice(RANK_VALUES + ["[0, 2147483648]", "[0, 1e400]",
                                                                          "[0, Infinity]", "[0, 0]", "[0, true]"])
        d["pg_config"] = {"": {"name": "", "desc": "", "ranks": value if isinstance(value, str) else [0, value]}}
    elif field == "name":
        value = value if value is not None else rng.choice([1 << 31, 1 << 63, 10 ** 30])
        name = f"fr_rank{value}.pkl"
        return {f"fr_rank{rank}.pkl.drop": b"", name: pickled(d)}, (name,), f"{job}: rank {rank}'s dump named {name}"
    else:
        value = value if value is not None else rng.choice(HUGE + [-1, -5, True])
        d["entries"][_pick_entry(rng, d)][field] = value
    return {name: pickled(d)}, (name,), f"{job}: {field} of {name} is {value!r:.40}"


def inflight_odd(rng, job=None, rank=None, field=None, value=None):
    """The in-flight record beside a dump (``read_inflight``) with a value the store cannot hold or that cannot be."""
    job = job or rng.choice([j for j in JOBS if any(_fixture(j)[r]["inflight"] for r in ranks(j))])
    rank = rank if rank is not None else rng.choice([r for r in ranks(job) if _fixture(job)[r]["inflight"]])
    field = field or rng.choice(["peer", "op_id", "time_ns", "group_ranks"])
    d = dump(job, rank, "inflight")
    if d["call"] is None:
        d["call"] = {"op": "recv", "peer": 0, "pg_name": "0", "pg_desc": "default_pg", "group_ranks": [0, 1],
                     "op_id": 1, "input_sizes": [[2]], "input_dtypes": ["Float"]}
    if value is None:
        value = rng.choice({"peer": RANK_VALUES, "group_ranks": RANK_VALUES, "op_id": HUGE + [-1],
                            "time_ns": HUGE + ["Infinity", "1e400", "NaN"]}[field])
    raw = {}
    target = d if field == "time_ns" else d["call"]
    v = value if not isinstance(value, str) else "@RAW0@"
    if isinstance(value, str):
        raw[0] = value
    target[field] = [0, v] if field == "group_ranks" else v
    name = f"fr_rank{rank}.inflight.json"
    return {name: json_text(d, raw)}, (name,), f"{job}: {field} of {name} is {value!r:.40}"


def pg_status_odd(rng, job=None, rank=None, how=None):
    job, rank = _target(rng, job, rank)
    how = how or rng.choice(["tuple key", "cycle", "cycle through a list", "a list", "entries in a cycle"])
    d = dump(job, rank)
    if how == "tuple key":
        d["pg_status"] = {("0", "default_pg"): next(iter(d["pg_status"].values()))}
    elif how == "cycle":
        d["pg_status"]["loop"] = d["pg_status"]
    elif how == "cycle through a list":
        loop = [1]
        loop.append(loop)
        next(iter(d["pg_status"].values()))["x"] = loop
    elif how == "a list":
        d["pg_status"] = [d["pg_status"]]
    else:
        d["entries"].append(d["entries"])
    name = f"fr_rank{rank}.pkl"
    return {name: pickled(d)}, (name,), f"{job}: pg_status of {name}: {how}"


def contradiction(rng, job=None, rank=None, how=None):
    """A dump that contradicts itself or declares impossible ranks (the hang once said "no divergence")."""
    job, rank = _target(rng, job, rank)
    how = how or rng.choice(["collective twice", "collective renumbered", "record twice", "negative ranks"])
    if how == "negative ranks":
        changed = {}
        for k, r in enumerate(ranks(job)):
            d = dump(job, r)
            d["rank"] = -1 - k
            changed[f"fr_rank{r}.pkl"] = pickled(d)
        return changed, tuple(changed), f"{job}: the dumps declare ranks -1, -2, ..."
    d = dump(job, rank)
    colls = [k for k, e in enumerate(d["entries"]) if not e.get("is_p2p")]
    if how == "collective twice":  # the last collective again, other sizes: the later one would win
        e = copy.deepcopy(d["entries"][colls[-1]])
        e["input_sizes"] = e["output_sizes"] = [[3]]
        e["record_id"] = max(x["record_id"] for x in d["entries"]) + 1
        e["op_id"] = max(x["op_id"] for x in d["entries"]) + 1
        d["entries"].append(e)
    elif how == "collective renumbered":  # two collectives of one group with one number
        a, b = rng.sample(colls, 2) if len(colls) > 1 else (colls[0], colls[0])
        same = [k for k in colls if d["entries"][k]["process_group"] == d["entries"][a]["process_group"] and k != a]
        b = rng.choice(same) if same else b
        d["entries"][b]["collective_seq_id"] = d["entries"][a]["collective_seq_id"]
    else:
        a = rng.randrange(len(d["entries"]))
        b = (a + 1) % len(d["entries"])
        d["entries"][b]["record_id"] = d["entries"][a]["record_id"]
    name = f"fr_rank{rank}.pkl"
    return {name: pickled(d)}, (name,), f"{job}: {name}: {how}"


def valid(rng, job=None, how=None):
    """Dumps that must still load: re-pickled (protocols 2 to 5, stacks shared between entries), unknown fields."""
    job = job or rng.choice(JOBS)
    how = how or rng.choice(["protocol", "shared frames", "unknown fields", "json dumps"])
    changed = {}
    for r in ranks(job):
        if how == "json dumps":
            changed[f"fr_rank{r}.json"] = json.dumps(dump(job, r, "json")).encode()
            continue
        d = dump(job, r)
        if how == "shared frames":
            first = d["entries"][0]["frames"]
            for e in d["entries"]:
                if e["frames"] == first:
                    e["frames"] = first
        elif how == "unknown fields":
            d["x_extra"] = {"nested": dag(8, 2, leaf="x"), "floats": [float("nan"), 1.5], "big": "y" * 100_000}
            for e in d["entries"]:
                e["x_note"] = {"k": [1, 2, {"deep": [[[]]]}]}
        changed[f"fr_rank{r}.pkl"] = pickled(d, rng.choice([2, 3, 4, 5]) if how == "protocol" else 2)
    return changed, (), f"{job}: valid dumps ({how})"


BUILDERS = {"bomb_depth": bomb_depth, "bomb_sharing": bomb_sharing, "deep_nesting": deep_nesting, "opcode": opcode,
            "duplicate_key": duplicate_key, "frames_odd": frames_odd, "nonfinite": nonfinite,
            "out_of_range": out_of_range, "inflight_odd": inflight_odd, "pg_status_odd": pg_status_odd,
            "contradiction": contradiction}


def build(kind: str, rng=None, **choices):
    """(files, hang arguments, names, description) of one case of ``kind`` (BUILDERS or ``valid``)."""
    rng = rng or random.Random(0)
    f = valid if kind == "valid" else BUILDERS[kind]
    if "job" not in choices:
        choices["job"] = rng.choice(JOBS)
    changed, names, what = f(rng, **choices)
    files, dumps = files_of(choices["job"], changed)
    return files, dumps, names, what


# --- the campaign's operators: each picks one of its builders ---------------------------------------------------

OPERATORS = {"bomb": ["bomb_depth", "bomb_sharing"], "nesting": ["deep_nesting"], "opcode": ["opcode"],
             "contradiction": ["contradiction", "duplicate_key"], "shape": ["frames_odd", "pg_status_odd"],
             "nonfinite": ["nonfinite"], "out_of_range": ["out_of_range"], "inflight": ["inflight_odd"],
             "valid": ["valid"]}


def _case(rng, kind) -> Case:
    files, dumps, names, what = build(kind, rng)
    refuse = kind != "valid"
    return Case("", "", what, files=files, args=["hang", *(f"{{in}}/{n}" for n in dumps), "--no-cache", "--format",
                                                  "json"],
                accept=("refuse",) if refuse else ("load",), names=names, document=False, timeout=TIMEOUT,
                max_rss_mb=RSS_BOUND_MB, expect={"rc": [1], "may_create": []})


def _register(name, kinds):
    def f(rng):
        return _case(rng, rng.choice(kinds))

    f.__name__ = f"op_{name}"
    op("dump")(f)


for _name, _kinds in OPERATORS.items():
    _register(_name, _kinds)
