-- collective_arrivals: each collective matched across its group's members (comments in schema.py). A collective of
-- a step left out (incomplete_steps: a rank cut short did not finish it) is not matched: its members' arrivals in
-- that step are not all recorded.
-- reads: comm_ops, incomplete_steps
INSERT INTO collective_arrivals
WITH c AS (
    SELECT rank, op_id, op, coalesce(strategy, 'untagged') AS strategy, step, list_sort(group_ranks) AS g,
           CASE WHEN seq IS NOT NULL THEN 'seq' ELSE 'order' END AS matched_by,
           member_key(group_ranks) || CASE WHEN seq IS NOT NULL THEN ' seq ' || seq
               ELSE ' step ' || coalesce(step::VARCHAR, '-') || ' #' || row_number() OVER (
                   PARTITION BY rank, member_key(group_ranks), seq IS NULL, step
                   ORDER BY coalesce(host_ts_ns, exec_ts_ns), op_id) END AS match_key,
           host_ts_ns, exec_ts_ns
    FROM comm_ops
    WHERE is_collective(op)
      AND len(group_ranks) >= 2 AND list_contains(group_ranks, rank)
      AND (host_ts_ns IS NOT NULL OR exec_ts_ns IS NOT NULL)
      AND (step IS NULL OR step NOT IN (SELECT step FROM incomplete_steps))
),
m AS (
    SELECT match_key, count(*) AS n, count(DISTINCT rank) AS members, count(DISTINCT op) AS kinds,
           count(exec_ts_ns) AS n_exec, count(host_ts_ns) AS n_host, any_value(len(g)) AS size
    FROM c GROUP BY match_key
),
a AS (
    SELECT c.*, CASE WHEN m.n_exec = m.n THEN 'execution' ELSE 'call' END AS basis,
           CASE WHEN m.n_exec = m.n THEN c.exec_ts_ns ELSE c.host_ts_ns END AS arrival_ns
    FROM c JOIN m USING (match_key)
    WHERE m.n = m.size AND m.members = m.size AND m.kinds = 1 AND (m.n_exec = m.n OR m.n_host = m.n)
),
l AS (
    SELECT *, max(arrival_ns) OVER k AS last_arrival_ns, avg(arrival_ns) OVER k AS mean_arrival_ns,
           count(*) FILTER (WHERE TRUE) OVER k AS size,
           row_number() OVER (PARTITION BY match_key ORDER BY arrival_ns DESC) AS place
    FROM a WINDOW k AS (PARTITION BY match_key)
),
ranked AS (
    SELECT *, max(arrival_ns) FILTER (WHERE place > 1) OVER (PARTITION BY match_key) AS second_arrival_ns
    FROM l
)
SELECT rank, op_id, op, strategy, step, g, matched_by, match_key, basis, arrival_ns, last_arrival_ns,
       second_arrival_ns, last_arrival_ns - arrival_ns, arrival_ns - mean_arrival_ns,
       arrival_ns = last_arrival_ns AND second_arrival_ns < last_arrival_ns
FROM ranked;

