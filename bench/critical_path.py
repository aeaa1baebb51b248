"""The critical path on every bundled run: the table of docs/critical-path.md.

    python bench/critical_path.py            # every fixture run and public GPU trace (fixtures/public_traces.py)
    python bench/critical_path.py --only straggler pp4

Per run: its steps, whether each path's length is the measured step (the sum of its pieces), the ranks it runs
through over the steps (share of the steps' time), how likely the largest share is by chance on ranks alike
(imbalance.critical_path.by_chance_p), its causes, and how the run was built (fixtures/runs/*/truth.json's note).
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fixtures import public_traces  # noqa: E402


def runs() -> dict[str, Path]:
    out = {p.name: p for p in sorted((ROOT / "fixtures" / "runs").iterdir()) if (p / "truth.json").is_file()}
    for rel in sorted(public_traces.names()):
        if public_traces.path(rel).is_file():  # the public traces that are there (none is committed)
            out[rel] = public_traces.path(rel)
    return out


def row(name: str, path: Path) -> str:
    from traceparse.document import analyze

    doc = analyze([path], use_cache=False)
    cp, on_path = doc["critical_path"], (doc["checks"]["imbalance"].get("critical_path") or {})
    steps = cp["steps"]
    if not steps:
        return f"| {name} | 0 | - | - | - | - | {cp.get('reason', '')} |"
    p = on_path.get("by_chance_p")
    total = sum(s["length_ns"] for s in steps)
    ranks, causes = {}, {}
    for s in steps:
        for k, v in s["by_rank"].items():
            ranks[k] = ranks.get(k, 0) + v
        for k, v in s["by_cause"].items():
            causes[k] = causes.get(k, 0) + v
    exact = all(s["covered_ns"] == s["length_ns"] for s in steps)
    top = sorted(ranks.items(), key=lambda kv: -kv[1])[:3]
    cause = sorted(causes.items(), key=lambda kv: -kv[1])[:3]
    note = json.loads((path / "truth.json").read_text()).get("note", "") if path.is_dir() else "public GPU trace"
    return (f"| {name} | {len(steps)} | {'yes' if exact else 'NO'} | "
            f"{', '.join(f'{k}: {v / total:.0%}' for k, v in top)} | {'-' if p is None else f'{p:.3g}'} | "
            f"{', '.join(f'{k} {v / total:.0%}' for k, v in cause)} | {note} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    print("| run | steps | length = measured step | through (rank: share) | largest share by chance (p) | by cause "
          "| built with |")
    print("|---|---:|---|---|---:|---|---|")
    for name, path in runs().items():
        if args.only and not any(o in name for o in args.only):
            continue
        print(row(name, path), flush=True)


if __name__ == "__main__":
    main()
