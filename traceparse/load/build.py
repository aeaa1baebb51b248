"""Build a store from staged per-rank Parquet output: every stage in order, in one transaction.

raw rows (store) -> derive.sql, process groups, finish.sql (store) -> the vocabulary that needs no tags
(main threads, step windows, backward passes, pipeline marks) -> tagging (comm_features, rules) -> layout
inference -> the vocabulary that needs the tags (intervals, window totals, arrivals).
"""

from traceparse.layout.infer import infer_layout
from traceparse.store.build import create_store, derive, insert_kernel_rules, insert_layout, insert_raw
from traceparse.tagging.comm_kernels import comm_kernel_rules
from traceparse.tagging.tag import tag_comm_ops
from traceparse.vocabulary import build_tagged, build_untagged


def build_store(db_path, ranks: list[dict], issues: list[tuple], meta: dict, dumps=()):
    """Write the store at ``db_path`` (a fresh file). ``ranks`` are parse summaries with rank and clock set;
    ``dumps`` Flight Recorder dumps (traceparse.ingest.flight_recorder.read_dump)."""
    con = create_store(db_path)
    try:
        con.execute("BEGIN TRANSACTION")
        insert_raw(con, ranks, issues, meta, dumps)
        insert_kernel_rules(con, comm_kernel_rules())
        derive(con)
        build_untagged(con)
        tag_comm_ops(con)
        insert_layout(con, infer_layout(con))
        build_tagged(con)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    finally:
        con.close()
