"""Decoded events -> Arrow record batches, one schema per staged table.

Each function takes one batch of ``Event`` structs and returns a
``pyarrow.Table`` (possibly empty). Work is done column by column so that the
per-event Python cost stays a handful of attribute reads.
"""

import math
import re
from decimal import Decimal

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceparse.ingest.categories import (
    COUNTED, CUDA_CALLS, DEVICE_WORK, KINETO_CATEGORIES, LAUNCH_NAMES, OLD_CATEGORIES, OTHER_CALLS, UNANALYZED_CALLS,
    UNANALYZED_WORK,
)
from traceparse.ingest.c10d_shapes import comm_from_shapes
from traceparse.ingest.model import EMPTY_ARGS
from traceparse.own_process import arrow_without_pandas

arrow_without_pandas()  # before the first conversion below
SHAPED_COMM = "^(c10d::|gloo:|symm_mem::|nccl:)"
THOUSAND = pa.scalar(Decimal(1000), pa.decimal128(4, 0))
US_DECIMAL = pa.decimal128(26, 3)

EVENTS = pa.schema(
    [
        ("ev_id", pa.int64()),
        ("cat", pa.string()),
        ("name", pa.string()),
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("ts_ns", pa.int64()),
        ("dur_ns", pa.int64()),
        ("external_id", pa.int64()),
        ("correlation", pa.int64()),
        ("stream", pa.int64()),
        ("device", pa.int64()),
    ]
)
COMM_ARGS = pa.schema(
    [
        ("ev_id", pa.int64()),
        ("coll_name", pa.string()),
        ("in_nelems", pa.int64()),
        ("out_nelems", pa.int64()),
        ("group_size", pa.int64()),
        ("dtype", pa.string()),
        ("in_split", pa.string()),
        ("out_split", pa.string()),
        ("pg_name", pa.string()),
        ("pg_desc", pa.string()),
        ("pg_ranks", pa.string()),
        ("seq", pa.int64()),
        ("rank_start", pa.int64()),
        ("rank_stride", pa.int64()),
        ("peer", pa.int64()),
        ("source", pa.string()),
    ]
)
OP_ARGS = pa.schema(
    [
        ("ev_id", pa.int64()),
        ("input_dims", pa.string()),
        ("input_types", pa.string()),
        ("concrete_inputs", pa.string()),
    ]
)
THREADS = pa.schema([("pid", pa.int64()), ("tid", pa.int64()), ("kind", pa.string()), ("label", pa.string())])
MEMORY = pa.schema(
    [
        ("ts_ns", pa.int64()),
        ("device_type", pa.int64()),
        ("device_id", pa.int64()),
        ("bytes", pa.int64()),
        ("total_allocated", pa.int64()),
        ("total_reserved", pa.int64()),
    ]
)


# What each number may be, decided per field. A value out of its range is never clamped (that would
# merge distinct ids or invent times): it is read as null (unknown) and counted in load_issues, or,
# for a timestamp, costs its event (an event that cannot be placed in time is not loaded).
INT64 = (-(1 << 63), 1 << 63)
# identifiers (pid, tid, External id, correlation, stream, device, Seq, memory device): any int64
IDS = INT64
# element counts: bytes = count x element width (<= 8) must stay an int64, sums too
NELEMS = (-(1 << 56), 1 << 56)
# ranks and group sizes: the store keeps them as INTEGER (int32)
RANKS = (-(1 << 31), 1 << 31)
# memory byte counts: within an exbibyte, so differences and ratios stay in range
MEM_BYTES = (-(1 << 60), 1 << 60)
# timestamps and durations in ns: ts within [-2^60, 2^62) (epoch ns reach 2^62 in 2116), dur within
# [-2^60, 2^61); with a clock offset below 2^62 (rank.py), start, end and their differences stay int64. A negative
# dur is read, then made null and counted (_events): an event cannot end before it starts
TS_NS = (-(1 << 60), 1 << 62)
DUR_NS = (-(1 << 60), 1 << 61)
# a number's text: a plain decimal (optionally with a small exponent), at most this long
MAX_NUMBER_TEXT = 40
MAX_EXPONENT = 30
_PLAIN = r"^-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,3})?$"  # the common case, converted column-wise
_NUMBER = re.compile(rb"(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?")
_STEP = re.compile(r"#([0-9]+)")
OLD_CATEGORIES_READ = (f"event(s) with Kineto's category names of PyTorch 1.8 to 1.10 ({', '.join(OLD_CATEGORIES)}): "
                       f"read as today's ({', '.join(OLD_CATEGORIES.values())})")
