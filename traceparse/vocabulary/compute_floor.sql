-- The compute floor, a variant of compute derived from compute_intervals (CPU-only ranks). Each compute
-- op's self time = its length minus its direct children's (the compute ops nested right inside it: on
-- one thread events nest); per (op name, recorded input shapes) the count times the shortest self time
-- of that op on any loaded rank;
-- summed per rank and divided by the rank's step windows. Contention only ever stretches an op, so the
-- fastest instance estimates the work of every instance.
WITH c AS (
    SELECT c.rank, c.ev_id, c.name, a.input_dims AS dims, c.start_ns AS s, c.end_ns AS e
    FROM compute_intervals c LEFT JOIN op_args a ON a.rank = c.rank AND a.ev_id = c.ev_id
    WHERE c.in_window AND c.part = 'cpu_op'
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
),
self AS (
    SELECT c.rank, c.name, c.dims, (c.e - c.s) - coalesce(ch.ns, 0) AS ns
    FROM c LEFT JOIN children ch ON ch.rank = c.rank AND ch.ev_id = c.ev_id
),
-- the shortest instance of the op on any loaded rank: the same op with the same shapes is the same work
-- on every rank, and a rank's few instances may all have been stretched (a rank's own minimum over two
-- steps left balanced ranks 18% apart)
fastest AS (SELECT name, dims, min(ns) AS ns FROM self GROUP BY ALL),
floor AS (SELECT s.rank, s.name, s.dims, count(*) * any_value(f.ns) AS ns
          FROM self s JOIN fastest f ON f.name = s.name AND f.dims IS NOT DISTINCT FROM s.dims GROUP BY ALL),
windows AS (SELECT rank, count(*) AS n FROM step_windows GROUP BY rank)
SELECT f.rank, sum(f.ns) / any_value(w.n) AS floor_ns
FROM floor f JOIN windows w USING (rank)
GROUP BY f.rank
ORDER BY f.rank
