-- incomplete_steps: the profiler steps a rank cut short did not finish (comments in schema.py), and step_windows
-- restricted to the complete steps. Crosses ranks: run by the driver (build_cross_rank) on the copied per-rank
-- step_windows, before anything selects from them. Reads ranks.kept_until_ns (a file cut off inside traceEvents:
-- up to when its events are whole) and steps (every rank's ProfilerStep#N).
--
-- A step is complete when every rank cut short has its ProfilerStep#N and that step ends by the rank's
-- kept_until_ns. An incomplete step is left out for every rank: a cross-rank number in it (a wait for the last
-- member of a collective, a straggler's cost, the step graph, the volume per step) would count what the cut rank
-- never recorded as if it had not happened.
-- reads: ranks, step_windows, steps
INSERT INTO incomplete_steps
WITH cut AS (SELECT rank, kept_until_ns FROM ranks WHERE kept_until_ns IS NOT NULL),
every_step AS (SELECT DISTINCT step FROM steps),
unfinished AS (
    SELECT a.step, c.rank, c.kept_until_ns,
           CASE WHEN s.rank IS NULL THEN 'not in what its file kept'
                ELSE 'ends after the last event its file kept' END AS why
    FROM every_step a CROSS JOIN cut c
    LEFT JOIN steps s ON s.rank = c.rank AND s.step = a.step
    WHERE s.rank IS NULL OR s.end_ns > c.kept_until_ns
)
SELECT step, arg_min(rank, rank), arg_min(kept_until_ns, rank), arg_min(why, rank)
FROM unfinished GROUP BY step;

DELETE FROM step_windows WHERE step IN (SELECT step FROM incomplete_steps);
