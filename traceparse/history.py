"""The run history: one DuckDB file to which ``traceparse analyze --record HISTORY`` appends each run's
metrics (``traceparse.run_metrics``) with its labels, and from which ``traceparse dashboard`` draws.

Tables (plain DuckDB: ``duckdb HISTORY "SELECT labels['job'], ... FROM runs"`` reads them):

- ``history_meta(key, value)``: ``format = 'traceparse history'`` and ``schema_version``; a DuckDB file
  without it is not a history and is never written to.
- ``runs(run_id, recorded_at, labels, label_key, files, version, report)``: one row per recorded run;
  ``recorded_at`` is UTC, ``labels`` a MAP(VARCHAR, VARCHAR), ``label_key`` the labels in one canonical
  text (``label_key()``), ``files`` the trace files, ``version`` traceparse's, ``report`` the absolute
  path of the report written with the run (``analyze -o``) or NULL.
- ``metrics(run_id, id, "group", value, text_value, unit, better)``: one row per metric of a run; a
  number in ``value`` (DOUBLE), a categorical value (a pipeline schedule) in ``text_value``.

A run is compared with the previous run of its series (``series``): the runs with the same labels, the
commit aside, or the label keys the dashboard is given (``--series-by``).

Concurrency: traceparse's writers take turns on a lock file beside the history (``HISTORY.lock``,
exclusive; readers share it), then on DuckDB's own file lock, each with a bounded retry (``WAIT_S``
seconds in all, jittered exponential backoff), and write a run in one transaction: concurrent writers
queue, and one that waits longer than ``WAIT_S`` gets ``HistoryBusy`` (the CLI exits 75, EX_TEMPFAIL:
try again) and writes nothing. A new history is built in a temporary file and linked into place
complete, so a writer killed at any moment leaves either no file or a history holding exactly the runs
whose transaction committed.
"""

import fcntl
import json
import os
import random
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from . import __version__
from .errors import TraceError
from .run_metrics import Metric, run_metrics

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
    PRIMARY KEY (run_id, id)
);
"""

LABEL_KEY = re.compile(r"[A-Za-z0-9_.\-]+")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class HistoryBusy(TraceError):
    """Another process held the history longer than ``WAIT_S``: nothing was written; try again."""


@dataclass
class History:
    runs: list[dict]  # run_id, recorded_at, labels (dict), label_key, files, version, report; in recording order
    metrics: list[dict]  # run_id, id, group, value (number or text), unit, better

    def metric_sets(self) -> dict[int, dict[str, Metric]]:
        """Each run's metrics as ``run_metrics`` gave them, by run id (what ``compare_metrics`` takes)."""
        out = {r["run_id"]: {} for r in self.runs}
        for m in self.metrics:
            out[m["run_id"]][m["id"]] = Metric(m["id"], m["group"], m["value"], m["unit"], m["better"])
        return out


def parse_labels(items) -> dict[str, str]:
    """``["commit=abc", "job=llama"]`` -> ``{"commit": "abc", "job": "llama"}``; raises ValueError naming
    the first item that is not key=value (key: letters, digits, ``_.-``; value: non-empty, one line)."""
    labels = {}
    for item in items:
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
    """Each run compared (``traceparse.compare.compare_metrics``) with the previous run of its series:
    run id -> (previous run id, the comparison document). A series' first run has no entry."""
    from .compare import compare_metrics, load_thresholds

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
    if not path.exists():
        _create(path)
    rows = [_metric_row(m) for m in run_metrics(doc).values()]
    with _connect(path, write=True, wait_s=wait_s) as con:
        con.execute("BEGIN TRANSACTION")
        run_id = con.execute(
            "INSERT INTO runs (recorded_at, labels, label_key, files, version, report) "
            "VALUES (?, map(?::VARCHAR[], ?::VARCHAR[]), ?, ?, ?, ?) RETURNING run_id",
            [datetime.now(UTC).replace(tzinfo=None), list(labels), list(labels.values()), label_key(labels),
             list(doc["run"]["files"]), __version__, str(Path(report).resolve()) if report else None],
        ).fetchone()[0]
        if rows:  # one statement: executemany runs one per row, and the file stays locked meanwhile
            marks = ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * len(rows))
            con.execute(f"INSERT INTO metrics VALUES {marks}", [x for r in rows for x in (run_id, *r)])
        con.execute("COMMIT")  # closing without it rolls the run back
        return run_id


