"""Load a run: files -> parallel per-rank parsing -> one DuckDB store.

The store is written to a temporary file next to its destination and moved
into place only when complete, so a failed load leaves nothing half-written.
"""

import atexit
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from functools import cache
from importlib import resources
from pathlib import Path

from traceparse.version import __version__
from traceparse.errors import TraceError, shown
from traceparse.load.inputs import OTHER_JSON, expand_inputs, folders_read, no_trace_files
from traceparse.load.parse import parse_batch, tabulate
from traceparse.load.run_identity import align_clocks, assign_ranks, check_one_run, missing_ranks
from traceparse.load.windows import choose_windows, parse_window
from traceparse.cache_dir import cache_dir, temp_beside
from traceparse.store.parts import LOCK, TOKEN, detach, folder_of, new_build, publish, release, stored, sweep, tidy
from traceparse.store.schema import SCHEMA_VERSION
from traceparse.store.trust import ROW_GROUP_ROWS, openable, writable_by_duckdb

# .ingest.rank (pyarrow) and .store.build (duckdb) are imported where used: the CLI's
# commands that load nothing start without them.


@cache
def code_identity() -> str:
    """Size and mtime of traceparse's own code and rules: an upgraded or edited install builds anew."""
    h = hashlib.sha256()
    for package in ("traceparse", "traceparse.analyzers", "traceparse.rules"):  # the last two live apart in a checkout
        root = Path(str(resources.files(package)))
        for p in sorted(root.rglob("*")):
            if p.suffix in (".py", ".sql", ".toml"):
                st = p.stat()
                h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def store_key(files: list[Path], allow_mixed: bool, window: int | None = None) -> str:
    """Identity of a load: the files (path, size, mtime; those of folders whether traces or not), the options
    and the code."""
    h = hashlib.sha256(f"{__version__}/{SCHEMA_VERSION}/{code_identity()}/{allow_mixed}/{window}".encode())
    for f in files:
        st = f.stat()
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:24]


def kept_store(paths, allow_mixed=False, window=None) -> tuple[Path, str] | None:
    """(cache entry, key) of the store ``load_run`` would reuse for ``paths`` and these options, when it is there
    (``_cache_hit``: read from its stamp, the store not opened); None when it would be built."""
    files, _ = expand_inputs(paths)
    key = store_key(files, allow_mixed, parse_window(window))
    remove_stale_leftovers()  # as load_run does: what a killed process left in the cache goes on any read of it
    entry = openable(cache_dir() / f"{key}.duckdb")
    return (entry, key) if _cache_hit(entry, key) else None


