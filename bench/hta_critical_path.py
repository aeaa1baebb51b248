"""traceparse's critical path beside HTA's on the public trace HTA's own critical-path tests use (alexnet), over the
same windows: the instances of the trace's annotation ``[param|pytorch.model.alex_net|0|0|0|measure|forward]``.

    python bench/hta_critical_path.py                                  # traceparse's paths only
    python bench/hta_critical_path.py --hta-python /path/to/venv/bin/python   # and HTA's (traceinsight 0.6.1)
    python bench/hta_critical_path.py --hta-python ... --write         # record HTA's numbers (HTA_RECORD)

The trace is read from the public traces' folder (fixtures/public_traces.py: ../shared/traces or
TRACEPARSE_PUBLIC_TRACES; `python scripts/fetch_public_traces.py DIR` fetches it), or from --trace PATH.

HTA's ``critical_path_analysis(rank, annotation, instance_id)`` runs on one rank between an annotation's bounds;
``get_critical_path_breakdown()`` gives the path's edges with their ``bound_by``. HTA 0.5 (the ``hta`` extra) stops
on this trace ("Cannot specify both 'axis' and 'index'/'columns'"); 0.6.1 runs. traceparse's path over the same
window is ``critical_path.window_path``. HTA_RECORD holds HTA 0.6.1's numbers, which tests/test_critical_path.py
compares with, so that the comparison runs without HTA 0.6.1.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fixtures import public_traces  # noqa: E402

TRACE = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"  # a public trace
ANNOTATION = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
HTA_RECORD = ROOT / "bench" / "hta_critical_path.json"
# HTA's bound_by -> traceparse's cause
CAUSES = {"cpu_bound": "host", "gpu_compute_bound": "compute", "gpu_kernel_launch_overhead": "launch",
          "gpu_kernel_kernel_overhead": "device"}

HTA_SCRIPT = """
import json, logging, os, sys, tempfile
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
path, annotation, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = []
with tempfile.TemporaryDirectory() as d:
    os.symlink(path, os.path.join(d, os.path.basename(path)))
    ta = TraceAnalysis(trace_dir=d)
    for k in range(n):
        g, ok = ta.critical_path_analysis(rank=0, annotation=annotation, instance_id=k)
        b = g.get_critical_path_breakdown()
        out.append({"ok": bool(ok), "length_us": float(b["duration"].sum()),
                    "by_bound": {k: float(v) for k, v in b.groupby("bound_by")["duration"].sum().items() if k}})
print(json.dumps(out))
"""


def traceparse_paths(trace: Path | None = None) -> list[dict]:
    """Per instance of the annotation on rank 0 of ``trace`` (the public trace TRACE when None), in order: its window
    and traceparse's path over it."""
    from traceparse.load.run import open_run
    from traceparse.vocabulary.critical_path import window_path

    with open_run([trace or public_traces.path(TRACE)]) as con:
        windows = con.execute("SELECT ts_ns, ts_ns + dur_ns FROM events WHERE rank = 0 AND name = ? "
                              "ORDER BY ts_ns", [ANNOTATION]).fetchall()
        return [{"window_ns": b - a, **window_path(con, 0, a, b)} for a, b in windows]


def hta_paths(python: str, trace: Path, n: int) -> list[dict]:
    got = subprocess.run([python, "-c", HTA_SCRIPT, str(trace), ANNOTATION, str(n)], capture_output=True, text=True,
                         check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python")
    ap.add_argument("--write", action="store_true", help="record HTA's numbers in bench/hta_critical_path.json")
    ap.add_argument("--trace", type=Path, help=f"the trace (default: the public trace {TRACE})")
    a = ap.parse_args()
    trace = a.trace or public_traces.path(TRACE)
    if not trace.is_file():
        sys.exit(public_traces.missing(TRACE) if a.trace is None else f"{trace}: no such file")
    ours = traceparse_paths(trace)
    hta = hta_paths(a.hta_python, trace, len(ours)) if a.hta_python else json.loads(HTA_RECORD.read_text())["paths"]
    if a.write and a.hta_python:
        HTA_RECORD.write_text(json.dumps({"hta": "traceinsight 0.6.1", "trace": TRACE,
                                          "annotation": ANNOTATION, "paths": hta}, indent=1) + "\n")
    print("| instance | window (ms) | traceparse path (ms) | HTA path (ms) | cause: traceparse / HTA (ms) |")
    print("|---:|---:|---:|---:|---|")
    for k, (o, h) in enumerate(zip(ours, hta, strict=True)):
        causes = ", ".join(f"{c} {o['by_cause'].get(c, 0) / 1e6:.3f} / {h['by_bound'].get(b, 0) / 1e3:.3f}"
                           for b, c in CAUSES.items())
        print(f"| {k} | {o['window_ns'] / 1e6:.3f} | {o['length_ns'] / 1e6:.3f} | {h['length_us'] / 1e3:.3f} | {causes} |")


if __name__ == "__main__":
    main()
