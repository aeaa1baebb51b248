-- gpu_activity: every activity of a GPU (its device work: kernel, memcpy, memset; store/macros.sql device_work) with
-- what it does and what launched it. Per rank:
-- run in the task that parsed the rank (per_rank.py), after interval_geometry.sql, whose placed_intervals say which
-- kernels execute communication and which compute, and in which step window each belongs (by its launch).
-- reads: events, placed_intervals, step_windows

INSERT INTO gpu_activity
WITH
-- the runtime or driver call that launched each GPU activity (cudaLaunchKernel, cudaMemcpyAsync, hipLaunchKernel,
-- cuLaunchKernel, ...): the CPU event carrying its correlation id; the first when several do
launch AS (
    SELECT rank, correlation, arg_min(ev_id, (ts_ns, ev_id)) AS ev_id, min(ts_ns) AS ts_ns,
           arg_min(ts_ns + dur_ns, (ts_ns, ev_id)) AS end_ns, arg_min(tid, (ts_ns, ev_id)) AS tid,
           arg_min(pid, (ts_ns, ev_id)) AS pid
    FROM events
    WHERE cat IN ('cuda_runtime', 'cuda_driver') AND correlation IS NOT NULL
    GROUP BY rank, correlation
),
-- HTA's window: the kernels launched before the rank's latest ProfilerStep#N starts (its GPU-side copy included)
last_step AS (SELECT rank, max(ts_ns) AS start_ns FROM events WHERE is_profiler_step(name) GROUP BY rank),
kind AS (
    SELECT rank, ev_id, any_value(kind) AS kind, any_value(step) AS step, bool_or(in_window) AS in_window
    FROM placed_intervals WHERE stream IS NOT NULL AND ev_id IS NOT NULL AND part IN ('exec', 'kernel')
    GROUP BY rank, ev_id
)
-- An activity that starts before the call that launched it starts (impossible: the CPU's and the GPU's clocks
-- disagree, or the correlation id is wrong) keeps its launching call (launch_ev_id) but not its times or thread:
-- launch_pid, launch_tid, launch_ns and launch_end_ns are NULL, so that no queue goes negative and no wait is
-- made up; load_checks.sql counts them in load_issues. Its step and HTA window still go by that call.
SELECT a.rank, a.ev_id, a.cat, a.name, coalesce(a.stream, a.tid) AS stream,
       CASE WHEN a.cat <> 'kernel' THEN 'memory' ELSE coalesce(k.kind, 'compute') END AS kind,
       a.ts_ns AS start_ns, a.ts_ns + a.dur_ns AS end_ns,
       l.ev_id AS launch_ev_id,
       CASE WHEN l.ts_ns <= a.ts_ns THEN l.pid END AS launch_pid, CASE WHEN l.ts_ns <= a.ts_ns THEN l.tid END AS launch_tid,
       CASE WHEN l.ts_ns <= a.ts_ns THEN l.ts_ns END AS launch_ns,
       CASE WHEN l.ts_ns <= a.ts_ns THEN l.end_ns END AS launch_end_ns,
       coalesce(k.step, w.step) AS step,
       coalesce(k.in_window, w.rank IS NOT NULL AND coalesce(l.ts_ns, a.ts_ns) < w.end_ns) AS in_window,
       l.ts_ns < s.start_ns AS before_last_step
FROM events a
LEFT JOIN launch l ON l.rank = a.rank AND l.correlation = a.correlation AND a.correlation IS NOT NULL
LEFT JOIN kind k ON k.rank = a.rank AND k.ev_id = a.ev_id
LEFT JOIN last_step s ON s.rank = a.rank
ASOF LEFT JOIN step_windows w ON w.rank = a.rank AND coalesce(l.ts_ns, a.ts_ns) >= w.start_ns
WHERE device_work(a.cat) AND a.dur_ns IS NOT NULL;
