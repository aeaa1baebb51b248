-- Every interval of communication and compute of one rank, placed in the window its anchor falls in (before the
-- tags: intervals.sql adds each operation's strategy). Per rank: run in the task that parsed the rank
-- (per_rank.py) after derive.sql, whose kernel links (kernel_call) and operations (comm_ops) it reads.
-- reads: comm_ops, events, interval_union, kernel_call, main_threads, step_windows

-- Every interval of the two interval tables, before it is placed in a window.
CREATE TEMP TABLE vocab_raw AS
WITH
-- a GPU rank: one whose GPU did work (device_work, store/macros.sql: the ranks gpu_activity holds); its compute is its
-- kernels', a CPU rank's its main thread's ops
gpu_rank AS (SELECT DISTINCT rank FROM events WHERE device_work(cat)),
launch AS (
    SELECT rank, correlation, min(ts_ns) AS ts_ns FROM events
    WHERE cat IN ('cuda_runtime', 'cuda_driver') AND correlation IS NOT NULL GROUP BY rank, correlation
),
-- the kernels that execute communication: linked to a call, or operations of their own
comm_kernel_op AS (
    SELECT rank, k_ev AS ev_id, op_id FROM kernel_call
    UNION ALL
    SELECT rank, op_id, op_id FROM comm_ops WHERE source IN ('kernel', 'custom_kernel')
),
kernels AS (
    SELECT k.rank, k.ev_id, k.name, k.stream, k.ts_ns, k.ts_ns + k.dur_ns AS end_ns,
           coalesce(l.ts_ns, k.ts_ns) AS anchor_ns, c.op_id
    FROM events k
    LEFT JOIN launch l ON l.rank = k.rank AND l.correlation = k.correlation AND k.correlation IS NOT NULL
    LEFT JOIN comm_kernel_op c ON c.rank = k.rank AND c.ev_id = k.ev_id
    WHERE k.cat = 'kernel'
),
calls AS (
    SELECT rank, op_id, tid, host_ts_ns AS s, host_ts_ns + host_dur_ns AS e FROM comm_ops WHERE host_ts_ns IS NOT NULL
),
-- CPU events named as communication (is_comm_call) that are in no operation's call: waits and wrappers. The calls
-- of a thread never overlap (derive.sql: one per outermost call), so the one that contains an event, if any, is
-- the latest to start at or before it
waits AS (
    SELECT e.rank, e.ev_id, e.tid, e.name, e.ts_ns AS s, e.ts_ns + e.dur_ns AS e
    FROM (SELECT * FROM events
          WHERE is_comm_call(name) AND NOT device_event(cat)) e
    ASOF LEFT JOIN calls c ON c.rank = e.rank AND c.tid = e.tid AND e.ts_ns >= c.s
    WHERE NOT coalesce(e.ts_ns + e.dur_ns <= c.e, false)
),
main_cpu AS (
    SELECT e.rank, e.ev_id, e.tid, e.name, e.ts_ns AS s, e.ts_ns + e.dur_ns AS e
    FROM events e JOIN main_threads m ON m.rank = e.rank AND m.pid = e.pid AND m.tid = e.tid
    WHERE e.cat = 'cpu_op' AND e.rank NOT IN (SELECT rank FROM gpu_rank)
),
-- the main thread's communication time, merged: an op overlapping it is not compute
main_comm AS (
    SELECT k AS rank, s, e FROM interval_union(
        'SELECT c.rank AS k, c.s, c.e FROM (SELECT rank, tid, s, e FROM calls UNION ALL SELECT rank, tid, s, e FROM waits) c
         JOIN main_threads m ON m.rank = c.rank AND m.tid = c.tid')
)
SELECT 'comm' AS kind, c.rank, c.op_id, c.op_id AS ev_id, 'call' AS part, o.name, c.tid, NULL::BIGINT AS stream,
       c.s AS start_ns, c.e AS end_ns, c.s AS anchor_ns, o.exec_ts_ns IS NULL AS counted
FROM calls c JOIN comm_ops o USING (rank, op_id)
UNION ALL
SELECT 'comm', rank, NULL, ev_id, 'wait', name, tid, NULL, s, e, s, false FROM waits
UNION ALL
SELECT 'comm', rank, op_id, ev_id, 'exec', name, NULL, stream, ts_ns, end_ns, anchor_ns, true FROM kernels WHERE op_id IS NOT NULL
UNION ALL
-- gloo: the worker thread's annotation (its event is not kept: NULL ev_id)
SELECT 'comm', rank, op_id, NULL, 'exec', kernel, exec_stream, NULL, exec_ts_ns, exec_ts_ns + exec_dur_ns, exec_ts_ns, true
FROM comm_ops
WHERE exec_ts_ns IS NOT NULL AND source NOT IN ('kernel', 'custom_kernel')
  AND (rank, op_id) NOT IN (SELECT (rank, op_id) FROM kernel_call)
UNION ALL
SELECT 'compute', rank, NULL, ev_id, 'kernel', name, NULL, stream, ts_ns, end_ns, anchor_ns, true FROM kernels WHERE op_id IS NULL
UNION ALL
SELECT 'compute', o.rank, NULL, o.ev_id, 'cpu_op', o.name, o.tid, NULL, o.s, o.e, o.s, true
FROM main_cpu o
ASOF LEFT JOIN main_comm c ON c.rank = o.rank AND o.e > c.s
WHERE c.rank IS NULL OR c.e <= o.s;

-- Each interval belongs to the window its anchor falls in (its start; a GPU kernel's launch).
CREATE TEMP TABLE placed_intervals AS
SELECT v.*, w.step, w.rank IS NOT NULL AND v.anchor_ns < w.end_ns AS in_window
FROM vocab_raw v ASOF LEFT JOIN step_windows w ON w.rank = v.rank AND v.anchor_ns >= w.start_ns;

DROP TABLE vocab_raw;
