-- main_threads: per rank, the thread that runs the training loop (columns: traceparse/store/schema.py).
-- reads: events, threads
INSERT INTO main_threads
WITH scored AS (
    SELECT rank, pid, tid,
           count(*) FILTER (WHERE cat = 'user_annotation' AND is_profiler_step(name)) AS n_steps,
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
