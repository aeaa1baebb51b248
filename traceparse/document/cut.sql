-- The analyze document's cut_short section (traceparse/document/cut.py): ranks whose file ends inside traceEvents.
-- TEMP views and macros of the connection.

-- cut_ranks: the ranks cut short, with where their record stops (kept_until_ns).
CREATE OR REPLACE TEMP VIEW cut_ranks AS
SELECT rank, file, kept_until_ns FROM ranks WHERE kept_until_ns IS NOT NULL;

-- cut_complete_steps: the profiled steps left in step_windows (complete on every rank).
CREATE OR REPLACE TEMP VIEW cut_complete_steps AS
SELECT DISTINCT step FROM step_windows WHERE step IS NOT NULL;

-- cut_where(r, t): the start of rank r's profile (its first ProfilerStep, else its first event: the start of its
-- whole-trace window) and the step whose window holds moment t (none between or after steps).
CREATE OR REPLACE TEMP MACRO cut_where(r, t) AS TABLE
SELECT coalesce((SELECT min(start_ns) FROM steps WHERE rank = r),
                (SELECT min(start_ns) FROM step_windows WHERE rank = r AND step IS NULL)) AS start_ns,
       (SELECT max(step) FROM steps WHERE rank = r AND start_ns <= t AND end_ns > t) AS step;
