-- comm_ops: one row per communication operation per rank.
--
-- A CPU-side call shows as nested events on one thread (c10d::op > record_param_comms >
-- nccl:op, or _c10d_functional::op > c10d::op); the outermost one anchors the operation.
-- Its execution is the NCCL/RCCL kernel(s) launched inside it (runtime launch with the same
-- correlation id, or the same External id), or, for gloo, the gloo:<op> annotation the worker
-- thread records (matched in order per rank, op and size). Kernels with no CPU call, and
-- custom communication kernels named by rules/comm_kernels, are operations of their own.

CREATE TEMP TABLE cpu_comm AS
SELECT e.rank, e.ev_id, e.tid, e.name, e.ts_ns, e.ts_ns + e.dur_ns AS end_ns, e.external_id
FROM events e
WHERE coalesce(e.cat, '') NOT IN ('kernel', 'gpu_user_annotation', 'cuda_runtime', 'cuda_driver',
                                 'gpu_memcpy', 'gpu_memset', 'python_function')
  AND is_comm_call(e.name)
  AND (e.name = 'record_param_comms' OR (norm_op(e.name) != 'unknown' AND e.name NOT LIKE '%wait%'));

-- nested calls -> one group per outermost call
CREATE TEMP TABLE cpu_comm_grouped AS
SELECT * EXCLUDE (k, s, e, piece), piece AS grp
FROM interval_pieces('SELECT {''rank'': rank, ''tid'': tid} AS k, ts_ns AS s, end_ns AS e, * FROM cpu_comm', false);

CREATE TEMP TABLE call AS
WITH info AS (
    SELECT g.rank, g.tid, g.grp, c.*,
           row_number() OVER (PARTITION BY g.rank, g.tid, g.grp
                              ORDER BY (c.source = 'args') DESC, (c.in_nelems IS NOT NULL) DESC,
                                       (c.dtype IS NOT NULL) DESC, g.ts_ns) AS rn
    FROM cpu_comm_grouped g JOIN comm_args c ON c.rank = g.rank AND c.ev_id = g.ev_id
    WHERE g.name NOT LIKE 'nccl:%'  -- an nccl: annotation's shapes give sizes only (call_size below)
),
grp AS (
    SELECT rank, tid, grp,
           first(ev_id ORDER BY ts_ns, end_ns DESC, ev_id) AS op_id,
           first(name ORDER BY ts_ns, end_ns DESC, ev_id) AS name,
           min(ts_ns) AS host_ts_ns, max(end_ns) AS host_end_ns,
           bool_or(name = 'record_param_comms') AS has_rpc,
           bool_or(name LIKE 'c10d::%') AS has_c10d,
           bool_or(name LIKE 'symm_mem::%') AS has_symm_mem,
           bool_or(name = 'c10d::alltoall_') AS has_list_alltoall,
           first(norm_op(name) ORDER BY (name = 'record_param_comms'), ts_ns DESC)
               FILTER (WHERE name != 'record_param_comms') AS name_op
    FROM cpu_comm_grouped GROUP BY rank, tid, grp
)
SELECT g.*, i.coll_name, i.in_nelems, i.out_nelems, i.group_size, i.dtype, i.in_split, i.out_split,
       i.pg_name, i.pg_desc, i.pg_ranks, i.seq, i.rank_start, i.rank_stride, p.peer,
       coalesce(CASE WHEN norm_op(i.coll_name) != 'unknown' THEN norm_op(i.coll_name) END, g.name_op, 'unknown') AS op,
       CASE WHEN g.has_rpc THEN 'record_param_comms' WHEN g.has_c10d THEN 'c10d'
            WHEN g.has_symm_mem THEN 'symm_mem' WHEN g.name LIKE 'nccl:%' THEN 'nccl_annotation'
            ELSE 'functional' END AS source
FROM grp g
LEFT JOIN info i ON i.rank = g.rank AND i.tid = g.tid AND i.grp = g.grp AND i.rn = 1
-- the peer is stated by the c10d op (its shapes), not by record_param_comms
LEFT JOIN (SELECT rank, tid, grp, first(peer) AS peer FROM info WHERE peer IS NOT NULL GROUP BY ALL) p
       ON p.rank = g.rank AND p.tid = g.tid AND p.grp = g.grp;