CASE_READ = ("event(s) whose category is a Kineto name in another letter case (e.g. 'KERNEL', 'gpu_user_Annotation'): "
             "read in Kineto's spelling")
NOTES = {OLD_CATEGORIES_READ, CASE_READ}  # what the columns count that is no loss: said as information, not a warning


def ints(values, bounds=INT64, problems=None, label=None) -> pa.Array:
    """int64 column; values that are not integers (strings, floats) are coerced or nulled. A number
    outside ``bounds`` (or too large for int64, or not finite: 1e400, "inf", "nan") is read as null
    and counted in ``problems`` under ``label``; a string that is not a number (a label such as
    Kineto's "Spans") is null as before."""
    try:
        arr = pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        arr = None
    if arr is not None:
        if bounds == INT64 or not len(arr):
            return arr
        mm = pc.min_max(arr)
        if mm["min"].as_py() is None or (bounds[0] <= mm["min"].as_py() and mm["max"].as_py() < bounds[1]):
            return arr
    out = []
    bad = 0
    for v in values:
        x, out_of_range = _to_int(v, bounds)
        out.append(x)
        bad += out_of_range
    if bad and problems is not None:
        problems[f"event field(s) '{label}' out of range: read as null"] += bad
    return pa.array(out, pa.int64())


def _to_int(v, bounds):
    """(integer or None, whether a number was out of range)."""
    if v is None or isinstance(v, bool):
        return None, False
    if isinstance(v, int):
        i = v
    elif isinstance(v, float):
        if not math.isfinite(v):
            return None, True
        i = int(v)
    elif isinstance(v, str):
        t = v.strip()
        try:
            i = int(t)
        except ValueError:
            try:
                f = float(t)
            except ValueError:
                return None, False  # a label, not a number
            if not math.isfinite(f):
                return None, True
            i = int(f)
    else:
        return None, False
    return (i, False) if bounds[0] <= i < bounds[1] else (None, True)


def strs(values) -> pa.Array:
    """string column; other JSON values (numbers, lists, objects) as their JSON text."""
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else v if isinstance(v, str) else _json(v) for v in values], pa.string())


def _json(v):
    try:
        return msgspec.json.encode(v).decode()
    except (msgspec.EncodeError, RecursionError, TypeError, ValueError):
        # decoded from JSON, so always encodable, unless nested near the recursion limit
        return "(a JSON value nested too deeply to show)"


def nanoseconds(raws, bounds) -> tuple[pa.Array, list, list]:
    """Microsecond JSON numbers (raw text) -> exact integer nanoseconds within ``bounds``.

    The text is checked before any conversion: a plain decimal number (optionally with an exponent
    of at most 30), at most 40 characters, whose value in ns is within ``bounds``. Returns the
    column (null where missing or unusable) and the positions of the missing (absent or null) and
    of the unusable values."""
    vals = [bytes(r) for r in raws]
    arr = pa.array(vals, pa.binary())
    if len(arr) and pc.all(pc.match_substring_regex(arr, _PLAIN)).as_py():
        try:
            us = pc.cast(arr.cast(pa.string()), US_DECIMAL)
            ns = pc.cast(pc.multiply(us, THOUSAND), pa.int64())
            mm = pc.min_max(ns)
            if bounds[0] <= mm["min"].as_py() and mm["max"].as_py() < bounds[1]:
                return ns, [], []
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    out, missing, bad = [], [], []
    for i, v in enumerate(vals):
        x = _ns(v, bounds)
        if x is None:
            (missing if not v or v == b"null" else bad).append(i)
        out.append(x)
    return pa.array(out, pa.int64()), missing, bad


