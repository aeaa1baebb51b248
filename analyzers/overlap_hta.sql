-- The HTA-compatible variant of overlap (HTA 0.5 get_comm_comp_overlap), derived from the vocabulary:
-- per GPU rank, the union of its communication kernels intersected with the union of its compute
-- kernels, over the kernels HTA keeps. HTA drops the last profiler step and kernels whose launch is not
-- in the trace: when the loaded ranks name two ProfilerStep#N or more, it keeps the kernels launched
-- before the rank's latest ProfilerStep event starts (its GPU-side copy included, which in newer
-- traces keeps every kernel); otherwise every kernel.
CREATE OR REPLACE TEMP VIEW hta_kernels AS
WITH
named_steps AS (SELECT count(DISTINCT name) AS n FROM events WHERE starts_with(name, 'ProfilerStep#')),
last_step AS (SELECT rank, max(ts_ns) AS start_ns FROM events WHERE starts_with(name, 'ProfilerStep#') GROUP BY rank),
launch AS (
    SELECT rank, correlation, min(ts_ns) AS ts_ns FROM events
    WHERE correlation IS NOT NULL AND cat NOT IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'gpu_user_annotation')
    GROUP BY rank, correlation
),
kernels AS (
    SELECT 'comm' AS kind, rank, ev_id, start_ns, end_ns FROM comm_intervals WHERE part = 'exec' AND stream IS NOT NULL
    UNION ALL
    SELECT 'compute', rank, ev_id, start_ns, end_ns FROM compute_intervals WHERE part = 'kernel'
)
SELECT k.kind, k.rank, k.start_ns, k.end_ns
FROM kernels k
JOIN events e ON e.rank = k.rank AND e.ev_id = k.ev_id
LEFT JOIN launch l ON l.rank = e.rank AND l.correlation = e.correlation
LEFT JOIN last_step s ON s.rank = k.rank
WHERE (SELECT n FROM named_steps) < 2 OR l.ts_ns < s.start_ns;

WITH
comm AS (
    SELECT k AS rank, ns FROM interval_union_ns(
        'SELECT rank AS k, start_ns AS s, end_ns AS e FROM hta_kernels WHERE kind = ''comm''')
),
hidden AS (
    SELECT k AS rank, sum(e - s) AS ns FROM interval_intersect(
        'SELECT rank AS k, rank AS g, start_ns AS s, end_ns AS e FROM hta_kernels WHERE kind = ''comm''',
        'SELECT rank AS k, start_ns AS s, end_ns AS e FROM hta_kernels WHERE kind = ''compute''') GROUP BY ALL
)
SELECT c.rank, c.ns::BIGINT AS comm_ns, coalesce(h.ns, 0)::BIGINT AS hidden_ns
FROM comm c LEFT JOIN hidden h USING (rank)
ORDER BY c.rank
