"""What ``traceparse analyze`` shows about a loaded run, as plain data."""

import json

from ..intervals import union_sql
from ..store.query import rows

WINDOW = """
    SELECT r.rank,
           coalesce(min(s.start_ns), (SELECT min(ts_ns) FROM events e WHERE e.rank = r.rank)) AS w_start,
           coalesce(max(s.end_ns), (SELECT max(ts_ns + dur_ns) FROM events e WHERE e.rank = r.rank)) AS w_end
    FROM ranks r LEFT JOIN steps s ON s.rank = r.rank GROUP BY r.rank
"""


def run_info(con) -> dict:
    ranks = rows(con, "SELECT * FROM ranks ORDER BY rank")
    steps = [r["step"] for r in rows(con, "SELECT DISTINCT step FROM steps ORDER BY step")]
    world = {r["world_size"] for r in ranks if r["world_size"] is not None}
    return {
        "files": [r["file"] for r in ranks],
        "ranks": [r["rank"] for r in ranks],
        "world_size": world.pop() if len(world) == 1 else None,
        "steps": steps,
        "backend": sorted({r["backend"] for r in ranks if r["backend"]}),
        "devices": sorted({r["device_name"] for r in ranks if r["device_name"]}),
        "clock": sorted({r["clock_method"] for r in ranks}),
        "events": sum(r["n_complete"] for r in ranks),
        "rank_sources": {str(r["rank"]): r["rank_source"] for r in ranks},
    }


def load_issues(con) -> list[dict]:
    return rows(con, "SELECT * FROM load_issues ORDER BY severity DESC, file")


def per_rank(con) -> list[dict]:
    busy_comm = union_sql(
        f"""SELECT c.rank, greatest(coalesce(c.exec_ts_ns, c.host_ts_ns), w.w_start) AS start_ns,
                   least(coalesce(c.exec_ts_ns + c.exec_dur_ns, c.host_ts_ns + c.host_dur_ns), w.w_end) AS end_ns
            FROM comm_ops c JOIN ({WINDOW}) w USING (rank)
            WHERE coalesce(c.exec_ts_ns, c.host_ts_ns) < w.w_end
              AND coalesce(c.exec_ts_ns + c.exec_dur_ns, c.host_ts_ns + c.host_dur_ns) > w.w_start""",
        ["rank"],
    )
    return rows(
        con,
        f"""
        WITH w AS ({WINDOW}), comm AS ({busy_comm}),
        st AS (SELECT rank, count(*) AS steps, avg(dur_ns)::BIGINT AS step_mean_ns, max(dur_ns) AS step_max_ns
               FROM steps GROUP BY rank),
        ops AS (SELECT rank, count(*) AS comm_ops, sum(coalesce(bytes_in, 0))::BIGINT AS comm_bytes_in
                FROM comm_ops c JOIN w USING (rank)
                WHERE coalesce(c.host_ts_ns, c.exec_ts_ns) BETWEEN w.w_start AND w.w_end GROUP BY rank)
        SELECT w.rank, coalesce(st.steps, 0) AS steps, st.step_mean_ns, st.step_max_ns,
               w.w_end - w.w_start AS window_ns, coalesce(ops.comm_ops, 0) AS comm_ops,
               coalesce(ops.comm_bytes_in, 0) AS comm_bytes_in, coalesce(comm.union_ns, 0) AS comm_ns,
               round(coalesce(comm.union_ns, 0) / nullif(w.w_end - w.w_start, 0), 4) AS comm_fraction
        FROM w LEFT JOIN st USING (rank) LEFT JOIN ops USING (rank) LEFT JOIN comm USING (rank)
        ORDER BY w.rank
        """,
    )


def busy(con) -> list[dict]:
    u = union_sql(
        f"""SELECT e.rank, e.pid, e.tid, greatest(e.ts_ns, w.w_start) AS start_ns,
                   least(e.ts_ns + e.dur_ns, w.w_end) AS end_ns
            FROM events e JOIN ({WINDOW}) w USING (rank)
            WHERE e.ts_ns < w.w_end AND e.ts_ns + e.dur_ns > w.w_start AND e.dur_ns > 0
              AND e.name NOT LIKE 'ProfilerStep#%'""",
        ["rank", "pid", "tid"],
    )
    return rows(
        con,
        f"""
        WITH u AS ({u}), w AS ({WINDOW}),
        kind AS (SELECT rank, pid, tid, any_value(thread_name) AS thread_name,
                        bool_or(cat IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'gpu_user_annotation')) AS gpu,
                        count(*) AS events
                 FROM events GROUP BY rank, pid, tid)
        SELECT u.rank, u.pid, u.tid, k.thread_name, CASE WHEN k.gpu THEN 'gpu stream' ELSE 'cpu thread' END AS kind,
               k.events, u.union_ns AS busy_ns, round(u.union_ns / nullif(w.w_end - w.w_start, 0), 4) AS busy_fraction
        FROM u JOIN kind k USING (rank, pid, tid) JOIN w USING (rank)
        ORDER BY u.rank, kind, busy_ns DESC
        """,
    )


def top_kernels(con, n=10) -> list[dict]:
    has_gpu = con.execute("SELECT count(*) FROM events WHERE cat = 'kernel'").fetchone()[0] > 0
    cat = "kernel" if has_gpu else "cpu_op"
    return rows(
        con,
        """
        SELECT ? AS kind, name, count(*) AS calls, sum(dur_ns)::BIGINT AS total_ns,
               round(sum(dur_ns) / sum(sum(dur_ns)) OVER (), 4) AS share,
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
               count(*) FILTER (WHERE bytes_in IS NULL) AS ops_without_size
        FROM comm_ops GROUP BY op, source ORDER BY time_ns DESC NULLS LAST
        """,
    )


def summary(con, top=10) -> dict:
    return {
        "per_rank": per_rank(con),
        "comm": comm_summary(con),
        "threads": busy(con),
        "top_kernels": top_kernels(con, top),
    }
