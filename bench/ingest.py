#!/usr/bin/env python
"""Ingest benchmark: HTA vs traceparse vs the bare decompress+parse floor.

Builds N-rank run folders by replicating one real trace (rewriting its
``distributedInfo`` rank/world_size), then, for each N, times in a fresh child
process each of:

  hta         ``TraceAnalysis(trace_dir=folder)`` (optional extra; skipped when
              ``hta`` is not importable)
  traceparse  ``load_run([folder], use_cache=False)``; the store is deleted after
  floor       gzip decompression + full JSON parse of every file, over a process
              pool of os.cpu_count() workers, with the faster of orjson and msgspec
              (both are run; the faster one is reported)

Usage:
  python bench/ingest.py                       # N = 8 and 32, table on stdout
  python bench/ingest.py --ranks 8 --json      # machine-readable results
  python bench/ingest.py --kinds traceparse floor

What is measured (each measurement is one child process running this script
with the hidden ``--one KIND FOLDER`` mode):

  time_s      wall time of the load call inside the child, after imports (includes
              starting its worker pool, if any); ``import_s`` is the import time of
              the tool, ``proc_s`` the child's whole life seen from the parent.
  self_mb     peak RSS of the child's main process (getrusage RUSAGE_SELF in the child).
  max_proc_mb largest peak RSS of any ONE process of the child's tree (the rusage
              that wait4 returns for the child: like RUSAGE_CHILDREN it is a max,
              not a sum, and it covers grandchildren only when they were reaped:
              pool workers are; forked workers also count pages they share with
              their parent).
  tree_mb     peak over time of the summed PSS (proportional set size: shared pages
              split between the processes sharing them) of the child and all its
              descendants, sampled from /proc every --sample-ms (default 100 ms;
              reading smaps_rollup costs CPU, so denser sampling slows the run).
              This is the figure to compare: the memory the whole tool needed at
              once. Sampling can miss spikes shorter than the interval.
  tree_rss_mb same, summing RSS (over-counts pages shared between forked processes).
  cpu_s       user+system CPU seconds of the whole tree: the larger of wait4's figure
              (child plus reaped descendants) and the sum over sampled processes of
              their last-seen /proc CPU time (misses each one's last interval). Less
              sensitive than wall time to other jobs sharing the machine; the 1-min
              load average before each measurement is recorded as loadavg_before.
"""

import argparse
import gzip
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from fixtures import public_traces  # noqa: E402 -- where the public traces are (never committed)

SOURCE_TRACE = "hta/df_index_resolver/df_index_resolver.json.gz"  # the public trace replicated by default
DEFAULT_SOURCE = str(public_traces.path(SOURCE_TRACE))


def source_trace(given: str) -> Path:
    """The trace to replicate: ``given`` (--trace), else the public trace; a missing one ends the bench with one
    line saying how to get it."""
    path = Path(given)
    if not path.is_file():
        sys.exit(public_traces.missing(SOURCE_TRACE) if given == DEFAULT_SOURCE else f"{path}: no such trace")
    return path
DEFAULT_OUT = HERE / "out"
KINDS = ("hta", "traceparse", "floor")
HEADER_SPAN = 64 << 10
DIST_INFO = re.compile(rb'"distributedInfo"\s*:\s*\{')
MARKER = "BUILT"  # written last in a folder: its absence means an interrupted build


# --------------------------------------------------------------------------------------
# building the rank folders


def _object_end(buf: bytes, start: int) -> int:
    """Index just past the JSON object whose '{' is at ``start`` (strings respected)."""
    depth, i, in_str = 0, start, False
    while i < len(buf):
        c = buf[i]
        if in_str:
            if c == 0x5C:  # backslash
                i += 1
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("distributedInfo object not closed within the header span")


def rewrite_rank(data: bytes, rank: int, world: int) -> bytes:
    head = data[:HEADER_SPAN]
    m = DIST_INFO.search(head)
    if not m:
        raise ValueError("no distributedInfo in the first 64 KB of the source trace")
    start = m.end() - 1
    end = _object_end(head, start)
    obj = head[start:end]
    # only the top-level "rank"/"world_size" keys ("ranks" in pg_config does not match)
    new, n1 = re.subn(rb'("rank"\s*:\s*)-?\d+', rb"\g<1>%d" % rank, obj, count=1)
    new, n2 = re.subn(rb'("world_size"\s*:\s*)-?\d+', rb"\g<1>%d" % world, new, count=1)
    if not (n1 and n2):
        raise ValueError(f"distributedInfo lacks rank or world_size: {obj[:200]!r}")
    return data[:start] + new + data[end:]


