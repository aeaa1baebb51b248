"""What ``traceparse analyze`` shows about a loaded run, as plain data."""

from traceparse.store.query import sql_file, table_rows
from traceparse.vocabulary.modules import use


def run_info(con) -> dict:
    ranks = table_rows(con, "ranks", "rank")
    steps = [s["step"] for s in table_rows(con, "steps", "step", columns="DISTINCT step")]
    use(con, "world")
    return {
        "files": [r["file"] for r in ranks],
        "ranks": [r["rank"] for r in ranks],
        "world_size": table_rows(con, "world")[0]["stated"],
        "steps": steps,
        "backend": sorted({r["backend"] for r in ranks if r["backend"]}),
        "devices": sorted({r["device_name"] for r in ranks if r["device_name"]}),
        "clock": clock(con, ranks),
        "events": sum(r["n_complete"] for r in ranks),
        "rank_sources": {str(r["rank"]): r["rank_source"] for r in ranks},
    }


def clock(con, ranks: list[dict]) -> dict:
    """How the files' times were put on one clock: ``methods`` (each file's, ``ranks.clock_method``), and, for a run
    on two hosts or more (or of ranks that name none), ``clocks``: each clock's ranks, the shift applied to their
    times and the bounds the traces allow (the store's ``clocks``), ``applied`` whether any moved, ``by`` whether the
    clocks are hosts or ranks. ``traceparse explain clocks``."""
    got = table_rows(con, "clocks", "rank")
    clocks = {}
    for c in got:
        row = clocks.setdefault(c["clock"], {"clock": c["clock"], "ranks": [], **{k: c[k] for k in (
            "shift_ns", "low_ns", "high_ns", "estimate_ns", "collectives", "transfers")}})
        row["ranks"].append(c["rank"])
    return {"methods": sorted({r["clock_method"] for r in ranks}),
            "by": None if not got else "host" if got[0]["clock"].startswith("host ") else "rank",
            "applied": any(c["shift_ns"] for c in got), "clocks": list(clocks.values())}


def load_issues(con) -> list[dict]:
    return table_rows(con, "load_issues", "severity DESC, file")


def per_rank(con) -> list[dict]:
    """Per rank: steps, step time, and compute and communication summed over its step windows (the vocabulary's
    window_totals, the numbers every check uses; summary.sql summary_per_rank says how comm_fraction stays within
    one window)."""
    return table_rows(con, "summary_per_rank", "rank")


def per_step(con) -> list[dict]:
    """Per rank and step window: its length split into compute, exposed communication (communication
    not under compute) and idle (neither, never below 0), from the vocabulary's window_totals."""
    return table_rows(con, "summary_per_step", "rank, step")


def busy(con) -> list[dict]:
    """Per CPU thread and GPU stream: the union of its work inside the rank's profiled span (first window's start to
    last window's end), nested events once; a GPU stream's work is its device work, as the GPU section's
    (vocabulary/busy_time.sql lane_busy)."""
    use(con, "lane_busy")
    return table_rows(con, "lane_busy", "rank, kind, busy_ns DESC, pid, tid")


def top_kernels(con, n=10) -> list[dict]:
    """The ``n`` heaviest kernels (CPU ops without kernels) by total time (summary.sql summary_top_ops)."""
    return table_rows(con, f"summary_top_ops({int(n)})")


def comm_summary(con) -> list[dict]:
    return table_rows(con, "summary_comm", "time_ns DESC NULLS LAST")


def summary(con, top=10) -> dict:
    """The ``summary`` section; its parts read summary.sql's views, made here once."""
    use(con, "name_totals")
    con.execute(sql_file(__package__, "summary.sql"))
    return {
        "per_rank": per_rank(con),
        "per_step": per_step(con),
        "comm": comm_summary(con),
        "threads": busy(con),
        "top_kernels": top_kernels(con, top),
    }
