"""Build a store over the ranks' Parquet: every stage that crosses ranks, in order, in one transaction.

the run's rows, each rank's tables and vocabulary (written by its parse task: traceparse/vocabulary/per_rank.py)
attached -> the complete steps (vocabulary/complete_steps.sql) -> derive.sql, process groups, finish.sql (store) ->
tagging (comm_features, rules) -> layout inference
-> the vocabulary that needs the tags (intervals, window totals, arrivals) -> the hosts' clocks (load/clocks.py: where
they differ, the whole build again with each rank's times moved).
"""

from functools import partial
from pathlib import Path

import duckdb

from traceparse.layout.infer import infer_layout
from traceparse.load import clocks
from traceparse.store.build import create_store, derive, insert_kernel_rules, insert_layout, insert_raw
from traceparse.store.trust import sized
from traceparse.tagging.tag import tag_comm_ops
from traceparse.vocabulary import build_cross_rank, build_tagged
from traceparse.vocabulary.per_rank import run_per_rank, tables_in_store


def build_store(db_path, ranks: list[dict], issues: list[tuple], meta: dict, dumps=(), parts=None, raw=None):
    """Write the store at ``db_path`` (a fresh file). ``ranks`` are parse summaries with rank and clock set, their
    tables in the per-rank folder ``parts`` (traceparse/store/parts.py), or, with ``raw`` (``(stage, kernel
    rules)``: a small run parsed in this process, ``load.run.in_store``), made here from the parser's staged tables
    into the store itself (``per_rank.tables_in_store``); ``dumps`` Flight Recorder dumps
    (traceparse.ingest.flight_recorder.read_dump). Where the traces prove the hosts' clocks differ
    (traceparse.load.clocks), the store is built again with each rank's times moved by its clock's shift."""
    shifts, attempt = {}, 0
    while True:
        got = _build(db_path, [{**r, "clock_shift_ns": shifts.get(r["rank"], 0)} for r in ranks], issues, meta, dumps,
                     parts, raw, partial(clocks.settle, shifts=shifts, attempt=attempt))
        if got is None:
            return
        Path(db_path).unlink(missing_ok=True)
        Path(f"{db_path}.wal").unlink(missing_ok=True)
        shifts, attempt = got, attempt + 1


def _build(db_path, ranks, issues, meta, dumps, parts, raw, settle):
    """One build; ``settle(con)`` (ranks only) decides on the clocks: None keeps the build (its rows of clocks and
    load issues written), else the shifts to build again with (this one rolled back, and returned)."""
    con = create_store(db_path)
    sized(con, sum(r.get("n_events") or 0 for r in ranks))
    again = None
    try:
        con.execute("BEGIN TRANSACTION")
        insert_raw(con, ranks, issues, meta, dumps, None if raw else parts)
        if ranks and raw:
            tables_in_store(con, *raw, ranks)
        elif not ranks:  # Flight Recorder dumps alone: the per-rank tables of no rank (empty)
            insert_kernel_rules(con, [])
            run_per_rank(con)
        build_cross_rank(con)
        derive(con)
        tag_comm_ops(con)
        insert_layout(con, infer_layout(con))
        build_tagged(con)
        again = settle(con) if ranks else None
        if again is None:
            con.execute("COMMIT")
        else:
            _rollback(con)
    except BaseException:
        _rollback(con)
        raise
    finally:
        con.close()
    return again


def _rollback(con):
    """Roll the build back; a transaction DuckDB already ended (a Ctrl-C that lands in its COMMIT) needs none, and
    saying so must not hide the interrupt."""
    try:
        con.execute("ROLLBACK")
    except duckdb.TransactionException:
        pass
