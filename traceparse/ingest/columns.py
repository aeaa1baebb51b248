"""Decoded events -> Arrow record batches, one schema per staged table.

Each function takes one batch of ``Event`` structs and returns a
``pyarrow.Table`` (possibly empty). Work is done column by column so that the
per-event Python cost stays a handful of attribute reads.
"""

from decimal import Decimal, InvalidOperation

import pyarrow as pa
import pyarrow.compute as pc

from .c10d_shapes import comm_from_shapes
from .model import EMPTY_ARGS

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


def ints(values) -> pa.Array:
    """int64 column; values that are not integers (strings, floats) are coerced or nulled."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([_to_int(v) for v in values], pa.int64())


def _to_int(v):
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    try:
        return int(float(v)) if isinstance(v, (float, str)) else None
    except ValueError:
        return None


def strs(values) -> pa.Array:
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else v if isinstance(v, str) else _json(v) for v in values], pa.string())


def _json(v):
    import msgspec

    return msgspec.json.encode(v).decode()


def nanoseconds(raws) -> pa.Array:
    """Microsecond JSON numbers (raw text) -> exact integer nanoseconds."""
    text = pa.array([bytes(r) or None for r in raws], pa.binary()).cast(pa.string())
    try:
        us = pc.cast(text, US_DECIMAL)
        return pc.cast(pc.multiply(us, THOUSAND), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.array([_ns(t) for t in text.to_pylist()], pa.int64())


def _ns(text):
    if text is None:
        return None
    try:
        return int((Decimal(text) * 1000).to_integral_value())
    except (InvalidOperation, ValueError):
        return None


def event_tables(batch, first_id: int):
    """Split one decoded batch into the staged tables. Returns (tables, n_complete)."""
    complete = [e for e in batch if e.ph == "X"]
    events = _events(complete, first_id)
    tables = {"events": events}
    args = [e.args or EMPTY_ARGS for e in complete]
    shaped = pc.indices_nonzero(pc.fill_null(pc.match_substring_regex(events["name"], SHAPED_COMM), False))
    tables["comm_args"] = pa.concat_tables(
        [_comm_args(args, first_id), _shape_comm_args(complete, args, shaped.to_pylist(), first_id)]
    )
    tables["op_args"] = _op_args(args, first_id)
    other = [e for e in batch if e.ph != "X"]
    tables["threads"] = _threads([e for e in other if e.ph == "M"])
    tables["memory"] = _memory([e for e in other if e.name == "[memory]" or e.cat == "[memory]"])
    return tables, len(complete)


def _events(ev, first_id):
    args = [e.args or EMPTY_ARGS for e in ev]
    return pa.Table.from_arrays(
        [
            pa.array(range(first_id, first_id + len(ev)), pa.int64()),
            strs([e.cat for e in ev]),
            strs([e.name for e in ev]),
            ints([e.pid for e in ev]),
            ints([e.tid for e in ev]),
            nanoseconds([e.ts for e in ev]),
            nanoseconds([e.dur for e in ev]),
            ints([a.external_id for a in args]),
            ints([a.correlation for a in args]),
            ints([a.stream for a in args]),
            ints([a.device for a in args]),
        ],
        schema=EVENTS,
    )


def _comm_args(args, first_id):
    idx = [i for i, a in enumerate(args) if a.coll_name is not None]
    sel = [args[i] for i in idx]
    return pa.Table.from_arrays(
        [
            pa.array([first_id + i for i in idx], pa.int64()),
            strs([a.coll_name for a in sel]),
            ints([a.in_nelems for a in sel]),
            ints([a.out_nelems for a in sel]),
            ints([a.group_size for a in sel]),
            strs([a.dtype for a in sel]),
            strs([a.in_split for a in sel]),
            strs([a.out_split for a in sel]),
            strs([a.pg_name for a in sel]),
            strs([a.pg_desc for a in sel]),
            strs([a.pg_ranks for a in sel]),
            ints([a.seq for a in sel]),
            ints([a.rank_start for a in sel]),
            ints([a.rank_stride for a in sel]),
            pa.nulls(len(sel), pa.int64()),
            pa.array(["args"] * len(sel), pa.string()),
        ],
        schema=COMM_ARGS,
    )


def _shape_comm_args(events, args, indices, first_id):
    """Rows for c10d ops and gloo annotations (at ``indices``), whose facts are in their recorded shapes."""
    rows = []
    for i in indices:
        a = args[i]
        if a.input_dims:
            got = comm_from_shapes(events[i].name, bytes(a.input_dims), bytes(a.input_types), bytes(a.concrete_inputs))
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


def _op_args(args, first_id):
    idx = [i for i, a in enumerate(args) if a.input_dims]
    sel = [args[i] for i in idx]
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


def _threads(meta):
    rows = [e for e in meta if e.name in ("thread_name", "process_name", "process_labels") and e.args]
    return pa.Table.from_arrays(
        [
            ints([e.pid for e in rows]),
            ints([None if e.name != "thread_name" else e.tid for e in rows]),
            strs([e.name for e in rows]),
            strs([e.args.name if e.args.name is not None else e.args.labels for e in rows]),
        ],
        schema=THREADS,
    )


def _memory(ev):
    args = [e.args or EMPTY_ARGS for e in ev]
    return pa.Table.from_arrays(
        [
            nanoseconds([e.ts for e in ev]),
            ints([a.device_type for a in args]),
            ints([a.device_id for a in args]),
            ints([a.bytes for a in args]),
            ints([a.total_allocated for a in args]),
            ints([a.total_reserved for a in args]),
        ],
        schema=MEMORY,
    )
