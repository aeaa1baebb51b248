"""traceparse's GPU section against HTA 0.6.1 on every public GPU trace, measured: the tables of docs/gpu.md
("Against HTA 0.6.1, measured").

    python3 -m venv /tmp/hta06 && /tmp/hta06/bin/pip install -q traceinsight==0.6.1    # once: HTA 0.6.1
    python bench/hta_parity.py --hta-python /tmp/hta06/bin/python                        # every trace
    python bench/hta_parity.py --hta-python /tmp/hta06/bin/python --only amd_trace      # some

The traces are other projects' files, read from ../shared/traces or TRACEPARSE_PUBLIC_TRACES (fixtures/
public_traces.py), never committed; nothing derived from them is written but to stdout (a trace without its
cuda_sync events, for the third HTA run, lives in a temporary folder).

HTA runs in the venv of --hta-python (a child process per setting), with its defaults (consecutive_kernel_delay 30):
- as shipped: whole-microsecond rounding (ceil each float-microsecond start, floor each end);
- rounding off: HTA_DISABLE_NS_ROUNDING=1;
- on a trace holding cuda_sync events, rounding off on a copy without them.
traceparse's numbers are ``traceparse analyze FILES --format json``'s gpu section (temporal scope 'hta': HTA's
window; idle per stream). Per trace and rank, the first table gives the temporal breakdown (idle / compute /
non-compute, % of HTA's span) of each, how many points of idle the rounding moves, the cuda_sync events HTA counts
as work, and what is left once both are taken out; the second, HTA's idle-time breakdown (host wait / kernel wait /
other, summed over the streams) against traceparse's, with the largest difference of a category on one stream as a
percent of that stream's idle, rounding on and off.
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from fixtures import public_traces  # noqa: E402
import hta_gpu  # noqa: E402  the label -> files list of docs/gpu.md's tables, and HTA's numbers (hta_numbers)

TRACES = {**hta_gpu.TRACES, "dsv3_ep64_dualpipe": ["deepseek/dsv3_ep64_dualpipe_rank0.json.gz"]}
CATEGORIES = ("host_wait", "kernel_wait", "other")


def _load(path: Path) -> dict:
    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
        return json.load(f)


def syncs(paths: list[Path]) -> dict:
    """{rank index in file order: (cuda_sync events, their total duration in us)} of the raw files."""
    out = {}
    for i, p in enumerate(paths):
        ev = [e for e in _load(p).get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") == "cuda_sync"]
        out[i] = (len(ev), sum(float(e.get("dur", 0)) for e in ev))
    return out


def without_syncs(paths: list[Path], folder: Path) -> list[Path]:
    """Copies of ``paths`` in ``folder`` without their cuda_sync events (for HTA, in a temporary folder)."""
    out = []
    for p in paths:
        d = _load(p)
        d["traceEvents"] = [e for e in d["traceEvents"] if e.get("cat") != "cuda_sync"]
        q = folder / Path(p).name
        with gzip.open(q, "wt") as f:
            json.dump(d, f)
        out.append(q)
    return out


def hta_only(labels: list[str], no_sync: bool) -> dict:
    """In the HTA venv: {label: hta_gpu.hta_numbers} (rounding as the environment says)."""
    out = {}
    for label in labels:
        paths = [public_traces.path(p) for p in TRACES[label]]
        if no_sync:
            with tempfile.TemporaryDirectory() as d:
                out[label] = hta_gpu.hta_numbers(without_syncs(paths, Path(d)))
        else:
            out[label] = hta_gpu.hta_numbers(paths)
    return out


def run_hta(python: str, labels: list[str], rounding: bool, no_sync: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HTA_DISABLE_NS_ROUNDING"}
    if not rounding:
        env["HTA_DISABLE_NS_ROUNDING"] = "1"
    cmd = [python, __file__, "--hta-only", "--only", *labels] + (["--no-sync"] if no_sync else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def ours(label: str) -> dict:
    """``traceparse analyze FILES --format json``'s gpu section (the CLI of this Python's environment)."""
    files = [str(public_traces.path(p)) for p in TRACES[label]]
    cli = Path(sys.executable).with_name("traceparse")
    out = subprocess.run([str(cli), "analyze", *files, "--format", "json"], capture_output=True, text=True)
    return json.loads(out.stdout)["gpu"]


def _pct3(t: dict | None) -> str:
    if not t or "idle_pct" not in t:
        return "-"
    return f"{t['idle_pct']:.2f} / {t['compute_pct']:.2f} / {t['non_compute_pct']:.2f}"


def _worst(hta_idle: dict, mine: dict, rank: str) -> float:
    """The largest |HTA - traceparse| of an idle category on one stream, as a share of HTA's idle of that stream."""
    worst = 0.0
    for stream, cats in hta_idle.items():
        total = sum(cats.get(c, 0.0) for c in CATEGORIES) or 1.0
        m = mine.get((rank, stream), {})
        for c in CATEGORIES:
            worst = max(worst, abs(m.get(f"{c}_ns", 0) / 1e3 - cats.get(c, 0.0)) / total)
    return worst


