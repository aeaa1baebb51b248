"""Helpers that write tiny hand-made Kineto (Chrome JSON) traces for tests.

Numbers that must reach the file as exact JSON text (timestamps with
nanosecond fractions, which float64 cannot hold) are given as ``Num("...")``
or ``decimal.Decimal``: they are written verbatim, unquoted.
"""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

_MARK = "\x00num\x00"
_MARKED = re.compile(r'"\\u0000num\\u0000([^"]*)"')


class Num(str):
    """A JSON number written exactly as this text."""


def _default(v):
    if isinstance(v, Decimal):
        return _MARK + str(v)
    raise TypeError(f"not JSON serializable: {v!r}")


def _mark(obj):
    if isinstance(obj, Num):
        return _MARK + str(obj)
    if isinstance(obj, dict):
        return {k: _mark(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_mark(v) for v in obj]
    return obj


def dumps(obj, indent=None) -> str:
    """JSON text of ``obj``; ``Num``/``Decimal`` values are written as bare numbers."""
    text = json.dumps(_mark(obj), indent=indent, default=_default)
    return _MARKED.sub(lambda m: m.group(1), text)


def x(name, ts, dur, cat="cpu_op", pid=1, tid=1, **args):
    """A complete (ph = X) event; ``args`` keys may be given as a dict under ``args=``."""
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    a = args.pop("args", None) or {}
    a.update(args)
    if a:
        ev["args"] = a
    return ev


def thread_name(pid, tid, name):
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def step(n, ts, dur, pid=1, tid=1):
    return x(f"ProfilerStep#{n}", ts, dur, cat="user_annotation", pid=pid, tid=tid)


def trace(events, rank=0, world_size=None, base=None, info=None, **header):
    """A trace document: header keys first, then traceEvents (as Kineto writes it)."""
    doc = {"schemaVersion": 1}
    di = dict(info or {})
    if rank is not None:
        di["rank"] = rank
    if world_size is not None:
        di["world_size"] = world_size
    if di:
        doc["distributedInfo"] = di
    doc.update(header)
    doc["traceEvents"] = list(events)
    if base is not None:
        doc["baseTimeNanoseconds"] = base
    return doc


def write(path, doc, indent=None) -> Path:
    """Write ``doc`` (a dict or a bare list) as JSON; gzip when the name ends in .gz."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(doc, indent=indent).encode()
    if path.name.endswith(".gz"):
        text = gzip.compress(text)
    path.write_bytes(text)
    return path


def load(paths, db, **kw):
    """load_run into ``db`` and return a read-only connection to the store."""
    from traceparse.load.run import connect, load_run

    if not isinstance(paths, (list, tuple)):
        paths = [paths]
    path, _ = load_run(list(paths), db=db, **kw)
    return connect(path)


def rows(con, sql, params=None) -> list[dict]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def scalar(con, sql, params=None):
    return con.execute(sql, params or []).fetchone()[0]