def load_run(paths, db=None, use_cache=True, allow_mixed=False, workers=None, progress=None, engine="local",
             address=None, stage_root=None, window=None) -> tuple[Path, bool]:
    """Load the traces named by ``paths`` into a store; return (store path, reused).

    ``engine``: ``local`` parses on a process pool here, ``ray`` as Ray tasks on the cluster at ``address``
    (``auto``, ``ray://host:port``; None: a cluster of this machine started for the load) with the per-rank
    Parquet staged under ``stage_root`` (a folder every worker can reach; default: the temporary folder).

    ``window``: of a job profiled in several windows (several files of a rank, told apart by their
    ProfilerStep#N), the one to load: None or ``"latest"`` (each rank's latest, said in a load issue), or a
    profiler step number (``load.windows``).

    ``progress``, when given, is called ``progress(files_done, files_total, bytes_done, bytes_total)``
    (bytes: the files' sizes on disk) once as parsing begins, with nothing done, then once as each file
    is parsed; a reused store parses nothing and calls it never."""
    files, in_folders = expand_inputs(paths)
    window = parse_window(window)
    key = store_key(files, allow_mixed, window)
    remove_stale_leftovers()
    if db is not None:
        target = openable(Path(db))
        if target.is_dir():
            raise TraceError(target, "is a directory; --db names the store file to write or read")
        if target.exists():
            made_for, token = stored(target)
            if made_for == key and _parts_there(target, token):
                return target, True
            if made_for is None:
                raise TraceError(target, "exists and is not a traceparse store; refusing to overwrite it")
        _make_parent(target)
    elif use_cache:
        target = openable(cache_dir() / f"{key}.duckdb")
        if _cache_hit(target, key):
            return target, True
        _clear_cache_entry(target)  # damaged, stale or missing: built again
        _make_parent(target)
    else:
        temp = openable(tempfile.gettempdir())
        target = Path(tempfile.mkdtemp(prefix=f"traceparse-{os.getpid()}-", dir=temp)) / "run.duckdb"
    try:
        token, build, lock = new_build(target)
    except OSError as e:
        if db is None and not use_cache:
            shutil.rmtree(target.parent, ignore_errors=True)
        raise TraceError(folder_of(target), f"cannot write the per-rank Parquet there: {e.strerror}") from None
    try:
        stage = build if stage_root is None else Path(
            tempfile.mkdtemp(prefix=f"traceparse-stage-{os.getpid()}-", dir=stage_root))
    except OSError as e:
        shutil.rmtree(build, ignore_errors=True)
        os.close(lock)
        if db is None and not use_cache:
            shutil.rmtree(target.parent, ignore_errors=True)
        raise TraceError(stage_root, f"cannot stage the per-rank Parquet there: {e.strerror}") from None
    tmp = temp_beside(target)
    work = None  # where DuckDB writes the store when it cannot write beside target (a path holding '?')
    done, summaries, meta = False, [], {}
    try:
        files, origin = _job_files(files, stage)
        parsed, raw = _parse_all(files, in_folders, stage, workers, progress, engine, address)
        shutil.rmtree(stage / JOBS, ignore_errors=True)
        for s in parsed:  # a rank of a job file is that file's
            s["file"] = origin.get(s.get("file"), s.get("file"))
        skipped = [(s["file"], s["why"]) for s in parsed if s.get("kind") == "skipped"]
        parsed = [s for s in parsed if s.get("kind") != "skipped"]
        if not parsed:
            raise no_trace_files(paths, skipped)
        dumps = [s for s in parsed if s.get("kind") == "flight_recorder"]
        summaries = [s for s in parsed if s.get("kind") != "flight_recorder"]
        dumps, dump_issues = _one_dump_per_rank(dumps)
        issues = dump_issues + [i for d in dumps for i in d["issues"]]
        summaries, window_issues = choose_windows(summaries, window)
        issues += window_issues
        issues += assign_ranks(summaries) if summaries else []
        issues += check_one_run(summaries, allow_mixed)
        issues += align_clocks(summaries)
        issues += missing_ranks(summaries)
        issues += [(s["file"], sev, what, n) for s in summaries for sev, what, n in s["issues"]]
        issues += [(shown(p), "info", f"skipped: {why}", 1) for p, why in skipped if why != OTHER_JSON]
        gone = {Path(p) for p, _ in skipped}
        issues += folders_read(paths, [f for f in files if f not in gone], skipped)
        summaries.sort(key=lambda s: s["rank"])
        meta = {"key": key, "traceparse_version": __version__, "files": [s["file"] for s in summaries + dumps]}
        if summaries and raw is None:  # else the ranks' tables are made by the build, in the store
            _place(stage, build)
            meta["parts"] = token
        from traceparse.load.build import build_store

        if writable_by_duckdb(tmp.parent):
            build_store(tmp, summaries, issues, meta, dumps, build, raw)
        else:  # built in a temporary folder, then copied beside the store: put in place whole as always
            work = Path(tempfile.mkdtemp(prefix=f"traceparse-{os.getpid()}-", dir=_plain_temp()))
            build_store(work / "run.duckdb", summaries, issues, meta, dumps, build, raw)
            shutil.copyfile(work / "run.duckdb", tmp)
        publish(tmp, target, meta.get("parts"))  # the build folder the store names, as built here
        if db is None and use_cache:
            _stamp(target, key, meta.get("parts"))
        done = True
    finally:
        if stage != build:
            shutil.rmtree(stage, ignore_errors=True)
        if not done or meta.get("parts") is None:
            shutil.rmtree(build, ignore_errors=True)
        release(lock, target, token)  # a later load's store may have replaced ours meanwhile: ours goes
        if not target.exists():
            sweep(folder_of(target))  # a first load that failed: no folder of it stays
        else:
            tidy(folder_of(target))  # a store with no per-rank folder keeps none beside it
        for p in (tmp, Path(str(tmp) + ".wal")):
            p.unlink(missing_ok=True)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        if not done and db is None and not use_cache:
            shutil.rmtree(target.parent, ignore_errors=True)
    return target, False


