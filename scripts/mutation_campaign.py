"""The full mutation campaign (docs/reliability.md).

    python scripts/mutation_campaign.py --cases 5000 --seed 1 --out report.json

generates ``--cases`` seeded cases over the classes (``--classes exponent,bad_value,...``; default all: the
loading classes of tests/mutation/generate.py, the surface classes of tests/mutation/surfaces.py, ``output``,
``history``, ``arguments``, ``concurrent``, ``dump``, hostile Flight Recorder dumps, tests/mutation/dumps.py, and the
hostile-input classes of tests/mutation/hostile.py, ``store``, ``control_chars``, ``markdown``, ``huge_numbers``,
``path_chars``)
plus one unmutated control per input arrangement, runs each as a ``traceparse`` subprocess in its
own folders, session and memory limit, and writes a JSON report: counts per class and outcome, the
first examples of each failure (their inputs, stdout, stderr and a case.json with the command to
reproduce them kept under ``--cases-dir``, default ``<out>-cases/``) and one row per case.
Decompression bombs reach 1.2 GiB unless ``--small``. Exit status: 0 when every case is ok, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from mutation import run as mutation_run  # noqa: E402
from mutation.campaign import code_version, markdown_table, now, report, run_cases  # noqa: E402
from mutation.generate import CLASSES, generate_cases  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=600, help="mutation cases (controls come on top)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--classes", default=",".join(CLASSES), help=f"comma-separated, of: {', '.join(CLASSES)}")
    ap.add_argument("--out", default="mutation-report.json", help="the JSON report")
    ap.add_argument("--cases-dir", help="where failing examples are kept (default: <out>-cases/)")
    ap.add_argument("--keep", type=int, default=3, help="examples kept per class and outcome")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once")
    ap.add_argument("--small", action="store_true", help="keep decompression bombs at or under 256 MiB")
    ap.add_argument("--mem-limit-mb", type=int, default=4096, help="RLIMIT_AS (address space) of each command; an idle traceparse maps about 2.2 GB")
    ap.add_argument("--work", help="scratch folder (default: a temporary one)")
    ap.add_argument("--pythonpath", help="run the traceparse found first in this folder (another checkout, e.g. "
                                         "`git archive` of an older commit, with traceparse/analyzers and "
                                         "traceparse/rules linked to its analyzers/ and rules/)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)

    classes = [c.strip() for c in a.classes.split(",") if c.strip()]
    if a.pythonpath:
        mutation_run.PYTHONPATH = str(Path(a.pythonpath).resolve())
        for sub in ("analyzers", "rules"):  # else the installed checkout's would run beside the other's code
            if not (Path(a.pythonpath) / "traceparse" / sub).is_dir():
                sys.exit(f"--pythonpath {a.pythonpath}: no traceparse/{sub} there; link it: "
                         f"ln -s ../{sub} {a.pythonpath}/traceparse/{sub}")
    out = Path(a.out)
    keep_dir = Path(a.cases_dir) if a.cases_dir else out.with_name(out.stem + "-cases")
    if keep_dir.exists():
        shutil.rmtree(keep_dir)
    started, t0, version = now(), time.monotonic(), code_version()
    cases = generate_cases(a.cases, a.seed, classes, big=not a.small)
    print(f"{len(cases)} cases ({a.cases} mutations + {len(cases) - a.cases} controls), generated in "
          f"{time.monotonic() - t0:.0f}s", file=sys.stderr)

    def progress(r, done):
        if not a.quiet:
            mark = "" if r.outcome == "ok" else f"  {r.outcome.upper()}: {r.detail[:150]}"
            print(f"[{done}/{len(cases)}] {r.id} {r.op} {r.elapsed:.1f}s{mark}", file=sys.stderr, flush=True)

    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="mutation-"))
    try:
        results = run_cases(cases, work, jobs=a.jobs, keep_dir=keep_dir, keep=a.keep, mem_limit_mb=a.mem_limit_mb,
                            progress=progress)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    doc = report(results, seed=a.seed, n=a.cases, classes=classes, big=not a.small, jobs=a.jobs, started=started,
                 duration=time.monotonic() - t0, keep_dir=keep_dir, examples=a.keep, version=version)
    out.write_text(json.dumps(doc, indent=2, default=str))
    print(markdown_table(results), file=sys.stderr)
    print(f"report: {out}; failing examples: {keep_dir}; {doc['duration_s']:.0f}s", file=sys.stderr)
    return 0 if all(r.outcome == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
