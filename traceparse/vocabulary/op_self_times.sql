-- op_self_times: per rank, step window and (op name, recorded input shapes), the in-window cpu_op compute intervals
-- and the shortest self time of one: its length minus its direct children's (the compute ops nested right inside it: on
-- one thread events nest). Per rank: run in the task that parsed the rank, over its placed_intervals
-- (interval_geometry.sql: compute_intervals before the tags). compute_floor.sql takes the shortest over ranks.
-- reads: op_args, placed_intervals
INSERT INTO op_self_times
WITH c AS (
    SELECT c.rank, c.step, c.ev_id, c.name, a.input_dims AS dims, c.start_ns AS s, c.end_ns AS e
    FROM placed_intervals c LEFT JOIN op_args a ON a.rank = c.rank AND a.ev_id = c.ev_id
    WHERE c.kind = 'compute' AND c.end_ns > c.start_ns AND c.in_window AND c.part = 'cpu_op'
),
-- the direct parent: on the main thread ops nest, so of the ops enclosing an op (earlier in nesting
-- order: start, then longest, then ev_id) the innermost is the last one before it, in that order, one
-- level less deep. Depth = ops before it in that order - ops ended by its start (those are disjoint
-- from it; every other op before it encloses it).
ordered AS (
    SELECT rank, ev_id, s, e, row_number() OVER (PARTITION BY rank ORDER BY s, e DESC, ev_id) AS pos FROM c
),
ended AS (SELECT rank, e, count(*) OVER (PARTITION BY rank ORDER BY e) AS n FROM c),
depth AS (
    SELECT o.rank, o.ev_id, o.pos, o.pos - 1 - coalesce(d.n, 0) AS depth
    FROM ordered o ASOF LEFT JOIN ended d ON d.rank = o.rank AND o.s >= d.e
),
parent AS (
    SELECT k.rank, k.ev_id, p.ev_id AS parent_id
    FROM depth k ASOF JOIN depth p ON p.rank = k.rank AND p.depth = k.depth - 1 AND k.pos > p.pos
),
children AS (
    SELECT p.rank, p.parent_id AS ev_id, sum(k.e - k.s) AS ns
    FROM parent p JOIN c k ON k.rank = p.rank AND k.ev_id = p.ev_id
    GROUP BY ALL
)
SELECT c.rank, c.step, c.name, c.dims, count(*), min((c.e - c.s) - coalesce(ch.ns, 0))
FROM c LEFT JOIN children ch ON ch.rank = c.rank AND ch.ev_id = c.ev_id
GROUP BY ALL;
