-- What the model, layout and optimizer facts (traceparse/layout/model_facts.py) read of a store: the run's shape,
-- its gradient collectives, the recorded shapes of its ops and its optimizer's step. TEMP views and macros of the
-- connection (store.query.define), after the vocabulary's recorded_inputs, name_totals, optimizer_spans and
-- main_thread_ops. ``stepped``: the run has ProfilerStep windows, so only the complete steps
-- (step_windows) count; else every operation does.

-- facts_run_shape: ranks loaded, complete profiled steps, whether the run has steps, the ranks cut short (kept_until_ns).
CREATE OR REPLACE TEMP VIEW facts_run_shape AS
SELECT (SELECT count(*) FROM ranks) AS ranks, (SELECT count(DISTINCT step) FROM step_windows) AS steps,
       (SELECT count(*) > 0 FROM steps) AS stepped,
       (SELECT coalesce(list(rank ORDER BY rank), []) FROM ranks WHERE kept_until_ns IS NOT NULL) AS cut;

-- facts_elem_size(s): the most common element size of strategy s's collectives with a known dtype, and those dtypes.
CREATE OR REPLACE TEMP MACRO facts_elem_size(s) AS TABLE
SELECT elem_bytes, string_agg(DISTINCT dtype, ', ' ORDER BY dtype) AS dtypes, count(*) AS n FROM comm_ops
WHERE strategy = s AND elem_bytes IS NOT NULL GROUP BY 1 ORDER BY 3 DESC, 1 LIMIT 1;

-- facts_grad_bytes(stepped, unmeasured): per rank (but the ranks ``unmeasured``), the input bytes of its dp gradient
-- collectives: all-reduce for ZeRO-0/1, reduce-scatter for ZeRO-2/3.
CREATE OR REPLACE TEMP MACRO facts_grad_bytes(stepped, unmeasured) AS TABLE
SELECT rank, any_value(variant) AS variant, sum(bytes_in) AS b, count(*) AS n, max(elem_bytes) AS eb
FROM comm_ops
WHERE strategy = 'dp' AND bytes_in IS NOT NULL
  AND ((rank, step) IN (SELECT (rank, step) FROM step_windows) OR NOT stepped)
  AND NOT list_contains(unmeasured, rank)
  AND ((op = 'all_reduce' AND coalesce(variant, 'zero0') IN ('zero0', 'zero1'))
    OR (op = 'reduce_scatter' AND coalesce(variant, 'zero2') IN ('zero2', 'zero3')))
GROUP BY rank;

-- facts_reduce_scatters: per rank, complete step and size, the ZeRO-2/3 gradient reduce-scatters of that size.
CREATE OR REPLACE TEMP VIEW facts_reduce_scatters AS
SELECT rank, step, bytes_in, count(*) AS n FROM comm_ops
WHERE strategy = 'dp' AND op = 'reduce_scatter' AND variant IN ('zero2', 'zero3')
  AND (rank, step) IN (SELECT (rank, step) FROM step_windows) AND bytes_in IS NOT NULL
GROUP BY ALL;

-- facts_accumulate_grad(stepped): each AccumulateGrad's rank and recorded input shapes.
CREATE OR REPLACE TEMP MACRO facts_accumulate_grad(stepped) AS TABLE
SELECT rank, input_dims FROM recorded_inputs
WHERE name = 'torch::autograd::AccumulateGrad'
  AND ((rank, step) IN (SELECT (rank, step) FROM step_windows) OR NOT stepped);

-- facts_pp_received: the shapes each rank receives on pp-tagged calls (a stage's activations and gradients).
CREATE OR REPLACE TEMP VIEW facts_pp_received AS
SELECT DISTINCT c.rank, r.input_dims FROM comm_intervals c JOIN recorded_inputs r USING (rank, ev_id)
WHERE c.strategy = 'pp' AND c.op = 'recv';

-- facts_event_ranks: how many ranks recorded any event (ranks.n_complete: their complete events).
CREATE OR REPLACE TEMP VIEW facts_event_ranks AS
SELECT count(*) AS n FROM ranks WHERE n_complete > 0;

-- facts_mode_dims(names, stepped): the most common recorded input shapes of the ops named ``names``.
CREATE OR REPLACE TEMP MACRO facts_mode_dims(names, stepped) AS TABLE
SELECT input_dims, count(*) AS n FROM recorded_inputs
WHERE list_contains(names::VARCHAR[], name) AND (step IS NOT NULL OR NOT stepped)
GROUP BY 1 ORDER BY n DESC, 1 LIMIT 1;

-- facts_calls(names, stepped): how many ops named ``names`` ran.
CREATE OR REPLACE TEMP MACRO facts_calls(names, stepped) AS TABLE
SELECT coalesce(sum(calls), 0)::BIGINT AS n FROM name_totals
WHERE list_contains(names::VARCHAR[], name) AND (step IS NOT NULL OR NOT stepped);

-- facts_top_k: the most common k of the aten::topk calls (the MoE router's), as recorded.
CREATE OR REPLACE TEMP VIEW facts_top_k AS
SELECT json_extract_string(concrete_inputs, '$[1]') AS k, count(*) AS n FROM recorded_inputs
WHERE name = 'aten::topk' GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 1;

-- facts_optimizers: the optimizer classes of the Optimizer.step#<Name>.step annotations (optimizer_class).
CREATE OR REPLACE TEMP VIEW facts_optimizers AS
SELECT DISTINCT optimizer_class(name) AS c FROM name_totals WHERE c IS NOT NULL;

-- facts_sgd_ops(step_name): inside the optimizer step annotations named step_name (optimizer_spans), the main thread's
-- CPU ops that multiply (momentum buffers) and those that add.
CREATE OR REPLACE TEMP MACRO facts_sgd_ops(step_name) AS TABLE
SELECT count(*) FILTER (WHERE i.name IN ('aten::mul_', 'aten::_foreach_mul_', 'aten::_foreach_mul')) AS muls,
       count(*) FILTER (WHERE i.name IN ('aten::add_', 'aten::_foreach_add_')) AS adds
FROM optimizer_spans o JOIN main_thread_ops i ON i.rank = o.rank AND i.start_ns >= o.start_ns AND i.end_ns <= o.end_ns
WHERE o.name = step_name;
