-- comm_features: what the tagging rules may look at, one row per comm_ops row. Reads the vocabulary (host_ops,
-- thread_names, world, main_threads, backward_passes), never the raw tables.
-- Every column is defined positively in traceparse.store.schema.FEATURES.

CREATE TEMP TABLE ctx_events AS
SELECT rank, tid, ts_ns, end_ns, name
FROM host_ops
WHERE regexp_matches(name, '(?i)backward|optimizer|autograd|fsdp|^pp:|^(forward|backward) \d|distributeddataparallel|^##|all2all|embedding|zero|dispatch|combine|reducer');

CREATE TEMP TABLE op_ctx AS
SELECT c.rank, c.op_id,
       string_agg(e.name, ' > ' ORDER BY e.ts_ns, e.end_ns DESC) AS ctx,
       bool_or(is_optimizer(e.name)) AS in_optimizer, bool_or(is_autograd_frame(e.name)) AS in_autograd_frame
FROM comm_ops c
JOIN ctx_events e ON e.rank = c.rank AND e.tid = c.tid
                 AND e.ts_ns <= c.host_ts_ns AND e.end_ns >= c.host_ts_ns + c.host_dur_ns
GROUP BY c.rank, c.op_id;

-- the compute between an operation and the next one of the same kind and group on the rank
CREATE TEMP TABLE a2a_window AS
SELECT rank, op_id, tid, host_ts_ns + host_dur_ns AS w_start,
       lead(host_ts_ns) OVER (PARTITION BY rank, op, member_key(group_ranks), step
                              ORDER BY host_ts_ns) AS w_end
FROM comm_ops WHERE op = 'all_to_all' AND host_ts_ns IS NOT NULL;

CREATE TEMP TABLE a2a_between AS
SELECT w.rank, w.op_id,
       bool_or(regexp_matches(e.name, '(?i)attention|attn|scaled_dot_product')) AS attention_between
FROM a2a_window w
JOIN host_ops e ON e.rank = w.rank AND e.tid = w.tid AND e.ts_ns >= w.w_start AND e.ts_ns < w.w_end
WHERE e.cat = 'cpu_op'
GROUP BY w.rank, w.op_id;

-- where backward runs in each step of each rank (the vocabulary's backward_passes, traceparse/vocabulary/
-- phases.sql): a call inside a pass, from its first autograd frame to its last, is in backward; a call
-- between two passes belongs to the next pass's forward; backward_window spans the step's passes.
CREATE TEMP TABLE backward_window AS
SELECT rank, step, min(start_ns) AS bwd_start, max(end_ns) AS bwd_end FROM backward_passes GROUP BY rank, step;

CREATE TEMP TABLE op_in_pass AS
SELECT DISTINCT c.rank, c.op_id
FROM comm_ops c
JOIN backward_passes p ON p.rank = c.rank AND p.step = c.step
                    AND c.host_ts_ns BETWEEN p.start_ns AND p.end_ns;

