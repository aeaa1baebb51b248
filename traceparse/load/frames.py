"""The store from Python: run SQL on a run's store and get a polars DataFrame."""

from contextlib import closing

import polars as pl

from traceparse.load.run import connect, open_run


def frame(sql: str, paths=(), db=None, use_cache=True, allow_mixed=False) -> pl.DataFrame:
    """``frame("SELECT * FROM comm_ops", ["run/"])``: load (or reuse) the store of ``paths``,
    or open the store ``db``, and return the query's result."""
    if paths:
        session = open_run(list(paths), db=db, use_cache=use_cache, allow_mixed=allow_mixed)
    else:
        session = closing(connect(db))
    with session as con:
        return con.sql(sql).pl()