-- Each call's size, field by field from the first record that has it, in this order:
-- 'args' (record_param_comms' "In/Out msg nelems", "dtype"), 'annotation shapes' (the recorded inputs of
-- the nccl:<op> annotation, when it is the call's op; not for a list all_to_all, whose annotation records
-- only the first tensor), 'c10d shapes' / 'symm_mem shapes' (the op's recorded shapes, by its schema).
-- Kernel args come next (ops below); other ranks' copies last (finish.sql).
CREATE TEMP TABLE call_size AS
WITH r AS (
    SELECT c.rank, c.op_id, g.ts_ns, a.in_nelems, a.out_nelems, a.dtype,
           CASE WHEN a.source = 'args' THEN 'args' WHEN g.name LIKE 'nccl:%' THEN 'annotation shapes'
                WHEN g.name LIKE 'symm_mem::%' THEN 'symm_mem shapes' ELSE 'c10d shapes' END AS size_source,
           CASE WHEN a.source = 'args' THEN 1 WHEN g.name LIKE 'nccl:%' THEN 2 ELSE 3 END AS pref
    FROM call c
    JOIN cpu_comm_grouped g ON g.rank = c.rank AND g.tid = c.tid AND g.grp = c.grp
    JOIN comm_args a ON a.rank = g.rank AND a.ev_id = g.ev_id
    WHERE NOT (g.name LIKE 'nccl:%' AND a.source = 'shapes'
               AND (norm_op(a.coll_name) IS DISTINCT FROM c.op OR (c.op = 'all_to_all' AND c.has_list_alltoall)))
)
SELECT rank, op_id,
       first(in_nelems ORDER BY pref, ts_ns) FILTER (WHERE in_nelems IS NOT NULL) AS in_nelems,
       first(size_source ORDER BY pref, ts_ns) FILTER (WHERE in_nelems IS NOT NULL) AS size_source,
       first(out_nelems ORDER BY pref, ts_ns) FILTER (WHERE out_nelems IS NOT NULL) AS out_nelems,
       first(dtype ORDER BY pref, ts_ns) FILTER (WHERE dtype IS NOT NULL) AS dtype
FROM r GROUP BY rank, op_id;

-- communication kernels and how they tie to calls
CREATE TEMP TABLE comm_kernel AS
SELECT k.rank, k.ev_id, k.name, k.ts_ns, k.dur_ns, k.stream, k.correlation, k.external_id,
       r.tid AS launch_tid, r.ts_ns AS launch_ts
FROM events k
LEFT JOIN events r ON r.rank = k.rank AND r.correlation = k.correlation
                  AND r.cat IN ('cuda_runtime', 'cuda_driver') AND k.correlation IS NOT NULL
WHERE k.cat = 'kernel' AND is_comm_kernel_name(k.name);

CREATE TEMP TABLE kernel_call AS
SELECT k.rank, k.ev_id AS k_ev, c.op_id
FROM comm_kernel k
ASOF JOIN call c ON c.rank = k.rank AND c.tid = k.launch_tid AND k.launch_ts >= c.host_ts_ns
WHERE k.launch_ts <= c.host_end_ns;

INSERT INTO kernel_call
SELECT k.rank, k.ev_id, first(c.op_id)
FROM comm_kernel k
JOIN cpu_comm_grouped m ON m.rank = k.rank AND m.external_id = k.external_id
JOIN call c ON c.rank = m.rank AND c.tid = m.tid AND c.grp = m.grp
WHERE k.external_id IS NOT NULL AND k.ev_id NOT IN (SELECT k_ev FROM kernel_call kc WHERE kc.rank = k.rank)
GROUP BY k.rank, k.ev_id;

CREATE TEMP TABLE call_exec AS
SELECT kc.rank, kc.op_id, min(k.ts_ns) AS exec_ts_ns, max(k.ts_ns + k.dur_ns) - min(k.ts_ns) AS exec_dur_ns,
       first(k.stream ORDER BY k.ts_ns) AS exec_stream, first(k.name ORDER BY k.ts_ns) AS kernel,
       first(a.coll_name) FILTER (WHERE a.coll_name IS NOT NULL) AS k_coll,
       first(a.in_nelems) FILTER (WHERE a.in_nelems IS NOT NULL) AS k_in,
       first(a.out_nelems) FILTER (WHERE a.out_nelems IS NOT NULL) AS k_out,
       first(a.dtype) FILTER (WHERE a.dtype IS NOT NULL) AS k_dtype,
       first(norm_op(k.name)) AS k_op
FROM kernel_call kc
JOIN comm_kernel k ON k.rank = kc.rank AND k.ev_id = kc.k_ev
LEFT JOIN comm_args a ON a.rank = k.rank AND a.ev_id = k.ev_id
GROUP BY kc.rank, kc.op_id;

-- gloo: the worker's annotation for the k-th call of the same op and size on the rank
CREATE TEMP TABLE gloo_exec AS
WITH calls AS (
    SELECT rank, op_id, CASE WHEN op = 'reduce_scatter' THEN 'all_reduce' ELSE op END AS exec_op,
           in_nelems,
           row_number() OVER (PARTITION BY rank, CASE WHEN op = 'reduce_scatter' THEN 'all_reduce' ELSE op END, in_nelems
                              ORDER BY host_ts_ns, op_id) AS k
    FROM call
    WHERE has_c10d AND (rank, op_id) NOT IN (SELECT (rank, op_id) FROM call_exec)
),
runs AS (
    SELECT e.rank, e.ev_id, e.tid, e.name, e.ts_ns, e.dur_ns, a.coll_name AS exec_op, a.in_nelems, a.dtype,
           row_number() OVER (PARTITION BY e.rank, a.coll_name, a.in_nelems ORDER BY e.ts_ns, e.ev_id) AS k
    FROM events e JOIN comm_args a ON a.rank = e.rank AND a.ev_id = e.ev_id
    WHERE e.name LIKE 'gloo:%'
)
SELECT c.rank, c.op_id, r.ts_ns AS exec_ts_ns, r.dur_ns AS exec_dur_ns, r.tid AS exec_stream,
       r.name AS kernel, r.dtype
FROM calls c JOIN runs r ON r.rank = c.rank AND r.exec_op = c.exec_op
                        AND r.in_nelems IS NOT DISTINCT FROM c.in_nelems AND r.k = c.k;

-- the rank's only process group, when it reports exactly one
CREATE TEMP TABLE only_group AS
SELECT rank, any_value(pg_name) AS pg_name, any_value(pg_desc) AS pg_desc,
       any_value(pg_size) AS pg_size, any_value(ranks) AS ranks
FROM process_groups GROUP BY rank HAVING count(*) = 1;

CREATE TEMP TABLE ops AS
SELECT c.rank, c.op_id,
       CASE WHEN c.op IN ('unknown', 'send_recv') AND x.k_coll IS NOT NULL THEN norm_op(x.k_coll)
            WHEN c.op = 'unknown' AND x.k_op IS NOT NULL THEN x.k_op ELSE c.op END AS op,
       c.source, c.name,
       coalesce(cs.dtype, x.k_dtype, ge.dtype) AS dtype,
       coalesce(cs.in_nelems, x.k_in) AS in_nelems, coalesce(cs.out_nelems, x.k_out) AS out_nelems,
       CASE WHEN cs.in_nelems IS NOT NULL THEN cs.size_source WHEN x.k_in IS NOT NULL THEN 'kernel args' END
           AS size_source,
       c.in_split, c.out_split,
       coalesce(c.pg_name, og.pg_name) AS pg_name,
       coalesce(c.pg_desc, pg.pg_desc, og.pg_desc) AS pg_desc,
       coalesce(CAST(c.group_size AS INTEGER), pg.pg_size, og.pg_size) AS group_size,
       coalesce(TRY_CAST(c.pg_ranks AS INTEGER[]), pg.ranks,
                CASE WHEN c.rank_start IS NOT NULL AND c.group_size IS NOT NULL AND s.fits
                     THEN CAST(range(c.rank_start, c.rank_start + c.group_size * coalesce(c.rank_stride, 1),
                                     coalesce(c.rank_stride, 1)) AS INTEGER[]) END,
                og.ranks) AS group_ranks,
       CASE WHEN TRY_CAST(c.pg_ranks AS INTEGER[]) IS NOT NULL THEN 'trace args'
            WHEN pg.ranks IS NOT NULL THEN 'process group name'
            WHEN c.rank_start IS NOT NULL AND c.group_size IS NOT NULL AND s.fits THEN 'global rank start/stride'
            WHEN og.ranks IS NOT NULL THEN 'the rank''s only process group' END AS group_source,
       c.peer AS peer_in_group,
       c.seq, c.host_ts_ns, c.host_end_ns - c.host_ts_ns AS host_dur_ns, c.tid,
       coalesce(x.exec_ts_ns, ge.exec_ts_ns) AS exec_ts_ns, coalesce(x.exec_dur_ns, ge.exec_dur_ns) AS exec_dur_ns,
       coalesce(x.exec_stream, ge.exec_stream) AS exec_stream, coalesce(x.kernel, ge.kernel) AS kernel
FROM call c
-- 'Global rank start/stride' make a group only when its ranks are ranks of the job (int32, at most the
-- world size the traces state, vocabulary/world.sql, else 4096): a parsed start, stride or size must not build a
-- list of billions (guard)
CROSS JOIN LATERAL (SELECT c.group_size BETWEEN 1 AND coalesce((SELECT stated FROM world), 4096)
                           AND c.rank_start BETWEEN 0 AND 2147483647
                           AND c.rank_start + (c.group_size - 1) * coalesce(c.rank_stride, 1) BETWEEN 0 AND 2147483647
                           AS fits) s
LEFT JOIN call_exec x ON x.rank = c.rank AND x.op_id = c.op_id
LEFT JOIN call_size cs ON cs.rank = c.rank AND cs.op_id = c.op_id
LEFT JOIN gloo_exec ge ON ge.rank = c.rank AND ge.op_id = c.op_id
LEFT JOIN process_groups pg ON pg.rank = c.rank AND pg.pg_name = c.pg_name
LEFT JOIN only_group og ON og.rank = c.rank AND c.pg_name IS NULL AND c.pg_ranks IS NULL
-- record_param_comms of a wait (coll_name 'wait', or a lone record without args that launches nothing)
WHERE NOT (c.op = 'unknown' AND x.op_id IS NULL);

-- kernels with no CPU call, and custom communication kernels
INSERT INTO ops
SELECT k.rank, k.ev_id, coalesce(CASE WHEN norm_op(a.coll_name) != 'unknown' THEN norm_op(a.coll_name) END, norm_op(k.name)),
       'kernel', k.name, a.dtype, a.in_nelems, a.out_nelems,
       CASE WHEN a.in_nelems IS NOT NULL THEN 'kernel args' END, a.in_split, a.out_split,
       a.pg_name, coalesce(a.pg_desc, pg.pg_desc), coalesce(CAST(a.group_size AS INTEGER), pg.pg_size),
       coalesce(TRY_CAST(a.pg_ranks AS INTEGER[]), pg.ranks),
       CASE WHEN TRY_CAST(a.pg_ranks AS INTEGER[]) IS NOT NULL THEN 'trace args'
            WHEN pg.ranks IS NOT NULL THEN 'process group name' END, NULL, a.seq,
       NULL, NULL, NULL, k.ts_ns, k.dur_ns, k.stream, k.name
FROM comm_kernel k
LEFT JOIN comm_args a ON a.rank = k.rank AND a.ev_id = k.ev_id
LEFT JOIN process_groups pg ON pg.rank = k.rank AND pg.pg_name = a.pg_name
WHERE (k.rank, k.ev_id) NOT IN (SELECT (rank, k_ev) FROM kernel_call);

INSERT INTO ops
WITH names AS (SELECT DISTINCT name FROM events WHERE cat = 'kernel' AND NOT is_comm_kernel_name(name)),
matched AS (SELECT n.name, first(r.op ORDER BY r.id) AS op
            FROM names n JOIN comm_kernel_rules r ON regexp_matches(n.name, r.pattern) GROUP BY n.name)
SELECT k.rank, k.ev_id, m.op, 'custom_kernel', k.name, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, k.ts_ns, k.dur_ns, k.stream, k.name
FROM events k JOIN matched m ON k.name = m.name
WHERE k.cat = 'kernel';

INSERT INTO comm_ops
SELECT o.rank, o.op_id, o.op, o.source, o.name, o.dtype, dtype_bytes(o.dtype) AS elem_bytes,
       o.in_nelems, o.out_nelems,
       o.in_nelems * dtype_bytes(o.dtype), o.out_nelems * dtype_bytes(o.dtype), o.size_source,
       o.in_split, o.out_split, o.pg_name, o.pg_desc, o.group_size, o.group_ranks, o.group_source,
       NULL AS peer, o.peer_in_group, o.seq, NULL AS group_index,
       s.step, o.host_ts_ns, o.host_dur_ns, o.tid, o.exec_ts_ns, o.exec_dur_ns, o.exec_stream, o.kernel,
       NULL, NULL, NULL, NULL
FROM ops o
LEFT JOIN events s ON s.rank = o.rank AND s.ev_id = o.op_id;

-- Why an operation has no size (bytes_in NULL): what its records lack. finish.sql adds what other
-- ranks could not give and turns what stays unknown into one load issue per file.
CREATE TEMP TABLE size_gap AS
WITH shaped AS (
    SELECT c.rank, c.op_id,
           count(oa.ev_id) AS n_shaped,
           bool_or(g.name LIKE 'nccl:%' AND a.in_nelems IS NOT NULL) AS ann_sized,
           bool_or(g.name LIKE 'c10d::%' AND oa.ev_id IS NOT NULL AND a.in_nelems IS NULL) AS c10d_unsized
    FROM call c
    JOIN cpu_comm_grouped g ON g.rank = c.rank AND g.tid = c.tid AND g.grp = c.grp
    LEFT JOIN op_args oa ON oa.rank = g.rank AND oa.ev_id = g.ev_id
    LEFT JOIN comm_args a ON a.rank = g.rank AND a.ev_id = g.ev_id AND a.source = 'shapes'
    GROUP BY c.rank, c.op_id
),
rank_shapes AS (SELECT rank, count(*) AS n FROM op_args GROUP BY rank)
SELECT o.rank, o.op_id,
       CASE
           WHEN o.in_nelems IS NOT NULL AND o.dtype IS NULL THEN 'its element count is known but not its element type'
           WHEN o.in_nelems IS NOT NULL THEN 'its element type ''' || o.dtype || ''' has no known width'
           WHEN o.source = 'custom_kernel' THEN 'a custom communication kernel (rules/comm_kernels), whose trace records no size'
           WHEN o.source = 'kernel' THEN 'an NCCL kernel with no CPU-side call and no ''In msg nelems'' in its args'
           ELSE concat_ws(', ',
               CASE WHEN c.has_rpc THEN 'record_param_comms without ''In msg nelems''' ELSE 'no record_param_comms' END,
               CASE WHEN coalesce(s.n_shaped, 0) = 0 AND coalesce(rs.n, 0) = 0 THEN 'no recorded shapes (record_shapes off)'
                    WHEN coalesce(s.n_shaped, 0) = 0 THEN 'no recorded shapes on its c10d op or nccl: annotation'
                    WHEN c.has_list_alltoall AND s.ann_sized
                        THEN 'a list all_to_all, whose nccl:all_to_all annotation records only the first tensor'
                    WHEN s.c10d_unsized THEN 'its c10d op records its tensor list without shapes'
                    ELSE 'recorded shapes without its tensors' END,
               CASE WHEN x.op_id IS NOT NULL THEN 'no ''In msg nelems'' in its NCCL kernel''s args'
                    WHEN o.exec_ts_ns IS NULL THEN 'no kernel linked' END)
       END AS why
FROM ops o
LEFT JOIN call c ON c.rank = o.rank AND c.op_id = o.op_id AND o.source NOT IN ('kernel', 'custom_kernel')
LEFT JOIN shaped s ON s.rank = o.rank AND s.op_id = o.op_id
LEFT JOIN rank_shapes rs ON rs.rank = o.rank
LEFT JOIN call_exec x ON x.rank = o.rank AND x.op_id = o.op_id AND o.source NOT IN ('kernel', 'custom_kernel')
WHERE o.in_nelems IS NULL OR dtype_bytes(o.dtype) IS NULL;
