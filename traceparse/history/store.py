"""The run history: one DuckDB file to which ``traceparse analyze --record HISTORY`` appends each run's
metrics (``traceparse.history.run_metrics``) with its labels, and from which ``traceparse dashboard`` draws.

Tables (plain DuckDB: ``duckdb HISTORY "SELECT labels['job'], ... FROM runs"`` reads them):

- ``history_meta(key, value)``: ``format = 'traceparse history'`` and ``schema_version``; a DuckDB file
  without it is not a history and is never written to.
- ``runs(run_id, recorded_at, labels, label_key, files, version, report)``: one row per recorded run;
  ``recorded_at`` is UTC, ``labels`` a MAP(VARCHAR, VARCHAR), ``label_key`` the labels in one canonical
  text (``label_key()``), ``files`` the trace files, ``version`` traceparse's, ``report`` the absolute
  path of the report written with the run (``analyze -o``) or NULL.
- ``metrics(run_id, id, "group", value, text_value, unit, better)``: one row per metric of a run; a
  number in ``value`` (DOUBLE), a categorical value (a pipeline schedule) in ``text_value``. Ids recorded
  under an older name are read under the current one (``run_metrics.current_id``: ``bytes.<strategy>`` ->
  ``volume.<strategy>``), so a history keeps its series across the rename. ``samples`` (DOUBLE[]) holds the
  metric per profiled step, the step-to-step variation ``compare`` judges a change against, so the dashboard judges
  as ``compare`` does; a history recorded before it had the column gains it at its next record, its older runs
  without samples (judged by the threshold alone, as a run of one step).

A run is compared with the previous run of its series (``series``): the runs with the same labels, the
commit aside, or the label keys the dashboard is given (``--series-by``).

Concurrency: traceparse's writers take turns on a lock file beside the history (``HISTORY.lock``,
exclusive; readers share it), then on DuckDB's own file lock, each with a bounded retry (``WAIT_S``
seconds in all, jittered exponential backoff), and write a run in one transaction: concurrent writers
queue, and one that waits longer than ``WAIT_S`` gets ``HistoryBusy`` (the CLI exits 75, EX_TEMPFAIL:
try again) and writes nothing. A new history is built in a temporary file (``.HISTORY.<pid>.<n>.new``) and
linked into place complete, so a writer killed at any moment leaves either no file or a history holding
exactly the runs whose transaction committed; the temporary files of writers that are gone are removed by
the next writer (``check``, ``record``).

A file that is not a history, or a damaged one (a DuckDB checksum error, a truncated file, a header
overwritten, a table missing), is refused with ``NotAHistory`` and left as it is, nothing created beside it.
"""

import fcntl
import json
import math
import os
import random
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from traceparse.version import __version__
from traceparse.errors import TraceError, shown
from traceparse.history.run_metrics import Metric, current_id, run_metrics
from traceparse.store.query import damaged

FORMAT = "traceparse history"
SCHEMA_VERSION = 1
WAIT_S = 30.0  # how long a writer or reader waits for another process to let go of the file

SCHEMA = """
CREATE TABLE history_meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE SEQUENCE run_ids START 1;
CREATE TABLE runs (
    run_id INTEGER PRIMARY KEY DEFAULT nextval('run_ids'),
    recorded_at TIMESTAMP NOT NULL,
    labels MAP(VARCHAR, VARCHAR) NOT NULL,
    label_key VARCHAR NOT NULL,
    files VARCHAR[] NOT NULL,
    version VARCHAR NOT NULL,
    report VARCHAR
);
CREATE TABLE metrics (
    run_id INTEGER NOT NULL REFERENCES runs (run_id),
    id VARCHAR NOT NULL,
    "group" VARCHAR NOT NULL,
    value DOUBLE,
    text_value VARCHAR,
    unit VARCHAR NOT NULL,
    better VARCHAR,
    samples DOUBLE[],
    PRIMARY KEY (run_id, id)
);
"""

RUN_COLUMNS = ("run_id", "recorded_at", "labels", "label_key", "files", "version", "report")
METRIC_COLUMNS = ("run_id", "id", "group", "value", "text_value", "unit", "better")
COLUMNS = {"runs": RUN_COLUMNS, "metrics": METRIC_COLUMNS}  # what read() and record() use of each table

