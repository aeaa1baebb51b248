-- Where a GPU's time goes, from gpu_activity (built per rank, gpu_activity.sql): busy computing, busy otherwise
-- (communication, memcpy, memset), or idle, and when idle, waiting on what. Run on a store by the document's GPU
-- section (traceparse/document/gpu.py); each object is a TEMP view or table of the connection.
-- reads: events, gpu_activity, host_cause, hta_gpu_activity, interval_intersect, step_windows

-- The span of each profiled step on the GPU. Steps tile the GPU's timeline: step N's span runs from the end of the
-- GPU work of the steps before it (the first step: its own first activity) to the end of its own, so a gap before
-- a step's first kernel (the GPU waiting for the next batch) belongs to that step. An activity belongs to the step
-- its launch falls in (gpu_activity.step). A rank without ProfilerStep#N has one span, step NULL: its whole trace
-- (its step window, step_windows), as the critical path's.
CREATE OR REPLACE TEMP TABLE gpu_step_spans AS
WITH per_step AS (
    SELECT rank, step, min(start_ns) AS first_ns, max(end_ns) AS last_ns
    FROM gpu_activity
    WHERE in_window AND (step IS NOT NULL OR rank NOT IN (SELECT rank FROM step_windows WHERE step IS NOT NULL))
    GROUP BY rank, step
),
bounds AS (
    SELECT rank, step, first_ns,
           max(last_ns) OVER (PARTITION BY rank ORDER BY step ROWS UNBOUNDED PRECEDING) AS end_ns
    FROM per_step
)
SELECT rank, step, least(coalesce(lag(end_ns) OVER (PARTITION BY rank ORDER BY step), first_ns), end_ns) AS start_ns,
       end_ns
FROM bounds;

-- The spans the temporal breakdown reports: each step's (scope 'step') and HTA's kernel span per rank (scope
-- 'hta', step NULL): from its window's first activity's start to the last one's end.
CREATE OR REPLACE TEMP TABLE gpu_spans AS
SELECT rank, step, 'step' AS scope, start_ns, end_ns FROM gpu_step_spans
UNION ALL
SELECT rank, NULL, 'hta', min(start_ns), max(end_ns) FROM hta_gpu_activity GROUP BY rank;

-- The busy pieces of each span: the union of every activity (any stream, whatever step launched it) in the span
-- (HTA's span: only HTA's activities), and those of compute kernels.
CREATE OR REPLACE TEMP TABLE gpu_span_keys AS
SELECT {'rank': rank, 'step': step, 'scope': scope} AS k, rank AS g, start_ns AS s, end_ns AS e
FROM gpu_spans WHERE end_ns > start_ns;

CREATE OR REPLACE TEMP TABLE gpu_busy AS
SELECT k.rank, k.step, k.scope, 'all' AS part, s, e FROM interval_intersect(
    'SELECT k, g, s, e FROM gpu_span_keys WHERE k.scope = ''step''',
    'SELECT rank AS k, start_ns AS s, end_ns AS e FROM gpu_activity')
UNION ALL
SELECT k.rank, k.step, k.scope, 'compute', s, e FROM interval_intersect(
    'SELECT k, g, s, e FROM gpu_span_keys WHERE k.scope = ''step''',
    'SELECT rank AS k, start_ns AS s, end_ns AS e FROM gpu_activity WHERE kind = ''compute''')
UNION ALL
SELECT k.rank, k.step, k.scope, 'all', s, e FROM interval_intersect(
    'SELECT k, g, s, e FROM gpu_span_keys WHERE k.scope = ''hta''',
    'SELECT rank AS k, start_ns AS s, end_ns AS e FROM hta_gpu_activity')
UNION ALL
SELECT k.rank, k.step, k.scope, 'compute', s, e FROM interval_intersect(
    'SELECT k, g, s, e FROM gpu_span_keys WHERE k.scope = ''hta''',
    'SELECT rank AS k, start_ns AS s, end_ns AS e FROM hta_gpu_activity WHERE kind = ''compute''');

