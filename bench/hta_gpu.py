"""HTA's GPU-time numbers on the public GPU traces (fixtures/public_traces.py: ../shared/traces or
TRACEPARSE_PUBLIC_TRACES, never committed), beside traceparse's ``gpu`` section: the table of
docs/gpu.md.

    python bench/hta_gpu.py                                   # HTA of this Python (the ``hta`` extra, 0.5)
    python bench/hta_gpu.py --hta-python /path/to/venv/bin/python   # another HTA (traceinsight 0.6.1)

Per trace and rank: HTA's temporal breakdown (get_temporal_breakdown: idle / compute / non-compute percent of
the kernel span), its idle breakdown (get_idle_time_breakdown, per stream: host wait / kernel wait / other),
its kernel launch statistics (get_cuda_kernel_launch_stats: launches, delay and runtime outliers, GPU events
shorter than their launch) and its queue length summary (max, mean per stream); then traceparse's ``gpu``
section for the same numbers and the largest difference. ``hta_numbers(paths)`` is what the tests call.
"""

import argparse
import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fixtures import public_traces  # noqa: E402

TRACES = {  # label: files (one run each)
    "nccl_parser_config": ["hta/nccl_parser_config/nccl_data.json.gz"],
    "trace_diff/control": ["hta/trace_diff/control/control.json.gz"],
    "trace_diff/test": ["hta/trace_diff/test/test.json.gz"],
    "df_index_resolver": ["hta/df_index_resolver/df_index_resolver.json.gz"],
    "negative_queue_length": ["hta/negative_queue_length_values_check/rank0.json.gz"],
    "trace_filter": ["hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz"],
    "ns_resolution_trace": ["hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"],
    "amd_trace": ["hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"],
    "critical_path/alexnet": ["hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"],
    "mi300_resnet_ddp": ["tracelens/mi300_resnet_ddp_rank0.json.gz"],
    "b200_vllm_tp8": ["tracelens/b200_vllm_tp8_rank0.json.gz"],
}
KERNEL_WAIT_NS = 30  # HTA's default consecutive_kernel_delay


def hta_numbers(paths: list[Path]) -> dict:
    """{rank: {temporal, idle (per stream), launch, queue}} from the HTA importable here, or {"error": text}."""
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory() as d:
            for p in paths:
                (Path(d) / Path(p).name).symlink_to(Path(p).resolve())
            try:
                ta = TraceAnalysis(trace_dir=d)
            except Exception as e:  # noqa: BLE001  HTA's own failure, reported as the table's cell
                return {"error": f"{type(e).__name__}: {e}"[:200]}
            ranks = sorted(ta.t.traces)
            out = {r: {} for r in ranks}
            _section(out, "temporal", lambda: _temporal(ta))
            for r in ranks:
                _section(out, "idle", lambda r=r: {r: _idle(ta, r)})
                _section(out, "launch", lambda r=r: {r: _launch(ta, r)})
                _section(out, "queue", lambda r=r: {r: _queue(ta, r)})
            return {str(r): v for r, v in out.items()}
    finally:
        logging.disable(logging.NOTSET)


def _section(out, name, fn):
    try:
        for rank, value in fn().items():
            out[rank][name] = value
    except Exception as e:  # noqa: BLE001
        for rank in out:
            out[rank].setdefault(name, {"error": f"{type(e).__name__}: {e}"[:200]})


def _temporal(ta) -> dict:
    df = ta.get_temporal_breakdown(visualize=False)
    return {int(row["rank"]): {"idle_pct": float(row["idle_time_pctg"]), "compute_pct": float(row["compute_time_pctg"]),
                               "non_compute_pct": float(row["non_compute_time_pctg"]),
                               "span_us": float(row["kernel_time(us)"])}
            for _, row in df.iterrows()}


def _idle(ta, rank) -> dict:
    df = ta.get_idle_time_breakdown(consecutive_kernel_delay=KERNEL_WAIT_NS, ranks=[rank], visualize=False) \
        if _takes_ranks(ta) else ta.get_idle_time_breakdown(consecutive_kernel_delay=KERNEL_WAIT_NS, rank=rank,
                                                            visualize=False)
    df = df[0] if isinstance(df, tuple) else df
    rows = {}
    for _, row in df.iterrows():
        rows.setdefault(str(int(row["stream"])), {})[str(row["idle_category"])] = float(row["idle_time"])
    return rows


def _takes_ranks(ta) -> bool:
    import inspect

    return "ranks" in inspect.signature(ta.get_idle_time_breakdown).parameters


def _launch(ta, rank) -> dict:
    df = ta.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[rank]
    return {"launches": int(len(df)), "short_gpu": int((df["gpu_duration"] < df["cpu_duration"]).sum()),
            "runtime_outliers": int((df["cpu_duration"] > 50).sum()),
            "delay_outliers": int((df["launch_delay"] > 100).sum()),
            "delay_median_us": float(df["launch_delay"].median()) if len(df) else None}


def _queue(ta, rank) -> dict:
    df = ta.get_queue_length_summary(ranks=[rank])
    if df is None:
        return {}
    return {str(int(stream)): {"max": float(row[("queue_length", "max")]), "mean": float(row[("queue_length", "mean")])}
            for (_, stream), row in df.iterrows()}


def ours(paths: list[Path]) -> dict:
    """traceparse's gpu section for ``paths``."""
    from traceparse.document import analyze

    return analyze([str(p) for p in paths], use_cache=False)["gpu"]


