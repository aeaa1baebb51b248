-- main_thread_ops: each rank's CPU ops (cat cpu_op) on its main thread (main_threads), with their start and end on
-- the run's clock. Reads events and main_threads. The bubble check rebuilds a stage's schedule from those that last
-- (analyzers/bubble.sql); the model facts read what the optimizer's step ran (layout/model_facts.sql). A TEMP view of
-- the connection.
-- reads: events, main_threads
CREATE OR REPLACE TEMP VIEW main_thread_ops AS
SELECT e.rank, e.cat, e.name, e.ts_ns AS start_ns, e.ts_ns + e.dur_ns AS end_ns
FROM events e JOIN main_threads m ON m.rank = e.rank AND m.pid = e.pid AND m.tid = e.tid
WHERE e.cat = 'cpu_op';