def _ns(text, bounds):
    if not text or len(text) > MAX_NUMBER_TEXT:
        return None
    m = _NUMBER.fullmatch(text)
    if m is None:
        return None
    sign, whole, frac, exp = m.groups()
    e = int(exp) if exp else 0
    if not -MAX_EXPONENT <= e <= MAX_EXPONENT:
        return None
    digits = int(whole + (frac or b""))
    scale = len(frac or b"") - e - 3  # ns = digits / 10^scale
    if scale <= 0:
        ns = digits * 10 ** (-scale)
    else:
        unit = 10**scale
        ns, r = divmod(digits, unit)
        if 2 * r > unit or (2 * r == unit and ns % 2):  # half to even, as Decimal rounds
            ns += 1
    ns = -ns if sign else ns
    return ns if bounds[0] <= ns < bounds[1] else None


def event_tables(batch, first_id: int, problems, steps: set | None = None):
    """Split one decoded batch (a list of ``Event``, or a ``ColumnBatch`` of the compiled decoder) into the staged
    tables. Returns (tables, n_complete); what a value cost (an event, a field) is counted in ``problems``; the N of
    each usable ``ProfilerStep#N`` window is added to ``steps`` when given."""
    if not isinstance(batch, list):  # a ColumnBatch
        cats, events = _column_events(batch, first_id, problems)
        args_at, other = batch.args_at, batch.other
    else:
        complete = [e for e in batch if e.ph == "X"]
        ts, missing, bad = nanoseconds([e.ts for e in complete], TS_NS)
        if missing or bad:
            if missing:
                problems["complete event(s) without a timestamp (ts missing or null): not loaded"] += len(missing)
            if bad:
                problems["complete event(s) whose ts is not a plain decimal number within range: not loaded"] += len(bad)
            drop = set(missing) | set(bad)
            complete = [e for i, e in enumerate(complete) if i not in drop]
            ts = pc.drop_null(ts)
        cats, events = _events(complete, ts, first_id, problems)
        args_at = [(i, e) for i, e in enumerate(complete) if e.args is not None]
        other = [e for e in batch if e.ph != "X"]
    tables = {"events": events}
    names = events["name"]
    shaped = pc.indices_nonzero(pc.fill_null(pc.match_substring_regex(names, SHAPED_COMM), False))
    tables["comm_args"] = pa.concat_tables(
        [_comm_args(args_at, first_id, problems), _shape_comm_args(names, args_at, shaped.to_pylist(), first_id)]
    )
    tables["op_args"] = _op_args(args_at, first_id)
    _check_steps(cats, names, events["dur_ns"], problems, steps)
    tables["threads"] = _threads([e for e in other if e.ph == "M"], problems)
    tables["memory"] = _memory([e for e in other if e.name == "[memory]" or e.cat == "[memory]"], problems)
    return tables, events.num_rows


def _check_steps(cats, names, durs, problems, steps=None):
    """ProfilerStep#N windows load.sql cannot use (no step number below 2^63, no duration) are said; the N of the
    others go to ``steps`` (when given). ``cats``: the events' categories as written (before ``_categories``)."""
    idx = pc.indices_nonzero(pc.fill_null(pc.starts_with(names, "ProfilerStep#"), False)).to_pylist()
    for i in idx:
        cat = cats[i].as_py()
        if cat is not None and cat.startswith("gpu"):
            continue
        m = _STEP.search(names[i].as_py())
        if m is None or int(m[1]) >= 1 << 63:
            problems["ProfilerStep#N annotation(s) without a step number below 2^63: not used as steps"] += 1
        elif durs[i].as_py() is None:
            problems["ProfilerStep#N annotation(s) without a duration: not used as steps"] += 1
        elif steps is not None:
            steps.add(int(m[1]))


