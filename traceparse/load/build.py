"""Build a store over the ranks' Parquet: every stage that crosses ranks, in order, in one transaction.

the run's rows, each rank's tables and vocabulary (written by its parse task: traceparse/vocabulary/per_rank.py)
attached -> the complete steps (vocabulary/complete_steps.sql) -> derive.sql, process groups, finish.sql (store) ->
tagging (comm_features, rules) -> layout inference
-> the vocabulary that needs the tags (intervals, window totals, arrivals).
"""

import duckdb

from traceparse.layout.infer import infer_layout
from traceparse.store.build import create_store, derive, insert_kernel_rules, insert_layout, insert_raw
from traceparse.tagging.tag import tag_comm_ops
from traceparse.vocabulary import build_cross_rank, build_tagged
from traceparse.vocabulary.per_rank import run_per_rank


def build_store(db_path, ranks: list[dict], issues: list[tuple], meta: dict, dumps=(), parts=None):
    """Write the store at ``db_path`` (a fresh file). ``ranks`` are parse summaries with rank and clock set, their
    tables in the per-rank folder ``parts`` (traceparse/store/parts.py); ``dumps`` Flight Recorder dumps
    (traceparse.ingest.flight_recorder.read_dump)."""
    con = create_store(db_path)
    try:
        con.execute("BEGIN TRANSACTION")
        insert_raw(con, ranks, issues, meta, dumps, parts)
        if not ranks:  # Flight Recorder dumps alone: the per-rank tables of no rank (empty)
            insert_kernel_rules(con, [])
            run_per_rank(con)
        build_cross_rank(con)
        derive(con)
        tag_comm_ops(con)
        insert_layout(con, infer_layout(con))
        build_tagged(con)
        con.execute("COMMIT")
    except BaseException:
        _rollback(con)
        raise
    finally:
        con.close()


def _rollback(con):
    """Roll the build back; a transaction DuckDB already ended (a Ctrl-C that lands in its COMMIT) needs none, and
    saying so must not hide the interrupt."""
    try:
        con.execute("ROLLBACK")
    except duckdb.TransactionException:
        pass
