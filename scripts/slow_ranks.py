"""The slow-rank campaign: real runs with one rank made slow in one place (fixtures/slow.py: before the forward,
inside the MLP or the attention, in the backward only, in the data loader, on the first profiled step only; on a
DDP job, a TP rank, an EP rank's dense part, a pipeline stage) and the balanced twin of each job, two profiler
windows each, two of them again on a busy host. Each window is analyzed on its own; for each it prints what the
report names as the costliest cause, its kind and how many steps show it, against the rank that was made slow;
then ``compare`` twin -> slow (should exit 1) and twin window 0 -> window 1 (should gate no slow rank: none of
``SLOW_RANK_GATES``; what a busy host moves between two windows of one balanced job, a strategy's cost or the step
time, is no slow rank and is not what the construction controls).

    python scripts/slow_ranks.py [--out DIR] [--json FILE] [--only NAME ...] [--regenerate]

Generating every run takes about 5 minutes on 2 cores (kept in DIR, default /tmp/traceparse_slow_ranks, and
reused); analyzing them about as long.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRACEPARSE_CACHE", tempfile.mkdtemp())

from fixtures.configs import CAMPAIGN, CONFIGS  # noqa: E402
from traceparse.thresholds import check_thresholds  # noqa: E402

WF = re.compile(r"rank(\d+)(?:\.step(\d+))?\.json\.gz")
# the kind each place's slowness is (savings.KINDS): its own work, its input
# compare's gates that name a slow rank or stage (docs/compare.md): a twin's windows pass none of them
SLOW_RANK_GATES = ("imbalance.straggler", "cost.rank", "cost.cause", "cost.stage")
KIND = {"before_forward": "work", "first_step": "work", "mlp": "work", "attention": "work", "backward": "work",
        "loader": "input"}


def windows(run: Path) -> list[list[Path]]:
    """Each profiler window's files, in rank order."""
    by = defaultdict(dict)
    for p in run.glob("rank*.json.gz"):
        m = WF.fullmatch(p.name)
        by[int(m[2] or 0)][int(m[1])] = p
    return [[f[r] for r in sorted(f)] for _, f in sorted(by.items())]


def expected(name: str) -> dict | None:
    """What the report should name for run ``name``: ``{cause, kind}`` (a pipeline's slow rank is its stage);
    None for a twin."""
    c = CAMPAIGN.get(name)
    if c is None:
        return None
    cfg = CONFIGS[name]
    if cfg.pp > 1:
        return {"cause": f"pipeline stage {c['rank']}", "kind": "work"}
    return {"cause": f"rank {c['rank']}", "kind": KIND[cfg.opts["slow_at"]]}


def verdict(doc: dict) -> dict:
    """The window's costliest material imbalance cause (a rank or a stage that costs at least the warn share of the
    step) and the check's status."""
    imb = doc["checks"]["imbalance"]
    material = check_thresholds()["imbalance"]["warn_straggler_share"]
    named = [c for c in doc.get("causes") or [] if c["check"] == "imbalance" and (c["share"] or 0) >= material]
    top = named[0] if named else None
    cause = (imb.get("cost") or {}).get("cause") or {}
    return {"status": imb["status"], "cause": top and top["cause"], "kind": top and top["kind"],
            "share": top and top["share"], "seen": f"{cause.get('steps_seen')}/{cause.get('steps')}" if cause else None,
            "first_line": next((f for f in imb.get("findings") or []), None)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "traceparse_slow_ranks")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", nargs="*", help="slow runs to take (default: all), with their twins")
    ap.add_argument("--regenerate", action="store_true")
    a = ap.parse_args(argv)
    from click.testing import CliRunner

    from fixtures.generate import generate
    from traceparse.cli import main as cli
    from traceparse.document import document
    from traceparse.load.run import connect, load_run

    slow = [n for n in CAMPAIGN if not a.only or n in a.only]
    names = list(dict.fromkeys([CAMPAIGN[n]["twin"] for n in slow] + slow))
    for n in names:
        if a.regenerate or not windows(a.out / n):
            generate(n, a.out)
            print(f"generated {n}", file=sys.stderr, flush=True)
    dbdir, dbs, rows = Path(tempfile.mkdtemp()), {}, []
    for n in names:
        for w, files in enumerate(windows(a.out / n)):
            db, _ = load_run(files, db=dbdir / f"{n}.{w}.duckdb")
            dbs[n, w] = db
            con = connect(db)
            got = verdict(document(con))
            con.close()
            want = expected(n)
            # a twin may name a rank only as its host's (the same ops slower in a majority of its steps): on a busy
            # host that is what happened; never as its own work, a stall or its input
            ok = (got["cause"] is None or got["kind"] == "slower" if want is None else
                  got["cause"] == want["cause"] and got["kind"] == want["kind"])
            rows.append({"run": n, "window": w, "expected": want, **got, "ok": ok})
            print(f"{'ok ' if ok else 'BAD'} {n:26} w{w} expected {want and want['cause']!s:18} "
                  f"{want and want['kind']!s:6} named {got['cause']!s:18} {got['kind']!s:7} "
                  f"share {got['share']!s:7} seen {got['seen']!s:4} [{got['status']}]", flush=True)

    def compare(base, new, want: int) -> dict:
        r = CliRunner().invoke(cli, ["compare", "--base-db", str(dbs[base]), "--new-db", str(dbs[new]),
                                     "--format", "json"])
        try:
            regs = [x["id"] for x in json.loads(r.stdout).get("regressions", [])]
        except ValueError:
            regs = [r.output[-200:]]
        slow = [x for x in regs if x in SLOW_RANK_GATES]
        ok = r.exit_code == 1 if want else not slow
        print(f"{'ok ' if ok else 'BAD'} compare {base[0]} w{base[1]} -> {new[0]} w{new[1]}: "
              f"exit {r.exit_code} (want {want}{'' if want else ', no slow-rank gate'}) {regs}", flush=True)
        return {"base": list(base), "new": list(new), "exit": r.exit_code, "want": want, "regressions": regs,
                "slow_rank_gates": slow, "ok": ok}

    compares = []
    for twin in dict.fromkeys(CAMPAIGN[n]["twin"] for n in slow):
        compares.append(compare((twin, 0), (twin, 1), 0))
    for n in slow:
        for w in (0, 1):
            compares.append(compare((CAMPAIGN[n]["twin"], w), (n, w), 1))
    bad = sum(not r["ok"] for r in rows) + sum(not c["ok"] for c in compares)
    print(f"{len(rows)} windows, {len(compares)} comparisons, {bad} not as expected")
    if a.json:
        a.json.write_text(json.dumps({"windows": rows, "compares": compares}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
