-- The compute floor, a variant of compute (CPU-only ranks): per (op name, recorded input shapes) the count times
-- the shortest self time of that op on any loaded rank (op_self_times, per rank), summed per rank and divided by
-- the rank's step windows. Contention only ever stretches an op, so the fastest instance estimates the work of
-- every instance; the same op with the same shapes is the same work on every rank, and a rank's few instances may
-- all have been stretched (a rank's own minimum over two steps left balanced ranks 18% apart).
WITH fastest AS (SELECT name, dims, min(min_self_ns) AS ns FROM op_self_times GROUP BY ALL),
floor AS (SELECT s.rank, s.n * f.ns AS ns
          FROM op_self_times s JOIN fastest f ON f.name = s.name AND f.dims IS NOT DISTINCT FROM s.dims),
windows AS (SELECT rank, count(*) AS n FROM step_windows GROUP BY rank)
SELECT f.rank, sum(f.ns) / any_value(w.n) AS floor_ns
FROM floor f JOIN windows w USING (rank)
GROUP BY f.rank
ORDER BY f.rank
