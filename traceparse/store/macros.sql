-- Shared SQL macros of the store. Loaded into every connection that reads a store.

-- Normalized collective name from any spelling: record_param_comms "Collective name",
-- c10d::/nccl:/gloo: op names, NCCL/RCCL kernel names.
CREATE OR REPLACE MACRO norm_op(s) AS (
    CASE
        WHEN s IS NULL THEN NULL
        WHEN regexp_matches(lower(s), 'all_?reduce') THEN 'all_reduce'
        WHEN regexp_matches(lower(s), 'reduce_?scatter') THEN 'reduce_scatter'
        WHEN regexp_matches(lower(s), 'all_?gather') THEN 'all_gather'
        WHEN regexp_matches(lower(s), 'all_?to_?all') THEN 'all_to_all'
        WHEN regexp_matches(lower(s), 'broadcast') THEN 'broadcast'
        WHEN regexp_matches(lower(s), 'barrier') THEN 'barrier'
        WHEN regexp_matches(lower(s), 'sendrecv') THEN 'send_recv'
        WHEN regexp_matches(lower(s), 'recv') THEN 'recv'
        WHEN regexp_matches(lower(s), 'send') THEN 'send'
        WHEN regexp_matches(lower(s), 'gather') THEN 'gather'
        WHEN regexp_matches(lower(s), 'scatter') THEN 'scatter'
        WHEN regexp_matches(lower(s), '(^|[:_])reduce') THEN 'reduce'
        ELSE 'unknown'
    END
);

-- Bytes per element of a dtype as traces spell it (Float, float, c10::BFloat16, Half, Long, ...).
CREATE OR REPLACE MACRO dtype_bytes(d) AS (
    CASE
        WHEN d IS NULL THEN NULL
        WHEN regexp_matches(lower(d), '(float64|double|int64|uint64|complexfloat|complex64|complex<float>)$')
             OR regexp_matches(lower(d), '\blong\b') THEN 8
        WHEN regexp_matches(lower(d), 'float8|(^|::|\s)(char|int8|uint8|byte|bool)$') THEN 1
        WHEN regexp_matches(lower(d), '(bfloat16|half|float16|int16|uint16)$') OR regexp_matches(lower(d), '\bshort\b') THEN 2
        WHEN regexp_matches(lower(d), '(float|float32|int|int32|uint32)$') THEN 4
        ELSE NULL
    END
);

-- A CPU event that is a communication call, by name: c10d ops, functional collectives, NCCL
-- annotations, symmetric-memory ops and record_param_comms (waits included).
CREATE OR REPLACE MACRO is_comm_call(n) AS (
    n = 'record_param_comms' OR regexp_matches(n, '^(c10d::|nccl:|_c10d_functional::|symm_mem::)')
);

-- NCCL/RCCL kernels and PyTorch's symmetric-memory all-reduce kernels.
CREATE OR REPLACE MACRO is_comm_kernel_name(n) AS (
    regexp_matches(n, '(?i)^(void )?(nccl|rccl)|multimem_all_reduce|(one|two)_shot_all_reduce')
);

-- The parallelism axis a process group's description or name states, if any:
-- DeviceMesh dims (mesh_tp, dp_shard, ...), Megatron-style names (tensor/pipeline/...).
CREATE OR REPLACE MACRO group_axis(descr, pgname) AS (
    CASE
        WHEN regexp_matches(lower(coalesce(descr, '') || ' ' || coalesce(pgname, '')),
                            '(^|[^a-z])(dp|fsdp|dp_shard|dp_replicate|data|replicate|shard|hsdp)([^a-z]|$)') THEN 'dp'
        WHEN regexp_matches(lower(coalesce(descr, '') || ' ' || coalesce(pgname, '')), '(^|[^a-z])(tp|tensor|mp)([^a-z]|$)') THEN 'tp'
        WHEN regexp_matches(lower(coalesce(descr, '') || ' ' || coalesce(pgname, '')), '(^|[^a-z])(pp|pipe|pipeline)([^a-z]|$)') THEN 'pp'
        WHEN regexp_matches(lower(coalesce(descr, '') || ' ' || coalesce(pgname, '')), '(^|[^a-z])(cp|context|ring)([^a-z]|$)') THEN 'cp'
        WHEN regexp_matches(lower(coalesce(descr, '') || ' ' || coalesce(pgname, '')), '(^|[^a-z])(sp|ulysses|sequence)([^a-z]|$)') THEN 'sp'
        WHEN regexp_matches(lower(coalesce(descr, '') || ' ' || coalesce(pgname, '')), '(^|[^a-z])(ep|expert|moe)([^a-z]|$)') THEN 'ep'
        ELSE NULL
    END
);