def tables(default: dict, exact: dict, nosync: dict, gpu: dict, sync_of: dict) -> str:
    temporal = ["| trace | rank | HTA 0.6.1: idle / compute / non-compute % | HTA, rounding off | traceparse | "
                "span, ms: HTA / traceparse | rounding moves idle (points) | cuda_sync: events, ms; span they add, "
                "ms | left, rounding and syncs out: idle / compute / non-compute (points) |",
                "|---|---:|---|---|---|---|---:|---|---|"]
    idle = ["| trace | rank | HTA 0.6.1: host wait / kernel wait / other, ms | traceparse | largest difference of a "
            "category on a stream, % of its idle: HTA as shipped / rounding off |", "|---|---:|---|---|---|"]
    for label, h in default.items():
        g = gpu[label]
        mine_t = {str(r["rank"]): r for r in g.get("temporal", []) if r["scope"] == "hta"}
        mine_i = {(str(r["rank"]), str(r["stream"])): r for r in g.get("idle", [])}
        if "error" in h:
            temporal.append(f"| {label} | - | HTA fails: {h['error'][:70]} | | | | | |")
            continue
        for rank, v in sorted(h.items()):
            t, e = v.get("temporal", {}), exact[label].get(rank, {}).get("temporal", {})
            n = (nosync.get(label) or {}).get(rank, {}).get("temporal") or e
            m = mine_t.get(rank)
            mt = ({"idle_pct": 100 * m["idle"], "compute_pct": 100 * m["compute"],
                   "non_compute_pct": 100 * m["non_compute"]} if m else None)
            count, dur = sync_of[label].get(sorted(h).index(rank), (0, 0.0))
            moved = f"{t['idle_pct'] - e['idle_pct']:+.2f}" if "idle_pct" in t and "idle_pct" in e else "-"
            left = (" / ".join(f"{n[k] - mt[k]:+.2f}" for k in ("idle_pct", "compute_pct", "non_compute_pct"))
                    if mt and "idle_pct" in n else "-")
            span = f"{t['span_us'] / 1e3:,.3f} / {m['span_ns'] / 1e6:,.3f}" if "span_us" in t and m else "-"
            added = f"{(e['span_us'] - n['span_us']) / 1e3:,.3f}" if "span_us" in e and "span_us" in n else "-"
            temporal.append(f"| {label} | {rank} | {_pct3(t)} | {_pct3(e)} | {_pct3(mt)} | {span} | {moved} | "
                            f"{count}, {dur / 1e3:.2f}; {added} | {left} |")
            hi, ei = v.get("idle", {}), exact[label].get(rank, {}).get("idle", {})
            if "error" in hi:
                idle.append(f"| {label} | {rank} | HTA fails: {hi['error'][:70]} | | |")
                continue
            hsum = " / ".join(f"{sum(s.get(c, 0.0) for s in hi.values()) / 1e3:.3f}" for c in CATEGORIES)
            msum = " / ".join(f"{sum(r[f'{c}_ns'] for (rk, _), r in mine_i.items() if rk == rank) / 1e6:.3f}"
                              for c in CATEGORIES)
            exact_worst = f"{100 * _worst(ei, mine_i, rank):.2f}%" if "error" not in ei else "-"
            idle.append(f"| {label} | {rank} | {hsum} | {msum} | {100 * _worst(hi, mine_i, rank):.2f}% / "
                        f"{exact_worst} |")
    return "\n".join(temporal) + "\n\n" + "\n".join(idle)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", default="/tmp/hta06/bin/python",
                    help="the python of the venv holding HTA 0.6.1 (traceinsight==0.6.1)")
    ap.add_argument("--only", nargs="*", help="labels to run (default: every trace)")
    ap.add_argument("--hta-only", action="store_true", help="(in the HTA venv) print HTA's numbers as JSON")
    ap.add_argument("--no-sync", action="store_true", help="with --hta-only: on copies without cuda_sync events")
    args = ap.parse_args()
    labels = args.only or list(TRACES)
    lost = [public_traces.missing(p) for k in labels for p in TRACES[k] if public_traces.missing(p)]
    if lost:
        sys.exit(lost[0])
    if args.hta_only:
        print(json.dumps(hta_only(labels, args.no_sync)))
        return
    sync_of = {k: syncs([public_traces.path(p) for p in TRACES[k]]) for k in labels}
    with_syncs = [k for k in labels if any(n for n, _ in sync_of[k].values())]
    default = run_hta(args.hta_python, labels, rounding=True)
    exact = run_hta(args.hta_python, labels, rounding=False)
    nosync = run_hta(args.hta_python, with_syncs, rounding=False, no_sync=True) if with_syncs else {}
    print(tables(default, exact, nosync, {k: ours(k) for k in labels}, sync_of))


if __name__ == "__main__":
    main()
