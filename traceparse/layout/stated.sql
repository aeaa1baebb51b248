-- What the layout and tag sections of a report (traceparse/layout/stated.py) read of a store: the ranks a node holds
-- and the tagged collectives summed per strategy, variant and op. TEMP views of the connection (store.query.define).

-- layout_ranks_per_node: the ranks of the fullest host, when every rank names its host.
CREATE OR REPLACE TEMP VIEW layout_ranks_per_node AS
SELECT CASE WHEN count(host) = count(*) THEN max(n) END AS per_node
FROM (SELECT host, count(*) AS n FROM ranks GROUP BY host);

-- layout_collectives: per (strategy, variant, op), the operations, their known input bytes and time per rank per
-- complete profiled step (every operation when the run has no steps); ops_without_size: those of unknown size.
CREATE OR REPLACE TEMP VIEW layout_collectives AS
WITH n AS (SELECT (SELECT count(*) FROM ranks) AS ranks,
                  greatest((SELECT count(DISTINCT step) FROM step_windows), 1) AS steps,
                  (SELECT count(*) > 0 FROM steps) AS stepped)
SELECT coalesce(strategy, 'untagged') AS strategy, variant, op,
       round(count(*) / any_value(n.ranks * n.steps), 3) AS count,
       -- NULL when no operation has a known size, else the sum of the known ones (ops_without_size: the rest)
       round(sum(bytes_in) / any_value(n.ranks * n.steps)) AS input_bytes_per_rank_per_step,
       round(sum(coalesce(exec_dur_ns, host_dur_ns)) / any_value(n.ranks * n.steps)) AS time_per_rank_per_step_ns,
       count(*) FILTER (WHERE bytes_in IS NULL) AS ops_without_size,
       any_value(rule_id) AS rule_id
FROM comm_ops, n
WHERE (rank, step) IN (SELECT (rank, step) FROM step_windows) OR NOT n.stepped
GROUP BY 1, 2, 3;

-- layout_untagged: the operations no rule tagged and their time, against all.
CREATE OR REPLACE TEMP VIEW layout_untagged AS
SELECT count(*) FILTER (WHERE strategy IS NULL) AS ops, count(*) AS all_ops,
       coalesce(sum(coalesce(exec_dur_ns, host_dur_ns)) FILTER (WHERE strategy IS NULL), 0) AS time_ns,
       coalesce(sum(coalesce(exec_dur_ns, host_dur_ns)), 0) AS all_time_ns
FROM comm_ops;

-- layout_tags: per (strategy, variant, op, rule, confidence), its operations, ranks, a group, bytes and time.
CREATE OR REPLACE TEMP VIEW layout_tags AS
SELECT coalesce(strategy, 'untagged') AS strategy, variant, op, rule_id, confidence,
       count(*) AS ops, count(DISTINCT rank) AS ranks, list_sort(any_value(group_ranks))::VARCHAR AS a_group,
       sum(bytes_in)::BIGINT AS bytes_in, count(*) FILTER (WHERE bytes_in IS NULL) AS ops_without_size,
       sum(coalesce(exec_dur_ns, host_dur_ns))::BIGINT AS time_ns
FROM comm_ops GROUP BY ALL;
