-- What the step graph (traceparse/vocabulary/step_graph.py) is built from, from the vocabulary: where each CPU thread
-- blocked, what each blocking call waited for, and which rank and moment released each communication operation. Each
-- object is a TEMP table of the connection.
-- reads: collective_arrivals, comm_intervals, comm_ops, cp_p2p, events, main_threads

-- Every communication operation's completion on its rank (comm_done_ns, store/macros.sql) and what
-- released it: a collective, the last member to arrive (collective_arrivals); a receive, its matched send; anything
-- else, the rank itself when it arrived. The lane its execution ran on: a GPU stream, else a CPU thread.
CREATE OR REPLACE TEMP TABLE cp_completions AS
WITH last_member AS (
    SELECT match_key, m.rank, m.op_id
    FROM (SELECT match_key, arg_max({'rank': rank, 'op_id': op_id}, (arrival_ns, -rank, -op_id)) AS m
          FROM collective_arrivals GROUP BY match_key)
),
ops AS (
    SELECT o.*, comm_arrival_ns(o.op, o.exec_ts_ns, o.host_ts_ns) AS arrival_ns,
           comm_done_ns(o.exec_ts_ns, o.exec_dur_ns, o.host_ts_ns, o.host_dur_ns) AS done_ns
    FROM comm_ops o
)
SELECT o.rank, o.op_id, o.op, coalesce(o.strategy, 'untagged') AS strategy, o.done_ns, o.arrival_ns,
       CASE WHEN o.source IN ('kernel', 'custom_kernel') OR g.stream IS NOT NULL THEN 'gpu' ELSE 'cpu' END AS lane,
       g.stream,
       CASE WHEN a.last_arrival_ns > o.arrival_ns THEN a.last_arrival_ns
            WHEN p.partner_ns > o.arrival_ns THEN p.partner_ns ELSE o.arrival_ns END AS released_ns,
       CASE WHEN a.last_arrival_ns > o.arrival_ns THEN lm.rank
            WHEN p.partner_ns > o.arrival_ns THEN p.partner ELSE o.rank END AS released_by,
       CASE WHEN a.last_arrival_ns > o.arrival_ns THEN lm.op_id
            WHEN p.partner_ns > o.arrival_ns THEN p.partner_op ELSE o.op_id END AS released_op,
       o.host_ts_ns, o.tid
FROM ops o
LEFT JOIN collective_arrivals a ON a.rank = o.rank AND a.op_id = o.op_id
LEFT JOIN last_member lm ON lm.match_key = a.match_key
LEFT JOIN cp_p2p p ON p.rank = o.rank AND p.op_id = o.op_id
LEFT JOIN (SELECT rank, op_id, any_value(stream) AS stream FROM comm_intervals
           WHERE part = 'exec' AND stream IS NOT NULL GROUP BY ALL) g ON g.rank = o.rank AND g.op_id = o.op_id
WHERE o.done_ns IS NOT NULL;

-- The CPU events of rank r's threads that the path reads: what a thread spends its time in (thread_work,
-- store/macros.sql), not gloo's annotations of a transfer (gloo:*, which can sit on the calling thread and span the
-- work it overlaps). Macros over one rank: the step graph reads each rank once.
CREATE OR REPLACE TEMP MACRO cp_cpu_events(r) AS TABLE
SELECT tid, name, ts_ns AS s, ts_ns + dur_ns AS e, ev_id FROM events
WHERE rank = r AND thread_work(cat, name, dur_ns) AND NOT starts_with(name, 'gloo:');

-- What each CPU thread of rank r was doing, as disjoint pieces: its outermost events (of events with the same span,
-- the first in the file).
CREATE OR REPLACE TEMP MACRO cp_cpu_ops(r) AS TABLE
WITH nested AS (
    SELECT *, max(e) OVER (PARTITION BY tid ORDER BY s, e DESC, ev_id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
              AS prev_end
    FROM cp_cpu_events(r)
)
SELECT tid, name, s, e FROM nested WHERE prev_end IS NULL OR s >= prev_end;

-- Every interval in which a CPU thread of rank r waited, or may have: a communication call or wait
-- (comm_intervals parts 'call', 'wait'), a runtime call that waits for the GPU (cuda/hip Stream/Device/Event
-- Synchronize), and each gap between the outermost ops of the main thread or of a thread that issues communication
-- (a wait the profiler records no op for: a gloo Work's wait, the main thread waiting for the autograd engine's
-- thread). A call waited for its own operation; a wait or a gap for the latest completion inside it of an operation
-- the thread issued (cp_completions; a synchronization: a GPU activity's end); a gap without one, for the op of
-- another thread of the rank that ended last inside it, else for the release inside it of an operation of the rank
-- still in flight (its last peer arrived, the thread resumed; gloo's worker annotation ends later); a gap without
-- any of these was idle (traceparse/vocabulary/step_graph.py, _waited_for).
CREATE OR REPLACE TEMP MACRO cp_blocking(r) AS TABLE
SELECT tid, start_ns AS s, end_ns AS e, part AS kind, name, strategy, op_id FROM comm_intervals
WHERE rank = r AND part IN ('call', 'wait') AND tid IS NOT NULL
UNION ALL
SELECT tid, ts_ns, ts_ns + dur_ns, 'sync', name, NULL, NULL FROM events
WHERE rank = r AND cat IN ('cuda_runtime', 'cuda_driver') AND regexp_matches(name, '(?i)synchronize') AND dur_ns > 0
UNION ALL
SELECT tid, prev_e, s, 'gap', NULL, NULL, NULL
FROM (SELECT tid, s, lag(e) OVER (PARTITION BY tid ORDER BY s, e) AS prev_e FROM cp_cpu_ops(r))
WHERE s > prev_e AND tid IN (SELECT tid FROM comm_ops WHERE rank = r AND tid IS NOT NULL
                             UNION SELECT tid FROM main_threads WHERE rank = r);
