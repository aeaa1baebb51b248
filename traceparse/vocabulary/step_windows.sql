-- step_windows: one per ProfilerStep#N; one whole-trace window (step NULL) for a rank without.
-- reads: events, steps
INSERT INTO step_windows
SELECT rank, step, start_ns, end_ns, dur_ns, 'ProfilerStep#N' FROM steps
UNION ALL
SELECT rank, NULL, min(ts_ns), max(ts_ns + dur_ns), max(ts_ns + dur_ns) - min(ts_ns), 'whole trace (no ProfilerStep#N)'
FROM events WHERE rank NOT IN (SELECT rank FROM steps) GROUP BY rank;