def _events(ev, ts, first_id, problems):
    """The events table of the complete events ``ev`` (``Event``) with their timestamps ``ts``, and their categories
    as written."""
    args = [e.args or EMPTY_ARGS for e in ev]
    dur, missing, bad = nanoseconds([e.dur for e in ev], DUR_NS)
    if missing:
        problems["complete event(s) without a duration (dur missing or null): duration unknown (null)"] += len(missing)
    if bad:
        problems["complete event(s) whose dur is not a plain decimal number within range: duration unknown (null)"] += len(bad)
    negative = pc.fill_null(pc.less(dur, 0), False)
    n_negative = pc.sum(negative).as_py() if len(dur) else 0
    if n_negative:  # an event cannot end before it starts: its duration is unknown, not a negative time
        problems["complete event(s) with a negative duration (dur < 0): duration unknown (null)"] += n_negative
        dur = pc.if_else(negative, pa.scalar(None, pa.int64()), dur)
    cats = strs([e.cat for e in ev])
    return cats, pa.Table.from_arrays(
        [
            pa.array(range(first_id, first_id + len(ev)), pa.int64()),
            _categories(cats, problems),
            strs([e.name for e in ev]),
            ints([e.pid for e in ev], IDS, problems, "pid"),
            ints([e.tid for e in ev], IDS, problems, "tid"),
            ts,
            dur,
            ints([a.external_id if a.external_id is not None else a.external_id_old for a in args], IDS, problems,
                 "args.External id"),
            ints([a.correlation for a in args], IDS, problems, "args.correlation"),
            ints([a.stream for a in args], IDS, problems, "args.stream"),
            ints([a.device for a in args], IDS, problems, "args.device"),
        ],
        schema=EVENTS,
    )


def _column_events(batch, first_id, problems):
    """``_events`` of a compiled decoder's batch: the same table from its columns (a value of those the decoder
    read out of range counted as ``ints`` counts it)."""
    c = batch.columns
    categories = _categories(c["cat"], problems)
    for label, n in batch.out_of_range.items():
        problems[f"event field(s) '{label}' out of range: read as null"] += n
    n = len(c["ts_ns"])
    return c["cat"], pa.Table.from_arrays(
        [pa.array(np.arange(first_id, first_id + n, dtype=np.int64)), categories, c["name"],
         *(c[f] for f in EVENTS.names[3:])],
        schema=EVENTS,
    )


def _categories(cats: pa.Array, problems) -> pa.Array:
    """The category column, Kineto's names matched in any letter case (``KINETO_CATEGORIES``) and its names before
    PyTorch 1.11 (``OLD_CATEGORIES``) read as today's, each counted."""
    if not len(cats) or pc.all(pc.fill_null(pc.is_in(cats, value_set=_KNOWN), True)).as_py():
        return cats  # the common case: every category in Kineto's spelling, or null
    canon = pc.take(_CANON, pc.index_in(pc.utf8_lower(cats), value_set=_LOWER))  # null: not a Kineto name
    changed = pc.fill_null(pc.not_equal(canon, cats), False)
    n = pc.sum(changed).as_py()
    if not n:
        return cats
    n_old = pc.sum(pc.fill_null(pc.is_in(cats, value_set=_OLD), False)).as_py()
    if n_old:
        problems[OLD_CATEGORIES_READ] += n_old
    if n > n_old:
        problems[CASE_READ] += n - n_old
    return pc.if_else(changed, canon, cats)


_SPELLINGS = {**{c.lower(): c for c in KINETO_CATEGORIES}, **{o.lower(): c for o, c in OLD_CATEGORIES.items()}}
_KNOWN = pa.array(KINETO_CATEGORIES)
_LOWER, _CANON = pa.array(list(_SPELLINGS)), pa.array(list(_SPELLINGS.values()))
_OLD = pa.array(list(OLD_CATEGORIES))