def _other_hta(python, labels) -> dict:
    out = subprocess.run([python, __file__, "--hta-only", "--only", *labels], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _three(t) -> str:
    return f"{t['idle_pct']:.2f} / {t['compute_pct']:.2f} / {t['non_compute_pct']:.2f}" if "idle_pct" in t else "-"


def table(hta: dict, other: dict, mine: dict) -> str:
    """Markdown: per trace and rank, idle / compute / non-compute % by each HTA and by traceparse, the largest
    idle-category difference per stream (% of the stream's idle), and the launches each counts."""
    lines = ["| trace | rank | HTA 0.5: idle / compute / non-compute % | HTA 0.6.1 | traceparse | idle breakdown: "
             "largest difference | launches: HTA / traceparse |", "|---|---:|---|---|---|---:|---|"]
    for label, h in hta.items():
        g = mine[label]
        temporal = {str(r["rank"]): r for r in g.get("temporal", []) if r["step"] is None}
        idle = {(str(r["rank"]), str(r["stream"])): r for r in g.get("idle", [])}
        launch = {str(r["rank"]): r["launches"] for r in g.get("launch", [])}
        if "error" in h:
            lines.append(f"| {label} | - | HTA fails: {h['error'][:60]} | | | | |")
            continue
        for rank, v in sorted(h.items()):
            t = temporal.get(rank)
            o = (other.get(label) or {}).get(rank, {}).get("temporal", {})
            worst = 0.0
            for stream, cats in v.get("idle", {}).items():
                total = sum(cats.values()) or 1.0
                m = idle.get((rank, stream), {})
                for cat in ("host_wait", "kernel_wait", "other"):
                    worst = max(worst, abs(m.get(f"{cat}_ns", 0) / 1e3 - cats.get(cat, 0.0)) / total)
            ours_t = (f"{100 * t['idle']:.2f} / {100 * t['compute']:.2f} / {100 * t['non_compute']:.2f}" if t
                      else "-")
            lines.append(f"| {label} | {rank} | {_three(v.get('temporal', {}))} | {_three(o) if o else '-'} | "
                         f"{ours_t} | {100 * worst:.2f}% | {v.get('launch', {}).get('launches', '-')} / "
                         f"{launch.get(rank, '-')} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", help="the python of another venv whose HTA to run (traceinsight 0.6.1)")
    ap.add_argument("--hta-only", action="store_true", help="print HTA's numbers as JSON and stop (used by "
                                                            "--hta-python)")
    ap.add_argument("--hta-json", help="HTA's numbers kept by an earlier --hta-only run")
    ap.add_argument("--only", nargs="*", help="labels to run")
    ap.add_argument("--table", action="store_true", help="print docs/gpu.md's table: HTA here, HTA of --hta-python, "
                                                         "traceparse")
    args = ap.parse_args()
    labels = args.only or list(TRACES)
    paths = {k: [public_traces.path(p) for p in TRACES[k]] for k in labels}
    lost = [public_traces.missing(p) for k in labels for p in TRACES[k] if public_traces.missing(p)]
    if lost:
        sys.exit(lost[0])
    if args.hta_only:
        print(json.dumps({k: hta_numbers(v) for k, v in paths.items()}))
        return
    if args.table:
        other = _other_hta(args.hta_python, labels) if args.hta_python else {}
        print(table({k: hta_numbers(v) for k, v in paths.items()}, other, {k: ours(v) for k, v in paths.items()}))
        return
    if args.hta_json:
        hta = json.loads(Path(args.hta_json).read_text())
    elif args.hta_python:
        hta = _other_hta(args.hta_python, labels)
    else:
        hta = {k: hta_numbers(v) for k, v in paths.items()}
    for label in labels:
        print(f"== {label}")
        gpu = ours(paths[label])
        temporal = {str(r["rank"]): r for r in gpu.get("temporal", []) if r["step"] is None}
        idle = {}
        for r in gpu.get("idle", []):
            idle.setdefault(str(r["rank"]), {})[str(r["stream"])] = r
        launch = {str(r["rank"]): r for r in gpu.get("launch", [])}
        h = hta[label]
        if "error" in h:
            print(f"  HTA: {h['error']}")
        for rank, hv in sorted(h.items()) if "error" not in h else ():
            t, o = hv.get("temporal", {}), temporal.get(rank)
            if "idle_pct" in t and o:
                print(f"  rank {rank} temporal  HTA idle {t['idle_pct']:.2f}% compute {t['compute_pct']:.2f}% "
                      f"non-compute {t['non_compute_pct']:.2f}% | ours {100 * o['idle']:.2f}% {100 * o['compute']:.2f}%"
                      f" {100 * o['non_compute']:.2f}%")
            else:
                print(f"  rank {rank} temporal  HTA {t} | ours {o}")
            for stream, cats in sorted(hv.get("idle", {}).items()) if "error" not in hv.get("idle", {}) else ():
                mine = idle.get(rank, {}).get(stream, {})
                print(f"  rank {rank} stream {stream:>3} idle  HTA host {cats.get('host_wait', 0) / 1e3:10.3f} ms "
                      f"kernel {cats.get('kernel_wait', 0) / 1e3:8.3f} other {cats.get('other', 0) / 1e3:10.3f} | "
                      f"ours {mine.get('host_wait_ns', 0) / 1e6:10.3f} {mine.get('kernel_wait_ns', 0) / 1e6:8.3f} "
                      f"{mine.get('other_ns', 0) / 1e6:10.3f}")
            if "error" in hv.get("idle", {}):
                print(f"  rank {rank} idle HTA {hv['idle']['error']}")
            hl, ol = hv.get("launch", {}), launch.get(rank, {})
            print(f"  rank {rank} launch    HTA {hl} | ours launches {ol.get('launches')} short "
                  f"{ol.get('short_gpu')} runtime>50us {ol.get('runtime_outliers')} delay>100us "
                  f"{ol.get('delay_outliers')}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
