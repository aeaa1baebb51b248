-- The bubble check's schedule reconstruction: per rank and step window, what the main thread
-- (main_threads) runs, one row per interval (rank, step, grp, s, e, name, comm, pp), clipped to the window.
--   grp 'top'  : top-level CPU ops of the main thread, nested ops merged into their outermost one;
--                name = the outermost op; comm = it is a communication call (is_comm_call);
--                pp = a pp-tagged operation's call (comm_intervals) starts inside it
--   grp 'mark' : the main thread's schedule annotations (the vocabulary's pipeline_marks, parsed there):
--                the F, B, I, W actions and fused pairs, with stage, action, microbatch, fused, part
--   grp 'opt'  : the optimizer's annotations on the main thread (the vocabulary's optimizer_spans; not part of the
--                pipeline schedule)
--   backward   : a 'top' op is a backward frame (is_autograd_frame)
-- Compute itself is not derived here: the measured bubble uses window_totals.compute_ns.
CREATE OR REPLACE TEMP VIEW bubble_intervals AS
WITH main_ops AS (
    SELECT rank, cat, name, start_ns, end_ns FROM main_thread_ops WHERE end_ns > start_ns
    UNION ALL
    SELECT rank, 'user_annotation', name, start_ns, end_ns FROM optimizer_spans
),
clipped AS (
    SELECT o.rank, w.step, o.cat, o.name, greatest(o.start_ns, w.start_ns) AS s, least(o.end_ns, w.end_ns) AS e
    FROM main_ops o JOIN step_windows w ON w.rank = o.rank AND o.start_ns < w.end_ns AND o.end_ns > w.start_ns
    WHERE w.step IS NOT NULL
)
SELECT {'rank': rank, 'step': step} AS k, rank, step, CASE WHEN cat = 'cpu_op' THEN 'top' ELSE 'opt' END AS grp,
       name, s, e, cat = 'cpu_op' AND is_comm_call(name) AS comm
FROM clipped;

WITH top AS (
    SELECT rank, step, min(s) AS s, max(e) AS e,
           first(name ORDER BY s, e DESC) AS name, first(comm ORDER BY s, e DESC) AS comm
    FROM interval_pieces('SELECT * FROM bubble_intervals WHERE grp = ''top''', false)
    GROUP BY rank, step, piece
)
SELECT t.rank, t.step, 'top' AS grp, t.s, t.e, t.name, t.comm, is_autograd_frame(t.name) AS backward,
       EXISTS (SELECT 1 FROM comm_intervals c WHERE c.rank = t.rank AND c.part = 'call' AND c.strategy = 'pp'
               AND c.start_ns >= t.s AND c.start_ns < t.e) AS pp,
       NULL::INTEGER AS stage, NULL::VARCHAR AS action, NULL::INTEGER AS microbatch, false AS fused, 1 AS part
FROM top t
UNION ALL
SELECT rank, step, grp, s, e, name, false, false, false, NULL, NULL, NULL, false, 1 FROM bubble_intervals WHERE grp = 'opt'
UNION ALL
SELECT p.rank, w.step, 'mark', greatest(p.ts_ns, w.start_ns), least(p.ts_ns + p.dur_ns, w.end_ns), p.name, false,
       false, false, p.stage, p.action, p.microbatch, p.fused, p.part
FROM pipeline_marks p
JOIN step_windows w ON w.rank = p.rank AND p.ts_ns < w.end_ns AND p.ts_ns + p.dur_ns > w.start_ns
WHERE p.main_thread AND p.dur_ns > 0 AND w.step IS NOT NULL AND (p.fused OR p.action IN ('F', 'B', 'I', 'W'))
ORDER BY rank, step, s, e DESC, part
