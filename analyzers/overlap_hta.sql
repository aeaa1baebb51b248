-- The HTA-compatible variant of overlap (HTA 0.5 get_comm_comp_overlap), derived from the vocabulary:
-- per GPU rank, the union of its communication kernels intersected with the union of its compute
-- kernels, over the kernels HTA keeps (hta_gpu_activity, vocabulary/hta_window.sql: HTA's window).
CREATE OR REPLACE TEMP VIEW hta_kernels AS
SELECT kind, rank, start_ns, end_ns FROM hta_gpu_activity WHERE kind IN ('comm', 'compute');

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
