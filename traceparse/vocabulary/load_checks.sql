-- load_issues for impossible values the per-rank vocabulary set aside, one row per file and kind (run last, in the
-- store's build, over every rank). The parser's own (a negative duration: duration unknown) come with the file's
-- parse; these need a relation between events:
-- - a GPU activity that starts before the call that launched it (gpu_activity.sql keeps the call, not its times).
-- reads: gpu_activity, ranks
INSERT INTO load_issues
SELECT r.file, 'warning',
       n || ' GPU activit' || CASE WHEN n = 1 THEN 'y starts' ELSE 'ies start' END
         || ' before the call that launched ' || CASE WHEN n = 1 THEN 'it' ELSE 'them' END
         || ' (the CPU''s and the GPU''s clocks disagree): launch time not used (no queue, launch delay or host wait '
         || 'counted from it)',
       n
FROM (SELECT rank, count(*) AS n FROM gpu_activity WHERE launch_ev_id IS NOT NULL AND launch_ns IS NULL GROUP BY rank) g
JOIN ranks r ON r.rank = g.rank
ORDER BY r.rank;