LABEL_KEY = re.compile(r"[A-Za-z0-9_.\-]+")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class HistoryBusy(TraceError):
    """Another process held the history longer than ``WAIT_S``: nothing was written; try again."""


class NotAHistory(TraceError):
    """A file that is not a history, or a damaged one: left as it is, nothing created beside it."""


NOT_A_HISTORY = "exists and is not a traceparse history; left untouched"
DAMAGED = ("is a damaged traceparse history ({}); left untouched: restore it from a copy, or record into a new "
           "history")
IS_A_FOLDER = "is a folder, not a history file (traceparse analyze --record HISTORY writes one)"


@dataclass
class History:
    runs: list[dict]  # run_id, recorded_at, labels (dict), label_key, files, version, report; in recording order
    metrics: list[dict]  # run_id, id, group, value (number or text), unit, better, samples (tuple or None)

    def metric_sets(self) -> dict[int, dict[str, Metric]]:
        """Each run's metrics as ``run_metrics`` gave them, by run id (what ``compare_metrics`` takes)."""
        out = {r["run_id"]: {} for r in self.runs}
        for m in self.metrics:
            if m["value"] is not None:  # as run_metrics: a metric without a value is left out
                out[m["run_id"]][m["id"]] = Metric(m["id"], m["group"], m["value"], m["unit"], m["better"],
                                                   m.get("samples"))
        return out


def parse_labels(items) -> dict[str, str]:
    """``["commit=abc", "job=llama"]`` -> ``{"commit": "abc", "job": "llama"}``; raises ValueError naming
    the first item that is not key=value (key: letters, digits, ``_.-``; value: non-empty, one line of valid
    UTF-8: a command-line argument can hold undecodable bytes, as surrogate escapes)."""
    labels = {}
    for item in items:
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"'{shown(item)}' is not valid UTF-8 (a label is stored as text)") from None
        key, eq, value = item.partition("=")
        if not eq or not LABEL_KEY.fullmatch(key) or not value or CONTROL.search(value):
            raise ValueError(f"{item!r} is not key=value (key: letters, digits, '_', '.', '-'; value: one "
                             "non-empty line)")
        if key in labels:
            raise ValueError(f"label {key!r} given twice")
        labels[key] = value
    return labels


def label_key(labels: dict) -> str:
    """The canonical text of a label set: the same labels in any order give the same key."""
    return json.dumps(dict(sorted(labels.items())), ensure_ascii=False, separators=(",", ":"))


def label_text(labels: dict) -> str:
    """A label set as a person reads it: ``commit=abc job=llama`` (keys sorted)."""
    return " ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "(no labels)"


RUN_LABELS = ("commit",)  # labels naming one run of a series, not the series: left out of series()


def series(labels: dict, by=None) -> dict:
    """The labels that make runs comparable, a run being compared with the previous run of the same
    series: the keys ``by`` when given, else every label but ``RUN_LABELS`` (a commit changes every run)."""
    return {k: v for k, v in labels.items() if (k in by if by else k not in RUN_LABELS)}


def compare_previous(hist: History, by=None, thresholds=None) -> dict[int, tuple[int, dict]]:
    """Each run compared (``traceparse.history.compare.compare_metrics``) with the previous run of its series:
    run id -> (previous run id, the comparison document). A series' first run has no entry."""
    from traceparse.history.compare import compare_metrics, load_thresholds

    thresholds = load_thresholds([]) if thresholds is None else thresholds
    sets, last, out = hist.metric_sets(), {}, {}
    for r in hist.runs:
        key = label_key(series(r["labels"], by))
        if key in last:
            out[r["run_id"]] = (last[key], compare_metrics(sets[last[key]], sets[r["run_id"]], thresholds))
        last[key] = r["run_id"]
    return out


