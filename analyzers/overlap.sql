-- overlap: how much of each rank's communication runs while the rank computes.
--
-- One row per (scope, rank, step, strategy): comm_ns = length of the union of the
-- communication intervals, hidden_ns = length of their intersection with the rank's compute.
--   scope 'step':    per profiled step (-1: outside any step) and strategy ('untagged' when no
--                    rule matched); every operation.
--   scope 'overall': per rank, all communication together (strategy 'all', step -1); on GPU
--                    ranks HTA's get_comm_comp_overlap window (see last_step).
-- A rank is a GPU rank when it has kernels:
--   communication = NCCL/RCCL (is_comm_kernel_name) and custom communication kernels, each
--                   tagged by the operation whose execution span on its stream contains it;
--   compute       = every other kernel (memcpy/memset are neither).
-- Otherwise (gloo, CPU):
--   communication = each operation's execution (gloo worker annotation), else its CPU call;
--   compute       = cpu_op events on the main thread (the one holding ProfilerStep#N, else the
--                   busiest) that do not enclose a communication call (c10d::*, gloo:*, nccl:*,
--                   _c10d_functional::*, record_param_comms), minus the time inside such calls.
-- Interval algebra, written once: a sweep (+1/-1 at every start/end; the segment between two
-- consecutive edges is covered while the running count is positive) gives the union of the
-- communication per key and the compute (covered by busy, by no idle); the hidden time is a
-- range join of the two (both disjoint, so overlaps add up).
WITH
gpu_rank AS (SELECT DISTINCT rank FROM events WHERE cat = 'kernel'),
custom AS (SELECT DISTINCT rank, kernel AS name FROM comm_ops WHERE source = 'custom_kernel'),
kern AS (
    SELECT k.rank, k.ts_ns, k.ts_ns + k.dur_ns AS end_ns, k.stream, k.step, k.correlation,
           is_comm_kernel_name(k.name) OR c.name IS NOT NULL AS is_comm
    FROM events k LEFT JOIN custom c ON c.rank = k.rank AND c.name = k.name
    WHERE k.cat = 'kernel' AND k.dur_ns > 0
),
gpu_comm AS (
    SELECT k.rank,
           CASE WHEN k.end_ns <= o.exec_ts_ns + o.exec_dur_ns THEN o.step ELSE k.step END AS step,
           CASE WHEN k.end_ns <= o.exec_ts_ns + o.exec_dur_ns THEN o.strategy END AS strategy,
           k.ts_ns AS start_ns, k.end_ns
    FROM kern k
    ASOF LEFT JOIN (SELECT * FROM comm_ops WHERE exec_ts_ns IS NOT NULL) o
         ON o.rank = k.rank AND o.exec_stream = k.stream AND k.ts_ns >= o.exec_ts_ns
    WHERE k.is_comm
),
cpu_comm AS (
    SELECT rank, step, strategy,
           coalesce(exec_ts_ns, host_ts_ns) AS start_ns,
           coalesce(exec_ts_ns + exec_dur_ns, host_ts_ns + host_dur_ns) AS end_ns
    FROM comm_ops WHERE rank NOT IN (SELECT rank FROM gpu_rank)
),
-- HTA drops the last profiler step and kernels whose launch is not in the trace: when the loaded
-- ranks name two ProfilerStep#N or more, it keeps the kernels launched before the rank's latest
-- ProfilerStep event starts (GPU-side copies, gpu_user_annotation, included: they make the
-- window reach further, as HTA's does)
last_step AS (
    SELECT rank, (SELECT count(DISTINCT name) FROM events WHERE name LIKE 'ProfilerStep#%') AS n,
           max(ts_ns) AS start_ns
    FROM events WHERE name LIKE 'ProfilerStep#%' GROUP BY rank
),
launch AS (
    SELECT rank, correlation, min(ts_ns) AS ts_ns FROM events
    WHERE correlation IS NOT NULL AND cat NOT IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'gpu_user_annotation')
    GROUP BY rank, correlation
),
hta_kern AS (
    SELECT k.* FROM kern k
    LEFT JOIN last_step s ON s.rank = k.rank
    LEFT JOIN launch l ON l.rank = k.rank AND l.correlation = k.correlation
    WHERE coalesce(s.n, 0) < 2 OR l.ts_ns < s.start_ns
),
main_thread AS (
    SELECT rank, arg_max(tid, w) AS tid FROM (
        SELECT rank, tid, count(*) FILTER (WHERE name LIKE 'ProfilerStep#%') * 1e18 + sum(dur_ns) AS w
        FROM events WHERE cat IN ('cpu_op', 'user_annotation') AND tid IS NOT NULL
          AND rank NOT IN (SELECT rank FROM gpu_rank)
        GROUP BY rank, tid)
    GROUP BY rank
),
cpu_main AS (
    SELECT e.rank, e.cat, e.name, e.ts_ns AS start_ns, e.ts_ns + e.dur_ns AS end_ns,
           regexp_matches(e.name, '^(c10d::|gloo:|nccl:|_c10d_functional::|record_param_comms$)') AS comm_call
    FROM events e JOIN main_thread m ON m.rank = e.rank AND m.tid = e.tid
),
-- an op enclosing a communication call waits for it in its own time (e.g. _AlltoAllSingle,
-- AccumulateGrad running a DDP hook): only its other children count as compute. On one thread
-- events nest, so an op encloses a call when the first call starting at or after it starts
-- before it ends.
cpu_busy AS (
    SELECT o.rank, o.start_ns, o.end_ns
    FROM (SELECT * FROM cpu_main WHERE cat = 'cpu_op' AND NOT comm_call) o
    ASOF LEFT JOIN (SELECT rank, start_ns FROM cpu_main WHERE comm_call) c
         ON c.rank = o.rank AND c.start_ns >= o.start_ns
    WHERE c.start_ns IS NULL OR c.start_ns >= o.end_ns
),
-- kind: comm (counted), busy (+compute), idle (-compute: inside communication calls)
intervals AS (
    SELECT 'step' AS scope, rank, coalesce(step, -1) AS step, coalesce(strategy, 'untagged') AS strategy,
           'comm' AS kind, start_ns, end_ns FROM gpu_comm
    UNION ALL
    SELECT 'step', rank, coalesce(step, -1), coalesce(strategy, 'untagged'), 'comm', start_ns, end_ns FROM cpu_comm
    UNION ALL
    SELECT 'overall', rank, -1, 'all', 'comm', ts_ns, end_ns FROM hta_kern WHERE is_comm
    UNION ALL
    SELECT 'overall', rank, -1, 'all', 'comm', start_ns, end_ns FROM cpu_comm
    UNION ALL
    SELECT 'step', rank, -1, '', 'busy', ts_ns, end_ns FROM kern WHERE NOT is_comm
    UNION ALL
    SELECT 'overall', rank, -1, '', 'busy', ts_ns, end_ns FROM hta_kern WHERE NOT is_comm
    UNION ALL
    SELECT s.scope, rank, -1, '', 'busy', start_ns, end_ns FROM cpu_busy, (VALUES ('step'), ('overall')) s(scope)
    UNION ALL
    SELECT s.scope, rank, -1, '', 'idle', start_ns, end_ns
    FROM cpu_main, (VALUES ('step'), ('overall')) s(scope) WHERE comm_call
),
edges AS (
    SELECT scope, rank, step, strategy, kind, start_ns AS t, 1 AS d FROM intervals WHERE end_ns > start_ns
    UNION ALL
    SELECT scope, rank, step, strategy, kind, end_ns, -1 FROM intervals WHERE end_ns > start_ns
),
-- compute: segments covered by busy and by no idle interval
compute_pts AS (
    SELECT scope, rank, t, sum(d) FILTER (WHERE kind = 'busy') AS db, sum(d) FILTER (WHERE kind = 'idle') AS dx
    FROM edges WHERE kind != 'comm' GROUP BY scope, rank, t
),
compute_seg AS (
    SELECT scope, rank, t AS s, lead(t) OVER w AS e,
           sum(coalesce(db, 0)) OVER w AS nb, sum(coalesce(dx, 0)) OVER w AS nx
    FROM compute_pts WINDOW w AS (PARTITION BY scope, rank ORDER BY t)
),
compute AS (
    -- adjacent covered segments merged into pieces
    SELECT scope, rank, min(s) AS s, max(e) AS e FROM (
        SELECT *, sum(CASE WHEN s = prev_e THEN 0 ELSE 1 END) OVER (PARTITION BY scope, rank ORDER BY s) AS piece
        FROM (SELECT *, lag(e) OVER (PARTITION BY scope, rank ORDER BY s) AS prev_e
              FROM compute_seg WHERE nb > 0 AND nx = 0 AND e > s))
    GROUP BY scope, rank, piece
),
comm_pts AS (
    SELECT scope, rank, step, strategy, t, sum(d) AS d FROM edges WHERE kind = 'comm'
    GROUP BY scope, rank, step, strategy, t
),
comm_seg AS (
    SELECT scope, rank, step, strategy, t AS s, lead(t) OVER w AS e, sum(d) OVER w AS n
    FROM comm_pts WINDOW w AS (PARTITION BY scope, rank, step, strategy ORDER BY t)
),
comm AS (SELECT * FROM comm_seg WHERE n > 0 AND e > s),
hidden AS (
    SELECT c.scope, c.rank, c.step, c.strategy, sum(least(c.e, p.e) - greatest(c.s, p.s)) AS hidden_ns
    FROM comm c JOIN compute p ON p.scope = c.scope AND p.rank = c.rank AND p.s < c.e AND c.s < p.e
    GROUP BY ALL
)
SELECT c.scope, c.rank, CASE WHEN c.step >= 0 THEN c.step END AS step, c.strategy,
       r.rank IS NOT NULL AS gpu,
       sum(c.e - c.s)::BIGINT AS comm_ns, coalesce(any_value(h.hidden_ns), 0)::BIGINT AS hidden_ns
FROM comm c
LEFT JOIN hidden h ON h.scope = c.scope AND h.rank = c.rank AND h.step = c.step AND h.strategy = c.strategy
LEFT JOIN gpu_rank r ON r.rank = c.rank
GROUP BY c.scope, c.rank, c.step, c.strategy, r.rank
ORDER BY c.scope DESC, c.rank, c.step, c.strategy
