#!/usr/bin/env python
"""Where a load and an analyze spend their time, stage by stage (one run, wall seconds, in this process).

  parse (pool)      every file parsed and its rank's tables written, over the local pool, in batches (the
                    per-rank work)
  driver stages     what load/build.py runs over the ranks' Parquet: the store's rows, groups, finish.sql,
                    tagging, layout inference, each SQL file of the tagged vocabulary
  document          the checks and the document (traceparse.document.document)
  worker, one file  the per-rank work of the first file alone, in this process: the parse (load/parse.py), then
                    its tables (vocabulary/per_rank.py)

  python bench/stages.py bench/out/ranks8
"""

import argparse
import tempfile
import time
from pathlib import Path


def _timed(module, name, times, label=None):
    f = getattr(module, name)

    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            times[label or name] = times.get(label or name, 0.0) + time.perf_counter() - t

    setattr(module, name, wrapper)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    args = ap.parse_args(argv)

    import traceparse.load.build as build
    import traceparse.load.run as run
    import traceparse.store.build as store
    import traceparse.vocabulary as vocabulary
    from traceparse.document import document
    from traceparse.load.parse import parse_file
    from traceparse.tagging.comm_kernels import comm_kernel_rules
    from traceparse.vocabulary.per_rank import prepare_ranks, raw_folder

    times = {}
    _timed(run, "_parse_all", times, "parse (pool)")
    for name in ("insert_raw", "tag_comm_ops", "infer_layout"):
        _timed(build, name, times)
    _timed(store, "infer_groups", times, "groups")
    finish = store.derive

    def derive(con):  # groups (timed above), then finish.sql
        t = time.perf_counter()
        finish(con)
        times["finish.sql"] = time.perf_counter() - t - times.get("groups", 0.0)

    build.derive = derive

    def tagged(con):
        for name in vocabulary.TAGGED:
            t = time.perf_counter()
            con.execute(vocabulary.sql_file(vocabulary.__package__, name))
            times[name] = time.perf_counter() - t

    build.build_tagged = tagged
    t = time.perf_counter()
    with run.open_run([args.folder], use_cache=False) as con:
        times["load"] = time.perf_counter() - t
        t = time.perf_counter()
        document(con)
        times["document"] = time.perf_counter() - t
    for k, v in times.items():
        print(f"{k:28s} {v:7.2f} s")
    first = sorted(p for p in args.folder.iterdir() if p.name.endswith((".json", ".json.gz")))[0]
    with tempfile.TemporaryDirectory() as d:
        stage = Path(d)
        t = time.perf_counter()
        summary = parse_file(first, raw_folder(stage, 0), False)
        parsed = time.perf_counter() - t
        t = time.perf_counter()
        prepare_ranks(stage, 0, [(0, summary)], comm_kernel_rules())
        print(f"{'worker, one file: parse':28s} {parsed:7.2f} s  ({first.name})")
        print(f"{'worker, one file: tables':28s} {time.perf_counter() - t:7.2f} s")

if __name__ == "__main__":
    main()
