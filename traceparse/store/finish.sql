-- After group inference: global peers and each operation's order within its group.

UPDATE comm_ops SET peer = group_ranks[peer_in_group + 1]
WHERE peer_in_group IS NOT NULL AND group_ranks IS NOT NULL AND peer IS NULL;

UPDATE comm_ops c SET group_index = o.gi
FROM (
    SELECT rank, op_id,
           row_number() OVER (PARTITION BY rank, coalesce(pg_name, list_sort(group_ranks)::VARCHAR, '?')
                              ORDER BY coalesce(host_ts_ns, exec_ts_ns), op_id) - 1 AS gi
    FROM comm_ops
) o
WHERE c.rank = o.rank AND c.op_id = o.op_id;
