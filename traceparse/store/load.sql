-- Staged per-rank Parquet -> store tables, with timestamps moved to the run's clock.
-- parquet_<table>: every rank's staged file of that table (build.py); stage_files: each rank's
-- staging folder, rank and clock offset.

CREATE TEMP VIEW staged_threads AS
SELECT f.rank, f.offset_ns, p.* EXCLUDE (filename) FROM parquet_threads p JOIN stage_files f ON parse_dirpath(p.filename) = f.stage;
CREATE TEMP VIEW staged_events AS
SELECT f.rank, f.offset_ns, p.* EXCLUDE (filename) FROM parquet_events p JOIN stage_files f ON parse_dirpath(p.filename) = f.stage;
CREATE TEMP VIEW staged_op_args AS
SELECT f.rank, f.offset_ns, p.* EXCLUDE (filename) FROM parquet_op_args p JOIN stage_files f ON parse_dirpath(p.filename) = f.stage;
CREATE TEMP VIEW staged_comm_args AS
SELECT f.rank, f.offset_ns, p.* EXCLUDE (filename) FROM parquet_comm_args p JOIN stage_files f ON parse_dirpath(p.filename) = f.stage;
CREATE TEMP VIEW staged_memory AS
SELECT f.rank, f.offset_ns, p.* EXCLUDE (filename) FROM parquet_memory p JOIN stage_files f ON parse_dirpath(p.filename) = f.stage;

INSERT INTO threads
SELECT rank, pid, tid, kind, label FROM staged_threads;

-- a ProfilerStep#N whose N is not a number below 2^63, or without a duration, is no step window (the
-- parser counts them in load_issues: columns.py _check_steps)
INSERT INTO steps
SELECT rank, step, start_ns, end_ns, dur_ns
FROM (SELECT rank,
             TRY_CAST(regexp_extract(name, '#(\d+)', 1) AS BIGINT) AS step,
             ts_ns + offset_ns AS start_ns,
             ts_ns + offset_ns + dur_ns AS end_ns,
             dur_ns
      FROM staged_events
      WHERE name LIKE 'ProfilerStep#%' AND coalesce(cat, '') NOT LIKE 'gpu%' AND dur_ns IS NOT NULL)
WHERE step IS NOT NULL;

INSERT INTO events
WITH e AS (
    SELECT rank, ev_id, pid, tid, cat, name, ts_ns + offset_ns AS ts_ns, dur_ns,
           external_id, correlation, stream, device
    FROM staged_events
),
names AS (
    SELECT rank, pid, tid, any_value(label) AS thread_name
    FROM threads WHERE kind = 'thread_name' GROUP BY ALL
)
SELECT e.rank, e.ev_id, e.pid, e.tid, n.thread_name, e.cat, e.name, e.ts_ns, e.dur_ns,
       e.external_id, e.correlation, e.stream, e.device,
       CASE WHEN e.ts_ns < s.end_ns THEN s.step END AS step
FROM e
ASOF LEFT JOIN steps s ON e.rank = s.rank AND e.ts_ns >= s.start_ns
LEFT JOIN names n ON e.rank = n.rank AND e.pid = n.pid AND e.tid = n.tid;

INSERT INTO op_args SELECT rank, ev_id, input_dims, input_types, concrete_inputs FROM staged_op_args;

INSERT INTO comm_args
SELECT rank, ev_id, coll_name, in_nelems, out_nelems, group_size, dtype, in_split, out_split,
       pg_name, pg_desc, pg_ranks, seq, rank_start, rank_stride, peer, source
FROM staged_comm_args;

INSERT INTO memory
SELECT rank, ts_ns + offset_ns, device_type, device_id, bytes, total_allocated, total_reserved
FROM staged_memory;

-- the staging files are deleted after the load: no view over them stays in the store
DROP VIEW staged_threads; DROP VIEW staged_events; DROP VIEW staged_op_args; DROP VIEW staged_comm_args; DROP VIEW staged_memory;
DROP VIEW parquet_threads; DROP VIEW parquet_events; DROP VIEW parquet_op_args; DROP VIEW parquet_comm_args; DROP VIEW parquet_memory;
