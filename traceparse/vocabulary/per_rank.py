"""What depends on one rank only, computed in the task that parsed it (the local pool or a Ray task), written as the
rank's Parquet (traceparse/store/parts.py): its events on the run's clock with their step and thread name, its
steps, threads, recorded shapes, communication args and memory (per_rank.sql), then the vocabulary that needs no
other rank (main threads, step windows, backward passes, pipeline marks: ``UNTAGGED``, the same SQL the store would
run). The driver reads the first through views and copies the second (small); it computes only what crosses ranks.
"""

import shutil
from pathlib import Path

import duckdb

from traceparse.store.parts import BUILD_ONLY, COPIED, VIEWS
from traceparse.store.query import sql_file
from traceparse.store.schema import ddl
from traceparse.vocabulary import UNTAGGED

RAW = ("events", "threads", "op_args", "comm_args", "memory")  # the parser's staged tables (ingest/rank.py)


def prepare_rank(raw: Path, out: Path, offset_ns: int):
    """Read the parser's staged tables in ``raw`` and write the rank's tables into ``out``; ``raw`` is removed."""
    con = duckdb.connect(config={"threads": 1})  # one task per core already
    try:
        con.execute("SET preserve_insertion_order = false")
        con.execute(ddl())
        con.execute(sql_file("traceparse.store", "macros.sql"))
        for table in RAW:
            con.read_parquet(str(Path(raw) / f"{table}.parquet")).create_view(f"raw_{table}")
        con.execute("SET VARIABLE offset_ns = ?", [offset_ns])
        con.execute(sql_file(__package__, "per_rank.sql"))
        for name in UNTAGGED:
            con.execute(sql_file(__package__, name))
        for table in VIEWS + COPIED + BUILD_ONLY:
            target = str(Path(out) / f"{table}.parquet")
            con.table(table).project("* EXCLUDE (rank)").write_parquet(target)
    finally:
        con.close()
    shutil.rmtree(raw, ignore_errors=True)
