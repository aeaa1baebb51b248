"""The GPU side of each step (the analyze document's ``gpu`` section): where each GPU's time went (computing, other
work, idle), why it was idle (HTA's categories per stream, and the host-side cause per step), how its work was
launched and queued. Every number selects from ``vocabulary/gpu_time.sql`` over the store's ``gpu_activity``;
``traceparse explain gpu.temporal`` (and gpu.idle, gpu.idle_causes, gpu.host_cost, gpu.launch, gpu.queue) defines
each.
"""

import math

from traceparse.ingest.categories import CUDA_CALLS, LAUNCH_NAMES, OTHER_CALLS, UNANALYZED_WORK
from traceparse.store.query import sql_file, table_rows
from traceparse.thresholds import check_thresholds
from traceparse.units import count, ms
from traceparse.vocabulary import savings
from traceparse.vocabulary.modules import use

# what the launching thread did before its launch call began: the host's waits, which the replay takes away (host_cost)
HOST_CAUSES = ("dataloader", "optimizer", "synchronize", "communication", "cpu_op", "python")
LAUNCH_CALL = "launch_call"  # the host's too (side 'host'): its launch call still running, which the replay keeps
CAUSE_WORDS = {
    "dataloader": "loading data", "optimizer": "the optimizer step", "synchronize": "a synchronization",
    "communication": "a communication call", "cpu_op": "host work", "python": "no recorded op (its own Python)",
    LAUNCH_CALL: "the host's launch call (launching, the call not yet returned)",
    "launch": "launch latency (launched, not yet started)",
    "device": "a dependency (work queued, waiting on an event, another stream or a peer)",
    "unknown": "nothing known (no launch in the trace)",
}
DELAY_OUTLIER_NS = 100_000  # HTA's launch_delay_cutoff default, 100 us
RUNTIME_OUTLIER_NS = 50_000  # HTA's runtime_cutoff default, 50 us


def gpu_section(con, graphs=None) -> dict:
    """``{status, reason?, temporal, idle, idle_causes, host_cost, launch, queue, findings}``; not_applicable on
    CPU-only runs. ``graphs``: the run's step graphs (step_graph.step_graphs, built once per document), to price
    the GPUs' waits on their hosts by replay (``host_cost``; None without them)."""
    if not table_rows(con, "gpu_activity", columns="count(*) AS n")[0]["n"]:
        return {"status": "not_applicable", "reason": _no_gpu_reason(con), "findings": []}
    gpu_tables(con)
    temporal = table_rows(con, "gpu_doc_temporal", "rank, scope = 'hta', step")
    causes = _causes(con)
    limits = check_thresholds()["gpu"]
    findings = _findings(temporal, causes, limits["cause_share"])
    host = _host_cost(con, graphs, causes)
    share = (host or {}).get("share") or 0
    if share >= limits["cause_share"]:
        whole = all(p["step"] is None for p in host["per_step"])  # a trace without ProfilerStep#N: one span
        findings.append(f"By replay, the GPUs' waits on their hosts cost {'the trace' if whole else 'the step'} "
                        f"{ms(host['saved_per_step_ns'])} ({share:.0%}): launched when the GPU went idle, "
                        f"{'it' if whole else 'each step'} would end that much sooner"
                        + (f" (mostly {CAUSE_WORDS[host['cause']]})" if host["cause"] else ""))
    return {
        "status": "fail" if share >= limits["fail_cost_share"] else "warn" if findings else "ok",
        "temporal": temporal,
        "idle": table_rows(con, "gpu_stream_idle", "rank, stream"),
        "idle_causes": causes,
        "host_cost": host,
        "launch": _launch(con),
        "queue": table_rows(con, "gpu_doc_queue", "rank, stream"),
        "findings": findings,
    }


def _no_gpu_reason(con) -> str:
    """Why a run has no GPU activity, as far as its events say: device work of an accelerator traceparse does not
    analyze, runtime calls that launched work while no device activity was recorded, else a CPU-only run (the load
    issues give the counts per file: ingest/columns.py device_kind_issues)."""
    use(con, "name_totals")
    con.execute(sql_file(__package__, "no_gpu.sql"))
    kinds = dict(con.execute("FROM no_gpu_kinds(?, ?, ?)", [list(UNANALYZED_WORK), list(CUDA_CALLS + OTHER_CALLS),
                                                           LAUNCH_NAMES]).fetchall())
    unanalyzed = [f"{name}, {kinds[cat]:,} {cat} events" for cat, name in UNANALYZED_WORK.items() if kinds.get(cat)]
    if unanalyzed:
        return f"device work of an accelerator traceparse does not analyze: {'; '.join(unanalyzed)}"
    if kinds.get("launch"):
        return (f"no device activity recorded though the host launched {kinds['launch']:,} kernels, copies or memsets "
                "(the profiler's device activities were not collected: see the load issues)")
    return "no GPU kernel, memcpy or memset in the traces (a CPU-only run)"


