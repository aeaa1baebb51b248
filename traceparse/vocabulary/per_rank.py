"""What depends on one rank only, computed in the task that parsed it (the local pool or a Ray task) and written as
Parquet (traceparse/store/parts.py). A task takes a batch of files (small files together: one DuckDB session
per batch, not per file) and runs, over every rank of the batch at once (the SQL is per rank throughout):

  per_rank.sql            their events on the run's clock with their step and thread name; their steps, threads,
                          recorded shapes, communication args and memory
  ``UNTAGGED``            main threads, step windows, backward passes, pipeline marks
  world.sql               the job's size as their headers state it (derive's guard)
  store/derive.sql        their communication operations (comm_ops before groups and tags), their kernel links and
                          why a size is unknown
  interval_geometry.sql   their intervals of compute and communication, placed in their windows
  op_self_times.sql       the shortest self time of each of their CPU ops (the compute floor's per-rank part)
  gpu_activity.sql        their GPU kernels, memcpys and memsets with the calls that launched them
  busy_time.sql           how long each of their threads and streams worked in their profiled span

A small run parsed in the driver's own process (``load.run.in_store``) runs the same SQL on the store's connection
instead, into the store's tables (``tables_in_store``): no session of its own, no Parquet.

``PER_RANK`` is the order after per_rank.sql. Ranks are known only once every file is read, so a rank's rows carry
its file's ``slot`` (its position among the load's files); the store maps slots to ranks. The driver reads the
events and the intermediate tables through views, copies the small tables (``COPIED``), and computes only what
crosses ranks: groups, the sizes other ranks give, tags, layout, and what needs the tags.
"""

import shutil
from pathlib import Path

import duckdb

from traceparse.ingest.rank import SCHEMAS
from traceparse.store.build import insert_kernel_rules, rank_group_rows
from traceparse.store.parts import BUILD_ONLY, COPIED, VIEWS, table_file
from traceparse.store.query import sql_file
from traceparse.store.schema import ddl
from traceparse.store.trust import literal_path
from traceparse.vocabulary import UNTAGGED
from traceparse.vocabulary.modules import order

RAW = tuple(SCHEMAS)  # the parser's staged tables (ingest/rank.py)
PER_RANK = (*(("traceparse.vocabulary", n) for n in UNTAGGED), ("traceparse.vocabulary", "world.sql"),
            ("traceparse.store", "derive.sql"),  # kernel_call, size_gap: read by interval_geometry.sql
            *(("traceparse.vocabulary", n) for n in order(("interval_geometry.sql", "op_self_times.sql",
                                                           "gpu_activity.sql", "busy_time.sql"))))


def run_per_rank(con):
    """The per-rank SQL after per_rank.sql (``PER_RANK``), on ``con``'s tables (some ranks', or none)."""
    for package, name in PER_RANK:
        con.execute(sql_file(package, name))


def raw_folder(stage: Path, slot: int) -> Path:
    """Where the parser stages the tables of the file in ``slot`` (read by ``prepare_ranks``, then removed)."""
    return Path(stage) / "raw" / f"slot={slot}"


def prepare_ranks(stage: Path, batch: int, ranks: list[tuple[int, dict]], kernel_rules: list[dict]):
    """The tables of ``ranks`` (``(slot, parse summary)``: staged in ``raw_folder(stage, slot)``) written as
    ``stage/<table>/b<batch>.parquet`` (``parts.table_file``), each row with its slot; the staged tables removed.
    ``kernel_rules``: the custom communication kernel rules (traceparse.tagging.comm_kernels), read once by the
    driver."""
    con = duckdb.connect(config={"threads": 1})  # one task per core already
    try:
        con.execute("SET preserve_insertion_order = false")
        con.execute(ddl(VIEWS + COPIED + ("ranks", "process_groups"), comments=False))
        con.execute(sql_file("traceparse.store", "macros.sql"))
        con.executemany("INSERT INTO ranks (rank, world_size) VALUES (?, ?)", [(slot, s["world_size"])
                                                                             for slot, s in ranks])
        groups = [row for slot, s in ranks for row in rank_group_rows({**s, "rank": slot})]
        if groups:
            con.executemany("INSERT INTO process_groups VALUES (?, ?, ?, ?, ?, ?)", groups)
        _per_rank_tables(con, stage, [(slot, slot, s["clock_offset_ns"]) for slot, s in ranks], kernel_rules)
        for table in VIEWS + COPIED + BUILD_ONLY:
            target = table_file(stage, table, batch)
            target.parent.mkdir(exist_ok=True)
            con.table(table).project("rank AS slot, * EXCLUDE (rank)").write_parquet(str(target))
    finally:
        con.close()
    for slot, _ in ranks:
        shutil.rmtree(raw_folder(stage, slot), ignore_errors=True)


def tables_in_store(con, stage: Path, kernel_rules: list[dict], ranks: list[dict]):
    """The tables of ``ranks`` (parse summaries with rank, slot and clock set; staged in ``raw_folder(stage, slot)``)
    made by the per-rank SQL on the store's own connection ``con``, into the store's tables, with their ranks and
    on the run's clock from the start (``prepare_ranks`` writes slots and the file's clock, which the store's views
    map: ``parts``): a small run parsed in this process (``load.run.in_store``), one DuckDB session and no Parquet
    between. The store's ``ranks``, ``process_groups`` and ``rank_slots`` are in already."""
    _per_rank_tables(con, stage, [(r["slot"], r["rank"], r["clock_offset_ns"] + r.get("clock_shift_ns", 0))
                                  for r in ranks], kernel_rules)


def _per_rank_tables(con, stage: Path, clocks: list[tuple[int, int, int]], kernel_rules: list[dict]):
    """per_rank.sql, then the per-rank SQL after it (``run_per_rank``), on ``con`` over the parser's staged tables of
    the files ``clocks`` names, as ``(slot, rank, clock offset)``: their rows with that rank, on that clock."""
    con.execute("CREATE TEMP TABLE clock (slot INTEGER, rank INTEGER, offset_ns BIGINT)")
    con.executemany("INSERT INTO clock VALUES (?, ?, ?)", clocks)
    for table in RAW:  # each file named literally: a stage path holding [, * or ? is no pattern
        files = ", ".join(literal_path(raw_folder(stage, slot) / f"{table}.parquet") for slot, _, _ in clocks)
        con.execute(f"CREATE TEMP VIEW raw_{table} AS SELECT t.* EXCLUDE (slot), c.rank "
                    f"FROM read_parquet([{files}], hive_partitioning = true) t JOIN clock c ON c.slot = t.slot::INTEGER")
    con.execute(sql_file(__package__, "per_rank.sql"))
    insert_kernel_rules(con, kernel_rules)
    run_per_rank(con)