def check(path, wait_s: float | None = None):
    """Raise TraceError unless ``path`` is a history, or names no file in an existing folder (a new one)."""
    path = Path(path)
    if not path.exists():
        if not path.parent.is_dir():
            raise TraceError(path, "cannot create the history: no such folder")
        return
    with _connect(path, write=False, wait_s=wait_s):
        pass


def read(path, wait_s: float | None = None) -> History:
    """Every run and metric of the history at ``path``, runs in recording order."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(path, "no such history (traceparse analyze --record writes one)")
    with _connect(path, write=False, wait_s=wait_s) as con:
        cols = ["run_id", "recorded_at", "labels", "label_key", "files", "version", "report"]
        runs = [dict(zip(cols, r, strict=True))
                for r in con.execute(f"SELECT {', '.join(cols)} FROM runs ORDER BY recorded_at, run_id").fetchall()]
        mcols = ["run_id", "id", "group", "value", "text_value", "unit", "better"]
        metrics = []
        for r in con.execute('SELECT run_id, id, "group", value, text_value, unit, better FROM metrics '
                             "ORDER BY run_id, id").fetchall():
            m = dict(zip(mcols, r, strict=True))
            text_value = m.pop("text_value")
            m["value"] = text_value if text_value is not None else _number(m["value"], m["unit"])
            metrics.append(m)
    return History(runs, metrics)


def _metric_row(m: Metric) -> tuple:
    text = m.value if isinstance(m.value, str) else None
    return m.id, m.group, None if text is not None else float(m.value), text, m.unit, m.better


def _number(value, unit):
    """A count (a layout degree, a rank) back as an int; other numbers as stored."""
    if value is not None and unit in ("", "rank") and float(value).is_integer():
        return int(value)
    return value


def _create(path: Path):
    """Build an empty history in a temporary file beside ``path`` and link it into place; when another
    process got there first, keep theirs."""
    import duckdb

    if not path.parent.is_dir():
        raise TraceError(path, "cannot create the history: no such folder")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{random.randrange(1 << 30)}.new")
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


NOT_A_HISTORY = "exists and is not a traceparse history; left untouched"


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

    if _magic(path) != b"DUCK":
        raise TraceError(path, NOT_A_HISTORY)  # a history is never seen half-made (_create): nothing to wait for
    lock, patience = lock_path(path), _Patience(path, WAIT_S if wait_s is None else wait_s)
    new_lock = not lock.exists()
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
            except duckdb.IOException as e:
                if "Could not set lock" not in str(e):
                    raise TraceError(path, f"cannot open the history: {str(e).splitlines()[0]}") from None
                patience.pause()
        try:
            con.execute("SET enable_progress_bar = false")  # DuckDB's bar would land in analyze's output
            try:
                _check(con, path)
            except TraceError:
                if new_lock:
                    lock.unlink(missing_ok=True)  # no litter beside a file that is not a history
                raise
            yield con
        finally:
            con.close()
    finally:
        if fd is not None:
            os.close(fd)  # after DuckDB let go of the file


def _magic(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(12)[8:]
    except OSError as e:
        raise TraceError(path, f"cannot open the history: {e.strerror or e}") from None


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
    """Refuse a DuckDB file that is not a history of this schema (before anything is written)."""
    try:
        meta = dict(con.execute("SELECT key, value FROM history_meta").fetchall())
    except Exception:
        meta = {}
    if meta.get("format") != FORMAT:
        raise TraceError(path, NOT_A_HISTORY)
    if meta.get("schema_version") != str(SCHEMA_VERSION):
        raise TraceError(path, f"history schema {meta.get('schema_version')} is not {SCHEMA_VERSION}, the one this "
                         f"traceparse ({__version__}) writes; record into a new history")