CREATE TEMP TABLE base AS
SELECT c.rank, c.op_id, c.step, c.op, c.source, c.kernel, c.bytes_in, c.bytes_out,
       c.group_size, c.group_ranks, member_key(c.group_ranks) AS group_key,
       c.pg_name, c.pg_desc, c.peer,
       (SELECT world_size FROM world) AS world_size,
       group_axis(c.pg_desc, c.pg_name) AS axis,
       CASE WHEN c.group_ranks IS NULL THEN NULL
            WHEN len(c.group_ranks) = (SELECT world_size FROM world) THEN 'world'
            WHEN len(c.group_ranks) = 1 THEN 'single'
            WHEN list_sort(c.group_ranks) = range(list_min(c.group_ranks), list_min(c.group_ranks) + len(c.group_ranks))
                THEN 'contiguous'
            WHEN list_sort(c.group_ranks) = range(list_min(c.group_ranks),
                     list_min(c.group_ranks) + len(c.group_ranks) * (list_sort(c.group_ranks)[2] - list_min(c.group_ranks)),
                     list_sort(c.group_ranks)[2] - list_min(c.group_ranks)) THEN 'strided'
            ELSE 'irregular' END AS geometry,
       coalesce(x.ctx, '') AS ctx,
       CASE WHEN c.host_ts_ns IS NULL THEN 'unknown'
            WHEN x.in_optimizer THEN 'optimizer'
            WHEN regexp_matches(coalesce(x.ctx, ''), '(?i)backward') OR x.in_autograd_frame
                 OR regexp_matches(coalesce(t.thread_name, ''), '(?i)autograd')
                 OR ip.op_id IS NOT NULL THEN 'backward'
            WHEN c.step IS NULL AND c.rank IN (SELECT rank FROM backward_window) THEN 'outside_step'
            WHEN c.host_ts_ns > bw.bwd_end THEN 'after_backward'
            ELSE 'forward' END AS phase,
       coalesce(c.name LIKE '_c10d_functional::%', false) AS dtensor,
       coalesce(c.host_ts_ns < bw.bwd_start, false) AS before_backward,
       (len(list_distinct(coalesce(TRY_CAST(c.in_split AS BIGINT[]), []))) > 1
        OR len(list_distinct(coalesce(TRY_CAST(c.out_split AS BIGINT[]), []))) > 1) AS uneven_split,
       coalesce(a.attention_between, false) AS attention_between
FROM comm_ops c
LEFT JOIN op_ctx x ON x.rank = c.rank AND x.op_id = c.op_id
LEFT JOIN a2a_between a ON a.rank = c.rank AND a.op_id = c.op_id
LEFT JOIN backward_window bw ON bw.rank = c.rank AND bw.step = c.step
LEFT JOIN op_in_pass ip ON ip.rank = c.rank AND ip.op_id = c.op_id
LEFT JOIN thread_names t ON t.rank = c.rank AND t.tid = c.tid;

-- point-to-point topology of each group, over all ranks: a ring (every member sends to both of
-- its ring neighbours equally often) or a chain (anything else: ends, or uneven links). Two ranks
-- are each other's both neighbours: they are a ring when both also send to the other before their
-- backward starts (K/V blocks in forward), a chain otherwise (a two-stage pipeline's last stage
-- sends only gradients, in backward).
CREATE TEMP TABLE p2p_links AS
SELECT group_key, rank AS src, peer AS dst, count(*) AS n, count(*) FILTER (WHERE before_backward) AS n_fwd
FROM base WHERE op = 'send' AND peer IS NOT NULL AND group_ranks IS NOT NULL
GROUP BY ALL;

CREATE TEMP TABLE p2p_shape AS
WITH g AS (SELECT DISTINCT group_key, group_ranks FROM base WHERE op IN ('send', 'recv') AND group_ranks IS NOT NULL),
members AS (SELECT group_key, unnest(list_sort(group_ranks)) AS r, len(group_ranks) AS size,
                   generate_subscripts(list_sort(group_ranks), 1) AS pos, list_sort(group_ranks) AS ranks FROM g),
nbr AS (SELECT group_key, r, ranks[((pos) % size) + 1] AS next_r, ranks[((pos - 2 + size) % size) + 1] AS prev_r, size
        FROM members),
chk AS (SELECT n.group_key, n.size,
               coalesce((SELECT l.n FROM p2p_links l WHERE l.group_key = n.group_key AND l.src = n.r AND l.dst = n.next_r), 0) AS to_next,
               coalesce((SELECT l.n FROM p2p_links l WHERE l.group_key = n.group_key AND l.src = n.r AND l.dst = n.prev_r), 0) AS to_prev,
               coalesce((SELECT l.n_fwd FROM p2p_links l WHERE l.group_key = n.group_key AND l.src = n.r AND l.dst = n.next_r), 0) AS fwd_next
        FROM nbr n)