def device_kinds(events: pa.Table, kinds) -> None:
    """Add to ``kinds`` (a Counter) one batch's events of each ``COUNTED`` category, and as ``(cat, 'launch')`` the
    runtime calls among them that put work on a device (``LAUNCH_NAMES``). Launches matter only to a file without
    device work (device_kind_issues), so once the file has some they are no longer counted."""
    cats = events["cat"]
    mask = pc.fill_null(pc.is_in(cats, value_set=_COUNTED), False)
    if not pc.any(mask).as_py():
        return
    sel = events.filter(mask)
    for row in pc.value_counts(sel["cat"]).to_pylist():
        kinds[row["values"]] += row["counts"]
    cuda = not any(kinds[c] for c in DEVICE_WORK) and any(kinds[c] for c in (*CUDA_CALLS, *OTHER_CALLS))
    if not cuda and not any(kinds[c] and not kinds[d] for c, d in UNANALYZED_CALLS.items()):
        return
    calls = sel.filter(pc.fill_null(pc.match_substring_regex(sel["name"], LAUNCH_NAMES), False))
    for row in pc.value_counts(calls["cat"]).to_pylist():
        kinds[(row["values"], "launch")] += row["counts"]


_COUNTED = pa.array(COUNTED)


def device_kind_issues(kinds) -> list[tuple[str, str, int]]:
    """load_issues rows ``(severity, what, count)`` for one file's device events (``device_kinds``' counts): device
    work of an accelerator traceparse does not analyze; runtime calls that launched work while no device activity
    was recorded; other accelerators' runtime calls, not linked to their kernels."""
    out = []
    work = sum(kinds[c] for c in DEVICE_WORK)
    for cat, accelerator in UNANALYZED_WORK.items():
        if kinds[cat]:
            out.append(("warning", f"{kinds[cat]} {cat} event(s): device work of an {accelerator} accelerator, which "
                                   "traceparse does not analyze (no GPU section, no device time in the checks)",
                        kinds[cat]))
    for cat in (*CUDA_CALLS, *OTHER_CALLS):
        launches = kinds[(cat, "launch")]
        if launches and not work:
            out.append(("warning", f"{kinds[cat]} {cat} call(s) ({launches} of them kernel launches, copies or "
                                   "memsets) but no kernel, memcpy or memset recorded: the device activities were "
                                   "not collected (the profiler's device activities off, or CUPTI failed)",
                        kinds[cat]))
        elif kinds[cat] and cat in OTHER_CALLS:
            out.append(("info", f"{kinds[cat]} {cat} call(s): traceparse links kernels to CUDA's launch calls only, "
                                "so these are not linked to the kernels they launch (no launch delay, queue or host "
                                "cause for them)", kinds[cat]))
    for cat, device in UNANALYZED_CALLS.items():
        if kinds[(cat, "launch")] and not kinds[device]:
            out.append(("warning", f"{kinds[cat]} {cat} call(s) but no {device} recorded: the device activities "
                                   "were not collected", kinds[cat]))
    return out


def _comm_args(args_at, first_id, problems):
    """The communication args of the complete events ``args_at`` (``(index, Event)``) that have them."""
    at = [(i, e.args) for i, e in args_at if e.args.coll_name is not None]
    idx = [i for i, _ in at]
    sel = [a for _, a in at]
    return pa.Table.from_arrays(
        [
            pa.array([first_id + i for i in idx], pa.int64()),
            strs([a.coll_name for a in sel]),
            ints([a.in_nelems for a in sel], NELEMS, problems, "args.In msg nelems"),
            ints([a.out_nelems for a in sel], NELEMS, problems, "args.Out msg nelems"),
            ints([a.group_size for a in sel], RANKS, problems, "args.Group size"),
            strs([a.dtype for a in sel]),
            strs([a.in_split for a in sel]),
            strs([a.out_split for a in sel]),
            strs([a.pg_name for a in sel]),
            strs([a.pg_desc for a in sel]),
            strs([a.pg_ranks for a in sel]),
            ints([a.seq for a in sel], IDS, problems, "args.Seq"),
            ints([a.rank_start for a in sel], RANKS, problems, "args.Global rank start"),
            ints([a.rank_stride for a in sel], RANKS, problems, "args.Global rank stride"),
            pa.nulls(len(sel), pa.int64()),
            pa.array(["args"] * len(sel), pa.string()),
        ],
        schema=COMM_ARGS,
    )


