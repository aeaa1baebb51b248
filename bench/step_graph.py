"""The step graph on every bundled run (and the public GPU traces that are there): whether the measured replay
reproduces each step, what the costliest rank's excess costs it, and what the graph costs to build and replay.

    python bench/step_graph.py                 # every fixture run (one window of a windowed run) and public trace
    python bench/step_graph.py --only straggler ddp4

Per run: its points (moments on the lanes, all steps), the seconds to build the graphs (from a loaded store),
to replay each step once, to find the imbalance check's cost (savings.rank_costs) and overlap's (savings.
strategy_costs: one replay per strategy and step); the replay's largest difference from a measured point (0:
exact); what hiding each strategy's communication saves (share of the steps); per step, the ranks whose excess costs the step most (share of the
step, kind); the cause when there is one; how the run was built (truth.json's note). The table of
docs/critical-path.md.
"""

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def runs() -> dict[str, list[Path]]:
    """bench/critical_path.py's runs, each as its files: a windowed run's first window."""
    from critical_path import runs as every_run

    out = {}
    for name, path in every_run().items():
        files = sorted(path.glob("rank*.json.gz")) if path.is_dir() else [path]
        if path.is_dir() and "windows" in json.loads((path / "truth.json").read_text()):
            first = min(int(f.name.split(".step")[1].split(".")[0]) for f in files)
            files = [f for f in files if f".step{first}." in f.name]
        out[name] = files
    return out


def row(name: str, files: list[Path]) -> str:
    from traceparse.load.run import open_run
    from traceparse.store.query import table_rows
    from traceparse.vocabulary.compute import floor_per_window
    from traceparse.vocabulary.modules import use
    from traceparse.vocabulary.savings import rank_costs, strategy_costs
    from traceparse.vocabulary.step_graph import step_graphs

    with open_run([str(f) for f in files]) as con:
        t0 = time.perf_counter()
        graphs = step_graphs(con)
        t1 = time.perf_counter()
        worst = 0
        for g in graphs:
            g.replay()
            worst = max([worst] + [abs(lane.out[k] - lane.times[k]) for lane in g.lanes.values()
                                   for k in range(len(lane.times))])
        t2 = time.perf_counter()
        use(con, "pp_stages")
        stage = {r["rank"]: r["stage"] for r in table_rows(con, "pp_stages", "stage, rank, group_ranks")}
        cost = rank_costs(graphs, stage, 0.05, floor_per_window(con)) if graphs and len(graphs[0].windows) > 1 \
            else None
        t3 = time.perf_counter()
        hidden = strategy_costs(graphs, sorted({d["strategy"] for d in graphs[0].ctx["by_op"].values()})) \
            if graphs else {}
        t4 = time.perf_counter()
    points = sum(len(lane.times) for g in graphs for lane in g.lanes.values())
    steps = []
    for s in (cost or {}).get("per_step", []):
        top = sorted(s["ranks"].items(), key=lambda kv: -kv[1]["saved_ns"])[:2]
        steps.append(", ".join(f"{r}: {v['share']:.0%} {v['kind']}" for r, v in top) or "-")
    cause = (cost or {}).get("cause")
    said = (f"rank {cause['rank']}, {cause['share']:.0%} {cause['kind']}, {cause['steps_seen']} of {cause['steps']}"
            if cause else "-")
    truth = files[0].parent / "truth.json"
    note = json.loads(truth.read_text()).get("note", "") if truth.is_file() else "public trace"
    hides = ", ".join(f"{s} {v['share']:.0%}" for s, v in hidden.items() if v["share"] is not None) or "-"
    return (f"| {name} | {points:,} | {t1 - t0:.2f} | {(t2 - t1) / max(1, len(graphs)):.3f} | {t3 - t2:.2f} | "
            f"{t4 - t3:.2f} | {worst} | {hides} | {' / '.join(steps) or '-'} | {said} | {note} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    print("| run | points | build (s) | replay per step (s) | cost (s) | hiding (s) | replay error (ns) | hiding saves "
          "| costliest ranks per step | cause | how it was built |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|---|---|")
    found = defaultdict(int)
    for name, files in runs().items():
        if args.only and not any(o in name for o in args.only):
            continue
        print(row(name, files), flush=True)
        found["runs"] += 1
    if not found:
        sys.exit("no run matched")


if __name__ == "__main__":
    main()