def _write_rank(job):
    src_raw, folder, rank, world, level = job
    data = rewrite_rank(src_raw, rank, world)
    dest = Path(folder) / f"rank{rank}.json.gz"
    tmp = dest.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(gzip.compress(data, compresslevel=level, mtime=0))
    os.replace(tmp, dest)
    return dest


_SRC = None


def _init_src(path):
    global _SRC
    with gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb") as f:
        _SRC = f.read()


def _write_rank_from_global(args):
    return _write_rank((_SRC, *args))


def build_folder(source: Path, out: Path, n: int, level: int, log) -> Path:
    folder = out / f"ranks{n}"
    if (folder / MARKER).exists() and len(list(folder.glob("rank*.json.gz"))) == n:
        log(f"reusing {folder}")
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    jobs = [(str(folder), r, n, level) for r in range(n)]
    with ProcessPoolExecutor(os.cpu_count(), initializer=_init_src, initargs=(str(source),)) as pool:
        list(pool.map(_write_rank_from_global, jobs))
    (folder / MARKER).write_text(f"source={source}\nranks={n}\ngzip_level={level}\n")
    log(f"built {folder} ({n} files, gzip level {level}) in {time.perf_counter() - t0:.1f} s")
    return folder


def json_bytes(folder: Path) -> int:
    """Total decompressed size (the gzip trailer's ISIZE, exact below 4 GiB per file)."""
    total = 0
    for f in sorted(folder.glob("rank*.json.gz")):
        with open(f, "rb") as fh:
            fh.seek(-4, os.SEEK_END)
            total += int.from_bytes(fh.read(4), "little")
    return total


# --------------------------------------------------------------------------------------
# one measurement, in a child process (hidden --one mode)


def _floor_orjson(path):
    import orjson

    with gzip.open(path, "rb") as f:
        doc = orjson.loads(f.read())
    return len(doc.get("traceEvents", ())) if isinstance(doc, dict) else len(doc)


def _floor_msgspec(path):
    import msgspec

    with gzip.open(path, "rb") as f:
        doc = msgspec.json.decode(f.read())
    return len(doc.get("traceEvents", ())) if isinstance(doc, dict) else len(doc)


def _floor_gunzip(path):
    """gunzip alone (counts no events: 0)."""
    with gzip.open(path, "rb") as f:
        f.read()
    return 0


def _floor_raw(path):
    """gunzip + the JSON validated, the events left as raw bytes (no object per field)."""
    import msgspec

    class Doc(msgspec.Struct):
        traceEvents: list[msgspec.Raw] = []

    with gzip.open(path, "rb") as f:
        return len(msgspec.json.decode(f.read(), type=Doc).traceEvents)


def _floor_typed(path):
    """gunzip + a typed decode of the fields an analysis reads (ph, name, cat, ts, dur, pid, tid; args raw)."""
    import msgspec

    class Event(msgspec.Struct):
        ph: str = ""
        name: str = ""
        cat: str = ""
        ts: float | str | None = None
        dur: float | str | None = None
        pid: int | str | None = None
        tid: int | str | None = None
        args: msgspec.Raw = msgspec.Raw(b"null")

    class Doc(msgspec.Struct):
        traceEvents: list[Event] = []

    with gzip.open(path, "rb") as f:
        return len(msgspec.json.decode(f.read(), type=Doc).traceEvents)


# the decode floors, cheapest first: what the same step costs when it skips more of the work (bench/speed.py)
FLOORS = {"floor-gunzip": _floor_gunzip, "floor-raw": _floor_raw, "floor-typed": _floor_typed,
          "floor-msgspec": _floor_msgspec, "floor-orjson": _floor_orjson}