JOBS = "jobs"  # where the ranks of job files (traceparse export) are written as traces of their own, in the stage


def _job_files(files: list[Path], stage: Path) -> tuple[list[Path], dict]:
    """``files`` with each job file (``traceparse export``: ``ingest.job_file``) replaced by its ranks' traces,
    written in the stage; and {a rank's trace: its job file}."""
    from traceparse.ingest.job_file import is_job_file, split

    out, origin = [], {}
    for f in files:
        if f.suffix in (".json", ".gz") and is_job_file(f):
            ranks = split(f, Path(stage) / JOBS / str(len(out)))
            origin.update((shown(r.resolve()), shown(f.resolve())) for r in ranks)  # as a summary names its file
            out += ranks
        else:
            out.append(f)
    return out, origin


def _plain_temp() -> str | None:
    """A temporary folder DuckDB can write a database in (``trust.writable_by_duckdb``); None: the default one."""
    return next((t for t in (tempfile.gettempdir(), "/tmp") if os.path.isdir(t) and writable_by_duckdb(t)), None)


def _place(stage: Path, build: Path):
    """The tables the tasks wrote in ``stage`` moved into the ``build`` folder (when staged apart: ``--stage``)."""
    shutil.rmtree(stage / "raw", ignore_errors=True)  # what a file that is no trace left (nothing, or a part)
    if stage != build:
        for p in stage.iterdir():
            shutil.move(p, build / p.name)  # a rename, unless staged on another file system


def _make_parent(target: Path):
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise TraceError(target, "its folder is a file") from None


def _stamp_path(entry: Path) -> Path:
    return entry.with_name(entry.name + ".stamp")


def _stamp_text(entry: Path, token: str | None) -> str:
    """The entry's size and time, then the files of its build folder ``token`` (name, size, time)."""
    st = entry.stat()
    lines = [f"{st.st_size} {st.st_mtime_ns}"]
    parts = folder_of(entry) / token if token else None
    if parts is not None and parts.is_dir():
        for p in sorted(parts.rglob("*")):
            if p.is_file():
                ps = p.stat()
                lines.append(f"{p.relative_to(parts)} {ps.st_size} {ps.st_mtime_ns}")
    return "\n".join(lines) + "\n"


def _stamp(entry: Path, key: str, token: str | None):
    """Record what a cache entry was made for (its key and build folder), and its size and time as written, and its
    build folder's files: a later change (cut off, overwritten in part) makes it differ, and the entry is built
    again instead of failing mid-report."""
    _stamp_path(entry).write_text(json.dumps([key, token]) + "\n" + _stamp_text(entry, token))


