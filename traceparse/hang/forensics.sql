-- What hang forensics (traceparse/hang/forensics.py) reads of a store: the calls of the Flight Recorder's dumps, or
-- without dumps the traces' operations as calls, and what dumps and traces say of each group's members. Reads
-- fr_entries, comm_ops, process_groups and load_issues. TEMP views and macros of the connection.

-- hang_fr_calls: each dumped call (a p2p call numbered by its p2p sequence, 0 read as none), ord its record's place.
CREATE OR REPLACE TEMP VIEW hang_fr_calls AS
SELECT rank, group_ranks, group_source, pg_name, pg_desc,
       CASE WHEN op IN ('send', 'recv') THEN nullif(p2p_seq, 0) ELSE seq END AS seq, op_id, op, peer, backend,
       input_sizes, output_sizes, input_dtypes, output_dtypes, state, retired, time_created_ns AS time_ns,
       frames, record_id AS ord
FROM fr_entries;

-- hang_traced_collectives: the traces' collectives of known groups (their c10d op and input size), to name a dumped
-- call's op.
CREATE OR REPLACE TEMP VIEW hang_traced_collectives AS
SELECT rank, pg_name, group_ranks, op, name, in_nelems, host_ts_ns, op_id FROM comm_ops
WHERE group_ranks IS NOT NULL AND op NOT IN ('send', 'recv');

-- hang_trace_calls: without dumps, comm_ops as calls: collectives numbered per rank and group in issue order (from
-- 1), sends and receives apart.
CREATE OR REPLACE TEMP VIEW hang_trace_calls AS
SELECT rank, group_ranks, group_source, pg_name, pg_desc, op, peer_in_group,
       CASE WHEN op IN ('send', 'recv') THEN NULL ELSE
         row_number() OVER (PARTITION BY rank, pg_name, group_ranks, op IN ('send', 'recv')
                            ORDER BY host_ts_ns, op_id) END AS seq,
       NULL AS op_id, CASE WHEN peer_in_group IS NOT NULL THEN group_ranks[peer_in_group + 1] END AS peer,
       CAST(bytes_in AS VARCHAR) AS input_sizes, NULL AS output_sizes, dtype AS input_dtypes,
       NULL AS output_dtypes, host_ts_ns AS time_ns, 'completed' AS state, [] AS frames, op_id AS ord
FROM comm_ops WHERE group_ranks IS NOT NULL;

-- hang_group_tag(members, name, kind): the strategy and variant the traces' tags give most of a group's operations
-- of that op.
CREATE OR REPLACE TEMP MACRO hang_group_tag(members, name, kind) AS TABLE
SELECT strategy, variant FROM comm_ops
WHERE group_ranks = members::INTEGER[] AND pg_name = name AND op = kind AND strategy IS NOT NULL
GROUP BY ALL ORDER BY count(*) DESC LIMIT 1;

-- hang_axis(description, name): the parallel axis a group's description or name gives (group_axis, macros.sql).
CREATE OR REPLACE TEMP MACRO hang_axis(description, name) AS TABLE SELECT group_axis(description, name) AS axis;

-- hang_last_traced(r): the last operation rank r's trace holds, as a call.
CREATE OR REPLACE TEMP MACRO hang_last_traced(r) AS TABLE
SELECT rank, op, group_ranks, pg_name, pg_desc, NULL AS seq, 'in its trace' AS state, 'in_trace' AS outcome,
       [] AS frames
FROM comm_ops WHERE rank = r ORDER BY host_ts_ns DESC LIMIT 1;

-- hang_declared_groups: each group a dump's pg_config lists, with the ranks whose dumps list it so.
CREATE OR REPLACE TEMP VIEW hang_declared_groups AS
SELECT pg_name, any_value(pg_desc) AS pg_desc, group_ranks, list(DISTINCT rank ORDER BY rank) AS dumped_by
FROM fr_entries WHERE group_source = 'pg_config' GROUP BY pg_name, group_ranks;

-- hang_outsider_calls: ranks that call on a group another dump's pg_config lists without them (and none with them).
CREATE OR REPLACE TEMP VIEW hang_outsider_calls AS
SELECT f.pg_name, any_value(f.pg_desc) AS pg_desc, list(DISTINCT f.rank ORDER BY f.rank) AS callers,
       any_value(d.group_ranks) AS group_ranks, any_value(d.rank) AS dumped_by
FROM fr_entries f JOIN (SELECT pg_name, group_ranks, min(rank) AS rank FROM fr_entries
                        WHERE group_source = 'pg_config' GROUP BY ALL) d
  ON d.pg_name = f.pg_name AND NOT list_contains(d.group_ranks, f.rank)
WHERE f.group_source IS DISTINCT FROM 'pg_config' AND NOT EXISTS (
    SELECT 1 FROM fr_entries e WHERE e.group_source = 'pg_config' AND e.pg_name = f.pg_name
    AND list_contains(e.group_ranks, f.rank))
GROUP BY f.pg_name;

-- hang_dump_against_trace: a rank whose dump's pg_config and trace's process group list different ranks for a group.
CREATE OR REPLACE TEMP VIEW hang_dump_against_trace AS
SELECT DISTINCT f.pg_name, f.pg_desc, f.group_ranks, f.rank, p.ranks AS traced
FROM fr_entries f JOIN process_groups p ON p.pg_name = f.pg_name AND p.rank = f.rank
WHERE f.group_source = 'pg_config' AND p.ranks IS NOT NULL AND list_sort(p.ranks) <> f.group_ranks;

-- hang_own_outsiders: ranks that call on a group their own dumps' pg_config lists without them.
CREATE OR REPLACE TEMP VIEW hang_own_outsiders AS
SELECT pg_name, any_value(pg_desc) AS pg_desc, group_ranks, list(DISTINCT rank ORDER BY rank) AS callers
FROM fr_entries WHERE group_source = 'pg_config' AND NOT list_contains(group_ranks, rank)
GROUP BY pg_name, group_ranks;

-- hang_groups: every group a dump, a trace's process groups or a traced operation names with its ranks (sorted).
CREATE OR REPLACE TEMP VIEW hang_groups AS
SELECT pg_name, pg_desc, list_sort(group_ranks) AS members FROM fr_entries WHERE len(group_ranks) > 0
UNION ALL SELECT pg_name, pg_desc, list_sort(ranks) FROM process_groups WHERE len(ranks) > 0
UNION ALL SELECT pg_name, pg_desc, list_sort(group_ranks) FROM comm_ops WHERE len(group_ranks) > 0;

-- hang_dump_only_groups: groups whose members are known only as the ranks whose dumps call on them.
CREATE OR REPLACE TEMP VIEW hang_dump_only_groups AS
SELECT pg_name, any_value(pg_desc) AS pg_desc, any_value(group_ranks) AS group_ranks FROM fr_entries
WHERE group_source = 'dumps' GROUP BY pg_name;

-- hang_last_step_p2p: the sends and receives each rank's last traced step posted.
CREATE OR REPLACE TEMP VIEW hang_last_step_p2p AS
SELECT rank, op, peer, host_ts_ns FROM comm_ops WHERE op IN ('send', 'recv')
  AND step = (SELECT max(step) FROM comm_ops c WHERE c.rank = comm_ops.rank);

-- hang_empty_folders: the folders nothing was read from (their load issues).
CREATE OR REPLACE TEMP VIEW hang_empty_folders AS
SELECT file, what FROM load_issues WHERE what LIKE 'nothing read from this folder%';
