-- compute_floor: the compute floor, a variant of compute (CPU-only ranks), per step window: per (op name, recorded
-- input shapes) the window's count times the shortest self time of that op on any loaded rank in any window
-- (op_self_times), summed per rank and window (0 for a window without such ops). Contention only ever stretches an op,
-- so the fastest instance estimates the work of every instance; the same op with the same shapes is the same work on
-- every rank, and a rank's few instances may all have been stretched (a rank's own minimum over two steps left balanced
-- ranks 18% apart). A rank's floor per step is the mean over its windows (compute.floor_per_rank). Only the windows of
-- step_windows count: a step left out (incomplete_steps) gives no instance.
-- reads: incomplete_steps, op_self_times, step_windows
CREATE OR REPLACE TEMP VIEW compute_floor AS
WITH kept AS (SELECT * FROM op_self_times WHERE step IS NULL OR step NOT IN (SELECT step FROM incomplete_steps)),
fastest AS (SELECT name, dims, min(min_self_ns) AS ns FROM kept GROUP BY ALL),
floor AS (SELECT s.rank, s.step, sum(s.n * f.ns) AS ns
          FROM kept s JOIN fastest f ON f.name = s.name AND f.dims IS NOT DISTINCT FROM s.dims
          GROUP BY ALL)
SELECT w.rank, w.step, coalesce(f.ns, 0) AS floor_ns
FROM step_windows w LEFT JOIN floor f ON f.rank = w.rank AND f.step IS NOT DISTINCT FROM w.step
WHERE w.rank IN (SELECT rank FROM op_self_times);
