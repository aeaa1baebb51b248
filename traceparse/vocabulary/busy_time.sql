-- Busy time per lane (a CPU thread or a GPU stream), from events, gpu_activity and step_windows. Per rank: run in the
-- task that parsed the rank (per_rank.py), after gpu_activity.sql, into the store's lane_busy, which the document's
-- summary reads (traceparse/document/summary.py, the busy table); gpu_lanes and lane_work are TEMP objects of the
-- task's connection.
-- reads: events, gpu_activity, interval_union_ns, step_windows

-- lane_work: what each lane of a rank works at, event by event. A lane holding an event the profiler records on a
-- GPU's stream (store/macros.sql device_event) is a GPU stream, and its work is its device work: its rows of
-- gpu_activity (kernels, memcpys, memsets; device_work), the rows the GPU section's busy and idle select
-- (gpu_time.sql), so a gpu_user_annotation (a label over work) or a cuda_sync (a wait) is no work in either. Every
-- other lane is a CPU thread, and its work is each of its events with a duration, but the ProfilerStep#N marker.
-- events: the lane's events of that kind (a GPU stream: its device work; a CPU thread: every event it records).
CREATE OR REPLACE TEMP TABLE gpu_lanes AS
SELECT DISTINCT rank, pid, tid FROM events WHERE device_event(cat);

CREATE OR REPLACE TEMP VIEW lane_work AS
SELECT e.rank, e.pid, e.tid, 'gpu stream' AS kind, a.start_ns AS s, a.end_ns AS e
FROM gpu_activity a JOIN events e ON e.rank = a.rank AND e.ev_id = a.ev_id
UNION ALL
SELECT e.rank, e.pid, e.tid, 'cpu thread', e.ts_ns, e.ts_ns + e.dur_ns
FROM events e ANTI JOIN gpu_lanes g ON g.rank = e.rank AND g.pid = e.pid AND g.tid = e.tid
WHERE e.dur_ns > 0 AND NOT is_profiler_step(e.name);

-- lane_busy: per lane, the length of the union of its work inside the rank's profiled span (its first step window's
-- start to its last one's end; nested and overlapping work once), and its share of that span.
INSERT INTO lane_busy
WITH span AS (SELECT rank, min(start_ns) AS w_start, max(end_ns) AS w_end FROM step_windows GROUP BY rank),
u AS (
    SELECT k.rank, k.pid, k.tid, k.kind, ns::BIGINT AS busy_ns FROM interval_union_ns(
        'SELECT {''rank'': l.rank, ''pid'': l.pid, ''tid'': l.tid, ''kind'': l.kind} AS k,
                greatest(l.s, w.w_start) AS s, least(l.e, w.w_end) AS e
         FROM lane_work l
         JOIN (SELECT rank, min(start_ns) AS w_start, max(end_ns) AS w_end FROM step_windows GROUP BY rank) w
           ON w.rank = l.rank
         WHERE l.s < w.w_end AND l.e > w.w_start AND l.e > l.s')
),
lanes AS (
    SELECT e.rank, e.pid, e.tid, any_value(e.thread_name) AS thread_name,
           CASE WHEN g.rank IS NULL THEN 'cpu thread' ELSE 'gpu stream' END AS kind,
           count(*) FILTER (WHERE g.rank IS NULL OR device_work(e.cat)) AS events
    FROM events e LEFT JOIN gpu_lanes g ON g.rank = e.rank AND g.pid = e.pid AND g.tid = e.tid
    GROUP BY e.rank, e.pid, e.tid, g.rank
)
SELECT u.rank, u.pid, u.tid, l.thread_name, u.kind, l.events, u.busy_ns,
       round(u.busy_ns / nullif(w.w_end - w.w_start, 0), 4) AS busy_fraction
FROM u JOIN lanes l USING (rank, pid, tid) JOIN span w USING (rank);
