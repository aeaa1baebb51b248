"""Judge what a case's commands did against the loading promise.

Outcomes, most severe first (a case gets the first that applies; ``flags`` lists all):

- ``timeout``: still running at the case's time limit (killed);
- ``memory``: MemoryError / allocation failure, or peak RSS over the case's bound;
- ``crash``: killed by a signal (SIGSEGV, SIGABRT, ...) or an exit code traceparse never uses;
- ``traceback``: a Python traceback or exception name on stderr, or exit 3 (internal error);
- ``wrong refusal``: exit 2 where the input must load, or a refusal that is not one line naming the file;
- ``not refused``: exit 0/1 where the input must be refused;
- ``silent pass``: exit 0 where the command must fail with 1 (compare of runs with different ranks; ``hang``
  saying "no divergence" of dumps that must be refused or show one), or exit 1 without saying why;
- ``silent loss``: exit 0/1 but events lost beyond what the damage touched, lost without a new load
  issue, damage not reported though it must be, or the wrong rank;
- ``miscount``: more events than the file holds;
- ``bad output``: exit 0/1 without a JSON document on stdout, or a report (``-o``) or document (the API)
  other than it must be;
- ``leftover``: a process of the case still alive after it exited, a file in $TMPDIR, or a
  temporary file (``*.tmp``, ``*.wal``, stage folder) in the cache;
- ``clobbered``: an input that must stay untouched (``--db`` naming a non-store, ``-o`` naming an input, the
  history or the store, a refused history) was changed, or a FIFO, device or symlink ``-o`` named replaced;
- ``harness``: the case could not be set up (e.g. no cache entry to damage).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

OUTCOMES = ["ok", "crash", "traceback", "silent loss", "leftover", "timeout", "memory", "wrong refusal",
            "not refused", "silent pass", "miscount", "bad output", "clobbered", "harness"]
PRIORITY = ["timeout", "memory", "crash", "traceback", "wrong refusal", "not refused", "silent pass", "silent loss",
            "miscount",
            "bad output", "leftover", "clobbered", "harness"]

MEMORY_MARKERS = re.compile(r"MemoryError|bad_alloc|Out of Memory|OutOfMemory|Cannot allocate memory|"
                            r"memory allocation|failed to allocate|ArrowMemoryError", re.IGNORECASE)
EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(?:[A-Z]\w*(?:Error|Exception|Interrupt|Warning)|BrokenProcessPool|"
                            r"KeyboardInterrupt|SystemExit)\b")
CLICK_BOILERPLATE = ("Usage:", "Try '")
TEMP_NAME = re.compile(r"\.tmp$|\.wal$|^traceparse-stage|^traceparse-|^pymp-|\.tmp\.")


@dataclass
class Verdict:
    outcome: str
    detail: str
    flags: list = field(default_factory=list)
    events: int | None = None
    issues: list | None = None


def signature(issue: dict) -> tuple:
    """A load issue without its numbers and file: what kind of issue it is."""
    return issue.get("severity"), re.sub(r"\d+", "#", str(issue.get("what")))


def leftover_files(tmp: Path, cache: Path) -> list[str]:
    """Anything in $TMPDIR; temporary files and stage folders in the cache."""
    out = [f"$TMPDIR/{p.relative_to(tmp)}" for p in sorted(tmp.iterdir())] if tmp.exists() else []
    if cache.exists():
        out += [f"cache/{p.relative_to(cache)}" for p in sorted(cache.rglob("*")) if TEMP_NAME.search(p.name)]
    return out


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith(CLICK_BOILERPLATE)]


def _process_problems(case, proc, mem_limit_mb, signalled=False) -> list[tuple[str, str]]:
    """Timeout, memory, crash and traceback findings for one command."""
    found = []
    err = proc.stderr
    if proc.timed_out:
        found.append(("timeout", f"still running after {proc.elapsed:.0f}s (limit {case.timeout:.0f}s)"))
    m = MEMORY_MARKERS.search(err)
    if m:
        found.append(("memory", f"{m.group(0)} (peak RSS {proc.max_rss_mb:.0f} MB, limit {mem_limit_mb} MB)"))
    elif case.max_rss_mb and proc.max_rss_mb > case.max_rss_mb:
        found.append(("memory", f"peak RSS {proc.max_rss_mb:.0f} MB over the bound {case.max_rss_mb} MB"))
    elif proc.rc is not None and proc.rc < 0 and proc.max_rss_mb > 0.85 * mem_limit_mb:
        found.append(("memory", f"killed by signal {-proc.rc} at peak RSS {proc.max_rss_mb:.0f} MB"))
    if not proc.timed_out and not signalled and proc.rc is not None and (proc.rc < 0 or proc.rc not in (0, 1, 2, 3)):
        found.append(("crash", f"{_signame(proc.rc)}; stderr: {_first(err) or '(empty)'}"))
    if "Fatal Python error" in err:
        found.append(("crash", _first(err, "Fatal Python error")))
    tb = "Traceback (most recent call last)" in err
    exc = [ln for ln in err.splitlines() if not ln.startswith("traceparse:") and EXCEPTION_LINE.match(ln)]
    if proc.rc == 3 or tb or exc:
        what = (exc[-1].strip() if exc else _first(err, "internal error") or _first(err))[:300]
        found.append(("traceback", f"exit {proc.rc}: {what}"))
    return found


def classify(case, procs, *, baseline=None, leftovers=(), changed=(), mem_limit_mb=4096, note=None,
             found=()) -> Verdict:
    """The verdict on ``procs`` (the case's commands); ``found``: (outcome, detail) pairs checked elsewhere
    (tests/mutation/surfaces.py)."""
    found = list(found)
    events = issues = None
    if case.action == "kill" and len(procs) == 2:
        first = procs[0]
        sig = first.signal_sent
        found += [(k, f"after signal {sig}: {d}") for k, d in
                  _process_problems(case, first, mem_limit_mb, signalled=bool(sig)) if not (sig == 9 and k == "traceback")]
        found += [("leftover", f"still running {case.action_args.get('grace', 3.0)}s after signal {sig}: {s}")
                  for s in first.survivors]
    elif case.action == "cache" and len(procs) == 1:
        found += [(k, f"first run: {d}") for k, d in _process_problems(case, procs[0], mem_limit_mb)]
        if not found:
            found.append(("harness", note or "cache case not set up"))
    if not (case.action == "cache" and len(procs) == 1):
        proc = procs[-1]
        found += _process_problems(case, proc, mem_limit_mb)
        if not any(k in ("timeout", "crash") for k, _ in found):
            sem, events, issues = _semantics(case, proc, baseline)
            found += sem
        found += [("leftover", f"still running after exit: {s}") for s in proc.survivors]
    found += [("leftover", f"left behind: {x}") for x in leftovers]
    found += [("clobbered", f"{x} was changed") for x in changed]
    if not found:
        return Verdict("ok", note or "", [], events, issues)
    found.sort(key=lambda f: PRIORITY.index(f[0]))
    flags = list(dict.fromkeys(k for k, _ in found))
    detail = found[0][1] + (f" [{note}]" if note else "")
    return Verdict(found[0][0], detail, flags, events, issues)


def _semantics(case, proc, baseline):
    """Exit code, message, events, load issues and ranks against what the case accepts."""
    found = []
    events = issues = None
    if proc.rc == 2:
        lines = error_lines(proc.stderr)
        if "refuse" not in case.accept:
            found.append(("wrong refusal", f"refused: {_first(proc.stderr)}"))
        elif len(lines) != 1:
            found.append(("wrong refusal", f"{len(lines)} lines on stderr: {' | '.join(lines[:3])[:300]}"))
        elif "error" not in lines[0].lower():
            found.append(("wrong refusal", f"not an error line: {lines[0][:200]}"))
        elif case.names and not any(n in lines[0] for n in case.names):
            found.append(("wrong refusal", f"does not name {' or '.join(case.names)}: {lines[0][:200]}"))
        return found, events, issues
    if proc.rc not in (0, 1):
        return found, events, issues
    if "load" not in case.accept:
        found.append(("not refused", f"exit {proc.rc}; stderr: {_first(proc.stderr) or '(empty)'}"))
        return found, events, issues
    if not case.document:
        return found, events, issues
    try:
        doc = json.loads(proc.stdout)
        events = doc["run"]["events"]
        ranks = doc["run"]["ranks"]
        issues = doc["load_issues"]
    except (ValueError, KeyError, TypeError) as e:
        found.append(("bad output", f"no JSON document on stdout ({type(e).__name__}: {str(e)[:100]})"))
        return found, events, issues
    base = baseline or set()
    new = [i for i in issues if signature(i) not in base]
    said = f"; new load issues: {_issues(new)}" if new else "; no new load issue"
    got = events if isinstance(events, int) else -1
    if case.events is not None:
        lost = case.events - got
        if lost < 0:
            found.append(("miscount", f"{got} events, the file(s) hold {case.events}"))
        elif lost > case.max_loss:
            found.append(("silent loss", f"kept {got} of {case.events} events: lost {lost}, the damage touched "
                                         f"{case.max_loss}{said}"))
        elif lost > 0 and not new:
            found.append(("silent loss", f"lost {lost} of {case.events} events with no new load issue"))
    if case.min_events is not None:
        if got < case.min_events:
            found.append(("silent loss", f"kept {got} events; the first {case.min_events} were intact{said}"))
        elif case.max_events is not None and got < case.max_events and not new:
            found.append(("silent loss", f"kept {got} of {case.max_events} events with no new load issue"))
    if case.max_events is not None and got > case.max_events:
        found.append(("miscount", f"{got} events, the file holds {case.max_events}"))
    if case.must_note and not new:
        found.append(("silent loss", f"the damage is not reported: no new load issue (kept {got} events)"))
    if case.ranks is not None and sorted(ranks) != sorted(case.ranks) and (case.rank_strict or not new):
        found.append(("silent loss", f"loaded as rank(s) {ranks}; the file(s) say {sorted(case.ranks)}{said}"))
    return found, events, issues


def _issues(issues) -> str:
    return "; ".join(f"{i.get('severity')}: {str(i.get('what'))[:120]}" for i in issues[:2])


def _first(text: str, containing: str = "") -> str:
    for ln in text.splitlines():
        if ln.strip() and containing in ln:
            return ln.strip()[:300]
    return ""


def _signame(rc: int) -> str:
    if rc is not None and rc < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit {rc}"
