-- A table, not a view: the GPU section reads it a dozen times, and the window scans every event once. Built once per
-- connection (a store's data does not change once loaded): the overlap check and the GPU section both run this file.
-- hta_gpu_activity: the GPU activities HTA (0.5 and 0.6) analyzes, a variant of gpu_activity that the checks' and
-- the GPU section's HTA-compatible numbers select. HTA drops the last profiler step and what was launched outside
-- the trace: when the loaded ranks name two ProfilerStep#N or more, it keeps the activities launched before the
-- rank's latest ProfilerStep#N event starts (its GPU-side copy included, which in newer traces keeps every
-- activity); otherwise all of them.
-- reads: events, gpu_activity
CREATE TEMP TABLE IF NOT EXISTS hta_gpu_activity AS
SELECT * FROM gpu_activity
WHERE (SELECT count(DISTINCT name) FROM events WHERE is_profiler_step(name)) < 2 OR before_last_step;
