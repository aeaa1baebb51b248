"""The progress bar of a load on a terminal: files parsed of all, and their bytes.

A ``LoadBar`` is the ``progress`` callback of ``traceparse.load.run.load_run``. It draws nothing until the
parsing has lasted ``SHOW_AFTER_S`` (a load of a small file, or a reused store, shows no bar), then a
transient bar on stderr, gone when the load ends.
"""

import os
import sys
import threading
from contextlib import nullcontext

SHOW_AFTER_S = 0.5


def bar_wanted(stream=None) -> bool:
    """Is ``stream`` (stderr by default) a terminal that can redraw a bar in place?"""
    stream = stream or sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False
    return tty and os.environ.get("TERM") != "dumb"


def load_bar(quiet: bool = False):
    """A LoadBar when stderr is a terminal and not ``quiet``; otherwise a context that yields None
    (no callback: nothing is drawn)."""
    return LoadBar() if not quiet and bar_wanted() else nullcontext()


class LoadBar:
    """``with LoadBar() as bar: load_run(..., progress=bar)``; ``bar.close()`` ends it early (before
    printing the report); leaving the ``with`` ends it in any case, an interrupt or error included."""

    def __init__(self, show_after_s: float | None = None):
        self._show_after_s = SHOW_AFTER_S if show_after_s is None else show_after_s
        self._lock = threading.Lock()
        self._counts = None  # (files_done, files_total, bytes_done, bytes_total)
        self._timer = None
        self._progress = None
        self._task = None
        self._closed = False

    def __call__(self, files_done, files_total, bytes_done, bytes_total):
        with self._lock:
            if self._closed:
                return
            self._counts = (files_done, files_total, bytes_done, bytes_total)
            if self._progress is not None:
                self._update()
            elif self._timer is None:  # the first call: parsing begins
                self._timer = threading.Timer(self._show_after_s, self._show)
                self._timer.daemon = True
                self._timer.start()

    def _show(self):
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        with self._lock:
            if self._closed or self._progress is not None:
                return
            self._progress = Progress(
                TextColumn("parsing {task.fields[files]} files"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                console=Console(stderr=True), transient=True, redirect_stdout=False, redirect_stderr=False,
            )
            self._task = self._progress.add_task("parsing", files="", total=None)
            self._update()
            self._progress.start()

    def _update(self):
        files_done, files_total, bytes_done, bytes_total = self._counts
        self._progress.update(self._task, completed=bytes_done, total=bytes_total,
                              files=f"{files_done}/{files_total}")

    def close(self):
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            if self._progress is not None:
                self._progress.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
