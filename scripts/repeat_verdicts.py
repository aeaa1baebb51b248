"""Verdicts on repeat runs: imbalance / overlap per profiler window of the repeat-run fixtures, and compare
exit codes between every ordered pair of windows, idle -> loaded, and dp2_tp2 -> its straggler variants.

    python scripts/repeat_verdicts.py out.json
"""
import itertools
import json
import os
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

os.environ["TRACEPARSE_CACHE"] = tempfile.mkdtemp()
from click.testing import CliRunner
import traceparse
from traceparse.cli import main
from traceparse.document import document
from traceparse.load.run import connect, load_run

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
OUT = Path(sys.argv[1])
WF = re.compile(r"rank(\d+)(?:\.step(\d+))?\.json\.gz")
print("traceparse from", traceparse.__file__, file=sys.stderr)


def windows(name):
    by = defaultdict(dict)
    for p in (RUNS / name).glob("rank*.json.gz"):
        m = WF.fullmatch(p.name)
        by[None if m[2] is None else int(m[2])][int(m[1])] = p
    return [(k, [f[r] for r in sorted(f)]) for k, f in sorted(by.items(), key=lambda kv: kv[0] or 0)]


dbdir = Path(tempfile.mkdtemp())
dbs, rows = {}, []
for name in ["ddp2_windows", "ddp2_windows_loaded", "dp2_tp2_windows", "ddp2", "dp2_tp2", "straggler_dp2_tp2_r1"]:
    for w, (k, files) in enumerate(windows(name)):
        db, _ = load_run(files, db=dbdir / f"{name}.{w}.duckdb")
        dbs[name, w] = db
        con = connect(db)
        d = document(con)
        con.close()
        imb, ov = d["checks"]["imbalance"], d["checks"]["overlap"]
        rows.append({"run": name, "window": w, "file_step": k,
                     "imbalance": {x: imb[x] for x in ("status", "straggler_rank", "straggler", "matched_collectives")},
                     "imbalance_findings": imb["findings"],
                     "last_arrivals": {p["rank"]: p["last_arrivals"] for p in imb["per_rank"]},
                     "wait_ms": {p["rank"]: round(p["wait_ns"] / 1e6, 2) for p in imb["per_rank"]},
                     "compute_floor_ms": {p["rank"]: round(p["compute_floor_ns"] / 1e6, 2) for p in imb["per_rank"]},
                     "overlap": {"status": ov["status"], "overall": ov.get("overall"),
                                 "per_strategy": {s: v.get("overlap") for s, v in (ov.get("per_strategy") or {}).items()}},
                     "step_ms": round(sum(s["window_ns"] for s in d["summary"]["per_step"] if s["step"] is not None)
                                      / max(1, sum(1 for s in d["summary"]["per_step"] if s["step"] is not None)) / 1e6, 1)})
        print(name, w, "done", file=sys.stderr)


def cmp(a, b):
    r = CliRunner().invoke(main, ["compare", "--base-db", str(dbs[a]), "--new-db", str(dbs[b]), "--format", "json"])
    try:
        doc = json.loads(r.stdout)
        regs = [(x["id"], x.get("note")) for x in doc.get("regressions", [])]
    except Exception:
        regs = r.output[-300:]
    return {"base": list(a), "new": list(b), "exit": r.exit_code, "regressions": regs}


compares = []
for name in ["ddp2_windows", "ddp2_windows_loaded", "dp2_tp2_windows"]:
    for a, b in itertools.permutations(range(len(windows(name))), 2):
        compares.append(cmp((name, a), (name, b)))
for w in range(4):
    compares.append(cmp(("ddp2_windows", w), ("ddp2_windows_loaded", w)))
compares.append(cmp(("dp2_tp2", 0), ("straggler_dp2_tp2_r1", 0)))
compares.append(cmp(("dp2_tp2", 0), ("dp2_tp2_windows", 0)))
OUT.write_text(json.dumps({"windows": rows, "compares": compares}, indent=1, default=str))