def run_one(kind: str, folder: str) -> dict:
    files = sorted(str(p) for p in Path(folder).glob("rank*.json.gz"))
    res = {"kind": kind, "files": len(files)}
    t0 = time.perf_counter()
    if kind == "hta":
        import logging

        from hta.trace_analysis import TraceAnalysis

        logging.getLogger("hta").setLevel(logging.ERROR)
        t1 = time.perf_counter()
        ta = TraceAnalysis(trace_dir=folder)
        t2 = time.perf_counter()
        res["events"] = int(sum(len(df) for df in ta.t.traces.values()))
        del ta
    elif kind == "traceparse":
        import duckdb

        from traceparse.load.run import load_run

        t1 = time.perf_counter()
        path, reused = load_run([folder], use_cache=False)
        t2 = time.perf_counter()
        assert not reused
        con = duckdb.connect(str(path), read_only=True)
        res["events"] = con.execute("SELECT count(*) FROM events").fetchone()[0]
        con.close()
        res["store_mb"] = round(Path(path).stat().st_size / 1e6, 1)
        shutil.rmtree(Path(path).parent, ignore_errors=True)
    elif kind in FLOORS:
        fn = FLOORS[kind]
        t1 = time.perf_counter()
        with ProcessPoolExecutor(os.cpu_count()) as pool:
            res["events"] = sum(pool.map(fn, files))
        t2 = time.perf_counter()
    elif kind in ("analyze", "analyze-ray"):
        import contextlib
        import io

        from traceparse.cli import main

        # analyze-ray: on the Ray cluster at $TRACEPARSE_BENCH_RAY (the driver is this process)
        engine = ["--engine", "ray", "--address", os.environ["TRACEPARSE_BENCH_RAY"]] if kind == "analyze-ray" else []
        t1 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()) as doc:
            main(["analyze", "--no-cache", "--format", "json", "-q", *engine, folder], standalone_mode=False)
        t2 = time.perf_counter()
        res["events"] = json.loads(doc.getvalue())["run"]["events"]
    elif kind == "cached":
        # the whole second command, as a user runs it (interpreter start and imports included), after a
        # first analyze has kept the store and the document in a cache of its own
        import tempfile

        cache = tempfile.mkdtemp(prefix="bench-cache-")
        cmd = [sys.executable, "-m", "traceparse.cli", "analyze", "--format", "json", "-q", folder]
        env = {**os.environ, "TRACEPARSE_CACHE": cache}
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        t1 = time.perf_counter()
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        t2 = time.perf_counter()
        res["events"] = json.loads(out)["run"]["events"]
        shutil.rmtree(cache, ignore_errors=True)
    else:
        raise SystemExit(f"unknown kind {kind}")
    res["import_s"] = round(t1 - t0, 3)
    res["time_s"] = round(t2 - t1, 3)
    kb = 1024  # ru_maxrss is in KiB on Linux
    res["self_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * kb / 1e6, 1)
    return res


# --------------------------------------------------------------------------------------
# process-tree memory sampler (runs in the parent while a child measures)


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def _pss_rss_kb(pid: int) -> tuple[int, int]:
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1])
    except OSError:
        pass
    return pss, rss


