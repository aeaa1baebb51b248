-- The vocabulary: the basic facts of a trace, defined once. Every check and the report
-- select from these tables; their columns are documented in traceparse/store/schema.py
-- (VOCABULARY) and printed by `traceparse schema`. Built last, after tagging, from the
-- events, comm_ops and the kernel links of derive.sql (temp table kernel_call).

-- main_threads: per rank, the thread that runs the training loop.
INSERT INTO main_threads
WITH scored AS (
    SELECT rank, pid, tid,
           count(*) FILTER (WHERE cat = 'user_annotation' AND starts_with(name, 'ProfilerStep#')) AS n_steps,
           coalesce(sum(dur_ns) FILTER (WHERE cat = 'cpu_op'), 0) AS cpu_op_ns
    FROM events
    WHERE cat IN ('cpu_op', 'user_annotation') AND tid IS NOT NULL
    GROUP BY rank, pid, tid
),
best AS (
    SELECT rank, arg_max(pid, (n_steps, cpu_op_ns, -tid)) AS pid, arg_max(tid, (n_steps, cpu_op_ns, -tid)) AS tid,
           max(n_steps) AS n_steps
    FROM scored GROUP BY rank
)
SELECT b.rank, b.pid, b.tid, (SELECT any_value(label) FROM threads t
                              WHERE t.rank = b.rank AND t.pid = b.pid AND t.tid = b.tid AND t.kind = 'thread_name'),
       CASE WHEN b.n_steps > 0 THEN 'ProfilerStep#N annotations' ELSE 'most cpu_op time (no ProfilerStep#N)' END
FROM best b;

-- step_windows: one per ProfilerStep#N; one whole-trace window (step NULL) for a rank without.
INSERT INTO step_windows
SELECT rank, step, start_ns, end_ns, dur_ns, 'ProfilerStep#N' FROM steps
UNION ALL
SELECT rank, NULL, min(ts_ns), max(ts_ns + dur_ns), max(ts_ns + dur_ns) - min(ts_ns), 'whole trace (no ProfilerStep#N)'
FROM events WHERE rank NOT IN (SELECT rank FROM steps) GROUP BY rank;

-- Every interval of the two interval tables, before it is placed in a window.
CREATE TEMP TABLE vocab_raw AS
WITH
gpu_rank AS (SELECT DISTINCT rank FROM events WHERE cat = 'kernel'),
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
-- CPU events named as communication (is_comm_call) that are in no operation's call: waits and wrappers
waits AS (
    SELECT e.rank, e.ev_id, e.tid, e.name, e.ts_ns AS s, e.ts_ns + e.dur_ns AS e
    FROM events e
    WHERE is_comm_call(e.name) AND e.cat NOT IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'gpu_user_annotation')
      AND NOT EXISTS (SELECT 1 FROM calls c WHERE c.rank = e.rank AND c.tid = e.tid
                      AND c.s <= e.ts_ns AND e.ts_ns + e.dur_ns <= c.e)
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
CREATE TEMP TABLE vocab AS
SELECT v.*, w.step, w.rank IS NOT NULL AND v.anchor_ns < w.end_ns AS in_window
FROM vocab_raw v ASOF LEFT JOIN step_windows w ON w.rank = v.rank AND v.anchor_ns >= w.start_ns;

INSERT INTO comm_intervals
SELECT v.rank, v.op_id, v.ev_id, v.part, v.name, v.tid, v.stream, v.start_ns, v.end_ns, v.counted,
       o.op, o.strategy, o.variant, v.anchor_ns, CASE WHEN v.in_window THEN v.step END, v.in_window
FROM vocab v LEFT JOIN comm_ops o ON o.rank = v.rank AND o.op_id = v.op_id
WHERE v.kind = 'comm' AND v.end_ns >= v.start_ns;

INSERT INTO compute_intervals
SELECT rank, ev_id, part, name, tid, stream, start_ns, end_ns, anchor_ns, CASE WHEN in_window THEN step END, in_window
FROM vocab WHERE kind = 'compute' AND end_ns > start_ns;

-- Per window: compute, communication and the part of it hidden under compute (comments in schema.py).
INSERT INTO window_totals
WITH compute AS (
    SELECT k.rank, k.step, ns FROM interval_union_ns(
        'SELECT {''rank'': rank, ''step'': step} AS k, start_ns AS s, end_ns AS e FROM compute_intervals WHERE in_window')
),
comm AS (
    SELECT k.rank, k.step, ns FROM interval_union_ns(
        'SELECT {''rank'': rank, ''step'': step} AS k, start_ns AS s, end_ns AS e FROM comm_intervals WHERE in_window AND counted')
),
hidden AS (
    SELECT k.rank, k.step, sum(e - s) AS ns FROM interval_intersect(
        'SELECT {''rank'': rank, ''step'': step} AS k, rank AS g, start_ns AS s, end_ns AS e FROM comm_intervals WHERE in_window AND counted',
        'SELECT rank AS k, start_ns AS s, end_ns AS e FROM compute_intervals')
    GROUP BY ALL
)
SELECT w.rank, w.step, w.dur_ns AS window_ns,
       coalesce(c.ns, 0)::BIGINT AS compute_ns, coalesce(m.ns, 0)::BIGINT AS comm_ns, coalesce(h.ns, 0)::BIGINT AS hidden_ns
FROM step_windows w
LEFT JOIN compute c ON c.rank = w.rank AND c.step IS NOT DISTINCT FROM w.step
LEFT JOIN comm m ON m.rank = w.rank AND m.step IS NOT DISTINCT FROM w.step
LEFT JOIN hidden h ON h.rank = w.rank AND h.step IS NOT DISTINCT FROM w.step;

