-- The analyze document's summary (traceparse/document/summary.py), from the vocabulary: per rank, per step window,
-- per kind of communication, and the heaviest ops. TEMP views and macros of the connection.

-- summary_per_rank: per rank its steps, step time, and compute and communication summed over its step windows
-- (window_totals). comm_ns counts the communication launched in the windows whole, also where it executes after them
-- (a GPU running behind its CPU): it can exceed window_ns; comm_fraction is taken over one window on both sides:
-- comm_in_window_ns, the time inside the windows during which the rank communicates (the union of all its counted
-- comm_intervals, whatever step launched them, clipped to the windows), over window_ns; never above 1.
CREATE OR REPLACE TEMP VIEW summary_per_rank AS
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
LEFT JOIN inside USING (rank);

-- summary_per_step: per rank and step window, its length split into compute, exposed communication (communication
-- not under compute) and idle (neither, never below 0), from window_totals.
CREATE OR REPLACE TEMP VIEW summary_per_step AS
SELECT rank, step, window_ns, compute_ns, comm_ns, hidden_ns, comm_ns - hidden_ns AS exposed_ns,
       greatest(window_ns - compute_ns - (comm_ns - hidden_ns), 0) AS idle_ns
FROM window_totals;

-- summary_comm: per op and source (how its size was read), its operations, ranks, bytes and time.
CREATE OR REPLACE TEMP VIEW summary_comm AS
SELECT op, source, count(*) AS ops, count(DISTINCT rank) AS ranks,
       sum(bytes_in)::BIGINT AS bytes_in, sum(bytes_out)::BIGINT AS bytes_out,
       sum(coalesce(exec_dur_ns, host_dur_ns))::BIGINT AS time_ns,
       count(*) FILTER (WHERE bytes_in IS NULL) AS ops_without_size,
       count(*) FILTER (WHERE bytes_out IS NULL) AS ops_without_bytes_out
FROM comm_ops GROUP BY op, source;

-- summary_top_ops(n): the n heaviest kernels by total time (CPU ops where the run has no kernel; equal times by
-- name), each with its calls, share of their kind's total (null when every one takes no time: 0 / 0) and ranks.
CREATE OR REPLACE TEMP MACRO summary_top_ops(n) AS TABLE
WITH kind AS (SELECT CASE WHEN EXISTS (SELECT 1 FROM name_totals WHERE cat = 'kernel') THEN 'kernel'
                          ELSE 'cpu_op' END AS cat)
SELECT (SELECT cat FROM kind) AS kind, name, sum(calls)::BIGINT AS calls, sum(total_ns)::BIGINT AS total_ns,
       round(sum(total_ns) / nullif(sum(sum(total_ns)) OVER (), 0), 4) AS share,
       count(DISTINCT rank) AS ranks
FROM name_totals WHERE cat = (SELECT cat FROM kind) GROUP BY name ORDER BY total_ns DESC, name LIMIT n;
