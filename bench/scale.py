#!/usr/bin/env python
"""Scale benchmark: N-rank replicas of a real run, analyzed on the local pool and on a real local Ray cluster.

For each N it builds (or reuses) ``OUT/replica{N}`` with bench/replicate.py from the source run (default
``fixtures/runs/dp2_pp2_tp2``: eight real gloo ranks, dp2 x pp2 x tp2), starts a Ray cluster on
127.0.0.1 (``ray start --head``; stopped at the end) and measures, each in a fresh child process
(``ingest.py --one``):

  local   ``traceparse analyze --no-cache --format json`` on the local process pool
  ray     the same with ``--engine ray --address 127.0.0.1:PORT``: per-rank parsing as Ray tasks
  cached  a second ``analyze`` with the cache kept, the whole command (``--cached``)
  HTA v   ``TraceAnalysis(trace_dir=folder)``, HTA's load alone, for N up to ``--hta-max``, with this
          interpreter's HTA and each ``--hta-python`` one's

reporting wall time, the driver's peak RSS (the child's main process: what the machine running the
command needs) and the per-rank parse cost (CPU seconds of the tree per rank), the input of the
projection in docs/speed.md.

  python bench/scale.py --ranks 64 256 1024
"""

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import ingest  # noqa: E402
import replicate  # noqa: E402

RAY = Path(sys.executable).with_name("ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(source: Path, out: Path, n: int, log) -> Path:
    folder = out / f"replica{n}"
    done = folder / ingest.MARKER
    if not done.exists():
        log(f"building {folder} ({n} ranks from {source})")
        replicate.replicate(source, folder, n, seed=n, workers=os.cpu_count() or 1)
        done.write_text("ok\n")
    return folder


def run(args, log) -> list[dict]:
    htas = ingest.hta_interpreters(args.hta_python, log)
    port = _free_port()
    start = [str(RAY), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
             "--include-dashboard", "false", "--disable-usage-stats"]
    subprocess.run(start, check=True, capture_output=True)
    os.environ["TRACEPARSE_BENCH_RAY"] = f"127.0.0.1:{port}"
    rows = []
    try:
        for n in args.ranks:
            folder = build(Path(args.source), Path(args.out), n, log)
            gz = sum(f.stat().st_size for f in folder.glob("rank*.json.gz"))
            row = {"ranks": n, "gz_mb": round(gz / 1e6, 1), "json_mb": round(ingest.json_bytes(folder) / 1e6, 1)}
            log(f"N={n}: {row['json_mb']:.0f} MB of JSON")
            kinds = (("analyze", "local"), ("analyze-ray", "ray")) + ((("cached", "cached"),) if args.cached else ())
            for kind, name in kinds:
                row[name] = ingest.measure(kind, folder, args.timeout, 0.25, log)
            row["hta"] = {v: ingest.measure("hta", folder, args.timeout, 0.25, log, py)
                          for v, py in htas.items() if n <= args.hta_max}
            rows.append(row)
    finally:
        subprocess.run([str(RAY), "stop", "--force"], capture_output=True)
    return rows


def _f(x, spec):
    return "-" if x is None else format(x, spec)


def table(rows) -> str:
    hdr = ["N", "JSON MB", "local s", "ray s", "local driver MB", "ray driver MB", "cpu s per rank (local)",
           "cached s"]
    out = ["| " + " | ".join(hdr) + " |", "|" + "---:|" * len(hdr)]
    for r in rows:
        loc, ray = r["local"], r["ray"]
        t = [x.get("time_s") if "error" not in x else None for x in (loc, ray)]
        cells = [r["ranks"], f"{r['json_mb']:.0f}", _f(t[0], ".1f"), _f(t[1], ".1f"),
                 _f(loc.get("self_mb"), ".0f"), _f(ray.get("self_mb"), ".0f"),
                 _f(loc["cpu_s"] / r["ranks"] if "error" not in loc else None, ".3f"),
                 _f((r.get("cached") or {}).get("time_s"), ".2f")]
        out.append("| " + " | ".join(map(str, cells)) + " |")
    out += [f"N={r['ranks']} {k}: {r[k]['error']}" for r in rows for k in ("local", "ray") if "error" in r[k]]
    out += [f"N={r['ranks']}: HTA {v} load " + (h["error"] if "error" in h else f"{h['time_s']:.1f} s, "
            f"main process {h['self_mb']:.0f} MB, tree {h['tree_mb']:.0f} MB") for r in rows for v, h in r["hta"].items()]
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--source", default=str(HERE.parent / "fixtures" / "runs" / "dp2_pp2_tp2"))
    p.add_argument("--out", default=str(ingest.DEFAULT_OUT))
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--hta-python", nargs="*", default=[], metavar="PYTHON", help="other interpreters with an HTA")
    p.add_argument("--hta-max", type=int, default=256, help="time HTA's load up to this N (default 256)")
    p.add_argument("--cached", action="store_true", help="also time a cached re-analysis (one more analyze per N)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = run(args, lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(rows, indent=2) if args.json else table(rows))


if __name__ == "__main__":
    main()
