"""A store's per-rank part: the folder of each rank's Parquet, written by the task that parsed the rank
(``traceparse.vocabulary.per_rank``), which the store reads through views instead of holding a copy.

``<store>.ranks/rank=N/<table>.parquet``: the rank's events, steps, threads, recorded shapes, communication
args and memory (the ``VIEWS``, on the run's clock, without their rank column: the folder's name gives it),
plus the vocabulary and communication operations that need no other rank (``COPIED``: small, copied into the
store) and the intermediate tables the build reads (``BUILD_ONLY``). The store keeps each view's table empty, with its columns and comments, as documentation;
a connection made with ``attach`` shadows it with a view over the folder. The folder's ``BUILD`` file holds
the token the store's ``meta`` row ``parts`` names: a store is never read with another build's folder.
"""

import secrets
from pathlib import Path

from traceparse.errors import TraceError
from traceparse.store.schema import TABLES, VOCABULARY

VIEWS = ("events", "steps", "threads", "op_args", "comm_args", "memory")
COPIED = ("main_threads", "step_windows", "backward_passes", "pipeline_marks", "comm_ops")
# read while the store is built (layout inference, finish.sql, intervals.sql), not kept
BUILD_ONLY = ("pass_events", "kernel_call", "size_gap", "placed_intervals")
TOKEN_FILE = "BUILD"


def folder_of(store: Path) -> Path:
    """The per-rank folder of the store file ``store``: beside it, ``<name>.ranks``."""
    store = Path(store)
    return store.with_name(store.name + ".ranks")


def rank_folder(parts: Path, rank: int) -> Path:
    return Path(parts) / f"rank={rank}"


def new_token(parts: Path) -> str:
    """Write a fresh build token into the folder ``parts``; return it (for the store's ``meta``)."""
    token = secrets.token_hex(8)
    (Path(parts) / TOKEN_FILE).write_text(token + "\n")
    return token


def token_of(parts: Path) -> str | None:
    try:
        return (Path(parts) / TOKEN_FILE).read_text().strip()
    except OSError:
        return None


def columns(table: str) -> list[str]:
    return [c for c, _, _ in {**TABLES, **VOCABULARY}[table][1]]


def _relation(parts: Path, table: str) -> str:
    """SQL text of every rank's ``table`` in ``parts``, with the rank from the folder name, in schema order."""
    glob = str(Path(parts) / "rank=*" / f"{table}.parquet").replace("'", "''")
    cols = columns(table) if table in TABLES or table in VOCABULARY else ["*"]
    return (f"SELECT {', '.join(cols)} FROM read_parquet('{glob}', hive_partitioning = true, "
            "hive_types = {'rank': INTEGER})")


def ranks_in(parts: Path) -> int:
    return sum(1 for p in Path(parts).glob("rank=*") if p.is_dir())


def attach_views(con, parts: Path, build: bool = False):
    """Views named after the per-rank tables over the folder ``parts`` (temporary: they shadow the store's empty
    tables in this connection only). ``build``: also the build's own ``pass_events``."""
    for table in VIEWS + (BUILD_ONLY if build else ()):
        con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS {_relation(parts, table)}")


def copy_vocabulary(con, parts: Path):
    """The per-rank vocabulary (small) into the store's tables."""
    for table in COPIED:
        con.execute(f"INSERT INTO {table} {_relation(parts, table)}")


def attach(con, store: Path):
    """Attach the per-rank folder of the store ``store`` to ``con``, when the store has one; a missing folder, or
    another build's, is a TraceError naming the store."""
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'parts'").fetchone()
    except Exception:  # not a store (yet): nothing to attach
        return
    if not row:
        return  # a store of Flight Recorder dumps alone: no rank has events
    parts = folder_of(store)
    if token_of(parts) != row[0]:
        raise TraceError(store, f"its per-rank folder {parts.name} is missing or from another build; load the "
                                "traces again")
    attach_views(con, parts)
