"""Run many cases: controls first (their load issues are the baselines), then the rest on a few
threads (each case is its own subprocess); count outcomes per class and keep the first examples of
each failure with their files."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .bases import REPO
from .checks import OUTCOMES, signature
from .generate import CLASSES, Case
from .run import MEM_LIMIT_MB, Result, run_case, save_case

TABLE_OUTCOMES = ["ok", "crash", "traceback", "silent loss", "leftover", "timeout", "memory"]


def run_cases(cases: list[Case], root, *, jobs: int = 1, keep_dir=None, keep: int = 3, mem_limit_mb: int = MEM_LIMIT_MB,
              progress=None, baselines: dict | None = None) -> list[Result]:
    """Run ``cases`` under ``root``, controls first; with ``keep_dir``, the first ``keep`` failures of
    each class and outcome keep their folder (inputs, stdout, stderr) and a case.json there.
    ``baselines`` (control key -> load issue signatures) is filled in; controls already in it are skipped."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    baselines = {} if baselines is None else baselines
    kept: Counter = Counter()
    lock = threading.Lock()
    results: list[Result] = []

    def one(case: Case) -> Result:
        base = baselines.get(case.baseline) if case.baseline else None
        try:
            r = run_case(case, root, baseline=base, mem_limit_mb=mem_limit_mb, keep=True)
        except Exception as e:  # the harness, not traceparse: say so and go on
            r = Result(case.id, case.cls, case.op, case.description, "harness", f"{type(e).__name__}: {e}", None, 0.0,
                       0.0, "", ["harness"], [], [], folder=str(root / case.id))
        folder = Path(r.folder)
        r.folder = None
        with lock:
            slot = (r.cls, r.outcome)
            take = keep_dir is not None and r.outcome != "ok" and kept[slot] < keep
            if take:
                kept[slot] += 1
        if take:
            dest = Path(keep_dir) / r.cls / r.outcome.replace(" ", "_") / case.id
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(folder / "in", ignore_errors=True)
            save_case(case, folder)
            shutil.move(str(folder), dest)
            r.folder = str(dest)
        else:
            shutil.rmtree(folder, ignore_errors=True)
        with lock:
            results.append(r)
            if progress:
                progress(r, len(results))
        return r

    controls = [c for c in cases if c.cls == "control" and c.action_args["key"] not in baselines]
    rest = [c for c in cases if c.cls != "control"]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for case, r in zip(controls, pool.map(one, controls), strict=True):
            baselines[case.action_args["key"]] = None if r.issues is None else {signature(i) for i in r.issues}
        list(pool.map(one, rest))
    order = {c.id: k for k, c in enumerate(cases)}
    results = [r for r in results if r.id in order]
    results.sort(key=lambda r: order[r.id])
    return results


def counts(results) -> dict:
    out: dict = defaultdict(Counter)
    for r in results:
        out[r.cls][r.outcome] += 1
    return {c: dict(out[c]) for c in ["control", *CLASSES] if c in out}


def markdown_table(results) -> str:
    table = counts(results)
    other = [o for o in OUTCOMES if o not in TABLE_OUTCOMES]
    used_other = [o for o in other if any(o in row for row in table.values())]
    head = ["class", "cases", *TABLE_OUTCOMES, *used_other]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    total = Counter()
    for cls, row in table.items():
        n = sum(row.values())
        total.update(row)
        total["cases"] += n
        lines.append("| " + " | ".join([cls, str(n)] + [str(row.get(o, 0) or "") for o in head[2:]]) + " |")
    lines.append("| **all** | " + " | ".join([str(total["cases"])] + [str(total.get(o, 0) or "") for o in head[2:]]) + " |")
    return "\n".join(lines)


def report(results, *, seed, n, classes, big, jobs, started, duration, keep_dir, examples: int = 3,
           version: dict | None = None) -> dict:
    ex: dict = defaultdict(lambda: defaultdict(list))
    for r in results:
        if r.outcome != "ok" and len(ex[r.cls][r.outcome]) < examples:
            ex[r.cls][r.outcome].append({k: getattr(r, k) for k in ("id", "op", "description", "detail", "rc",
                                                                    "elapsed", "max_rss_mb", "stderr", "folder")})
    totals = Counter(r.outcome for r in results)
    return {
        "seed": seed, "cases": n, "classes": classes, "big": big, "jobs": jobs,
        "started": started, "duration_s": round(duration, 1), "traceparse": version or code_version(),
        "totals": dict(totals), "counts": counts(results), "table": markdown_table(results),
        "examples": {c: dict(v) for c, v in ex.items()}, "cases_dir": str(keep_dir) if keep_dir else None,
        "results": [{k: getattr(r, k) for k in ("id", "cls", "op", "outcome", "detail", "rc", "elapsed",
                                                 "max_rss_mb", "flags")} for r in results],
    }


def code_version() -> dict:
    """The checkout's commit and modified files (take it when the campaign starts: others may commit meanwhile),
    and the other checkout run instead, if any (its own commit is not known here)."""
    from . import run

    out = {"python": sys.version.split()[0], "pythonpath": run.PYTHONPATH}
    try:
        out["commit"] = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                                       text=True, timeout=10).stdout.strip()
        out["modified"] = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                                         capture_output=True, text=True, timeout=10).stdout.split("\n")[:50]
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