def record(path, doc: dict, labels: dict, report=None, wait_s: float | None = None) -> int:
    """Append the run of the analyze document ``doc`` to the history at ``path`` (created when missing),
    with ``labels`` and the path of its ``report``; return its run id. One transaction."""
    if parse_labels(f"{k}={v}" for k, v in labels.items()) != labels:
        raise ValueError(f"labels {labels!r} are not key=value pairs")
    path = Path(path)
    _remove_leftovers(path)
    if not path.exists():
        _create(path)
    rows = [_metric_row(m) for m in run_metrics(doc).values()]
    with _connect(path, write=True, wait_s=wait_s) as con:
        con.execute("BEGIN TRANSACTION")
        con.execute("ALTER TABLE metrics ADD COLUMN IF NOT EXISTS samples DOUBLE[]")  # a history from before it
        run_id = con.execute(
            "INSERT INTO runs (recorded_at, labels, label_key, files, version, report) "
            "VALUES (?, map(?::VARCHAR[], ?::VARCHAR[]), ?, ?, ?, ?) RETURNING run_id",
            [datetime.now(UTC).replace(tzinfo=None), list(labels), list(labels.values()), label_key(labels),
             list(doc["run"]["files"]), __version__, str(Path(report).resolve()) if report else None],
        ).fetchone()[0]
        if rows:  # one statement: executemany runs one per row, and the file stays locked meanwhile
            marks = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?)"] * len(rows))
            con.execute('INSERT INTO metrics (run_id, id, "group", value, text_value, unit, better, samples) '
                        f"VALUES {marks}", [x for r in rows for x in (run_id, *r)])
        con.execute("COMMIT")  # closing without it rolls the run back
        return run_id


def check(path, wait_s: float | None = None):
    """Raise TraceError unless ``record`` can write to ``path``: a history this process can write, in a folder
    it can write in (the lock file, DuckDB's journal), or no file in a folder where it can create one. First
    removes what writers killed while creating a history left beside it. Writes nothing."""
    path = Path(path)
    if path.is_dir():
        raise TraceError(path, IS_A_FOLDER)
    if not path.parent.is_dir():
        raise TraceError(path, "cannot create the history: no such folder")
    _remove_leftovers(path)
    if path.exists():
        _header(path)
    _writable(path)
    if path.exists():
        with _connect(path, write=False, wait_s=wait_s) as con:
            for table in COLUMNS:  # every value read: a damaged block raises here, before the analysis
                con.execute(f"SELECT count(*), max(hash(t)) FROM {table} t").fetchall()


def _writable(path: Path):
    """Raise TraceError unless this process can open the history (and its lock file) at ``path`` for writing,
    when they exist, and create a file beside them. Tried, not read from the mode bits (os.access): root
    passes those, yet a read-only mount, or a folder such as /proc, still refuses."""
    exists = path.exists()
    for p, what in ((path, "the history"), (lock_path(path), "the history's lock file")):
        if p.exists():
            try:
                os.close(os.open(p, os.O_RDWR))
            except OSError as e:
                raise TraceError(p, f"cannot write to {what}: {e.strerror or e}") from None
    probe = _temp_path(path)
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as e:
        why = "its lock file and journal go beside it" if exists else "it is built beside it"
        raise TraceError(path, f"cannot {'write to' if exists else 'create'} the history: its folder refuses "
                         f"new files ({e.strerror or e}; {why})") from None


