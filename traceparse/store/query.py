"""Run a query on a store and get plain rows (dicts); tell a damaged database file from other DuckDB errors."""

import weakref
from functools import cache
from importlib.resources import files


def rows(con, sql, params=None) -> list[dict]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def row_groups(con, sql, keys: tuple, params=None, chunk: int = 8192):
    """The rows of ``sql`` (ordered by ``keys`` first) as ``(key values, [row dicts])``, one group of consecutive rows
    with the same ``keys`` at a time, fetched in chunks: a reader that reduces each group keeps one in memory, not
    every rank's rows."""
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    at = [names.index(k) for k in keys]
    key, group = None, []
    while batch := cur.fetchmany(chunk):
        for r in batch:
            k = tuple(r[i] for i in at)
            if k != key and group:
                yield key, group
                group = []
            key = k
            group.append(dict(zip(names, r, strict=True)))
    if group:
        yield key, group


def table_rows(con, name: str, order: str = "", columns: str = "*", where: str = "", params=None,
               tuples: bool = False) -> list:
    """The rows of the table, view or table macro call ``name`` (traceparse's own: never user text), ``columns`` of
    them, ``where`` holds, in ``order``: reading a view an SQL file defines, with its logic left there. A value
    that is not traceparse's own (a name read from a trace) goes in as a parameter: ``?`` in ``name``, ``params``.
    ``tuples``: the rows as tuples of ``columns``, in their order (for many rows: a tuple is a third of a dict)."""
    sql = f"SELECT {columns} FROM {name}" + (f" WHERE {where}" if where else "") + (f" ORDER BY {order}" if order else "")
    return con.execute(sql, params or []).fetchall() if tuples else rows(con, sql, params)


_defined = weakref.WeakKeyDictionary()  # connection -> the SQL files run on it (define)


def define(con, package: str, name: str):
    """Run the SQL file ``name`` of ``package`` on ``con`` once: the TEMP views and macros of a module that reads
    them many times over one read-only connection (each read calls this first)."""
    done = _defined.setdefault(con, set())
    if (package, name) not in done:
        con.execute(sql_file(package, name))
        done.add((package, name))


def damaged(e: Exception) -> bool:
    """Whether DuckDB's error ``e`` says its database file is damaged: a block's checksum, or a file shorter than
    it says (a store or a history changed after it was written)."""
    msg = str(e)
    return "Corrupt database file" in msg or "Could not read enough bytes" in msg


@cache
def sql_file(package: str, name: str) -> str:
    """The SQL file ``name`` of ``package`` (``traceparse.vocabulary``, ``traceparse.analyzers``, ...), read whole:
    the one way SQL kept beside its module is loaded."""
    return files(package).joinpath(name).read_text()
