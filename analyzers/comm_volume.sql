-- comm_volume: bytes per (strategy, variant, op), and per phase, summed over ranks and profiled steps.
-- $1: the trace has profiled steps (then only operations inside their step_windows count: the complete steps)
-- $2, $3: strategies and their layout degrees
-- $4: the ranks measured through the others (cut short: model_facts.run_shape's unmeasured)
-- n = the group size: stated by the operation, else full / shard for all_gather and reduce_scatter, else the degree
-- size  = the full tensor: bytes_in, except all_gather (bytes_out, the gathered tensor)
-- bus   = per-device bytes on the wire (nccl-tests' bus bytes): all_reduce 2(n-1)/n size;
--         reduce_scatter, all_gather, all_to_all, gather, scatter (n-1)/n size; send, recv, broadcast, reduce size
-- notes = docs/parallelism.md 2's volume (bytes a device sends, ignoring (n-1)/n): all_reduce 2 size;
--         every other collective size; send size; recv 0 (the sender counts it)
WITH deg AS (SELECT unnest($2::VARCHAR[]) AS strategy, unnest($3::INTEGER[]) AS degree),
o AS (
    SELECT c.strategy, c.variant, c.op, coalesce(f.phase, 'unknown') AS phase, c.bytes_in, c.bytes_out,
           c.exec_dur_ns, r.device_name IS NOT NULL AS gpu,
           coalesce(c.group_size, len(c.group_ranks),
                    CASE c.op WHEN 'all_gather' THEN c.bytes_out // nullif(c.bytes_in, 0)
                              WHEN 'reduce_scatter' THEN c.bytes_in // nullif(c.bytes_out, 0) END, d.degree) AS n,
           CASE WHEN c.op = 'all_gather'
                THEN coalesce(c.bytes_out, c.bytes_in * coalesce(c.group_size, len(c.group_ranks), d.degree))
                ELSE c.bytes_in END AS size
    FROM comm_ops c JOIN ranks r USING (rank)
    LEFT JOIN comm_features f USING (rank, op_id)
    LEFT JOIN deg d ON d.strategy = c.strategy
    WHERE ((c.rank, c.step) IN (SELECT (rank, step) FROM step_windows) OR NOT $1)
      AND NOT list_contains($4, c.rank)
),
b AS (
    SELECT *,
           size * CASE WHEN op = 'all_reduce' THEN 2.0 * (n - 1) / n
                       WHEN op IN ('reduce_scatter', 'all_gather', 'all_to_all', 'gather', 'scatter') THEN (n - 1) / n
                       WHEN op IN ('send', 'recv', 'broadcast', 'reduce') THEN 1.0
                       WHEN op = 'barrier' THEN 0.0 END::DOUBLE AS bus,
           size * CASE WHEN op = 'all_reduce' THEN 2.0
                       WHEN op IN ('reduce_scatter', 'all_gather', 'all_to_all', 'gather', 'scatter',
                                   'send', 'broadcast', 'reduce') THEN 1.0
                       WHEN op IN ('recv', 'barrier') THEN 0.0 END::DOUBLE AS notes
    FROM o
)
SELECT coalesce(strategy, 'untagged') AS strategy, variant, op,
       CASE WHEN grouping(phase) = 1 THEN NULL ELSE phase END AS phase,
       count(*) AS count,
       sum(bytes_in) AS bytes_in, sum(bytes_out) AS bytes_out,
       sum(bus) AS bus_bytes, sum(notes) AS volume_bytes,
       count(*) FILTER (WHERE size IS NULL) AS ops_without_size,
       histogram(n) AS group_sizes,
       histogram(size) AS sizes,
       median(size / exec_dur_ns) FILTER (WHERE gpu AND exec_dur_ns > 0) AS algbw_gbps,
       median(bus / exec_dur_ns) FILTER (WHERE gpu AND exec_dur_ns > 0) AS busbw_gbps
FROM b
GROUP BY GROUPING SETS ((strategy, variant, op), (strategy, variant, op, phase))
ORDER BY strategy, variant, op, phase NULLS FIRST
