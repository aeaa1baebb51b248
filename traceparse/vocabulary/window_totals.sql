-- Per window: compute, communication and the part of it hidden under compute (comments in schema.py).
-- reads: comm_intervals, compute_intervals, interval_intersect, interval_union_ns, step_windows
INSERT INTO window_totals
WITH compute AS (
    SELECT k.rank, k.step, ns FROM interval_union_ns(
        'SELECT {''rank'': rank, ''step'': step} AS k, start_ns AS s, end_ns AS e FROM compute_intervals WHERE in_window')
),
comm AS (
    SELECT k.rank, k.step, ns FROM interval_union_ns(
        'SELECT {''rank'': rank, ''step'': step} AS k, start_ns AS s, end_ns AS e FROM comm_intervals WHERE in_window AND counted')
),
hidden AS (
    SELECT k.rank, k.step, sum(e - s) AS ns FROM interval_intersect(
        'SELECT {''rank'': rank, ''step'': step} AS k, rank AS g, start_ns AS s, end_ns AS e FROM comm_intervals WHERE in_window AND counted',
        'SELECT rank AS k, start_ns AS s, end_ns AS e FROM compute_intervals')
    GROUP BY ALL
)
SELECT w.rank, w.step, w.dur_ns AS window_ns,
       coalesce(c.ns, 0)::BIGINT AS compute_ns, coalesce(m.ns, 0)::BIGINT AS comm_ns, coalesce(h.ns, 0)::BIGINT AS hidden_ns
FROM step_windows w
LEFT JOIN compute c ON c.rank = w.rank AND c.step IS NOT DISTINCT FROM w.step
LEFT JOIN comm m ON m.rank = w.rank AND m.step IS NOT DISTINCT FROM w.step
LEFT JOIN hidden h ON h.rank = w.rank AND h.step IS NOT DISTINCT FROM w.step;

