-- Inputs of the bubble check: one row per interval (rank, step, grp, s, e, name, comm, pp), clipped to the step.
--   grp 'top'    : top-level CPU ops of the main thread (the thread carrying ProfilerStep#N), nested ops merged
--                  into their outermost one; name = the outermost op; comm = it is a communication call;
--                  pp = a pp-tagged comm_ops call starts inside it
--   grp 'comm'   : union of the main thread's communication/wait CPU ops (c10d::*, _c10d_functional::*,
--                  record_param_comms, nccl:*, gloo:*), at any depth
--   grp 'kernel' : union of GPU kernels that are not communication (NCCL/RCCL names, comm_ops kernels)
--   grp 'mark'   : schedule annotations on the main thread: PP:<stage><action><mb>, Forward <mb>, Backward <mb>
--   grp 'opt'    : Optimizer.* annotations on the main thread (not part of the pipeline schedule)
CREATE OR REPLACE TEMP VIEW bubble_intervals AS
WITH main AS (
    SELECT DISTINCT rank, tid FROM events WHERE starts_with(name, 'ProfilerStep#') AND tid IS NOT NULL
),
clipped AS (
    SELECT e.rank, s.step, e.cat, e.name,
           greatest(e.ts_ns, s.start_ns) AS s, least(e.ts_ns + e.dur_ns, s.end_ns) AS e,
           m.tid IS NOT NULL AS on_main
    FROM events e JOIN steps s ON s.rank = e.rank AND e.ts_ns < s.end_ns AND e.ts_ns + e.dur_ns > s.start_ns
    LEFT JOIN main m ON m.rank = e.rank AND m.tid = e.tid
    WHERE e.cat IN ('cpu_op', 'kernel', 'user_annotation') AND e.dur_ns > 0
),
src AS (
    SELECT rank, step, cat, name, s, e,
           (starts_with(name, 'c10d::') OR starts_with(name, '_c10d_functional::') OR starts_with(name, 'gloo:')
            OR starts_with(name, 'nccl:') OR name = 'record_param_comms') AS comm,
           CASE
               WHEN cat = 'cpu_op' AND on_main THEN 'cpu'
               WHEN cat = 'kernel' AND NOT is_comm_kernel_name(name)
                    AND name NOT IN (SELECT kernel FROM comm_ops WHERE kernel IS NOT NULL) THEN 'kernel'
               WHEN cat = 'user_annotation' AND on_main
                    AND (regexp_full_match(name, 'PP:\d+[FB]\d+') OR regexp_full_match(name, '(Forward|Backward) \d+')) THEN 'mark'
               WHEN cat = 'user_annotation' AND on_main AND starts_with(name, 'Optimizer.') THEN 'opt'
           END AS src
    FROM clipped
),
grouped AS (
    SELECT rank, step, 'top' AS grp, name, s, e, comm FROM src WHERE src = 'cpu'
    UNION ALL SELECT rank, step, 'comm', name, s, e, comm FROM src WHERE src = 'cpu' AND comm
    UNION ALL SELECT rank, step, 'kernel', name, s, e, comm FROM src WHERE src = 'kernel'
    UNION ALL SELECT rank, step, src, name, s, e, false FROM src WHERE src IN ('mark', 'opt')
)
SELECT {'rank': rank, 'step': step, 'grp': grp} AS k, * FROM grouped;

-- 'top' keeps touching ops apart; the unions merge them (the length is the same either way)
WITH pieces AS (
    SELECT rank, step, grp, min(s) AS s, max(e) AS e,
           first(name ORDER BY s, e DESC) AS name, first(comm ORDER BY s, e DESC) AS comm
    FROM interval_pieces('SELECT * FROM bubble_intervals WHERE grp = ''top''', false)
    GROUP BY rank, step, grp, piece
    UNION ALL
    SELECT rank, step, grp, min(s), max(e), first(name ORDER BY s, e DESC), first(comm ORDER BY s, e DESC)
    FROM interval_pieces('SELECT * FROM bubble_intervals WHERE grp IN (''comm'', ''kernel'')', true)
    GROUP BY rank, step, grp, piece
)
SELECT p.rank, p.step, p.grp, p.s, p.e, p.name, p.comm,
       p.grp = 'top' AND EXISTS (SELECT 1 FROM comm_ops c WHERE c.rank = p.rank AND c.strategy = 'pp'
                                 AND c.host_ts_ns >= p.s AND c.host_ts_ns < p.e) AS pp
FROM pieces p
UNION ALL
SELECT rank, step, grp, s, e, name, false, false FROM bubble_intervals WHERE grp IN ('mark', 'opt')
ORDER BY rank, step, s, e DESC