-- Interval arithmetic, written once. interval_pieces(q, merge_touching): the rows of query q
-- (columns k: the partition key, any type, e.g. a struct; s, e: start and end; any others are
-- kept) each with `piece`, the number (from 1, per k, in time order) of the run of overlapping
-- intervals it belongs to. With merge_touching an interval starting exactly where the earlier
-- ones end joins their piece; without, it starts a new one (consecutive calls stay apart).
CREATE OR REPLACE MACRO interval_pieces(q, merge_touching) AS TABLE
WITH o AS (
    SELECT *, max(e) OVER (PARTITION BY k ORDER BY s, e DESC
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM query(q)
)
SELECT * EXCLUDE (prev_end),
       sum(CASE WHEN prev_end IS NULL OR s > prev_end OR (NOT merge_touching AND s = prev_end) THEN 1 ELSE 0 END)
           OVER (PARTITION BY k ORDER BY s, e DESC ROWS UNBOUNDED PRECEDING) AS piece
FROM o;

-- interval_union(q): the union of the intervals of query q (columns k: the key, any type; s, e:
-- start and end) per key, as disjoint pieces (k, s, e); nested, overlapping and touching
-- intervals merge. The length of a union is sum(e - s) over its pieces.
CREATE OR REPLACE MACRO interval_union(q) AS TABLE
SELECT k, min(s) AS s, max(e) AS e FROM interval_pieces(q, true) GROUP BY k, piece;

-- interval_union_ns(q): the length of that union per key, (k, ns), in one pass: in time order each
-- interval adds what it reaches past the end of every earlier one.
CREATE OR REPLACE MACRO interval_union_ns(q) AS TABLE
SELECT k, sum(greatest(e - greatest(s, coalesce(prev_end, s)), 0)) AS ns
FROM (SELECT k, s, e, max(e) OVER (PARTITION BY k ORDER BY s, e DESC
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
      FROM query(q))
GROUP BY k;

-- interval_intersect(qa, qb): the union of qa's intervals per key k (qa: k, g, s, e, with g constant
-- per k) intersected with the union of qb's intervals with the same g (qb: k = that g, s, e), as
-- disjoint pieces (k, s, e). E.g. each strategy's communication (k = rank, step, strategy; g = rank)
-- against the rank's compute (k = rank).
-- The pieces of b (disjoint, numbered i in time order per g) that meet a piece of a are the run from
-- the last one starting at or before a's start to the last one starting before a's end: two ASOF
-- joins find them, so the cost follows the number of pieces, not their product.
CREATE OR REPLACE MACRO interval_intersect(qa, qb) AS TABLE
WITH a AS (SELECT k, any_value(g) AS g, min(s) AS s, max(e) AS e FROM interval_pieces(qa, true) GROUP BY k, piece),
     b AS (SELECT k AS g, s, e, row_number() OVER (PARTITION BY k ORDER BY s) AS i FROM interval_union(qb)),
     first_b AS (SELECT a.*, b.i AS i0 FROM a ASOF LEFT JOIN b ON a.g = b.g AND a.s >= b.s),
     last_b AS (SELECT f.*, b.i AS i1 FROM first_b f ASOF LEFT JOIN b ON f.g = b.g AND f.e > b.s),
     meets AS (SELECT k, g, s, e, unnest(range(coalesce(i0, 1), i1 + 1)) AS i FROM last_b WHERE i1 IS NOT NULL)
SELECT m.k, greatest(m.s, b.s) AS s, least(m.e, b.e) AS e
FROM meets m JOIN b ON b.g = m.g AND b.i = m.i
WHERE b.e > m.s;

-- A collective: an operation every member of its group takes part in (not send/recv).
CREATE OR REPLACE MACRO is_collective(op) AS (
    op IN ('all_reduce', 'reduce_scatter', 'all_gather', 'all_to_all', 'broadcast', 'reduce', 'gather', 'scatter',
           'barrier')
);

-- A communication operation's own arrival, the moment it was ready on its rank (comm_ops' columns): a send's or a
-- receive's call (a transfer starts once both sides have posted theirs), else its execution; any other operation's
-- execution start, else its call's. A collective's arrivals compared across its members (vocabulary/arrivals.sql)
-- take one basis for every member instead. The step graph's completions, the matched point-to-point pairs and the
-- clocks' bounds select with it.
CREATE OR REPLACE MACRO comm_arrival_ns(op, exec_ts_ns, host_ts_ns) AS (
    CASE WHEN op IN ('send', 'recv') THEN coalesce(host_ts_ns, exec_ts_ns) ELSE coalesce(exec_ts_ns, host_ts_ns) END
);

