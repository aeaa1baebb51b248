-- The tables of a batch of ranks on the run's clock, in the task that parsed them (per_rank.py). clock: each file's
-- slot, rank and clock offset; raw_<table>: the parser's staged Parquet of each (traceparse/ingest/rank.py), its
-- ``rank`` the one clock gives its file (the slot itself in a task, which traceparse/store/parts.py maps; the rank
-- where a small run's store is built: per_rank.tables_in_store).
-- reads: clock, raw_comm_args, raw_events, raw_memory, raw_op_args, raw_threads

INSERT INTO threads SELECT rank, pid, tid, kind, label FROM raw_threads;

-- a ProfilerStep#N whose N is not a number below 2^63, or without a duration, is no step window (the
-- parser counts them in load_issues: columns.py _check_steps)
INSERT INTO steps
SELECT rank, step, start_ns, end_ns, dur_ns
FROM (SELECT e.rank, TRY_CAST(regexp_extract(name, '#(\d+)', 1) AS BIGINT) AS step,
             ts_ns + c.offset_ns AS start_ns,
             ts_ns + c.offset_ns + dur_ns AS end_ns,
             dur_ns
      FROM raw_events e JOIN clock c USING (rank)
      WHERE is_profiler_step(name) AND coalesce(cat, '') NOT LIKE 'gpu%' AND dur_ns IS NOT NULL)
WHERE step IS NOT NULL;

INSERT INTO events
WITH e AS (
    SELECT rank, ev_id, pid, tid, cat, name, ts_ns + c.offset_ns AS ts_ns, dur_ns,
           external_id, correlation, stream, device
    FROM raw_events JOIN clock c USING (rank)
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

INSERT INTO op_args SELECT rank, ev_id, input_dims, input_types, concrete_inputs FROM raw_op_args;

INSERT INTO comm_args
SELECT rank, ev_id, coll_name, in_nelems, out_nelems, group_size, dtype, in_split, out_split,
       pg_name, pg_desc, pg_ranks, seq, rank_start, rank_stride, peer, source
FROM raw_comm_args;

INSERT INTO memory
SELECT rank, ts_ns + c.offset_ns, device_type, device_id, bytes, total_allocated, total_reserved
FROM raw_memory JOIN clock c USING (rank);
