#!/usr/bin/env python
"""How long a small run takes to answer, as a user runs it: ``traceparse analyze`` in a fresh process, interpreter
start and imports included, beside the floors of that process (the interpreter alone, and with traceparse's command
line imported).

    python bench/small_runs.py              # the bundled ddp2 (2 ranks) and ddp4 (4 ranks), and the public
                                            # single-GPU alexnet trace when present (fixtures/public_traces.py)
    python bench/small_runs.py -n 9

Per run: ``cold`` is ``analyze --no-cache`` (parse, store, checks, document); ``cached`` is ``analyze`` again with the
store and document of a first run kept (a fresh cache folder per run). Each figure is the median of ``-n`` runs,
taken in turn with the floors so that a machine's drift moves them alike. The goals (docs/speed.md, Small runs):
cold within 0.8 s, cached within 0.3 s.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fixtures import public_traces  # noqa: E402

ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


def cases() -> dict[str, Path]:
    out = {"ddp2 (2 ranks)": ROOT / "fixtures" / "runs" / "ddp2", "ddp4 (4 ranks)": ROOT / "fixtures" / "runs" / "ddp4"}
    if public_traces.path(ALEXNET).is_file():
        out["alexnet (1 GPU, 25 KB)"] = public_traces.path(ALEXNET)
    return out


def timed(cmd: list[str], env: dict) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5)
    a = ap.parse_args()
    py = sys.executable
    # as a user's Python runs: modules compiled once and kept (an installer compiles them; a sandbox that sets
    # PYTHONDONTWRITEBYTECODE would compile every module on every run)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    floors = {"python -c pass": [py, "-c", "pass"],
              "import traceparse.cli": [py, "-c", "import traceparse.cli"]}
    times = {k: [] for k in floors}
    for name in cases():
        times[f"{name}: cold"], times[f"{name}: cached"] = [], []
    for _ in range(a.n):
        for k, cmd in floors.items():
            times[k].append(timed(cmd, env))
        for name, path in cases().items():
            analyze = [py, "-m", "traceparse.cli", "analyze", str(path)]
            with tempfile.TemporaryDirectory() as home:
                cached = {**env, "TRACEPARSE_CACHE": home}
                times[f"{name}: cold"].append(timed([*analyze, "--no-cache"], cached))
                timed(analyze, cached)  # fills the cache
                times[f"{name}: cached"].append(timed(analyze, cached))
    print(f"| what | median s (of {a.n}) | min s | max s |")
    print("|---|---:|---:|---:|")
    for k, v in times.items():
        print(f"| {k} | {statistics.median(v):.2f} | {min(v):.2f} | {max(v):.2f} |")


if __name__ == "__main__":
    main()
