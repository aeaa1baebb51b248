#!/usr/bin/env python
"""Speed benchmark: ``traceparse analyze`` end to end against HTA's load and the bare parse floor.

For each N it builds (or reuses) the N-rank folder that ``bench/ingest.py`` builds from one real
trace, then measures, each in a fresh child process (``ingest.py --one``, memory sampled the same
way):

  analyze   ``traceparse analyze --no-cache --format json`` on the folder, in the child after
            imports: parse, build the store, every check, the document
  cached    a second ``analyze`` of the same folder with its cache kept, the whole command as a user
            runs it (interpreter start and imports included)
  floor     the typed decode of every file over a pool of cpu_count workers: gzip, then msgspec Structs of the
            fields an analysis reads (ph, name, cat, ts, dur, pid, tid; args left raw); beside it the other floors
            of the same step: gunzip alone, the JSON validated with its events left raw, every field decoded
            into Python dicts (msgspec, and orjson when installed)
  HTA v     ``TraceAnalysis(trace_dir=folder)``: HTA's load alone, with this interpreter's HTA and with
            each ``--hta-python`` interpreter's (HolisticTraceAnalysis 0.5, traceinsight 0.6.1, ...)

and prints the targets: analyze at least 5x faster than the newest HTA's load, within 2x of the
typed-decode floor, cached re-analysis under 0.5 s, peak memory (summed PSS of the process tree) below HTA's.

  python bench/speed.py --ranks 8 32 --hta-python /tmp/hta06/bin/python
"""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ingest  # noqa: E402


def _vkey(v: str):
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def run(args, log) -> dict:
    htas = ingest.hta_interpreters(args.hta_python, log)
    rows = []
    for n in args.ranks:
        folder = ingest.build_folder(ingest.source_trace(args.source), Path(args.out), n, 6, log)
        row = {"ranks": n, "json_mb": round(ingest.json_bytes(folder) / 1e6, 1)}
        log(f"N={n}: {row['json_mb']:.0f} MB of JSON")

        def best(kind, python=sys.executable, folder=folder):
            return ingest.best_of([ingest.measure(kind, folder, args.timeout, 0.1, log, python)
                                   for _ in range(args.repeat)])

        row["analyze"] = best("analyze")
        row["cached"] = best("cached")
        # the decode floors over the same pool: gunzip only, JSON validated with events as raw bytes, the typed
        # decode of the fields an analysis reads (the floor analyze is judged against), every field as dicts
        kinds = ["floor-gunzip", "floor-raw", "floor-typed", "floor-msgspec"]
        kinds += ["floor-orjson"] if importlib.util.find_spec("orjson") else []
        row["floors"] = {k: best(k) for k in kinds}
        row["floor"] = row["floors"]["floor-typed"]
        row["hta"] = {v: best("hta", py) for v, py in sorted(htas.items(), key=lambda t: _vkey(t[0]))}
        rows.append(row)
    return {"hta_versions": sorted(htas, key=_vkey), "results": rows}


def _s(r):
    return r.get("time_s") if r and "error" not in r else None


def _f(x, spec="0.2f"):
    return "-" if x is None else format(x, spec)


def table(data: dict) -> str:
    vs = data["hta_versions"]
    hdr = ["N", "JSON MB", "analyze s", "floor s", "analyze / floor", "cached s"]
    hdr += [f"HTA {v} load s" for v in vs] + [f"HTA {v} / analyze" for v in vs[-1:]]
    hdr += ["analyze MB"] + [f"HTA {v} MB" for v in vs]
    out = ["| " + " | ".join(hdr) + " |", "|" + "---:|" * len(hdr)]
    verdicts = []
    for row in data["results"]:
        a, fl, c = _s(row["analyze"]), _s(row["floor"]), _s(row["cached"])
        h = {v: _s(row["hta"].get(v)) for v in vs}
        newest = h[vs[-1]] if vs else None
        cells = [row["ranks"], f"{row['json_mb']:.0f}", _f(a), _f(fl), _f(a / fl if a and fl else None),
                 _f(c)] + [_f(h[v], "0.1f") for v in vs]
        cells += [_f(newest / a if newest and a else None, "0.1f")] if vs else []
        mb = [row["analyze"].get("tree_mb")] + [row["hta"][v].get("tree_mb") for v in vs]
        cells += [_f(m, "0.0f") for m in mb]
        out.append("| " + " | ".join(map(str, cells)) + " |")
        checks = {
            "analyze >= 5x faster than the newest HTA's load": newest and a and newest / a >= 5,
            "analyze within 2x of the typed-decode floor": a and fl and a / fl <= 2,
            "cached re-analysis under 0.5 s": c is not None and c < 0.5,
            "peak memory below every HTA's": all(m is not None and mb[0] is not None and mb[0] < m for m in mb[1:]),
        }
        verdicts.append(f"N={row['ranks']}: " + "; ".join(f"{k}: {'met' if ok else 'missed'}" for k, ok in checks.items()))
        verdicts.append(f"N={row['ranks']} floors: " + ", ".join(f"{k.removeprefix('floor-')} {_f(_s(r))} s"
                                                                 for k, r in row.get("floors", {}).items()))
    failed = [f"N={row['ranks']} {k}: {row[k]['error']}" for row in data["results"] for k in ("analyze", "cached", "floor")
              if "error" in row[k]]
    return "\n".join(out + [""] + verdicts + failed)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 32])
    p.add_argument("--hta-python", nargs="*", default=[], metavar="PYTHON",
                   help="other interpreters with an HTA installed (e.g. a venv with traceinsight==0.6.1)")
    p.add_argument("--trace", "--source", dest="source", default=ingest.DEFAULT_SOURCE,
                   help=f"the trace to replicate (default: the public trace {ingest.SOURCE_TRACE})")
    p.add_argument("--out", default=str(ingest.DEFAULT_OUT))
    p.add_argument("--repeat", type=int, default=1, help="runs per measurement; the fastest is kept")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    data = run(args, lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(data, indent=2) if args.json else table(data))


if __name__ == "__main__":
    main()
