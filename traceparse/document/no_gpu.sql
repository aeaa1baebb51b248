-- Why a run has no GPU activity, as far as its events say (traceparse/document/gpu.py, _no_gpu_reason), from the
-- vocabulary's name_totals. A TEMP macro of the connection.

-- no_gpu_kinds(unanalyzed, runtime, launches): how many events of each category in ``unanalyzed`` (device work of an
-- accelerator traceparse does not analyze) there are, and as 'launch' how many runtime calls of the categories in
-- ``runtime`` launched work (their names match the pattern ``launches``).
CREATE OR REPLACE TEMP MACRO no_gpu_kinds(unanalyzed, runtime, launches) AS TABLE
SELECT cat, sum(calls)::BIGINT AS n FROM name_totals WHERE list_contains(unanalyzed, cat) GROUP BY cat
UNION ALL
SELECT 'launch', coalesce(sum(calls), 0)::BIGINT FROM name_totals
WHERE list_contains(runtime, cat) AND regexp_matches(name, launches);
