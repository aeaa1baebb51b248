"""A store's per-rank part: the Parquet of each rank's tables, written by the tasks that parsed the ranks
(``traceparse.vocabulary.per_rank``), which the store reads through views instead of holding a copy.

``<store>.ranks/<build>/<table>/b<batch>.parquet``: per batch of files parsed together, the ranks' events, steps,
threads, recorded shapes, communication args and memory (the ``VIEWS``, on the run's clock), the vocabulary and
communication operations that need no other rank (``COPIED``: small, copied into the store) and the intermediate
tables the build reads (``BUILD_ONLY``). Each row carries its file's ``slot``; the store's ``rank_slots`` maps
slots to ranks (the ranks are known only once every file is read; a file not loaded, another profiled window, has
no rank and its rows are not read). The store keeps each view's table empty, with its columns and comments, as
documentation; a connection made with ``attach`` shadows it with a view over the build the store's ``meta`` row
``parts`` names.

A small run parsed in the loading process has no per-rank part: its rows are in the store's tables
(``vocabulary.per_rank.tables_in_store``), and its ``meta`` names no ``parts``.

Each build writes a folder of its own, so loads of one store at once never share one, and a store replaced while
it is read leaves its reader its folder: the folder's ``BUILD`` file is locked, exclusively by the load writing it
until its store is in place, shared by every connection reading it (released when the connection is gone or the
process ends). A connection takes that hold while no load of the store can put another in place (``opening``),
so the folder the store it opened names cannot go before it is held. ``publish`` removes the folders of a store that nobody holds and its store no longer names, and the
last connection out of such a folder removes it when this process made it (``_made``) or the store is an entry of
traceparse's cache: a reader of a store it was given removes no folder of another process's (the store's next load
collects it).

A store is untrusted input (``traceparse.store.trust``): the ``parts`` it names is read as the name of one folder of
its own ``<store>.ranks`` (``build_folder``: a token as ``new_build`` makes them, neither a path nor a link), else
the store is refused; and what is ever removed is a token-named folder (not a link) of a ``.ranks`` folder (not a
link) that holds a ``BUILD`` file nobody locks, or the bookkeeping files of an emptied ``.ranks`` folder.
"""

import fcntl
import os
import re
import secrets
import shutil
import stat
import weakref
from contextlib import contextmanager
from pathlib import Path

from traceparse.errors import TraceError, shown
from traceparse.store.schema import TABLES, VOCABULARY
from traceparse.store.trust import literal_path, vouch

VIEWS = ("events", "steps", "threads", "op_args", "comm_args", "memory", "gpu_activity")
COPIED = ("main_threads", "step_windows", "backward_passes", "pipeline_marks", "comm_ops", "op_self_times", "lane_busy")
# read while the store is built (layout inference, finish.sql, intervals.sql), not kept
BUILD_ONLY = ("pass_events", "kernel_call", "size_gap", "placed_intervals")
# the columns of each per-rank table that are moments (not durations): moved by the rank's clock shift as they are read
# (rank_slots.clock_shift_ns: its host's clock against the first rank's, traceparse/load/clocks.py)
MOMENTS = {
    "events": ("ts_ns",), "steps": ("start_ns", "end_ns"), "memory": ("ts_ns",),
    "gpu_activity": ("start_ns", "end_ns", "launch_ns", "launch_end_ns"),
    "step_windows": ("start_ns", "end_ns"), "backward_passes": ("start_ns", "end_ns"), "pipeline_marks": ("ts_ns",),
    "comm_ops": ("host_ts_ns", "exec_ts_ns"), "pass_events": ("ts_ns", "end_ns"),
    "placed_intervals": ("start_ns", "end_ns", "anchor_ns"),
}
LOCK = "BUILD"
CURRENT = "CURRENT"  # the build folder the store in place names (written by publish)
PUBLISH = ".publish"  # the lock file of loads of one store (_publishing)
TOKEN = re.compile(r"[0-9a-f]{16}")  # a build folder's name (new_build: secrets.token_hex(8))


