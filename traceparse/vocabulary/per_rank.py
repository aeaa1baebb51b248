"""What depends on one rank only, computed in the task that parsed it (the local pool or a Ray task) and written as
the rank's Parquet (traceparse/store/parts.py):

  per_rank.sql            its events on the run's clock with their step and thread name; its steps, threads,
                          recorded shapes, communication args and memory
  ``UNTAGGED``            main threads, step windows, backward passes, pipeline marks
  store/derive.sql        its communication operations (comm_ops before groups and tags), their kernel links and
                          why a size is unknown
  interval_geometry.sql   its intervals of compute and communication, placed in its windows
  op_self_times.sql       the shortest self time of each of its CPU ops (the compute floor's per-rank part)

``PER_RANK`` is the order after per_rank.sql. The driver reads the events and the intermediate tables through
views, copies the small tables (``COPIED``), and computes only what crosses ranks: groups, the sizes other ranks
give, tags, layout, and what needs the tags.
"""

import shutil
from pathlib import Path

import duckdb

from traceparse.store.build import rank_group_rows
from traceparse.store.parts import BUILD_ONLY, COPIED, VIEWS
from traceparse.store.query import sql_file
from traceparse.store.schema import ddl
from traceparse.vocabulary import UNTAGGED

RAW = ("events", "threads", "op_args", "comm_args", "memory")  # the parser's staged tables (ingest/rank.py)
PER_RANK = (*(("traceparse.vocabulary", n) for n in UNTAGGED), ("traceparse.store", "derive.sql"),
            ("traceparse.vocabulary", "interval_geometry.sql"), ("traceparse.vocabulary", "op_self_times.sql"))


def run_per_rank(con):
    """The per-rank SQL after per_rank.sql (``PER_RANK``), on ``con``'s tables (one rank's, or none)."""
    for package, name in PER_RANK:
        con.execute(sql_file(package, name))


def prepare_rank(raw: Path, out: Path, summary: dict, kernel_rules: list[dict]):
    """Read the parser's staged tables in ``raw`` and write the rank's tables into ``out``; ``raw`` is removed.
    ``summary``: the parse summary (clock offset, world size, process groups); ``kernel_rules``: the custom
    communication kernel rules (traceparse.tagging.comm_kernels), read once by the driver."""
    con = duckdb.connect(config={"threads": 1})  # one task per core already
    try:
        con.execute("SET preserve_insertion_order = false")
        con.execute(ddl(VIEWS + COPIED + ("ranks", "process_groups"), comments=False))
        con.execute(sql_file("traceparse.store", "macros.sql"))
        for table in RAW:
            con.read_parquet(str(Path(raw) / f"{table}.parquet")).create_view(f"raw_{table}")
        con.execute("SET VARIABLE offset_ns = ?", [summary["clock_offset_ns"]])
        con.execute(sql_file(__package__, "per_rank.sql"))
        con.execute("INSERT INTO ranks (rank, world_size) VALUES (0, ?)", [summary["world_size"]])
        groups = rank_group_rows({**summary, "rank": 0})
        if groups:
            con.executemany("INSERT INTO process_groups VALUES (?, ?, ?, ?, ?, ?)", groups)
        con.execute("CREATE TEMP TABLE comm_kernel_rules (id VARCHAR, pattern VARCHAR, op VARCHAR)")
        if kernel_rules:
            con.executemany("INSERT INTO comm_kernel_rules VALUES (?, ?, ?)",
                            [(r["id"], r["pattern"], r["op"]) for r in kernel_rules])
        run_per_rank(con)
        for table in VIEWS + COPIED + BUILD_ONLY:
            con.table(table).project("* EXCLUDE (rank)").write_parquet(str(Path(out) / f"{table}.parquet"))
    finally:
        con.close()
    shutil.rmtree(raw, ignore_errors=True)