SELECT group_key,
       CASE WHEN size > 2 AND min(to_next) > 0 AND min(to_next) = max(to_next)
                 AND (max(to_prev) = 0 OR (min(to_prev) = max(to_prev) AND min(to_prev) = min(to_next))) THEN 'ring'
            WHEN size = 2 AND count(*) = 2 AND min(to_next) > 0 AND min(to_next) = max(to_next) AND min(fwd_next) > 0
                THEN 'ring'
            ELSE 'chain' END AS p2p_shape
FROM chk GROUP BY group_key, size;

CREATE TEMP TABLE group_traits AS
SELECT group_key,
       bool_or(op = 'all_reduce' AND phase = 'forward') AS group_forward_all_reduce,
       bool_or(op = 'reduce_scatter' AND phase = 'forward') AS group_forward_reduce_scatter,
       bool_or(op = 'reduce_scatter' AND phase = 'backward') AS group_backward_reduce_scatter,
       bool_or(op = 'all_to_all' AND uneven_split) AS group_uneven_all_to_all,
       bool_or(op = 'all_to_all' AND attention_between) AS group_attention_all_to_all
FROM base WHERE group_key IS NOT NULL GROUP BY group_key;

-- an operation whose group is unknown may share its group with any other such operation of its rank (a rank
-- calls every collective of each of its groups): a trait is false when none of them shows it, else unknown
-- (NULL), never true, so a rule that needs a group's whole pattern neither matches nor is ruled out
CREATE TEMP TABLE unknown_group_traits AS
SELECT rank,
       CASE WHEN bool_or(op = 'all_reduce' AND phase = 'forward') THEN NULL ELSE false END AS group_forward_all_reduce,
       CASE WHEN bool_or(op = 'reduce_scatter' AND phase = 'forward') THEN NULL ELSE false END
           AS group_forward_reduce_scatter,
       CASE WHEN bool_or(op = 'reduce_scatter' AND phase = 'backward') THEN NULL ELSE false END
           AS group_backward_reduce_scatter,
       CASE WHEN bool_or(op = 'all_to_all' AND uneven_split) THEN NULL ELSE false END AS group_uneven_all_to_all,
       CASE WHEN bool_or(op = 'all_to_all' AND attention_between) THEN NULL ELSE false END AS group_attention_all_to_all
FROM base WHERE group_key IS NULL GROUP BY rank;

CREATE OR REPLACE TABLE comm_features AS
SELECT b.*, s.p2p_shape,
       CASE WHEN b.group_key IS NULL THEN u.group_forward_all_reduce
            ELSE coalesce(g.group_forward_all_reduce, false) END AS group_forward_all_reduce,
       CASE WHEN b.group_key IS NULL THEN u.group_forward_reduce_scatter
            ELSE coalesce(g.group_forward_reduce_scatter, false) END AS group_forward_reduce_scatter,
       CASE WHEN b.group_key IS NULL THEN u.group_backward_reduce_scatter
            ELSE coalesce(g.group_backward_reduce_scatter, false) END AS group_backward_reduce_scatter,
       CASE WHEN b.group_key IS NULL THEN u.group_uneven_all_to_all
            ELSE coalesce(g.group_uneven_all_to_all, false) END AS group_uneven_all_to_all,
       CASE WHEN b.group_key IS NULL THEN u.group_attention_all_to_all
            ELSE coalesce(g.group_attention_all_to_all, false) END AS group_attention_all_to_all
FROM base b
LEFT JOIN p2p_shape s ON s.group_key = b.group_key AND b.op IN ('send', 'recv')
LEFT JOIN group_traits g ON g.group_key = b.group_key
LEFT JOIN unknown_group_traits u ON u.rank = b.rank;

DROP TABLE ctx_events; DROP TABLE backward_window;
DROP TABLE op_in_pass; DROP TABLE op_ctx; DROP TABLE a2a_window; DROP TABLE a2a_between;
DROP TABLE base; DROP TABLE p2p_links; DROP TABLE p2p_shape; DROP TABLE group_traits; DROP TABLE unknown_group_traits;
