-- Why a run has no GPU activity, as far as its events say (traceparse/document/gpu.py, _no_gpu_reason). A TEMP macro
-- of the connection.

-- no_gpu_kinds(unanalyzed, calls, launches): how many events of each category in ``unanalyzed`` (device work of an
-- accelerator traceparse does not analyze) there are, and as 'launch' how many runtime calls of the categories in
-- ``calls`` launched work (their names match the pattern ``launches``).
CREATE OR REPLACE TEMP MACRO no_gpu_kinds(unanalyzed, calls, launches) AS TABLE
SELECT cat, count(*) AS n FROM events WHERE list_contains(unanalyzed, cat) GROUP BY cat
UNION ALL
SELECT 'launch', count(*) FROM events WHERE list_contains(calls, cat) AND regexp_matches(name, launches);