def clipped_streams(con) -> list[dict]:
    """load_issues rows (``file, severity, what, count``) for the streams whose HTA idle breakdown came out negative
    (activities overlapping on one stream) and were measured without overlaps (gpu_time.sql gpu_stream_clipped);
    after ``gpu_section`` on a run with GPU activities."""
    return table_rows(con, "gpu_doc_clipped", "rank, stream", columns="file, severity, what, count")


def _causes(con) -> list[dict]:
    """Per rank, step and cause: idle time, its share of the step's GPU span, and the ops that took most of it."""
    found = table_rows(con, "gpu_doc_idle_causes", "rank, step, idle_ns DESC, cause")
    for r in found:
        r["side"] = "host" if r["cause"] in HOST_CAUSES or r["cause"] == LAUNCH_CALL else r["cause"]
        r["ops"] = r["ops"] or []
    return found


def gpu_tables(con):
    """The GPU vocabulary's tables the section reads (gpu_time.sql, after what it reads), then its views (gpu.sql)."""
    use(con, "gpu_temporal", "gpu_queue", "gpu_stream_idle", "gpu_stream_clipped", "gpu_idle_parts", "gpu_step_spans",
        "gpu_gaps", "gpu_launches")
    con.execute(sql_file(__package__, "gpu.sql"))


def _host_cost(con, graphs, causes: list[dict]) -> dict | None:
    """What the GPUs' waits on their hosts cost the steps by replay (savings.host_wait_cost over gpu_gaps: from the
    moment a GPU went idle to the launch of its next activity, on the launching thread), with the host cause that
    kept them idle longest; None without step graphs or host waits."""
    waits = {}
    for w in table_rows(con, "gpu_doc_host_waits", "rank, tid, a, b"):
        waits.setdefault((w["rank"], w["tid"]), []).append((w["a"], w["launched"]))
    gs = graphs if waits else None
    if not gs:
        return None
    by_cause = {}
    for c in causes:
        if c["cause"] in HOST_CAUSES:  # what the replay takes away: not the launch calls, which it keeps
            by_cause[c["cause"]] = by_cause.get(c["cause"], 0) + c["idle_ns"]
    return {**savings.host_wait_cost(gs, waits),
            "cause": max(sorted(by_cause), key=by_cause.get) if by_cause else None}


def _launch(con) -> list[dict]:
    return table_rows(con, f"gpu_doc_launch({DELAY_OUTLIER_NS}, {RUNTIME_OUTLIER_NS})", "rank")


def _findings(temporal: list[dict], causes: list[dict], min_share: float) -> list[str]:
    """A cause is named for a rank when it is material (at least ``min_share`` of the rank's steps' GPU span
    together) and steady (at least that share in a majority of its steps), so one odd step names nothing."""
    steps = {}
    for t in temporal:
        if t["scope"] == "step":
            steps.setdefault(t["rank"], []).append(t)
    out = []
    for rank, spans in steps.items():
        total = sum(t["span_ns"] for t in spans)
        idle = sum(t["idle_ns"] for t in spans)
        if not total:
            continue
        mine = [c for c in causes if c["rank"] == rank]
        named = []
        for cause in dict.fromkeys(c["cause"] for c in mine):
            rows_ = [c for c in mine if c["cause"] == cause]
            share = sum(c["idle_ns"] for c in rows_) / total
            steady = sum(1 for c in rows_ if c["share"] >= min_share)
            if share >= min_share and steady >= math.floor(len(spans) / 2) + 1:
                named.append((share, cause, steady, _top_op(rows_)))
        for share, cause, steady, op in sorted(named, reverse=True):
            if cause == "cpu_op":
                why = f"waiting for the host, its launching thread busy in CPU ops (most in `{op}`)"
            elif cause == LAUNCH_CALL:
                why = f"waiting on {CAUSE_WORDS[cause]}" + (f", most in `{op}`" if op else "")
            elif cause in HOST_CAUSES:
                why = (f"waiting for the host, whose launching thread was in `{op}` ({CAUSE_WORDS[cause]})" if op
                       else f"waiting for the host, whose launching thread ran {CAUSE_WORDS[cause]}")
            else:
                why = f"waiting on {CAUSE_WORDS[cause]}"
            seen = (f"in {steady} of {count(len(spans), 'step')}" if spans[0]["step"] is not None
                    else "over its whole trace (no ProfilerStep#N)")
            out.append(f"rank {rank}: GPU idle {idle / total:.0%} of its steps' GPU time: {100 * share:.0f} points "
                       f"{why}, {seen}")
    return out


def _top_op(rows_: list[dict]) -> str | None:
    ops = {}
    for r in rows_:
        for o in r["ops"]:
            ops[o["name"]] = ops.get(o["name"], 0) + o["ns"]
    return max(ops, key=lambda n: (ops[n], n)) if ops else None
