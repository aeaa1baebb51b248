-- The phases of each step: its forward/backward passes (columns of backward_passes: traceparse/store/schema.py).
-- With gradient accumulation (or a pipeline) a step runs several forward/backward passes. The step's
-- autograd frames (is_autograd_frame, store/macros.sql: on any thread) split into passes wherever
-- forward compute runs on the main thread (main_threads, when it carries ProfilerStep#N) outside every
-- autograd frame there. Forward compute is the one list below (matmuls, embeddings, convolutions,
-- attention); a recomputation inside backward is inside a frame. A pass runs from its first autograd
-- frame to its last; a call between two passes belongs to the next pass's forward.
-- reads: events, main_threads

-- pass_events (internal): the events that delimit passes, each with the pass it belongs to (the number
-- of forward breaks on the main thread before it in its step; 0: before any forward compute).
CREATE TEMP TABLE pass_events AS
WITH e AS (
    SELECT e.rank, e.tid, e.step, e.ts_ns, e.ts_ns + e.dur_ns AS end_ns,
           is_autograd_frame(e.name) AS autograd,
           m.rank IS NOT NULL AS main_thread
    FROM events e
    LEFT JOIN main_threads m ON m.rank = e.rank AND m.pid = e.pid AND m.tid = e.tid
                             AND m.chosen_by = 'ProfilerStep#N annotations'
    WHERE e.step IS NOT NULL AND e.dur_ns IS NOT NULL AND e.cat = 'cpu_op'
      AND (is_autograd_frame(e.name)
           OR e.name IN ('aten::linear', 'aten::mm', 'aten::matmul', 'aten::addmm', 'aten::bmm', 'aten::embedding',
                         'aten::convolution', 'aten::scaled_dot_product_attention'))
),
open AS (
    -- the latest end of the autograd frames that started before the event on its thread
    SELECT *, max(CASE WHEN autograd THEN end_ns END)
                  OVER (PARTITION BY rank, tid ORDER BY ts_ns, autograd DESC
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS open_until
    FROM e
)
SELECT * EXCLUDE (open_until),
       NOT autograd AND main_thread AND (open_until IS NULL OR ts_ns >= open_until) AS forward_break,
       sum(CASE WHEN NOT autograd AND main_thread AND (open_until IS NULL OR ts_ns >= open_until) THEN 1 ELSE 0 END)
           OVER (PARTITION BY rank, step ORDER BY ts_ns, autograd DESC ROWS UNBOUNDED PRECEDING) AS pass
FROM open;

INSERT INTO backward_passes
SELECT rank, step, pass, min(ts_ns), max(end_ns), count(*), count(*) FILTER (WHERE main_thread), pass > 0
FROM pass_events WHERE autograd GROUP BY rank, step, pass;