-- A communication operation's completion on its rank: its execution's end, else its call's end.
CREATE OR REPLACE MACRO comm_done_ns(exec_ts_ns, exec_dur_ns, host_ts_ns, host_dur_ns) AS (
    coalesce(exec_ts_ns + exec_dur_ns, host_ts_ns + host_dur_ns)
);

-- The members of a process group as one key: its sorted global ranks as text (NULL when unknown).
-- Who talks to whom (tagging's traits, arrivals' matching) is keyed by the members alone.
CREATE OR REPLACE MACRO member_key(ranks) AS (list_sort(ranks)::VARCHAR);

-- The identity of a process group, one key everywhere a group is matched or partitioned by: its
-- members ('?' when unknown) and its name (two groups may have the same ranks).
CREATE OR REPLACE MACRO group_key(ranks, pgname) AS (
    coalesce(member_key(ranks), '?') || '/' || coalesce(pgname, '')
);

-- The profiler's step marker: torch.profiler's 'ProfilerStep#N' around each profiled step (a user_annotation on the
-- CPU; newer traces copy it onto the GPU as a gpu_user_annotation). The steps (vocabulary/per_rank.sql), the main
-- thread, a thread's work (not the marker, which spans everything), the busy table and HTA's window select with it.
CREATE OR REPLACE MACRO is_profiler_step(name) AS (starts_with(name, 'ProfilerStep#'));

-- The optimizer's time on the CPU: torch.optim's annotations of each optimizer's step and zero_grad
-- ('Optimizer.step#AdamW.step', 'Optimizer.zero_grad#AdamW.zero_grad'). The bubble check's schedule (not part of it),
-- the GPU's idle causes (vocabulary/host_cause.sql), tagging's phase of a communication call and what-if's optimizer
-- time select with it.
CREATE OR REPLACE MACRO is_optimizer(name) AS (starts_with(name, 'Optimizer.'));
-- The optimizer's class an optimizer step annotation names ('AdamW' of 'Optimizer.step#AdamW.step'); NULL otherwise.
CREATE OR REPLACE MACRO optimizer_class(name) AS (
    CASE WHEN is_optimizer(name) THEN nullif(regexp_extract(name, '^Optimizer\.step#([^.]+)\.step', 1), '') END
);

-- A backward frame: the autograd engine running one node's backward function ('autograd::engine::evaluate_function:
-- MmBackward0'), on whichever thread runs backward. The passes of a step (vocabulary/phases.sql), tagging's phase of
-- a communication call and the bubble check's backward blocks select with it.
CREATE OR REPLACE MACRO is_autograd_frame(name) AS (starts_with(name, 'autograd::engine::evaluate_function'));

-- What a CPU thread spends its time in, event by event: an op, an annotation or a CUDA/HIP runtime or driver call that
-- lasts, not the profiler's step marker (ProfilerStep#N, which spans everything). The GPU section's launching ops
-- (vocabulary/gpu_time.sql) and the step graph's CPU lanes (vocabulary/step_graph.sql) select from it.
CREATE OR REPLACE MACRO thread_work(cat, name, dur_ns) AS (
    cat IN ('cpu_op', 'user_annotation', 'cuda_runtime', 'cuda_driver') AND dur_ns > 0
    AND NOT is_profiler_step(name)
);

-- Device work: what a GPU does, event by event: a kernel, a memcpy or a memset (gpu_activity holds every one, with
-- its launch). Not the profiler's other events on a GPU's stream: a gpu_user_annotation (a label drawn over work
-- already counted) or a cuda_sync (a stream, event or context synchronization: waiting, not working). The GPU
-- section's busy and idle (vocabulary/gpu_time.sql) and the busy table's GPU streams (vocabulary/busy_time.sql)
-- select from gpu_activity, so both read this one definition.
CREATE OR REPLACE MACRO device_work(cat) AS (cat IN ('kernel', 'gpu_memcpy', 'gpu_memset'));

-- An event the profiler records on a GPU's stream: device work, or an annotation or a synchronization beside it.
-- A lane (pid, tid) holding one is a GPU stream, not a CPU thread.
CREATE OR REPLACE MACRO device_event(cat) AS (device_work(cat) OR cat IN ('gpu_user_annotation', 'cuda_sync'));