def _cache_hit(entry: Path, key: str) -> bool:
    """The cache entry is the store of ``key``: a regular file, with no journal beside it (traceparse closes its
    stores clean), stamped as made for ``key`` and unchanged since (its build folder included), and its build folder
    there. Read from the stamp alone: the store itself is opened once, by its reader, and checked then
    (``trust.vet``)."""
    try:
        if not (entry.is_file() and not entry.is_symlink() and not Path(str(entry) + ".wal").exists()):
            return False
        made, _, stamp = _stamp_path(entry).read_text().partition("\n")
        made_for, token = json.loads(made)
        if made_for != key or not (token is None or (isinstance(token, str) and TOKEN.fullmatch(token))):
            return False
        return stamp == _stamp_text(entry, token) and _parts_there(entry, token)
    except (OSError, ValueError):  # no stamp, or one of an older traceparse (ValueError: not JSON): built again
        return False


def _clear_cache_entry(entry: Path):
    """What would stop a cache entry from being replaced or read: a folder in its place, a stale journal.
    A file in its place is left to be replaced atomically (a concurrent reader keeps a whole store)."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    Path(str(entry) + ".wal").unlink(missing_ok=True)


@contextmanager
def open_run(paths, db=None, use_cache=True, allow_mixed=False, progress=None, full_access=False, **engine):
    """Load (or reuse) the store of ``paths`` and yield a read-only connection, confined to the store
    (``traceparse.store.trust``; ``full_access``: ``traceparse sql``'s own query); a store made
    with ``use_cache=False`` and no ``db`` is deleted afterwards. ``progress``, ``engine``, ``address``,
    ``stage_root``, ``window``: as for load_run."""
    path, _ = load_run(paths, db=db, use_cache=use_cache, allow_mixed=allow_mixed, progress=progress, **engine)
    temporary = db is None and not use_cache
    try:
        from traceparse.store.build import connect_with_limits

        con = connect_with_limits(path, read_only=True, full_access=full_access)  # checked again as it is opened
        try:
            yield con
        finally:
            con.close()
            detach(con)
    finally:
        if temporary:
            shutil.rmtree(path.parent, ignore_errors=True)


def connect(path, full_access=False):
    """Read-only connection to an existing store (its SQL macros are stored in it), checked and confined to it
    (``traceparse.store.trust``: a store is untrusted input); ``full_access``: for ``traceparse sql``'s own query."""
    import duckdb

    from traceparse.store.build import connect_with_limits
    from traceparse.store.trust import NOT_A_STORE

    if not Path(path).is_file():
        raise TraceError(path, NOT_A_STORE)
    try:
        return connect_with_limits(path, read_only=True, full_access=full_access)
    except duckdb.Error:  # not a DuckDB file, or a damaged one
        raise TraceError(path, NOT_A_STORE) from None


BATCH_BYTES = 8 << 20
# A process pool takes about POOL_START_S to start in a fresh process (its forkserver, the parse modules preloaded),
# and a file about PARSE_S_PER_MB per MB on disk to parse and tabulate: measured on an idle 2-core machine
# (docs/speed.md, Small runs)
POOL_START_S = 0.5
PARSE_S_PER_MB = {"gz": 0.6, "json": 0.03}


def batches(files: list[Path], workers: int | None) -> list[list[int]]:
    """The files' indices in batches of consecutive files, each parsed by one task whose rank tables are built in one
    DuckDB session (whose fixed cost, about 0.2 s, is most of the work of a small file): files are put together
    until a batch holds ``BATCH_BYTES`` on disk, or its share of the load (a quarter of one of ``workers``'), whichever
    is less, so that a few large files still spread over every worker (``workers`` None: a cluster's, unknown here:
    ``BATCH_BYTES`` alone)."""
    sizes = [f.stat().st_size for f in files]
    limit = BATCH_BYTES if workers is None else min(BATCH_BYTES, sum(sizes) / (4 * max(workers, 1)))
    out, size = [], 0
    for i, n in enumerate(sizes):
        if not out or size >= limit:
            out.append([])
            size = 0
        out[-1].append(i)
        size += n
    return out


def _processes(files: list[Path]) -> int:
    """How many processes parse ``files`` when the caller does not say: one per file up to the cores, or this one
    alone when the parse the others would take off it is shorter than their pool's start (a small run)."""
    n = min(len(files), os.cpu_count() or 1)
    cost = sum(f.stat().st_size / 2**20 * PARSE_S_PER_MB["gz" if f.name.endswith(".gz") else "json"] for f in files)
    return n if n > 1 and cost * (1 - 1 / n) > POOL_START_S else 1


def in_store(parsed: list[dict]) -> bool:
    """Whether the ranks' tables of a run parsed in this process are written by the store's build, in its own DuckDB
    session, instead of a session of their own and Parquet between (``per_rank.tables_in_store``): a run of fewer
    events than one row group holds (``trust.ROW_GROUP_ROWS``), which DuckDB runs in one thread, whose work is less
    than that session's and the Parquet's fixed costs (docs/speed.md, Small runs). A larger one keeps the Parquet:
    a store reads its events there, never copying them."""
    return sum(r.get("n_events") or 0 for r in parsed if "kind" not in r) < ROW_GROUP_ROWS


def _parse_all(files, in_folders, stage, workers, progress=None, engine="local", address=None):
    """Parse each file (on a pool when there are several, or on Ray), in batches (``batches``); the summaries in
    the order of ``files``, and, where the ranks' tables are left to the store's build (a run parsed in this process
    of fewer events than one row group: ``in_store``), ``(stage, kernel rules)`` for it (else None). A file of
    ``in_folders`` whose start shows no trace gives ``{"kind": "skipped", "file", "why"}``."""
    from traceparse.tagging.comm_kernels import comm_kernel_rules

    rules = comm_kernel_rules()  # read once, here: a bad rules file is one error, before any file is parsed
    n = workers or _processes(files)
    groups = batches(files, None if engine == "ray" or n == 1 else n)
    n = min(n, len(groups))
    jobs = [([(i, files[i], files[i] in in_folders) for i in g], stage, b, rules) for b, g in enumerate(groups)]
    report_file = _progress_report(files, progress)

    def report(b):
        for i in groups[b]:
            report_file(i)

    if engine == "ray":
        from traceparse.load.ray_engine import parse_on_ray

        return [r for rs in parse_on_ray(jobs, address, report) for r in rs], None
    if n <= 1:
        per_job = []
        for b, job in enumerate(jobs):
            per_job.append(parse_batch(job, tables=False))
            report(b)
        results = [r for rs in per_job for r in rs]
        if in_store(results):
            return results, (stage, rules)
        for job, rs in zip(jobs, per_job, strict=True):
            tabulate(job, rs)
        return results, None
    # fork would copy the caller's threads (DuckDB's among them): start workers from a clean server
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["traceparse.ingest.rank", "traceparse.vocabulary.per_rank"])
    _note_multiprocessing_tempdir()
    pool = ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_die_with, initargs=(os.getpid(),))
    try:
        # Ctrl-C is held while the workers start: one interrupted half-way through its start would
        # print a traceback of its own once this process is gone
        with _main_not_rerun(), _sigint_held():
            futures = {pool.submit(parse_batch, job): b for b, job in enumerate(jobs)}
        for done in as_completed(futures):
            if done.exception() is not None:
                break  # raised below, as the first failed batch in order
            report(futures[done])
        return [r for f in futures for r in f.result()], None  # in the order of files, whatever order they finished
    except BaseException:
        _stop(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _forget_parents_forkserver():
    """In a child forked from a process that had started the forkserver: start one of its own when it loads.
    The child inherits the parent's forkserver pid, which is not its child, and its first pool failed with
    ChildProcessError (traceparse.analyze() called in ProcessPoolExecutor workers)."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None) is not None:
        if server._forkserver_alive_fd is not None:
            os.close(server._forkserver_alive_fd)  # the parent's server ends with the parent, not with this child
        server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None


os.register_at_fork(after_in_child=_forget_parents_forkserver)


def _progress_report(files, progress):
    """``report(i)``: file ``i`` is parsed; calls ``progress`` with the counts so far (a first call, with
    nothing done, is made here). Without ``progress``, it does nothing."""
    if progress is None:
        return lambda _i: None
    sizes = [f.stat().st_size for f in files]
    done = []
    progress(0, len(files), 0, sum(sizes))

    def report(i):
        done.append(sizes[i])
        progress(len(done), len(files), sum(done), sum(sizes))

    return report


@contextmanager
def _sigint_held():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _stop(pool: ProcessPoolExecutor):
    """On an interrupt or error: drop queued files and end the workers now, not after their files."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # shutdown() forgets them
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        proc.terminate()
    for proc in workers:
        proc.join(5)


def _note_multiprocessing_tempdir():
    """multiprocessing keeps the forkserver's socket in a pymp-* folder it removes at a normal exit;
    a marker names it so that, after a kill, the next load removes it (remove_stale_leftovers)."""
    from multiprocessing import util

    marker = Path(tempfile.gettempdir()) / f"traceparse-{os.getpid()}-multiprocessing"
    if not marker.exists():
        marker.write_text(util.get_temp_dir())
        atexit.register(marker.unlink, missing_ok=True)


def _die_with(parent: int):
    """In a pool worker: exit as soon as the loading process is gone (killed, crashed), so no worker
    outlives it (the forkserver, their parent, exits when the loading process closes its pipe).
    Ctrl-C in a terminal reaches the whole process group: the loading process handles it, workers ignore it."""
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch():
        while _alive(parent):
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs. A zombie (killed, not yet waited for by its parent) does not: a parent
    that reads the load's stderr until it closes waits for the workers, which hold it open."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: what kill says
    return state != b"Z"


# in the cache: temp_beside's names (with DuckDB's journal .wal and spill folder .tmp of a store being built);
# in the cache and the temporary folder: staging and temporary folders (traceparse-[stage-]<pid>-*)
STALE_IN_CACHE = re.compile(r"^\.[^/]*\.(\d+)(?:-\d+)?\.tmp(?:\.wal|\.tmp)?$")
STALE = re.compile(r"^traceparse-(?:stage-)?(\d+)-[^/]*$")


def remove_stale_leftovers():
    """Remove what loads killed before they could clean up left behind: half-written files in the cache
    (``temp_beside``: stores, their journal and spill folder, kept documents), the per-rank folders of stores that
    are gone (``store.parts.sweep``) and staging or temporary folders (traceparse-[stage-]<pid>-*), of processes
    that no longer exist. /tmp is looked in as well: the
    local Ray instance's folder goes there when the temporary folder's path is too long (ray_engine)."""
    temps = dict.fromkeys([Path(tempfile.gettempdir()), Path("/tmp")])
    for folder, patterns in [(cache_dir(), (STALE_IN_CACHE, STALE)), *((t, (STALE,)) for t in temps)]:
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for p in entries:
            if folder == cache_dir() and p.name.endswith(".ranks") and not p.with_name(p.name[:-6]).exists():
                sweep(p)  # the build folders of a store that is gone (a killed load, a removed entry)
                continue
            m = next(filter(None, (pattern.match(p.name) for pattern in patterns)), None)
            pid = m and int(m[1])
            if pid and pid != os.getpid() and not _alive(pid) and _ours(p):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                    continue
                if p.name.endswith("-multiprocessing"):
                    mp_dir = Path(p.read_text(errors="replace").strip())
                    if mp_dir.name.startswith("pymp-") and mp_dir.parent in temps and _ours(mp_dir):
                        shutil.rmtree(mp_dir, ignore_errors=True)
                p.unlink(missing_ok=True)


def _ours(p: Path) -> bool:
    """Whether ``p`` is a file or folder of this user's, not a link (what a dead load of this user's left)."""
    try:
        st = p.lstat()
    except OSError:
        return False
    return not stat.S_ISLNK(st.st_mode) and st.st_uid == os.getuid()


@contextmanager
def _main_not_rerun():
    """Start workers that do not run the caller's main script again.

    A forkserver (or spawn) worker is sent multiprocessing.spawn.get_preparation_data(), which names
    the caller's main module (``__main__.__spec__.name``) or file (``__main__.__file__``), and runs it
    again as ``__mp_main__`` before taking work: a script without an ``if __name__ == "__main__":``
    guard re-entered the load in every worker and broke the pool (BrokenProcessPool). The workers only
    run traceparse's own functions, so while the pool starts them (all in ``pool.map``) the main
    module names neither; both are restored afterwards.
    """
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__spec__", "__file__") if main is not None and k in main.__dict__}
    if main is not None:
        main.__dict__["__spec__"] = None
        main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


def _one_dump_per_rank(dumps) -> tuple[list[dict], list[tuple]]:
    """One dump per rank. Several dumps of one rank are snapshots of its one ring buffer (a pickle and a JSON
    written together; the plugin's dump and NCCL's own one, taken at different times) when every record id they
    share holds the same call: the one with the newest record is read (of equals, the pickle, which keeps the
    stack frames), with the in-flight record of another taken at the same point, and the others are said to be
    skipped. Dumps of one rank that contradict each other (a shared record id holding different calls, or no record
    in common) are refused: they cannot both be that rank's."""
    by_rank = {}
    for d in dumps:
        by_rank.setdefault(d["rank"], []).append(d)
    kept, issues = [], []
    for rank, ds in sorted(by_rank.items()):
        ds.sort(key=lambda d: (-_newest(d), d["format"] != "pickle", -sum(e["retired"] for e in d["entries"]),
                               d.get("inflight") is None, d["file"]))
        first = ds[0]
        for other in ds[1:]:
            why = _contradiction(first, other)
            if why:
                raise TraceError(other["file"], f"a second Flight Recorder dump of rank {rank} that is not the same "
                                                f"rank's buffer as {first['file']}: {why}")
            if first.get("inflight") is None and other.get("inflight") and _newest(other) == _newest(first):
                first = {**first, "inflight": other["inflight"], "issues": first["issues"] + other["issues"]}
            same = _newest(other) == _newest(first) and {first["format"], other["format"]} == {"pickle", "json"}
            issues.append((other["file"], "info", f"skipped: the pickle dump of rank {rank} is loaded instead" if same
                           else f"skipped: another dump of rank {rank}, {first['file']}, holds the same buffer up to "
                                "a later record and is loaded instead", 1))
        kept.append(first)
    return kept, issues


def _newest(d) -> int:
    return max((e["record_id"] for e in d["entries"]), default=-1)


def _contradiction(a, b) -> str | None:
    """Why two dumps of one rank cannot be snapshots of its one buffer, or None."""
    def call(e):
        return e["pg_name"], e["seq"], e["p2p_seq"], e["op"], e["input_sizes"]

    ea, eb = ({e["record_id"]: e for e in d["entries"]} for d in (a, b))
    shared = ea.keys() & eb.keys()
    if ea and eb and not shared:
        return "no record in common (another job's, or another rank's under this rank's name)"
    for rid in sorted(shared):
        if call(ea[rid]) != call(eb[rid]):
            return (f"record {rid} is {ea[rid]['op']} #{ea[rid]['seq']} on group {ea[rid]['pg_name']!r} in one and "
                    f"{eb[rid]['op']} #{eb[rid]['seq']} on group {eb[rid]['pg_name']!r} in the other")
    return None


def _parts_there(db: Path, token: str | None) -> bool:
    """Whether the build folder ``token`` the store names is there (or it names none)."""
    return token is None or (folder_of(db) / token / LOCK).is_file()