def _shape_comm_args(names, args_at, indices, first_id):
    """Rows for c10d ops and gloo annotations (at ``indices``; ``names`` the complete events' names), whose facts are
    in their recorded shapes (``args_at``: ``(index, Event)``)."""
    rows = []
    shaped = set(indices)
    for i, e in args_at:
        a = e.args
        if i in shaped and a.input_dims:
            got = comm_from_shapes(names[i].as_py(), bytes(a.input_dims), bytes(a.input_types), bytes(a.concrete_inputs))
            if got:
                rows.append((first_id + i, *got))
    cols = list(zip(*rows, strict=True)) if rows else [()] * 8
    n = len(rows)
    none = pa.nulls(n, pa.string())
    nint = pa.nulls(n, pa.int64())
    return pa.Table.from_arrays(
        [
            pa.array(cols[0], pa.int64()), pa.array(cols[1], pa.string()), pa.array(cols[2], pa.int64()),
            pa.array(cols[3], pa.int64()), nint, pa.array(cols[4], pa.string()), pa.array(cols[6], pa.string()),
            pa.array(cols[7], pa.string()), none, none, none, nint, nint, nint, pa.array(cols[5], pa.int64()),
            pa.array(["shapes"] * n, pa.string()),
        ],
        schema=COMM_ARGS,
    )


def _op_args(args_at, first_id):
    at = [(i, e.args) for i, e in args_at if e.args.input_dims]
    idx = [i for i, _ in at]
    sel = [a for _, a in at]
    return pa.Table.from_arrays(
        [
            pa.array([first_id + i for i in idx], pa.int64()),
            _raw_strs([a.input_dims for a in sel]),
            _raw_strs([a.input_types for a in sel]),
            _raw_strs([a.concrete_inputs for a in sel]),
        ],
        schema=OP_ARGS,
    )


def _raw_strs(raws):
    return pa.array([bytes(r) or None for r in raws], pa.binary()).cast(pa.string())


def _threads(meta, problems):
    rows = [e for e in meta if e.name in ("thread_name", "process_name", "process_labels") and e.args]
    return pa.Table.from_arrays(
        [
            ints([e.pid for e in rows], IDS, problems, "pid"),
            ints([None if e.name != "thread_name" else e.tid for e in rows], IDS, problems, "tid"),
            strs([e.name for e in rows]),
            strs([e.args.name if e.args.name is not None else e.args.labels for e in rows]),
        ],
        schema=THREADS,
    )


def _memory(ev, problems):
    ts, missing, bad = nanoseconds([e.ts for e in ev], TS_NS)
    if missing or bad:
        problems["memory event(s) without a usable timestamp (missing, null, or not a plain decimal number "
                 "within range): not loaded"] += len(missing) + len(bad)
        drop = set(missing) | set(bad)
        ev = [e for i, e in enumerate(ev) if i not in drop]
        ts = pc.drop_null(ts)
    args = [e.args or EMPTY_ARGS for e in ev]
    return pa.Table.from_arrays(
        [
            ts,
            ints([a.device_type for a in args], IDS, problems, "args.Device Type"),
            ints([a.device_id for a in args], IDS, problems, "args.Device Id"),
            ints([a.bytes for a in args], MEM_BYTES, problems, "args.Bytes"),
            ints([a.total_allocated for a in args], MEM_BYTES, problems, "args.Total Allocated"),
            ints([a.total_reserved for a in args], MEM_BYTES, problems, "args.Total Reserved"),
        ],
        schema=MEMORY,
    )
