-- Point-to-point operations matched (read by the step graph, step_graph.sql, and the clocks, load/clocks.py): the
-- k-th send from a rank to a peer in a step with the k-th receive of that peer from that rank in the step (the
-- pipeline's order). One row per side, with its partner: a transfer starts when both have arrived, each at its call
-- (a send completes only once its receive is posted). A TEMP table of the connection.
-- reads: comm_ops
CREATE OR REPLACE TEMP TABLE cp_p2p AS
WITH p AS (
    SELECT rank, op_id, op, peer, step, comm_arrival_ns(op, exec_ts_ns, host_ts_ns) AS arrival_ns,
           row_number() OVER (PARTITION BY rank, op, peer, step
                              ORDER BY comm_arrival_ns(op, exec_ts_ns, host_ts_ns), op_id) AS k
    FROM comm_ops WHERE op IN ('send', 'recv') AND peer IS NOT NULL
),
pairs AS (
    SELECT s.rank AS s_rank, s.op_id AS s_op, s.arrival_ns AS s_at, r.rank AS r_rank, r.op_id AS r_op,
           r.arrival_ns AS r_at
    FROM p s JOIN p r ON s.op = 'send' AND r.op = 'recv' AND r.rank = s.peer AND r.peer = s.rank
                     AND r.step IS NOT DISTINCT FROM s.step AND r.k = s.k
)
SELECT s_rank AS rank, s_op AS op_id, r_rank AS partner, r_op AS partner_op, r_at AS partner_ns FROM pairs
UNION ALL
SELECT r_rank, r_op, s_rank, s_op, s_at FROM pairs;
