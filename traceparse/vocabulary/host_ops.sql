-- host_ops: each rank's CPU ops and annotations (cat cpu_op, user_annotation) on every thread, with their start, end
-- and profiled step on the run's clock. Reads events. Tagging reads the framework context around each communication
-- call from it (tagging/features.sql), and history the CPU ops each step ran (history/kernel_diff.py).
-- thread_names: each thread's name as its trace names it (threads' thread_name metadata), per rank.
-- TEMP views of the connection.
-- reads: events, threads
CREATE OR REPLACE TEMP VIEW host_ops AS
SELECT rank, ev_id, pid, tid, cat, name, ts_ns, ts_ns + dur_ns AS end_ns, dur_ns, step
FROM events WHERE cat IN ('cpu_op', 'user_annotation');

CREATE OR REPLACE TEMP VIEW thread_names AS
SELECT rank, tid, any_value(label) AS thread_name FROM threads WHERE kind = 'thread_name' GROUP BY ALL;