def folder_of(store: Path) -> Path:
    """The per-rank folders of the store file ``store``: beside it, ``<name>.ranks``, one folder per build."""
    store = Path(store)
    return store.with_name(store.name + ".ranks")


def table_file(parts: Path, table: str, batch: int) -> Path:
    """The file of ``table`` written by batch ``batch``."""
    return Path(parts) / table / f"b{batch}.parquet"


_made: dict[str, int] = {}  # build folder (real path) -> the process that made it (a forked child did not)


def new_build(store: Path) -> tuple[str, Path, int]:
    """(token, folder, lock): a fresh build folder of ``store``, locked for writing until ``os.close(lock)``."""
    token = secrets.token_hex(8)
    container = folder_of(store)
    for attempt in range(3):
        container.mkdir(exist_ok=True)
        try:
            with _publishing(container):  # not swept while it is made
                folder = container / token
                folder.mkdir()
                _made[os.path.realpath(folder)] = os.getpid()
                lock = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(lock, fcntl.LOCK_EX)
            return token, folder, lock
        except FileNotFoundError:  # the empty container was swept between its mkdir and the lock
            if attempt == 2:
                raise


@contextmanager
def _publishing(container: Path):
    """The lock under which loads of one store make their folders, put their store in place and collect."""
    fd = os.open(container / PUBLISH, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextmanager
def opening(store: Path):
    """While a connection opens the store ``store`` and takes hold of the build folder it names: no load of the
    store puts another in place or collects a folder (``_publishing``'s lock, shared by readers), so the folder the
    store names is there until it is held. A store whose folders have no such lock (copied without it, or none)
    is opened without it: a folder gone meanwhile is ``Gone`` and the store is opened again. The lock is taken
    only on a regular file (a store handed over is untrusted: a FIFO in its place would block the reader)."""
    try:
        fd = os.open(folder_of(store) / PUBLISH, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        fd = None
    if fd is not None and not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        fd = None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        if fd is not None:
            os.close(fd)


def publish(tmp: Path, store: Path, token: str | None):
    """Move the store built at ``tmp`` (naming the build folder ``token``, None for none) over ``store``, then remove
    the build folders of ``store`` that it does not name and that no load is writing and no connection reads. Loads
    publish one at a time (a lock beside the folders): a folder is never collected while a store that names it is
    being put in place. The store, built here, is not vetted again when this process reads it (``trust.vouch``)."""
    container = folder_of(store)
    container.mkdir(exist_ok=True)
    with _publishing(container):
        os.replace(tmp, store)
        vouch(store)
        current = container / f".{CURRENT}.{os.getpid()}"
        current.write_text(token or "")
        os.replace(current, container / CURRENT)
        _collect(container, token)


def sweep(container: Path):
    """Remove the build folders of a store that is gone (``container``: its ``<name>.ranks``), but those being
    written or read; the container too once empty."""
    try:
        with _publishing(container):
            store = container.with_name(container.name[: -len(".ranks")])
            if store.exists():
                return  # put in place meanwhile
            _collect(container, None)
            _remove_if_empty(container)
    except OSError:
        return  # swept by another load meanwhile, or holding files of someone else's


def tidy(container: Path):
    """Remove the ``.ranks`` folder of a store in place when it holds no build folder: the store names none (a small
    run's, whose rows are its own, or dumps alone), or a load of it failed before it made one."""
    try:
        with _publishing(container):
            _remove_if_empty(container)
    except OSError:
        return  # gone already


def _remove_if_empty(container: Path):
    """The ``.ranks`` folder removed when it holds no build folder (under the publish lock)."""
    try:
        if not any(p.is_dir() for p in container.iterdir()):
            for name in (CURRENT, PUBLISH):  # traceparse's own files; anything else keeps the folder
                (container / name).unlink(missing_ok=True)
            container.rmdir()
    except OSError:
        return  # holding files of someone else's


def stored(db: Path) -> tuple[str | None, str | None]:
    """(key, build folder token) of the store file ``db``; (None, None) for a file that is no store. A store that
    is refused (``trust.vet``, ``build_folder``) raises ``TraceError``."""
    import duckdb

    from traceparse.store.trust import NotAStore, confine, lock, open_store

    try:
        con = open_store(db)
    except (duckdb.Error, NotAStore):
        return None, None
    try:
        confine(con, db, None)
        lock(con)
        rows = dict(con.execute("SELECT key, value FROM meta WHERE key IN ('key', 'parts')").fetchall())
    except duckdb.Error:
        return None, None
    finally:
        con.close()
    token = rows.get("parts")
    if token is not None:
        build_folder(db, token)  # refused unless a folder of its own
    return rows.get("key"), token


def build_folder(store: Path, token: str) -> Path:
    """The build folder ``token`` (read from the store ``store``'s ``meta`` row ``parts``) names: a folder of the
    store's own ``<store>.ranks``, resolved. Refuses (``TraceError``) a token that is not a build folder's name (a
    path, ``..``), and a ``.ranks`` folder or build folder that is a link (it would lead elsewhere)."""
    container = folder_of(store)
    if not isinstance(token, str) or not TOKEN.fullmatch(token):
        raise TraceError(store, f"its meta row 'parts' ({shown(repr(token))}) is not the name of a build folder in "
                         f"{container.name}; refused (a store reads its per-rank Parquet from its own folder only)")
    real = Path(os.path.realpath(container.parent)) / container.name
    folder = real / token
    if os.path.realpath(folder) != str(folder):
        raise TraceError(store, f"its per-rank folder {container.name}/{token} is a link to "
                         f"{shown(os.path.realpath(folder))}; refused (a store reads its own folder only)")
    return folder


def _collect(container: Path, keep: str | None):
    if container.is_symlink():
        return  # not a folder of traceparse's
    try:
        folders = [p for p in container.iterdir() if TOKEN.fullmatch(p.name) and p.name != keep]
    except OSError:
        return
    for folder in folders:
        _collect_one(folder)


def _collect_one(folder: Path):
    """Remove the build folder unless a load writes it or a connection reads it (or it is not yet locked), or it is
    no build folder: a link, or without its lock file (``BUILD``, a file, not a link)."""
    if folder.is_symlink() or folder.parent.is_symlink() or not TOKEN.fullmatch(folder.name):
        return
    try:
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return  # just made, not yet locked by its load, or gone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return  # held: being written or read
    shutil.rmtree(folder, ignore_errors=True)
    os.close(fd)


def release(fd: int, store: Path, token: str):
    """Let go of the build folder ``token`` of ``store`` that this process's load made (held by ``fd``), and remove
    it when the store no longer names it (``CURRENT``: a later load replaced the store) and nobody else holds it."""
    os.close(fd)
    try:
        container = folder_of(store)
        with _publishing(container):
            if _current(container) != token:
                _collect_one(container / token)
    except OSError:
        pass  # a store gone with its folders: a later load sweeps what is left


def release_read(fd: int, store: Path, token: str):
    """Let go of the build folder ``token`` of ``store`` that a connection read (held by ``fd``); remove it as
    ``release`` does only when this process made it (its load, replaced since by another) or the store is an entry
    of traceparse's own cache (whose loads, in any process, each leave the last reader out to collect)."""
    if _made.get(os.path.realpath(folder_of(store) / token)) == os.getpid() or _in_cache(store):
        release(fd, store, token)
    else:
        os.close(fd)


def _in_cache(store: Path) -> bool:
    from traceparse.cache_dir import cache_dir

    try:
        return os.path.realpath(Path(store).parent) == os.path.realpath(cache_dir())
    except OSError:
        return False


def _current(container: Path) -> str | None:
    """The build folder the store in place names, as its last ``publish`` wrote it (read under the publish lock).
    Not read from the store itself: a file read, not a database opened (and vetted) under the lock."""
    try:
        return (container / CURRENT).read_text().strip() or None
    except FileNotFoundError:
        return None


def columns(table: str) -> list[str]:
    return [c for c, _, _ in {**TABLES, **VOCABULARY}[table][1]]


def _relation(parts: Path, table: str) -> str:
    """SQL text of every loaded rank's ``table`` in ``parts``, with the rank its slot maps to, in schema order. The
    files are listed here, each named literally (``trust.literal_path``): whatever characters the folder's path
    holds (``[``, ``*``, ``?``, quotes), it is no pattern."""
    try:
        files = sorted(str(p) for p in (Path(parts) / table).iterdir() if p.name.endswith(".parquet"))
    except OSError:
        files = []
    if not files:
        raise Incomplete(table)
    moved = MOMENTS.get(table, ())
    if table in TABLES or table in VOCABULARY:
        cols = ", ".join("s.rank" if c == "rank" else f"t.{c} + s.clock_shift_ns AS {c}" if c in moved else f"t.{c}"
                         for c in columns(table))
    else:
        replace = f" REPLACE ({', '.join(f't.{c} + s.clock_shift_ns AS {c}' for c in moved)})" if moved else ""
        cols = f"s.rank, t.* EXCLUDE (slot){replace}"
    listed = ", ".join(literal_path(f) for f in files)
    return f"SELECT {cols} FROM read_parquet([{listed}]) t JOIN main.rank_slots s USING (slot)"


def attach_views(con, parts: Path, build: bool = False):
    """Views named after the per-rank tables over the folder ``parts`` (temporary: they shadow the store's empty
    tables in this connection only). ``build``: also the build's intermediate tables."""
    for table in VIEWS + (BUILD_ONLY if build else ()):
        con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS {_relation(parts, table)}")


def copy_vocabulary(con, parts: Path):
    """The per-rank vocabulary and communication operations (small) into the store's tables."""
    for table in COPIED:
        con.execute(f"INSERT INTO {table} {_relation(parts, table)}")


def parts_token(con) -> str | None:
    """The build folder the store on ``con`` names; None for a store with none (Flight Recorder dumps alone) or a
    database that is no store."""
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'parts'").fetchone()
    except Exception:  # no meta table: not a store (yet)
        return None
    return row[0] if row else None


_held = weakref.WeakKeyDictionary()  # connection -> the finalizer that lets go of its build folder (closes its lock)


class Gone(Exception):
    """The store's build folder is missing (replaced by a later load of the same store, or deleted)."""


class Incomplete(Exception):
    """A build folder without the Parquet of one of its tables (damaged)."""


def attach(con, store: Path, full_access: bool = False):
    """Attach the build folder of the store ``store`` to ``con`` (``trust.open_store``), hold it for reading while
    ``con`` lives (until it is gone, or ``detach``), and confine ``con`` to it (``trust.confine``; ``full_access``:
    ``traceparse sql``'s own query). Raises ``Gone`` when the folder is missing, ``TraceError`` for a store whose
    ``parts`` is not a folder of its own (``build_folder``) or whose folder is damaged."""
    from traceparse.store.trust import confine, lock

    token = parts_token(con)
    folder = None if token is None else build_folder(store, token)
    confine(con, store, folder, full_access)
    if folder is not None:
        try:
            fd = os.open(folder / LOCK, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            raise Gone(folder) from None
        fcntl.flock(fd, fcntl.LOCK_SH)
        if not (folder / LOCK).exists():  # collected between the open and the lock
            os.close(fd)
            raise Gone(folder)
        _held[con] = weakref.finalize(con, release_read, fd, Path(store), token)
        try:
            attach_views(con, folder)
        except Incomplete as e:
            raise TraceError(store, f"its per-rank folder {folder_of(store).name}/{token} has no Parquet of "
                             f"{e.args[0]}; load the traces again") from None
    lock(con, full_access)


def detach(con):
    """Let go of the build folder ``con`` holds now, not when ``con`` is collected: a process that ends with
    ``os._exit`` (a multiprocessing worker) never collects it."""
    held = _held.pop(con, None)
    if held is not None:
        held()


def missing(store: Path) -> TraceError:
    return TraceError(store, f"its per-rank folder in {folder_of(store).name} is missing; load the traces again")
