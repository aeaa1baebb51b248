-- Queries of the imbalance check, in sections ("-- name: <section>"); the module puts
-- `windows` in front of `kernels` or `main_thread` as one WITH query.

-- name: windows
-- A rank's windows: one per ProfilerStep; the whole trace (win = -1) for a rank without steps.
stepped AS (SELECT DISTINCT rank FROM steps),
windows AS (
    SELECT rank, step AS win, start_ns AS w0, end_ns AS w1 FROM steps
    UNION ALL
    SELECT rank, -1, min(ts_ns), max(ts_ns + dur_ns) FROM events
    WHERE rank NOT IN (SELECT rank FROM stepped) GROUP BY rank
),
gpu AS (SELECT DISTINCT rank FROM events WHERE cat = 'kernel')

-- name: kernels
-- GPU ranks: compute kernels (communication kernels left out) on every stream, each in the
-- window of the CPU call that launched it (runtime/driver event with the same correlation;
-- else the window it starts in): GPU work lags its CPU step, often by steps.
-- Columns rank, win, start_ns, end_ns (the module takes the length of their union).
comm_kernels AS (
    SELECT DISTINCT rank, exec_ts_ns AS ts_ns, kernel AS name FROM comm_ops
    WHERE exec_ts_ns IS NOT NULL AND kernel IS NOT NULL
),
compute_kernels AS (
    SELECT e.rank, e.ts_ns, e.dur_ns, e.correlation FROM events e
    LEFT JOIN comm_kernels c ON e.rank = c.rank AND e.ts_ns = c.ts_ns AND e.name = c.name
    WHERE e.cat = 'kernel' AND c.rank IS NULL AND NOT (e.name ILIKE '%nccl%' OR e.name ILIKE '%rccl%')
),
launches AS (
    SELECT rank, correlation, min(ts_ns) AS ts_ns FROM events
    WHERE cat IN ('cuda_runtime', 'cuda_driver') AND correlation IS NOT NULL GROUP BY rank, correlation
)
SELECT k.rank, w.win, k.ts_ns AS start_ns, k.ts_ns + k.dur_ns AS end_ns
FROM compute_kernels k
LEFT JOIN launches l ON l.rank = k.rank AND l.correlation = k.correlation
JOIN windows w ON w.rank = k.rank AND coalesce(l.ts_ns, k.ts_ns) >= w.w0 AND coalesce(l.ts_ns, k.ts_ns) < w.w1

-- name: main_thread
-- CPU ranks: the CPU ops and annotations of the main thread (the one holding the ProfilerStep
-- annotations, else the one with the most CPU-op time) that start in a window, in nesting
-- order (start, then longest first), with their recorded input shapes.
main AS (
    SELECT rank, arg_max(pid, score) AS pid, arg_max(tid, score) AS tid FROM (
        SELECT rank, pid, tid,
               1e18 * count(*) FILTER (WHERE name LIKE 'ProfilerStep#%')
               + coalesce(sum(dur_ns) FILTER (WHERE cat = 'cpu_op'), 0) AS score
        FROM events WHERE cat IN ('cpu_op', 'user_annotation') GROUP BY rank, pid, tid
    ) GROUP BY rank
)
SELECT e.rank, w.win, e.ts_ns AS s, e.ts_ns + e.dur_ns AS e, e.cat, e.name, a.input_dims
FROM events e
JOIN main m ON e.rank = m.rank AND e.pid = m.pid AND e.tid = m.tid
JOIN windows w ON e.rank = w.rank AND e.ts_ns >= w.w0 AND e.ts_ns < w.w1
LEFT JOIN op_args a ON a.rank = e.rank AND a.ev_id = e.ev_id
WHERE e.cat IN ('cpu_op', 'user_annotation') AND e.rank NOT IN (SELECT rank FROM gpu)
  AND e.name NOT LIKE 'ProfilerStep#%'
ORDER BY e.rank, e.ts_ns, e.dur_ns DESC, e.ev_id
