-- pipeline_marks: the pipeline-schedule annotations, parsed once (columns: traceparse/store/schema.py).
-- The one grammar, on user_annotation events of any thread:
--   PP:<stage><action><mb>       torch.distributed.pipelining's actions: F, B, I (input-grad), W (weight-grad),
--                                and the others as written (SEND_F, RECV_B, ...)
--   PP:(<stage>F<mb>;<stage>B<mb>)OVERLAP_F_B   DualPipeV's fused pair: two rows, the F (part 1) then the B (part 2)
--   Forward <mb> / Backward <mb> GPipe's annotations: action F or B, no stage
-- reads: events, main_threads
CREATE TEMP TABLE mark_events AS
SELECT e.rank, e.tid, m.rank IS NOT NULL AS main_thread, e.step, e.name, e.ts_ns, e.dur_ns
FROM events e
LEFT JOIN main_threads m ON m.rank = e.rank AND m.pid = e.pid AND m.tid = e.tid
WHERE e.cat = 'user_annotation'
  AND (starts_with(e.name, 'PP:') OR regexp_full_match(e.name, '(Forward|Backward) \d+'));

INSERT INTO pipeline_marks
SELECT rank, tid, main_thread, step, name, ts_ns, dur_ns,
       regexp_extract(name, '^PP:(\d+)([A-Z_]*?)(\d+)$', 1)::INTEGER,
       nullif(regexp_extract(name, '^PP:(\d+)([A-Z_]*?)(\d+)$', 2), ''),
       regexp_extract(name, '^PP:(\d+)([A-Z_]*?)(\d+)$', 3)::INTEGER, false, 1
FROM mark_events WHERE regexp_matches(name, '^PP:(\d+)([A-Z_]*?)(\d+)$')
UNION ALL
SELECT rank, tid, main_thread, step, name, ts_ns, dur_ns, regexp_extract(name, '^PP:\((\d+)F(\d+);(\d+)B(\d+)\)OVERLAP_F_B$', 1)::INTEGER, 'F',
       regexp_extract(name, '^PP:\((\d+)F(\d+);(\d+)B(\d+)\)OVERLAP_F_B$', 2)::INTEGER, true, 1
FROM mark_events WHERE regexp_matches(name, '^PP:\((\d+)F(\d+);(\d+)B(\d+)\)OVERLAP_F_B$')
UNION ALL
SELECT rank, tid, main_thread, step, name, ts_ns, dur_ns, regexp_extract(name, '^PP:\((\d+)F(\d+);(\d+)B(\d+)\)OVERLAP_F_B$', 3)::INTEGER, 'B',
       regexp_extract(name, '^PP:\((\d+)F(\d+);(\d+)B(\d+)\)OVERLAP_F_B$', 4)::INTEGER, true, 2
FROM mark_events WHERE regexp_matches(name, '^PP:\((\d+)F(\d+);(\d+)B(\d+)\)OVERLAP_F_B$')
UNION ALL
SELECT rank, tid, main_thread, step, name, ts_ns, dur_ns, NULL, left(name, 1),
       regexp_extract(name, '^(Forward|Backward) (\d+)$', 2)::INTEGER, false, 1
FROM mark_events WHERE regexp_full_match(name, '(Forward|Backward) \d+');

DROP TABLE mark_events;
