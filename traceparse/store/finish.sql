-- After group inference: global peers and each operation's order within its group.

UPDATE comm_ops SET peer = group_ranks[peer_in_group + 1]
WHERE peer_in_group IS NOT NULL AND group_ranks IS NOT NULL AND peer IS NULL;

UPDATE comm_ops c SET group_index = o.gi
FROM (
    SELECT rank, op_id,
           row_number() OVER (PARTITION BY rank, group_key(group_ranks, pg_name)
                              ORDER BY coalesce(host_ts_ns, exec_ts_ns), op_id) - 1 AS gi
    FROM comm_ops
) o
WHERE c.rank = o.rank AND c.op_id = o.op_id;

-- Sizes from other ranks. An all_reduce, broadcast or reduce moves a tensor of the same size and type
-- on every member of its group; when this rank's records give none, another loaded member's copy of
-- the same operation does: the one with the same seq, else the k-th of the group in the same profiler
-- step, when both ranks ran the same sequence of operations in that group and step (collectives of
-- one group are issued in the same order on every member). Only an unambiguous size is taken.
CREATE TEMP TABLE peer_key AS
WITH k AS (
    SELECT rank, op_id, op, seq, step, group_ranks, dtype, in_nelems, out_nelems, bytes_in,
           group_key(group_ranks, pg_name) AS g,
           coalesce(host_ts_ns, exec_ts_ns) AS t
    FROM comm_ops WHERE group_ranks IS NOT NULL
),
steps AS (
    SELECT rank, g, step, string_agg(op, ',' ORDER BY t, op_id) AS step_ops
    FROM k WHERE step IS NOT NULL GROUP BY rank, g, step
)
SELECT k.*, s.step_ops,
       row_number() OVER (PARTITION BY k.rank, k.g, k.step ORDER BY k.t, k.op_id) AS k_in_step
FROM k LEFT JOIN steps s ON s.rank = k.rank AND s.g = k.g AND s.step = k.step;

UPDATE comm_ops c
SET in_nelems = p.in_nelems, out_nelems = p.out_nelems, dtype = p.dtype, elem_bytes = dtype_bytes(p.dtype),
    bytes_in = p.in_nelems * dtype_bytes(p.dtype), bytes_out = p.out_nelems * dtype_bytes(p.dtype),
    size_source = 'peer ranks'
FROM (
    SELECT a.rank, a.op_id, any_value(b.in_nelems) AS in_nelems, any_value(b.out_nelems) AS out_nelems,
           any_value(b.dtype) AS dtype
    FROM peer_key a
    JOIN peer_key b ON b.g = a.g AND b.rank != a.rank AND b.op = a.op AND list_contains(a.group_ranks, b.rank)
                   AND CASE WHEN a.seq IS NOT NULL AND b.seq IS NOT NULL THEN a.seq = b.seq
                            ELSE a.step = b.step AND a.k_in_step = b.k_in_step AND a.step_ops = b.step_ops END
    WHERE a.op IN ('all_reduce', 'broadcast', 'reduce') AND a.bytes_in IS NULL AND b.bytes_in IS NOT NULL
      AND (a.dtype IS NULL OR dtype_bytes(a.dtype) = dtype_bytes(b.dtype))
      AND (a.in_nelems IS NULL OR a.in_nelems = b.in_nelems)
    GROUP BY a.rank, a.op_id
    HAVING count(DISTINCT (b.in_nelems, b.out_nelems, dtype_bytes(b.dtype))) = 1
) p
WHERE c.rank = p.rank AND c.op_id = p.op_id;

-- What stays without a size, and why: one load issue per file.
INSERT INTO load_issues
WITH gaps AS (
    SELECT c.rank, c.op,
           g.why || CASE WHEN c.op NOT IN ('all_reduce', 'broadcast', 'reduce') THEN ''
                         WHEN c.group_ranks IS NULL THEN ', its process group unknown (no other rank to read it from)'
                         ELSE ', no copy with a size on another loaded rank of its group' END AS why,
           count(*) AS n
    FROM comm_ops c JOIN size_gap g ON g.rank = c.rank AND g.op_id = c.op_id
    WHERE c.bytes_in IS NULL
    GROUP BY ALL
)
SELECT r.file, 'info',
       string_agg(n || ' ' || op || CASE WHEN n = 1 THEN ' operation carries' ELSE ' operations carry' END
                  || ' no size: ' || why, '; ' ORDER BY n DESC, op, why),
       sum(n)
FROM gaps JOIN ranks r ON r.rank = gaps.rank
GROUP BY r.file;