-- gpu.temporal: per span, idle = span - busy, compute = the compute pieces, non_compute = busy - compute.
CREATE OR REPLACE TEMP TABLE gpu_temporal AS
WITH busy AS (
    SELECT rank, step, scope, sum(e - s) FILTER (WHERE part = 'all') AS busy_ns,
           coalesce(sum(e - s) FILTER (WHERE part = 'compute'), 0) AS compute_ns
    FROM gpu_busy GROUP BY rank, step, scope
)
SELECT s.rank, s.step, s.scope, s.end_ns - s.start_ns AS span_ns,
       (s.end_ns - s.start_ns - coalesce(b.busy_ns, 0))::BIGINT AS idle_ns, coalesce(b.compute_ns, 0)::BIGINT AS compute_ns,
       (coalesce(b.busy_ns, 0) - coalesce(b.compute_ns, 0))::BIGINT AS non_compute_ns
FROM gpu_spans s LEFT JOIN busy b ON b.rank = s.rank AND b.scope = s.scope AND b.step IS NOT DISTINCT FROM s.step;

-- gpu.idle, HTA's idle time breakdown (get_idle_time_breakdown): per stream, each activity's gap since the end of
-- the one before it on the stream (in start order) is host wait when it was launched after that end (the CPU had
-- not yet asked for it), else kernel wait when shorter than 30 us (HTA's consecutive_kernel_delay of 30, compared with its microsecond times: back-to-back
-- launch overhead), else other (queued, but waiting on something else: an event, another stream, a peer).
-- Activities that overlap on one stream (programmatic dependent launch, or timestamps that disagree) give HTA's
-- sums a negative gap. Where that makes a stream's idle or one of its categories negative (impossible), the
-- stream's gaps are measured instead from the latest end before each activity, none below 0 (an overlap is no
-- idle time), and gpu_stream_clipped says so (the document's load_issues); elsewhere HTA's numbers stand.
CREATE OR REPLACE TEMP TABLE gpu_stream_gaps AS
WITH g AS (
    SELECT rank, stream, start_ns, launch_ns,
           lag(end_ns) OVER (PARTITION BY rank, stream ORDER BY start_ns, end_ns) AS prev_end,
           max(end_ns) OVER (PARTITION BY rank, stream ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM hta_gpu_activity
),
c AS (
    SELECT rank, stream, start_ns - prev_end AS gap_ns, greatest(start_ns - reach, 0) AS free_ns,
           CASE WHEN launch_ns > prev_end THEN 'host_wait' WHEN start_ns - prev_end < 30000 THEN 'kernel_wait'
                ELSE 'other' END AS category,
           CASE WHEN launch_ns > reach THEN 'host_wait' WHEN start_ns - reach < 30000 THEN 'kernel_wait'
                ELSE 'other' END AS free_category
    FROM g WHERE prev_end IS NOT NULL
)
SELECT rank, stream,
       coalesce(sum(gap_ns) FILTER (WHERE category = 'host_wait'), 0)::BIGINT AS host_wait_ns,
       coalesce(sum(gap_ns) FILTER (WHERE category = 'kernel_wait'), 0)::BIGINT AS kernel_wait_ns,
       coalesce(sum(gap_ns) FILTER (WHERE category = 'other'), 0)::BIGINT AS other_ns,
       sum(gap_ns)::BIGINT AS idle_ns,
       coalesce(sum(free_ns) FILTER (WHERE free_category = 'host_wait'), 0)::BIGINT AS free_host_wait_ns,
       coalesce(sum(free_ns) FILTER (WHERE free_category = 'kernel_wait'), 0)::BIGINT AS free_kernel_wait_ns,
       coalesce(sum(free_ns) FILTER (WHERE free_category = 'other'), 0)::BIGINT AS free_other_ns,
       sum(free_ns)::BIGINT AS free_idle_ns,
       count(*) FILTER (WHERE gap_ns < 0) AS overlapping
FROM c GROUP BY rank, stream;

CREATE OR REPLACE TEMP TABLE gpu_stream_clipped AS
SELECT rank, stream, overlapping, kernel_wait_ns AS signed_kernel_wait_ns, idle_ns AS signed_idle_ns
FROM gpu_stream_gaps WHERE least(host_wait_ns, kernel_wait_ns, other_ns, idle_ns) < 0;

CREATE OR REPLACE TEMP TABLE gpu_stream_idle AS
SELECT g.rank, g.stream,
       CASE WHEN c.rank IS NULL THEN host_wait_ns ELSE free_host_wait_ns END AS host_wait_ns,
       CASE WHEN c.rank IS NULL THEN kernel_wait_ns ELSE free_kernel_wait_ns END AS kernel_wait_ns,
       CASE WHEN c.rank IS NULL THEN other_ns ELSE free_other_ns END AS other_ns,
       CASE WHEN c.rank IS NULL THEN idle_ns ELSE free_idle_ns END AS idle_ns
FROM gpu_stream_gaps g LEFT JOIN gpu_stream_clipped c ON c.rank = g.rank AND c.stream = g.stream;

-- Each moment of a step's span when no stream of the GPU is busy (a gap between busy pieces), with the activity
-- that ends it and the call that launched that activity: its start (launch_ns), end (launch_end_ns), thread and
-- event (launch_ev_id).
CREATE OR REPLACE TEMP TABLE gpu_gaps AS
WITH pieces AS (
    SELECT rank, step, s, e, lag(e) OVER (PARTITION BY rank, step ORDER BY s) AS prev_e
    FROM gpu_busy WHERE scope = 'step' AND part = 'all'
),
gaps AS (
    SELECT p.rank, p.step, coalesce(p.prev_e, sp.start_ns) AS a, p.s AS b
    FROM pieces p JOIN gpu_step_spans sp ON sp.rank = p.rank AND sp.step IS NOT DISTINCT FROM p.step
    WHERE p.s > coalesce(p.prev_e, sp.start_ns)
),
next AS (
    SELECT rank, start_ns, n.launch_ns, n.launch_end_ns, n.launch_ev_id, n.pid, n.tid
    FROM (SELECT rank, start_ns,
                 arg_min({'launch_ns': launch_ns, 'launch_end_ns': coalesce(launch_end_ns, launch_ns),
                          'launch_ev_id': launch_ev_id, 'pid': launch_pid, 'tid': launch_tid},
                         (coalesce(launch_ns, 9223372036854775807), launch_pid, launch_tid, launch_ev_id)) AS n
          FROM gpu_activity GROUP BY rank, start_ns)
)
SELECT row_number() OVER (ORDER BY g.rank, g.b, g.a) AS gap_id, g.rank, g.step, g.a, g.b, n.launch_ns,
       n.launch_end_ns, n.launch_ev_id, n.pid, n.tid
FROM gaps g JOIN next n ON n.rank = g.rank AND n.start_ns = g.b;

-- What each thread that launches GPU work was doing at each moment, as disjoint pieces named by one CPU event (not
-- the ProfilerStep#N annotation): the outermost event whose name gives a cause of its own (host_cause: a DataLoader,
-- the optimizer, a synchronization, a communication call), so that a wrapper around the whole step does not hide
-- it; elsewhere the outermost event.
CREATE OR REPLACE TEMP TABLE launcher_ops AS
WITH threads AS (SELECT DISTINCT rank, pid, tid FROM gpu_gaps WHERE tid IS NOT NULL),
ops AS (
    SELECT e.rank, e.pid, e.tid, e.name, host_cause(e.name) <> 'cpu_op' AS named, e.ts_ns AS s, e.ts_ns + e.dur_ns AS e,
           e.ev_id
    FROM events e SEMI JOIN threads t ON t.rank = e.rank AND t.pid = e.pid AND t.tid = e.tid
    WHERE thread_work(e.cat, e.name, e.dur_ns)
),
tiers AS (SELECT *, 'all' AS tier FROM ops UNION ALL SELECT *, 'named' FROM ops WHERE named),
outermost AS (
    SELECT * FROM (
        SELECT *, max(e) OVER (PARTITION BY tier, rank, pid, tid ORDER BY s, e DESC, ev_id
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
        FROM tiers)
    WHERE prev_end IS NULL OR s >= prev_end
),
points AS (SELECT DISTINCT rank, pid, tid, unnest([s, e]) AS t FROM outermost),
pieces AS (
    SELECT rank, pid, tid, t AS s, lead(t) OVER (PARTITION BY rank, pid, tid ORDER BY t) AS e FROM points
),
named AS (
    SELECT p.*, o.name AS n_name, o.e AS n_end FROM pieces p
    ASOF LEFT JOIN (SELECT * FROM outermost WHERE tier = 'named') o
        ON o.rank = p.rank AND o.pid = p.pid AND o.tid = p.tid AND p.s >= o.s
    WHERE p.e IS NOT NULL
),
labelled AS (
    SELECT n.*, o.name AS a_name, o.e AS a_end FROM named n
    ASOF LEFT JOIN (SELECT * FROM outermost WHERE tier = 'all') o
        ON o.rank = n.rank AND o.pid = n.pid AND o.tid = n.tid AND n.s >= o.s
)
SELECT rank, pid, tid, CASE WHEN n_end >= e THEN n_name ELSE a_name END AS name, s, e,
       row_number() OVER (PARTITION BY rank, pid, tid ORDER BY s) AS i
FROM labelled WHERE n_end >= e OR a_end >= e;

-- gpu.idle_causes: each gap [a, b] split by what kept the GPU waiting, from the call [L, E] that launched the activity
-- starting at b. Its launch call began after the GPU went idle (L > a): [a, L] is the host's, named by what the
-- launching thread was doing at each moment (launcher_ops, host_cause; 'python' where the thread ran no recorded op:
-- the training loop's own code, named by its innermost Python frame when stacks were recorded and no op covers the
-- wait). While the launch call runs, [max(a, L), min(E, b)], the host is launching: 'launch_call', named by the call.
-- From its end to the start, [max(a, E), b], the work is launched and not yet started: 'launch' (launch latency, the
-- queue). Launched before the GPU went idle (E <= a): 'device' (queued work waiting on a dependency: an event,
-- another device, a peer). No launch in the trace: 'unknown'. The parts of a gap add up to b - a.
CREATE OR REPLACE TEMP TABLE gpu_idle_parts AS
WITH host AS (
    SELECT gap_id, rank, step, pid, tid, a, least(launch_ns, b) AS h FROM gpu_gaps WHERE launch_ns > a
),
first_op AS (SELECT h.*, o.i AS i0 FROM host h ASOF LEFT JOIN launcher_ops o
             ON o.rank = h.rank AND o.pid = h.pid AND o.tid = h.tid AND h.a >= o.s),
last_op AS (SELECT f.*, o.i AS i1 FROM first_op f ASOF LEFT JOIN launcher_ops o
            ON o.rank = f.rank AND o.pid = f.pid AND o.tid = f.tid AND f.h > o.s),
meets AS (SELECT *, unnest(range(coalesce(i0, 1), i1 + 1)) AS i FROM last_op WHERE i1 IS NOT NULL),
covered AS (
    SELECT m.gap_id, m.rank, m.step, o.name, least(m.h, o.e) - greatest(m.a, o.s) AS ns
    FROM meets m JOIN launcher_ops o ON o.rank = m.rank AND o.pid = m.pid AND o.tid = m.tid AND o.i = m.i
    WHERE o.e > m.a AND o.s < m.h
),
-- a moment with no op on the thread, when Python stacks were recorded (with_stack=True): the innermost Python frame
-- around the middle of a host wait that no op covers at all
uncovered AS (
    SELECT h.*, h.h - h.a - coalesce(c.ns, 0) AS ns, c.ns IS NULL AS bare
    FROM host h LEFT JOIN (SELECT gap_id, sum(ns) AS ns FROM covered GROUP BY gap_id) c USING (gap_id)
    WHERE h.h - h.a - coalesce(c.ns, 0) > 0
),
frame AS (
    SELECT u.gap_id, arg_max(e.name, (e.ts_ns, e.name)) AS name
    FROM uncovered u JOIN events e ON e.rank = u.rank AND e.pid = u.pid AND e.tid = u.tid
    WHERE u.bare AND e.cat = 'python_function' AND e.ts_ns <= (u.a + u.h) // 2 AND e.ts_ns + e.dur_ns >= (u.a + u.h) // 2
    GROUP BY u.gap_id
)
SELECT rank, step, host_cause(name) AS cause, name, ns FROM covered
UNION ALL
SELECT u.rank, u.step, 'python', f.name, u.ns FROM uncovered u LEFT JOIN frame f USING (gap_id)
UNION ALL
SELECT g.rank, g.step, 'launch_call', c.name, least(g.launch_end_ns, g.b) - greatest(g.launch_ns, g.a)
FROM gpu_gaps g LEFT JOIN events c ON c.rank = g.rank AND c.ev_id = g.launch_ev_id
WHERE g.launch_ns IS NOT NULL AND least(g.launch_end_ns, g.b) > greatest(g.launch_ns, g.a)
UNION ALL
SELECT rank, step, 'launch', NULL, b - launch_end_ns FROM gpu_gaps WHERE launch_end_ns > a AND launch_end_ns < b
UNION ALL
SELECT rank, step, 'device', NULL, b - a FROM gpu_gaps WHERE launch_end_ns <= a
UNION ALL
SELECT rank, step, 'unknown', NULL, b - a FROM gpu_gaps WHERE launch_ns IS NULL;

-- gpu.launch: per rank over HTA's window, each launched activity's launch delay (from the end of its launching
-- call to its start on the GPU, 0 when it starts before), as HTA's get_cuda_kernel_launch_stats.
CREATE OR REPLACE TEMP TABLE gpu_launches AS
SELECT rank, stream, launch_ev_id, start_ns, end_ns - start_ns AS gpu_ns, launch_end_ns - launch_ns AS cpu_ns,
       greatest(start_ns - launch_end_ns, 0) AS delay_ns
FROM hta_gpu_activity WHERE launch_ns IS NOT NULL;

-- gpu.queue: per stream over HTA's window, the queue length (activities launched and not yet started, HTA's
-- counter), and when the stream runs dry: nothing queued and nothing running between its first start and last end.
CREATE OR REPLACE TEMP TABLE gpu_queue AS
WITH changes AS (
    SELECT rank, stream, launch_ns AS ts, 1 AS dq, 0 AS dr, 0 AS ord FROM hta_gpu_activity WHERE launch_ns IS NOT NULL
    UNION ALL
    SELECT rank, stream, start_ns, CASE WHEN launch_ns IS NOT NULL THEN -1 ELSE 0 END, 1, 1 FROM hta_gpu_activity
    UNION ALL
    SELECT rank, stream, end_ns, 0, -1, 2 FROM hta_gpu_activity
),
state AS (
    SELECT rank, stream, ts, dq,
           sum(dq) OVER w AS queued, sum(dr) OVER w AS running,
           lead(ts) OVER w AS next_ts
    FROM changes
    WINDOW w AS (PARTITION BY rank, stream ORDER BY ts, ord ROWS UNBOUNDED PRECEDING)
),
bounds AS (SELECT rank, stream, min(start_ns) AS first_ns, max(end_ns) AS last_ns FROM hta_gpu_activity GROUP BY ALL),
dry AS (
    SELECT s.rank, s.stream, greatest(least(s.next_ts, b.last_ns) - greatest(s.ts, b.first_ns), 0) AS ns
    FROM state s JOIN bounds b USING (rank, stream)
    WHERE s.queued = 0 AND s.running = 0 AND s.next_ts IS NOT NULL AND s.next_ts > s.ts
)
SELECT b.rank, b.stream, q.max_length, q.mean_length, b.last_ns - b.first_ns AS span_ns,
       coalesce(d.dry_ns, 0)::BIGINT AS dry_ns, coalesce(d.dry_count, 0) AS dry_count
FROM bounds b
LEFT JOIN (SELECT rank, stream, max(queued) AS max_length, avg(queued) FILTER (WHERE dq <> 0) AS mean_length
           FROM state GROUP BY ALL) q USING (rank, stream)
LEFT JOIN (SELECT rank, stream, sum(ns) AS dry_ns, count(*) FILTER (WHERE ns > 0) AS dry_count FROM dry GROUP BY ALL) d
       USING (rank, stream);
