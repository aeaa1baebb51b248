"""Profiled windows: a job profiled with a repeating schedule (``torch.profiler.schedule(wait=1, warmup=1,
active=2)`` repeats until the loop ends) leaves one trace file per rank and window. Which window a file is comes
from its ``ProfilerStep#N`` annotations (the summary's ``steps``: its first and last N), whatever the files are
named (the plugin's ``rank<r>.step<k>.json.gz``, torch's ``<host>_<pid>.<time>.pt.trace.json``).

One window of each rank is loaded: by default each rank's latest, said in one load issue that names ``--window``;
``--window STEP`` loads, of each rank, the window holding profiler step ``STEP``."""

from collections import defaultdict
from itertools import pairwise
from pathlib import Path

from traceparse.errors import TraceError, shown
from traceparse.units import first_of

OPTION = "--window"
SHOWN = 8  # windows listed in a message


def parse_window(value) -> int | None:
    """``--window``'s value: None or ``latest`` (each rank's latest window), else a profiler step number."""
    if value is None or isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    text = str(value).strip().lower()
    if text in ("", "latest", "last"):
        return None
    if text.isdigit():
        return int(text)
    raise TraceError(OPTION, f"{value!r} is not a profiler step number or 'latest'")


def choose_windows(summaries: list[dict], window=None) -> tuple[list[dict], list[tuple]]:
    """The summaries to load (one window per rank) and the load issues saying so.

    Nothing changes when every rank has one file and no window is asked for. Files of one rank are windows of
    one job when each has ProfilerStep#N annotations and their step ranges do not overlap; otherwise they are
    left as they are (``assign_ranks`` refuses two files of one rank). ``window``: see ``parse_window``."""
    window = parse_window(window)
    by_rank = defaultdict(list)
    for s in summaries:
        if s["rank"] is not None:
            by_rank[s["rank"]].append(s)
    several = {r: ss for r, ss in by_rank.items() if len(ss) > 1}
    if not several and window is None:
        return summaries, []
    if any(not _windows_of_one_rank(ss) for ss in several.values()):
        return summaries, []
    found = _windows(summaries)
    if window is None:
        chosen = {r: max(ss, key=lambda s: s["steps"][1]) for r, ss in several.items()}
    else:
        chosen = {r: next((s for s in ss if s.get("steps") and s["steps"][0] <= window <= s["steps"][1]), None)
                  for r, ss in by_rank.items()}
        if not any(chosen.values()):
            raise TraceError(OPTION, f"no profiled window holds step {window}; the windows: "
                             f"{_list(found)}" if found else f"no profiled window holds step {window}: the traces "
                             "have no ProfilerStep#N annotations")
    keep = [s for s in summaries if s["rank"] is None or chosen.get(s["rank"], s) is s]
    loaded = _windows(keep)
    where = _folder(summaries)
    if window is None:
        earlier = next(w for w in found if w not in loaded)
        what = (f"{len(summaries)} trace files hold {len(found)} profiled windows ({_list(found)}): analyzing the "
                f"latest of each rank, {_list(loaded)}; choose another with {OPTION} STEP (a step in it, e.g. "
                f"{OPTION} {earlier[0]})")
        return keep, [(where, "warning", what, len(summaries) - len(keep))]
    what = f"analyzing {_list(loaded)} ({OPTION} {window}) of {len(found)} profiled windows ({_list(found)})"
    return keep, [(where, "info", what, 1)]


def _windows(summaries) -> list[tuple]:
    """The distinct windows (first, last ProfilerStep#N) of ``summaries``, latest last."""
    return sorted({tuple(s["steps"]) for s in summaries if s.get("steps")}, key=lambda w: (w[1], w[0]))


def _windows_of_one_rank(ss: list[dict]) -> bool:
    if any(not s.get("steps") for s in ss):
        return False
    ranges = sorted(tuple(s["steps"]) for s in ss)
    return all(a[1] < b[0] for a, b in pairwise(ranges))


def _list(windows) -> str:
    """``steps 2-3, 6-7`` (the first and last ProfilerStep#N of each window)."""
    spans = [str(a) if a == b else f"{a}-{b}" for a, b in windows]
    return ("step " if len(windows) == 1 and windows[0][0] == windows[0][1] else "steps ") + first_of(spans, SHOWN)


def _folder(summaries) -> str | None:
    """The folder all the files are in (what the user most likely named), or None (the run)."""
    folders = {str(Path(s["file"]).parent) for s in summaries}
    return shown(Path(folders.pop())) if len(folders) == 1 else None
