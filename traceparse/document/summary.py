"""What ``traceparse analyze`` shows about a loaded run, as plain data."""

from traceparse.store.query import rows, sql_file


def run_info(con) -> dict:
    ranks = rows(con, "SELECT * FROM ranks ORDER BY rank")
    steps = [r["step"] for r in rows(con, "SELECT DISTINCT step FROM steps ORDER BY step")]
    con.execute(sql_file("traceparse.vocabulary", "world.sql"))
    return {
        "files": [r["file"] for r in ranks],
        "ranks": [r["rank"] for r in ranks],
        "world_size": con.table("world").project("stated").fetchall()[0][0],
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
    got = rows(con, "SELECT * FROM clocks ORDER BY rank")
    clocks = {}
    for c in got:
        row = clocks.setdefault(c["clock"], {"clock": c["clock"], "ranks": [], **{k: c[k] for k in (
            "shift_ns", "low_ns", "high_ns", "estimate_ns", "collectives", "transfers")}})
        row["ranks"].append(c["rank"])
    return {"methods": sorted({r["clock_method"] for r in ranks}),
            "by": None if not got else "host" if got[0]["clock"].startswith("host ") else "rank",
            "applied": any(c["shift_ns"] for c in got), "clocks": list(clocks.values())}


def load_issues(con) -> list[dict]:
    return rows(con, "SELECT * FROM load_issues ORDER BY severity DESC, file")


def per_rank(con) -> list[dict]:
    """Per rank: steps, step time, and compute and communication summed over its step windows
    (the vocabulary's window_totals, the numbers every check uses).

    ``comm_ns`` counts the communication launched in the windows whole, also where it executes after
    them (a GPU running behind its CPU): it can exceed ``window_ns``. ``comm_fraction`` is therefore
    taken over one window on both sides: ``comm_in_window_ns``, the time inside the windows during which
    the rank communicates (the union of all its counted comm_intervals, whatever step launched them,
    clipped to the windows), over ``window_ns``; never above 1."""
    return rows(
        con,
        """
        WITH wt AS (SELECT rank, sum(window_ns)::BIGINT AS window_ns, sum(compute_ns)::BIGINT AS compute_ns,
                           sum(comm_ns)::BIGINT AS comm_ns
                    FROM window_totals GROUP BY rank),
        inside AS (SELECT k AS rank, sum(e - s)::BIGINT AS comm_in_window_ns FROM interval_intersect(
                       'SELECT rank AS k, rank AS g, start_ns AS s, end_ns AS e FROM step_windows',
                       'SELECT rank AS k, start_ns AS s, end_ns AS e FROM comm_intervals WHERE counted')
                   GROUP BY k),
        st AS (SELECT rank, count(*) AS steps, avg(dur_ns)::BIGINT AS step_mean_ns, max(dur_ns) AS step_max_ns
               FROM step_windows WHERE step IS NOT NULL GROUP BY rank),
        ops AS (SELECT c.rank, count(*) AS comm_ops, sum(c.bytes_in)::BIGINT AS comm_bytes_in,
                       count(*) FILTER (WHERE c.bytes_in IS NULL) AS ops_without_size
                FROM comm_ops c
                WHERE (c.rank, c.op_id) IN (SELECT (rank, op_id) FROM comm_intervals WHERE counted AND in_window)
                GROUP BY c.rank)
        SELECT r.rank, coalesce(st.steps, 0) AS steps, st.step_mean_ns, st.step_max_ns, wt.window_ns,
               coalesce(ops.comm_ops, 0) AS comm_ops,
               CASE WHEN ops.rank IS NULL THEN 0 ELSE ops.comm_bytes_in END AS comm_bytes_in,
               coalesce(ops.ops_without_size, 0) AS ops_without_size,
               wt.compute_ns, wt.comm_ns,
               CASE WHEN wt.rank IS NOT NULL THEN coalesce(inside.comm_in_window_ns, 0) END AS comm_in_window_ns,
               round(coalesce(inside.comm_in_window_ns, 0) / nullif(wt.window_ns, 0), 4) AS comm_fraction
        FROM ranks r LEFT JOIN wt USING (rank) LEFT JOIN st USING (rank) LEFT JOIN ops USING (rank)
        LEFT JOIN inside USING (rank)
        ORDER BY r.rank
        """,
    )


def per_step(con) -> list[dict]:
    """Per rank and step window: its length split into compute, exposed communication (communication
    not under compute) and idle (neither, never below 0), from the vocabulary's window_totals."""
    return rows(
        con,
        """
        SELECT rank, step, window_ns, compute_ns, comm_ns, hidden_ns, comm_ns - hidden_ns AS exposed_ns,
               greatest(window_ns - compute_ns - (comm_ns - hidden_ns), 0) AS idle_ns
        FROM window_totals ORDER BY rank, step
        """,
    )


def busy(con) -> list[dict]:
    """Per CPU thread and GPU stream: the union of its work inside the rank's profiled span (first window's start to
    last window's end), nested events once; a GPU stream's work is its device work, as the GPU section's
    (vocabulary/busy_time.sql lane_busy)."""
    con.execute(sql_file("traceparse.vocabulary", "busy_time.sql"))
    return rows(con, "SELECT * FROM lane_busy ORDER BY rank, kind, busy_ns DESC, pid, tid")


def top_kernels(con, n=10) -> list[dict]:
    has_gpu = con.execute("SELECT count(*) FROM events WHERE cat = 'kernel'").fetchone()[0] > 0
    cat = "kernel" if has_gpu else "cpu_op"
    return rows(
        con,
        """
        SELECT ? AS kind, name, count(*) AS calls, sum(dur_ns)::BIGINT AS total_ns,
               -- null when every op takes no time (0 / 0): no share to give
               round(sum(dur_ns) / nullif(sum(sum(dur_ns)) OVER (), 0), 4) AS share,
               count(DISTINCT rank) AS ranks
        FROM events WHERE cat = ? GROUP BY name ORDER BY total_ns DESC LIMIT ?
        """,
        [cat, cat, n],
    )


def comm_summary(con) -> list[dict]:
    return rows(
        con,
        """
        SELECT op, source, count(*) AS ops, count(DISTINCT rank) AS ranks,
               sum(bytes_in)::BIGINT AS bytes_in, sum(bytes_out)::BIGINT AS bytes_out,
               sum(coalesce(exec_dur_ns, host_dur_ns))::BIGINT AS time_ns,
               count(*) FILTER (WHERE bytes_in IS NULL) AS ops_without_size,
               count(*) FILTER (WHERE bytes_out IS NULL) AS ops_without_bytes_out
        FROM comm_ops GROUP BY op, source ORDER BY time_ns DESC NULLS LAST
        """,
    )


def summary(con, top=10) -> dict:
    return {
        "per_rank": per_rank(con),
        "per_step": per_step(con),
        "comm": comm_summary(con),
        "threads": busy(con),
        "top_kernels": top_kernels(con, top),
    }