def _cpu_ticks(pid: int):
    """(start time, utime + stime) of a process, in clock ticks; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[19]), int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


class TreeSampler(threading.Thread):
    def __init__(self, pid: int, interval: float):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_pss = self.peak_rss = self.max_procs = 0
        self.cpu = {}  # (pid, start time) -> latest utime + stime seen
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            pids = _descendants(self.pid)
            tot = [_pss_rss_kb(p) for p in pids]
            self.peak_pss = max(self.peak_pss, sum(t[0] for t in tot))
            self.peak_rss = max(self.peak_rss, sum(t[1] for t in tot))
            self.max_procs = max(self.max_procs, len(pids))
            for p in pids:
                got = _cpu_ticks(p)
                if got:
                    self.cpu[(p, got[0])] = got[1]
            self.done.wait(self.interval)

    def cpu_s(self) -> float:
        return sum(self.cpu.values()) / os.sysconf("SC_CLK_TCK")


def _drain(stream, sink):
    sink.append(stream.read())


def measure(kind: str, folder: Path, timeout: float, sample_s: float, log, python: str = sys.executable) -> dict:
    """One measurement of ``kind`` on ``folder`` in a child process run by ``python``."""
    cmd = [python, str(Path(__file__).resolve()), "--one", kind, str(folder)]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = TreeSampler(proc.pid, sample_s)
    sampler.start()
    out, err = [], []
    readers = [threading.Thread(target=_drain, args=a, daemon=True) for a in ((proc.stdout, out), (proc.stderr, err))]
    for t in readers:
        t.start()
    # wait4 (not Popen.wait) to get the child's rusage: its ru_maxrss is the largest peak RSS of
    # any one process in the child's tree that was reaped along the way (pool workers included)
    timed_out = False
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - t0 > timeout:
            timed_out = True
            proc.kill()  # the child we started, by its own handle
            pid, status, ru = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc_s = time.perf_counter() - t0
    sampler.done.set()
    sampler.join()
    for t in readers:
        t.join(10)  # orphaned grandchildren could hold the pipes open
    out, err = "".join(out), "".join(err)
    if timed_out:
        res = {"kind": kind, "error": f"timed out after {timeout:.0f} s"}
    else:
        line = next((ln for ln in reversed(out.splitlines()) if ln.startswith("{")), None)
        if proc.returncode != 0 or line is None:
            tail = " | ".join(err.strip().splitlines()[-3:])
            why = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
            res = {"kind": kind, "error": f"{why}: {tail}"}
        else:
            res = json.loads(line)
    res["proc_s"] = round(proc_s, 2)
    res["max_proc_mb"] = round(ru.ru_maxrss * 1024 / 1e6, 1)
    res["tree_mb"] = round(sampler.peak_pss * 1024 / 1e6, 1)
    res["tree_rss_mb"] = round(sampler.peak_rss * 1024 / 1e6, 1)
    res["max_procs"] = sampler.max_procs
    res["cpu_s"] = round(max(ru.ru_utime + ru.ru_stime, sampler.cpu_s()), 1)
    res["loadavg_before"] = round(load, 2)
    log(f"  {kind:<14} " + (f"ERROR {res['error']} (tree {res['tree_mb']:.0f} MB)" if "error" in res else
                            f"{res['time_s']:8.2f} s  cpu {res['cpu_s']:6.1f} s  tree {res['tree_mb']:6.0f} MB  "
                            f"(main {res['self_mb']:.0f} MB, largest process {res['max_proc_mb']:.0f} MB; "
                            f"load avg before {load:.1f})"))
    return res


def hta_available(python: str = sys.executable) -> str | None:
    """The HTA version ``python`` has (HolisticTraceAnalysis, or traceinsight from 0.6), or None when ``hta``
    cannot be imported there (checked in a child)."""
    code = ("import importlib.metadata as m, hta.trace_analysis\n"
            "for d in ('traceinsight', 'HolisticTraceAnalysis'):\n"
            "    try:\n        print(m.version(d)); break\n"
            "    except m.PackageNotFoundError:\n        pass")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def hta_interpreters(pythons, log=None) -> dict:
    """{HTA version: interpreter} of this interpreter and ``pythons``, those with an importable HTA."""
    found = {}
    for py in [sys.executable, *pythons]:
        v = hta_available(py)
        if v:
            found[v] = py
        elif log:
            log(f"note: no HTA importable by {py}; skipped")
    return found


# --------------------------------------------------------------------------------------
# driver


def best_of(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    return min(ok, key=lambda r: r["time_s"]) if ok else runs[0]


def bench(args, log) -> dict:
    source = source_trace(args.source)
    out = Path(args.out)
    kinds = args.kinds
    hta_version = hta_available() if "hta" in kinds else None
    if "hta" in kinds and hta_version is None:
        log("note: HTA (pip install HolisticTraceAnalysis) is not importable; skipping the HTA load")
    env = {
        "cpus": os.cpu_count(),
        "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1),
        "python": sys.version.split()[0],
        "hta_version": hta_version,
        "source": str(source),
        "gzip_level": args.gzip_level,
        "repeat": args.repeat,
    }
    rows = []
    for n in args.ranks:
        folder = build_folder(source, out, n, args.gzip_level, log)
        row = {"ranks": n, "json_mb": round(json_bytes(folder) / 1e6, 1),
               "gz_mb": round(sum(f.stat().st_size for f in folder.glob("rank*.json.gz")) / 1e6, 1)}
        log(f"N={n}: {row['json_mb']:.0f} MB of JSON ({row['gz_mb']:.0f} MB gzip)")
        for kind in kinds:
            if kind == "hta" and hta_version is None:
                row["hta"] = None
                continue
            if kind == "floor":
                variants = {v: best_of([measure(v, folder, args.timeout, args.sample_ms / 1e3, log)
                                        for _ in range(args.repeat)]) for v in ("floor-orjson", "floor-msgspec")}
                row["floor_variants"] = {v: r.get("time_s") for v, r in variants.items()}
                row["floor"] = best_of(list(variants.values()))
            else:
                row[kind] = best_of([measure(kind, folder, args.timeout, args.sample_ms / 1e3, log)
                                     for _ in range(args.repeat)])
        rows.append(row)
    return {"env": env, "results": rows}


def _t(r):
    return r["time_s"] if r and "error" not in r else None


def _fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def table(data: dict) -> str:
    hdr = ("N", "JSON MB", "HTA s", "tp s", "floor s", "HTA/tp", "tp/floor",
           "HTA MB", "tp MB", "floor MB")
    lines = ["| " + " | ".join(hdr) + " |", "|" + "|".join("---:" for _ in hdr) + "|"]
    for row in data["results"]:
        h, tp, fl = row.get("hta"), row.get("traceparse"), row.get("floor")
        th, ttp, tfl = _t(h), _t(tp), _t(fl)
        cells = [
            str(row["ranks"]), f"{row['json_mb']:.0f}",
            _fmt(th, ".1f", "skipped" if h is None else "failed"),
            _fmt(ttp, ".2f", "failed" if tp else "-"),
            _fmt(tfl, ".2f", "failed" if fl else "-"),
            _fmt(th / ttp if th and ttp else None, ".1f"),
            _fmt(ttp / tfl if ttp and tfl else None, ".2f"),
        ]
        for r in (h, tp, fl):
            cells.append(_fmt(r.get("tree_mb") if r else None, ".0f"))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("| N | HTA cpu s | tp cpu s | floor cpu s | HTA/tp cpu | tp/floor cpu |")
    lines.append("|---:|---:|---:|---:|---:|---:|")
    for row in data["results"]:
        c = [(row.get(k) or {}).get("cpu_s") if "error" not in (row.get(k) or {}) else None for k in KINDS]
        lines.append(f"| {row['ranks']} | " + " | ".join(_fmt(x, ".1f") for x in c) + " | "
                     + _fmt(c[0] / c[1] if c[0] and c[1] else None, ".1f") + " | "
                     + _fmt(c[1] / c[2] if c[1] and c[2] else None, ".2f") + " |")
    lines.append("")
    lines.append("times: load call inside a fresh child, after imports; MB: peak summed PSS of the "
                 "child's process tree; cpu: user+sys seconds of that tree (see --help)")
    for row in data["results"]:
        fv = row.get("floor_variants")
        extra = []
        if fv:
            extra.append("floor orjson " + _fmt(fv.get("floor-orjson"), ".2f") + " s, msgspec "
                         + _fmt(fv.get("floor-msgspec"), ".2f") + " s")
        for k in KINDS:
            r = row.get(k)
            if r and "error" in r:
                extra.append(f"{k}: {r['error']}")
            elif r:
                extra.append(f"{k}: import {r['import_s']:.1f} s, proc {r['proc_s']:.1f} s, cpu {r['cpu_s']:.1f} s, "
                             f"main {r['self_mb']:.0f} MB, largest process {r['max_proc_mb']:.0f} MB, "
                             f"tree RSS {r['tree_rss_mb']:.0f} MB")
        lines.append(f"N={row['ranks']}: " + "; ".join(extra))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 32], help="rank counts (default: 8 32)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="where the rank folders go (default bench/out)")
    p.add_argument("--trace", "--source", dest="source", default=DEFAULT_SOURCE,
                   help=f"the trace to replicate (default: the public trace {SOURCE_TRACE})")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS), help="what to time")
    p.add_argument("--gzip-level", type=int, default=6, choices=range(1, 10), metavar="1-9")
    p.add_argument("--repeat", type=int, default=1, help="runs per measurement; the fastest is kept")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per measurement before it is killed")
    p.add_argument("--sample-ms", type=float, default=100, help="process-tree memory sampling interval (ms)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.add_argument("--one", nargs=2, metavar=("KIND", "FOLDER"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(*args.one)), flush=True)
        return
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    data = bench(args, log)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        env = data["env"]
        print(f"machine: {env['cpus']} CPUs, {env['mem_gb']} GB RAM; Python {env['python']}; "
              f"HTA {env['hta_version'] or ('not checked' if 'hta' not in args.kinds else 'not installed')}")
        print(table(data))


if __name__ == "__main__":
    main()
