-- optimizer_spans: per rank, its main thread's optimizer annotations (is_optimizer, store/macros.sql: torch.optim's
-- Optimizer.step#<Class>.step and Optimizer.zero_grad#<Class>.zero_grad) that last, each with its start and end on the
-- run's clock. Reads events and main_threads. The bubble check leaves them out of the pipeline's schedule
-- (analyzers/bubble.sql) and what-if takes the compute inside them as the optimizer's time (whatif/measured.sql).
-- A TEMP view of the connection.
-- reads: events, main_threads
CREATE OR REPLACE TEMP VIEW optimizer_spans AS
SELECT e.rank, e.name, e.ts_ns AS start_ns, e.ts_ns + e.dur_ns AS end_ns
FROM events e JOIN main_threads m ON m.rank = e.rank AND m.pid = e.pid AND m.tid = e.tid
WHERE e.cat = 'user_annotation' AND is_optimizer(e.name) AND e.dur_ns > 0;