-- collective_arrivals: each collective matched across its group's members (comments in schema.py).
INSERT INTO collective_arrivals
WITH c AS (
    SELECT rank, op_id, op, coalesce(strategy, 'untagged') AS strategy, step, list_sort(group_ranks) AS g,
           CASE WHEN seq IS NOT NULL THEN 'seq' ELSE 'order' END AS matched_by,
           list_sort(group_ranks)::VARCHAR || CASE WHEN seq IS NOT NULL THEN ' seq ' || seq
               ELSE ' step ' || coalesce(step::VARCHAR, '-') || ' #' || row_number() OVER (
                   PARTITION BY rank, list_sort(group_ranks), seq IS NULL, step
                   ORDER BY coalesce(host_ts_ns, exec_ts_ns), op_id) END AS match_key,
           host_ts_ns, exec_ts_ns
    FROM comm_ops
    WHERE op IN ('all_reduce', 'reduce_scatter', 'all_gather', 'all_to_all', 'broadcast', 'reduce', 'gather',
                 'scatter', 'barrier')
      AND len(group_ranks) >= 2 AND list_contains(group_ranks, rank)
      AND (host_ts_ns IS NOT NULL OR exec_ts_ns IS NOT NULL)
),
m AS (
    SELECT match_key, count(*) AS n, count(DISTINCT rank) AS members, count(DISTINCT op) AS kinds,
           count(exec_ts_ns) AS n_exec, count(host_ts_ns) AS n_host, any_value(len(g)) AS size
    FROM c GROUP BY match_key
),
a AS (
    SELECT c.*, CASE WHEN m.n_exec = m.n THEN 'execution' ELSE 'call' END AS basis,
           CASE WHEN m.n_exec = m.n THEN c.exec_ts_ns ELSE c.host_ts_ns END AS arrival_ns
    FROM c JOIN m USING (match_key)
    WHERE m.n = m.size AND m.members = m.size AND m.kinds = 1 AND (m.n_exec = m.n OR m.n_host = m.n)
),
l AS (
    SELECT *, max(arrival_ns) OVER k AS last_arrival_ns, avg(arrival_ns) OVER k AS mean_arrival_ns,
           count(*) FILTER (WHERE TRUE) OVER k AS size,
           row_number() OVER (PARTITION BY match_key ORDER BY arrival_ns DESC) AS place
    FROM a WINDOW k AS (PARTITION BY match_key)
),
ranked AS (
    SELECT *, max(arrival_ns) FILTER (WHERE place > 1) OVER (PARTITION BY match_key) AS second_arrival_ns
    FROM l
)
SELECT rank, op_id, op, strategy, step, g, matched_by, match_key, basis, arrival_ns, last_arrival_ns,
       second_arrival_ns, last_arrival_ns - arrival_ns, arrival_ns - mean_arrival_ns,
       arrival_ns = last_arrival_ns AND second_arrival_ns < last_arrival_ns
FROM ranked;

-- The waits inside each strategy's communication: exposed unless the rank computes meanwhile.
CREATE TEMP TABLE wait_comm AS
SELECT k.rank, k.step, k.strategy, s, e FROM interval_intersect(
    'SELECT {''rank'': rank, ''step'': step, ''strategy'': strategy} AS k, {''rank'': rank, ''strategy'': strategy} AS g,
            arrival_ns AS s, last_arrival_ns AS e FROM collective_arrivals WHERE last_arrival_ns > arrival_ns',
    'SELECT {''rank'': rank, ''strategy'': coalesce(strategy, ''untagged'')} AS k, start_ns AS s, end_ns AS e
     FROM comm_intervals WHERE in_window AND counted');

INSERT INTO window_strategy_comm
WITH waiting AS (
    SELECT rank, step, strategy, sum(e - s) AS ns FROM wait_comm GROUP BY ALL
),
waiting_hidden AS (
    SELECT k.rank, k.step, k.strategy, sum(e - s) AS ns FROM interval_intersect(
        'SELECT {''rank'': rank, ''step'': step, ''strategy'': strategy} AS k, rank AS g, s, e FROM wait_comm',
        'SELECT rank AS k, start_ns AS s, end_ns AS e FROM compute_intervals')
    GROUP BY ALL
),
comm AS (
    SELECT k.rank, k.step, k.strategy, ns FROM interval_union_ns(
        'SELECT {''rank'': rank, ''step'': step, ''strategy'': coalesce(strategy, ''untagged'')} AS k,
                start_ns AS s, end_ns AS e FROM comm_intervals WHERE in_window AND counted')
),
hidden AS (
    SELECT k.rank, k.step, k.strategy, sum(e - s) AS ns FROM interval_intersect(
        'SELECT {''rank'': rank, ''step'': step, ''strategy'': coalesce(strategy, ''untagged'')} AS k, rank AS g,
                start_ns AS s, end_ns AS e FROM comm_intervals WHERE in_window AND counted',
        'SELECT rank AS k, start_ns AS s, end_ns AS e FROM compute_intervals')
    GROUP BY ALL
)
SELECT c.rank, c.step, c.strategy, c.ns::BIGINT AS comm_ns, coalesce(h.ns, 0)::BIGINT AS hidden_ns,
       least(greatest(coalesce(w.ns, 0) - coalesce(wh.ns, 0), 0), c.ns - coalesce(h.ns, 0))::BIGINT AS waiting_ns
FROM comm c
LEFT JOIN hidden h ON h.rank = c.rank AND h.step IS NOT DISTINCT FROM c.step AND h.strategy = c.strategy
LEFT JOIN waiting w ON w.rank = c.rank AND w.step IS NOT DISTINCT FROM c.step AND w.strategy = c.strategy
LEFT JOIN waiting_hidden wh ON wh.rank = c.rank AND wh.step IS NOT DISTINCT FROM c.step AND wh.strategy = c.strategy;
