"""A batch of events decoded by the compiled decoder (``traceparse/ingest/decode.c``): its complete events as
columns, and the few events Python reads whole (complete events with communication or shape args, metadata and
memory events) decoded by msgspec.

The decoder answers only where msgspec would have decoded the batch to the same values (decode.c says when it
declines); everything else, and everything where the extension was not built (or ``TRACEPARSE_DECODER=msgspec``), is
decoded by msgspec as ``Event`` structs. ``columns.event_tables`` takes either and writes the same tables.
"""

import os

import numpy as np
import pyarrow as pa

from traceparse.ingest.columns import EVENTS as EVENT_TABLE, IDS, _to_int
from traceparse.ingest.model import EVENTS
from traceparse.ingest.repair import DECODE_ERRORS

try:
    from traceparse.ingest import _decode
except ImportError:  # not built (no compiler where it was installed): msgspec alone
    _decode = None

# the events table's integer columns, in the order decode.c writes them: pid, tid, ts_ns, dur_ns, External id,
# correlation, stream, device
FIELDS = tuple(EVENT_TABLE.names[3:])
LABELS = {0: "pid", 1: "tid", 4: "args.External id", 5: "args.correlation", 6: "args.stream", 7: "args.device"}


def compiled() -> bool:
    """Whether batches are decoded by the compiled decoder (built, and not turned off)."""
    return _decode is not None and os.environ.get("TRACEPARSE_DECODER", "compiled") != "msgspec"


class ColumnBatch:
    """``columns``: the complete events' fields (``FIELDS``, ``cat``, ``name``) as Arrow arrays, in file order;
    ``args_at``: ``(index among the complete events, Event)`` of those whose args Python reads; ``other``: the
    metadata and memory events (``Event``); ``out_of_range``: per id field, how many of its values were read as
    null for being out of range (counted by ``event_tables`` where the decoded batch's are)."""

    __slots__ = ("n_events", "columns", "args_at", "other", "out_of_range")

    def __len__(self) -> int:
        return self.n_events


def decode(buf: bytes, start: int, end: int):
    """The events of ``buf[start:end]`` (``end`` -1: up to the ``]`` closing traceEvents) as ``(ColumnBatch, where
    reading stopped)``, or None where the compiled decoder declines (or is not in use)."""
    if not compiled():
        return None
    bad = dict.fromkeys(LABELS, 0)

    def coerce(field: int, text: str, quoted: bool):
        value, out_of_range = _to_int(text if quoted else int(text), IDS)
        bad[field] += out_of_range
        return value

    got = _decode.decode(buf, start, end, coerce)
    if got is None:
        return None
    n_events, m, names, cat, name, ints, valid, rare, stop = got
    batch = ColumnBatch()
    batch.n_events = n_events
    values = np.frombuffer(ints, np.int64).reshape(len(FIELDS), m)
    known = np.frombuffer(valid, np.bool_).reshape(len(FIELDS), m)
    batch.columns = {f: pa.array(values[i], pa.int64(), mask=None if known[i].all() else ~known[i])
                     for i, f in enumerate(FIELDS)}
    names = pa.array(names, pa.string())
    for key, idx in (("cat", cat), ("name", name)):
        idx = np.frombuffer(idx, np.int32)
        batch.columns[key] = pa.DictionaryArray.from_arrays(pa.array(idx, mask=idx < 0), names).dictionary_decode()
    try:  # events the decoder checked as strict JSON of the shape msgspec reads: a refusal here would be a bug of
        # the decoder's, and msgspec then decodes the batch as a whole (the same values, or the guided path's)
        whole = EVENTS.decode(b"[" + b",".join(buf[a:b] for _, a, b in rare) + b"]") if rare else []
    except DECODE_ERRORS:
        return None
    batch.args_at = [(i, e) for (i, _, _), e in zip(rare, whole, strict=True) if i >= 0]
    batch.other = [e for (i, _, _), e in zip(rare, whole, strict=True) if i < 0]
    batch.out_of_range = {LABELS[f]: n for f, n in bad.items() if n}
    return batch, stop
