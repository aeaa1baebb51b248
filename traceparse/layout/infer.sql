-- What layout inference (traceparse/layout/infer.py) reads of the store being built: the tagged communication's
-- group sizes and variants, the passes per step, the schedule annotations and the pipeline's sends. TEMP views and
-- macros of the build's connection (pass_events is one of its intermediate tables), after the vocabulary's name_totals.

-- layout_tagged_sizes: per strategy and group size, its tagged operations.
CREATE OR REPLACE TEMP VIEW layout_tagged_sizes AS
SELECT strategy, group_size, count(*) AS n FROM comm_ops WHERE strategy IS NOT NULL GROUP BY ALL;

-- layout_dp_variants: per variant (ZeRO stage pattern), the dp-tagged operations.
CREATE OR REPLACE TEMP VIEW layout_dp_variants AS
SELECT variant, count(*) AS n FROM comm_ops WHERE strategy = 'dp' GROUP BY variant;

-- layout_dp_groups: per group size and variant, the dp-tagged operations whose group size is known.
CREATE OR REPLACE TEMP VIEW layout_dp_groups AS
SELECT group_size, variant, count(*) AS n FROM comm_ops WHERE strategy = 'dp' AND group_size IS NOT NULL GROUP BY ALL;

-- layout_forward_passes(names): per rank and profiled step, the ops named ``names`` (a wrapper's forward), from the
-- vocabulary's name_totals.
CREATE OR REPLACE TEMP MACRO layout_forward_passes(names) AS TABLE
SELECT rank, step, sum(calls)::BIGINT AS n FROM name_totals WHERE step IS NOT NULL AND list_contains(names::VARCHAR[], name)
GROUP BY ALL;

-- layout_backward_passes: per rank and step, the backward passes on the main thread that follow forward compute.
CREATE OR REPLACE TEMP VIEW layout_backward_passes AS
SELECT rank, step, count(DISTINCT pass) FILTER (WHERE autograd AND pass > 0) AS n
FROM pass_events WHERE main_thread GROUP BY rank, step;

-- layout_stage_actions: per rank, the stages and the actions (F, B, I, W; OVERLAP_F_B for a fused pair) its
-- schedule annotations name.
CREATE OR REPLACE TEMP VIEW layout_stage_actions AS
SELECT rank, list(DISTINCT stage) AS stages,
       list(DISTINCT CASE WHEN fused THEN 'OVERLAP_F_B' ELSE action END) AS actions
FROM pipeline_marks WHERE stage IS NOT NULL AND (fused OR action IN ('F', 'B', 'I', 'W')) GROUP BY rank;

-- layout_marked: the stages and micro-batches the (unfused) schedule annotations name.
CREATE OR REPLACE TEMP VIEW layout_marked AS
SELECT coalesce(list(DISTINCT stage), []) AS stages, coalesce(list(DISTINCT microbatch), []) AS microbatches
FROM pipeline_marks WHERE NOT fused;

-- layout_pp_sends: per pipeline group (its ranks sorted, and in stage order), rank and peer, the pp sends per step.
CREATE OR REPLACE TEMP VIEW layout_pp_sends AS
SELECT list_sort(group_ranks) AS g, group_ranks, rank, peer, count(*) // count(DISTINCT step) AS per_step
FROM comm_ops
WHERE strategy = 'pp' AND op = 'send' AND peer IS NOT NULL AND group_ranks IS NOT NULL AND step IS NOT NULL
GROUP BY ALL;

-- layout_last_stage_ops: the pp operations of the first pipeline group's last stage with the stage before it, in
-- the first step with pp operations (their order tells 1F1B from GPipe).
CREATE OR REPLACE TEMP VIEW layout_last_stage_ops AS
WITH last AS (SELECT rank, group_ranks[len(group_ranks)] AS last_rank, group_ranks[len(group_ranks) - 1] AS prev
              FROM comm_ops WHERE strategy = 'pp' AND group_ranks IS NOT NULL
              ORDER BY list_sort(group_ranks), rank LIMIT 1)
SELECT c.op, c.host_ts_ns FROM comm_ops c, last
WHERE c.strategy = 'pp' AND c.rank = last.last_rank AND c.peer = last.prev
  AND c.step = (SELECT min(step) FROM comm_ops WHERE strategy = 'pp');
