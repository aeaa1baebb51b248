#!/usr/bin/env python
"""The overlap check's status on every bundled run (``fixtures/runs/*``), with what hiding each strategy's
communication would save a step by replay (``per_strategy[s].cost.share``) and why a strategy cannot be hidden here,
then the count of each status: how the grade from saving (docs/checks.md, overlap) falls over the bundled runs.

  python scripts/overlap_grades.py              # every bundled run
  python scripts/overlap_grades.py RUN ...      # these runs or traces
"""

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None):
    from traceparse.document import analyze

    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])] or \
        sorted(p for p in (ROOT / "fixtures" / "runs").iterdir() if p.is_dir())
    counts = Counter()
    for path in paths:
        o = analyze([path], use_cache=False)["checks"]["overlap"]
        counts[o["status"]] += 1
        costs = ", ".join(f"{s} {v['cost']['share']:.1%}" + (" (cannot hide)" if v.get("cannot_hide") else "")
                          for s, v in (o.get("per_strategy") or {}).items() if v.get("cost"))
        print(f"{path.name:32} {o['status']:15} {costs}")
    print(", ".join(f"{s}: {n}" for s, n in sorted(counts.items())))


if __name__ == "__main__":
    main()
