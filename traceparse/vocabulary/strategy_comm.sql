-- The waits inside each strategy's communication: exposed unless the rank computes meanwhile.
-- reads: collective_arrivals, comm_intervals, compute_intervals, interval_intersect, interval_union_ns
CREATE TEMP TABLE wait_comm AS
SELECT k.rank, k.step, k.strategy, s, e FROM interval_intersect(
    'SELECT {''rank'': rank, ''step'': step, ''strategy'': strategy} AS k, {''rank'': rank, ''strategy'': strategy} AS g,
            arrival_ns AS s, last_arrival_ns AS e FROM collective_arrivals WHERE last_arrival_ns > arrival_ns',
    'SELECT {''rank'': rank, ''strategy'': coalesce(strategy, ''untagged'')} AS k, start_ns AS s, end_ns AS e
     FROM comm_intervals WHERE in_window AND counted');

INSERT INTO window_strategy_comm
WITH waiting AS (
    SELECT rank, step, strategy, sum(e - s) AS ns FROM wait_comm GROUP BY ALL
),
waiting_hidden AS (
    SELECT k.rank, k.step, k.strategy, sum(e - s) AS ns FROM interval_intersect(
        'SELECT {''rank'': rank, ''step'': step, ''strategy'': strategy} AS k, rank AS g, s, e FROM wait_comm',
        'SELECT rank AS k, start_ns AS s, end_ns AS e FROM compute_intervals')
    GROUP BY ALL
),
comm AS (
    SELECT k.rank, k.step, k.strategy, ns FROM interval_union_ns(
        'SELECT {''rank'': rank, ''step'': step, ''strategy'': coalesce(strategy, ''untagged'')} AS k,
                start_ns AS s, end_ns AS e FROM comm_intervals WHERE in_window AND counted')
),
hidden AS (
    SELECT k.rank, k.step, k.strategy, sum(e - s) AS ns FROM interval_intersect(
        'SELECT {''rank'': rank, ''step'': step, ''strategy'': coalesce(strategy, ''untagged'')} AS k, rank AS g,
                start_ns AS s, end_ns AS e FROM comm_intervals WHERE in_window AND counted',
        'SELECT rank AS k, start_ns AS s, end_ns AS e FROM compute_intervals')
    GROUP BY ALL
)
SELECT c.rank, c.step, c.strategy, c.ns::BIGINT AS comm_ns, coalesce(h.ns, 0)::BIGINT AS hidden_ns,
       least(greatest(coalesce(w.ns, 0) - coalesce(wh.ns, 0), 0), c.ns - coalesce(h.ns, 0))::BIGINT AS waiting_ns
FROM comm c
LEFT JOIN hidden h ON h.rank = c.rank AND h.step IS NOT DISTINCT FROM c.step AND h.strategy = c.strategy
LEFT JOIN waiting w ON w.rank = c.rank AND w.step IS NOT DISTINCT FROM c.step AND w.strategy = c.strategy
LEFT JOIN waiting_hidden wh ON wh.rank = c.rank AND wh.step IS NOT DISTINCT FROM c.step AND wh.strategy = c.strategy;