def read(path, wait_s: float | None = None) -> History:
    """Every run and metric of the history at ``path``, runs in recording order."""
    path = Path(path)
    if path.is_dir():
        raise TraceError(path, IS_A_FOLDER)
    if not path.is_file():
        raise TraceError(path, "no such history (traceparse analyze --record writes one)")
    _remove_leftovers(path)  # what dead writers left beside it, for readers too
    with _connect(path, write=False, wait_s=wait_s) as con:
        runs = [dict(zip(RUN_COLUMNS, r, strict=True)) for r in
                con.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY recorded_at, run_id").fetchall()]
        metrics = []
        has_samples = con.execute("SELECT count(*) FROM duckdb_columns() WHERE database_name = current_database() "
                                  "AND table_name = 'metrics' AND column_name = 'samples'").fetchone()[0]
        for r in con.execute('SELECT run_id, id, "group", value, text_value, unit, better, '
                             f'{"samples" if has_samples else "NULL"} FROM metrics ORDER BY run_id, id').fetchall():
            m = dict(zip(METRIC_COLUMNS, r[:-1], strict=True))
            m["samples"] = _samples(r[-1])
            text_value = m.pop("text_value")
            m["value"] = text_value if text_value is not None else _number(m["value"], m["unit"])
            m["id"], m["group"] = current_id(m["id"]), current_id(m["group"])  # bytes.<s>, recorded before: volume.<s>
            metrics.append(m)
    return History(runs, metrics)


def _metric_row(m: Metric) -> tuple:
    """A metric as stored; a number that is not finite (NaN, infinity) as no value."""
    text = m.value if isinstance(m.value, str) else None
    number = None if text is not None or not math.isfinite(m.value) else float(m.value)
    return m.id, m.group, number, text, m.unit, m.better, list(_samples(m.samples) or ()) or None


def _samples(values) -> tuple | None:
    """A metric's per-step values as compare reads them: the finite numbers (a history is input: another program may
    have written NaN there); None without two of them."""
    kept = tuple(float(v) for v in values or () if isinstance(v, int | float) and math.isfinite(v))
    return kept if len(kept) >= 2 else None


def _number(value, unit):
    """A count (a layout degree, a rank) back as an int; other numbers as stored, one that is not finite (a
    NaN written by another program) as no value."""
    if value is not None and not math.isfinite(value):
        return None
    if value is not None and unit in ("", "rank") and float(value).is_integer():
        return int(value)
    return value


def _create(path: Path):
    """Build an empty history in a temporary file beside ``path`` and link it into place; when another
    process got there first, keep theirs."""
    import duckdb

    if not path.parent.is_dir():
        raise TraceError(path, "cannot create the history: no such folder")
    tmp = _temp_path(path)
    try:
        con = duckdb.connect(str(tmp))
        try:
            con.execute(SCHEMA)
            con.executemany("INSERT INTO history_meta VALUES (?, ?)",
                            [("format", FORMAT), ("schema_version", str(SCHEMA_VERSION))])
        finally:
            con.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    except (OSError, duckdb.Error) as e:
        raise TraceError(path, f"cannot create the history: {getattr(e, 'strerror', None) or e}") from None
    finally:
        for p in (tmp, tmp.with_name(tmp.name + ".wal")):
            p.unlink(missing_ok=True)


def _temp_path(path: Path) -> Path:
    """A temporary file beside ``path``, named with this process's id (``_remove_leftovers``)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{random.randrange(1 << 30)}.new")


def _remove_leftovers(path: Path):
    """Remove the temporary files (``_temp_path``, with DuckDB's journal) that processes no longer running
    left beside ``path``: a writer killed while creating the history."""
    from traceparse.load.run import _alive

    leftover = re.compile(rf"\.{re.escape(path.name)}\.(\d+)\.\d+\.new(?:\.wal)?")
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        m = leftover.fullmatch(name)
        if m and int(m[1]) != os.getpid() and not _alive(int(m[1])):
            try:
                (path.parent / name).unlink(missing_ok=True)
            except OSError:
                pass  # not ours to remove: check() says why the folder cannot be written


def lock_path(path: Path) -> Path:
    """The lock file beside a history, on which traceparse's readers and writers take turns."""
    return path.with_name(path.name + ".lock")


@contextmanager
def _connect(path: Path, write: bool, wait_s: float | None):
    """A connection to the history at ``path``, checked to be one (``_check``), held under the lock file:
    exclusive to write, shared to read. Waits at most ``wait_s`` (default ``WAIT_S``) for the lock file,
    then for DuckDB's own lock (a program other than traceparse holding the file), else HistoryBusy.

    The lock file is needed: DuckDB reads a database's header before it takes its own file lock, so a
    process whose open waited out another writer's checkpoint could work on the header from before it."""
    import duckdb

    _header(path)  # a history is never seen half-made (_create): nothing to wait for
    lock, patience = lock_path(path), _Patience(path, WAIT_S if wait_s is None else wait_s)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        if write:
            raise TraceError(lock, f"cannot create the history's lock file: {e.strerror or e}") from None
        fd = None  # a folder nobody can write to: no writer to take turns with
    try:
        while fd is not None:
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if write else fcntl.LOCK_SH) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                patience.pause()
        while True:
            try:
                con = duckdb.connect(str(path), read_only=not write)
                break
            except duckdb.Error as e:
                if damaged(e):
                    raise NotAHistory(path, DAMAGED.format(_first_line(e))) from None
                if "Could not set lock" not in str(e):
                    raise TraceError(path, f"cannot open the history: {_first_line(e)}") from None
                patience.pause()
        try:
            con.execute("SET enable_progress_bar = false")  # DuckDB's bar would land in analyze's output
            _check(con, path)
            yield con
        except duckdb.Error as e:  # a damaged block found by a query: of the check, or of the caller
            if not damaged(e):
                raise
            raise NotAHistory(path, DAMAGED.format(_first_line(e))) from None
        finally:
            con.close()
    except NotAHistory:
        lock.unlink(missing_ok=True)  # no litter beside a file that is not a history (nobody can use it)
        raise
    finally:
        if fd is not None:
            os.close(fd)  # after DuckDB let go of the file


DUCKDB_HEADERS, DUCKDB_BLOCK = 3 * 4096, 256 * 1024  # a DuckDB file: three 4 KiB headers, then 256 KiB blocks


def _header(path: Path):
    """Raise NotAHistory unless ``path`` starts as a DuckDB file does; one of a DuckDB file's size whose
    header is gone (zeroed, overwritten) is a damaged history rather than some other file."""
    try:
        with open(path, "rb") as f:
            head, size = f.read(4096), os.fstat(f.fileno()).st_size
    except IsADirectoryError:
        raise TraceError(path, IS_A_FOLDER) from None
    except OSError as e:
        raise TraceError(path, f"cannot open the history: {e.strerror or e}") from None
    if head[8:12] == b"DUCK":
        return
    if size >= DUCKDB_HEADERS and ((size - DUCKDB_HEADERS) % DUCKDB_BLOCK == 0 or not any(head)):
        raise NotAHistory(path, DAMAGED.format("its DuckDB header is gone"))
    raise NotAHistory(path, NOT_A_HISTORY)


def _first_line(e: Exception) -> str:
    return next(iter(str(e).splitlines()), type(e).__name__)


class _Patience:
    """The pauses between attempts at a lock: jittered exponential backoff from 20 ms to 1 s, then
    HistoryBusy once ``wait_s`` has passed."""

    def __init__(self, path: Path, wait_s: float):
        self.path, self.wait_s = path, wait_s
        self.deadline, self.delay = time.monotonic() + wait_s, 0.02

    def pause(self):
        if time.monotonic() + self.delay > self.deadline:
            raise HistoryBusy(self.path, f"busy: another process held the history for {self.wait_s:g} s; "
                              "nothing was written, try again")
        time.sleep(self.delay * random.uniform(0.5, 1.5))
        self.delay = min(self.delay * 2, 1.0)


def _check(con, path):
    """Refuse a DuckDB file that is not a history of this schema, or one missing a table or column that
    ``read`` and ``record`` use (before anything is written). A damaged block raises duckdb.Error."""
    import duckdb

    try:
        meta = dict(con.execute("SELECT key, value FROM history_meta").fetchall())
    except (duckdb.CatalogException, duckdb.BinderException):
        meta = {}
    if meta.get("format") != FORMAT:
        raise NotAHistory(path, NOT_A_HISTORY)
    if meta.get("schema_version") != str(SCHEMA_VERSION):
        raise TraceError(path, f"history schema {meta.get('schema_version')} is not {SCHEMA_VERSION}, the one this "
                         f"traceparse ({__version__}) writes; record into a new history")
    have = {}
    for table, column in con.execute("SELECT table_name, column_name FROM duckdb_columns() "
                                     "WHERE database_name = current_database() AND schema_name = 'main'").fetchall():
        have.setdefault(table, set()).add(column)
    missing = [f"table {t}" if t not in have else f"column {t}.{c}" for t, cols in COLUMNS.items()
               for c in cols if t not in have or c not in have[t]]
    if missing:
        raise NotAHistory(path, DAMAGED.format(", ".join(dict.fromkeys(missing)) + " missing"))
