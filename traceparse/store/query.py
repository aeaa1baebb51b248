"""Run a query on a store and get plain rows (dicts); tell a damaged database file from other DuckDB errors."""

from functools import cache
from importlib.resources import files


def rows(con, sql, params=None) -> list[dict]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def relation_rows(rel) -> list[dict]:
    """A DuckDB relation's rows as dicts (``rows`` for a view or table read with ``con.table``)."""
    names = rel.columns
    return [dict(zip(names, r, strict=True)) for r in rel.fetchall()]


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
