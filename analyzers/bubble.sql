-- The bubble check's schedule reconstruction: per rank and step window, what the main thread
-- (main_threads) runs, one row per interval (rank, step, grp, s, e, name, comm, pp), clipped to the window.
--   grp 'top'  : top-level CPU ops of the main thread, nested ops merged into their outermost one;
--                name = the outermost op; comm = it is a communication call (is_comm_call);
--                pp = a pp-tagged operation's call (comm_intervals) starts inside it
--   grp 'mark' : schedule annotations on the main thread: PP:<stage><F|B|I|W><mb>, DualPipeV's fused
--                PP:(<stage>F<mb>;<stage>B<mb>)OVERLAP_F_B, Forward <mb>, Backward <mb>
--   grp 'opt'  : Optimizer.* annotations on the main thread (not part of the pipeline schedule)
-- Compute itself is not derived here: the measured bubble uses window_totals.compute_ns.
CREATE OR REPLACE TEMP VIEW bubble_intervals AS
WITH clipped AS (
    SELECT e.rank, w.step, e.cat, e.name,
           greatest(e.ts_ns, w.start_ns) AS s, least(e.ts_ns + e.dur_ns, w.end_ns) AS e
    FROM events e
    JOIN main_threads m ON m.rank = e.rank AND m.pid = e.pid AND m.tid = e.tid
    JOIN step_windows w ON w.rank = e.rank AND e.ts_ns < w.end_ns AND e.ts_ns + e.dur_ns > w.start_ns
    WHERE e.cat IN ('cpu_op', 'user_annotation') AND e.dur_ns > 0 AND w.step IS NOT NULL
)
SELECT {'rank': rank, 'step': step} AS k, rank, step,
       CASE WHEN cat = 'cpu_op' THEN 'top'
            WHEN regexp_full_match(name, 'PP:\d+[FBIW]\d+') OR regexp_full_match(name, '(Forward|Backward) \d+')
              OR regexp_full_match(name, 'PP:\(\d+F\d+;\d+B\d+\)OVERLAP_F_B') THEN 'mark'
            WHEN starts_with(name, 'Optimizer.') THEN 'opt' END AS grp,
       name, s, e, cat = 'cpu_op' AND is_comm_call(name) AS comm
FROM clipped;

WITH top AS (
    SELECT rank, step, min(s) AS s, max(e) AS e,
           first(name ORDER BY s, e DESC) AS name, first(comm ORDER BY s, e DESC) AS comm
    FROM interval_pieces('SELECT * FROM bubble_intervals WHERE grp = ''top''', false)
    GROUP BY rank, step, piece
)
SELECT t.rank, t.step, 'top' AS grp, t.s, t.e, t.name, t.comm,
       EXISTS (SELECT 1 FROM comm_intervals c WHERE c.rank = t.rank AND c.part = 'call' AND c.strategy = 'pp'
               AND c.start_ns >= t.s AND c.start_ns < t.e) AS pp
FROM top t
UNION ALL
SELECT rank, step, grp, s, e, name, false, false FROM bubble_intervals WHERE grp IN ('mark', 'opt')
ORDER BY rank, step, s, e DESC
