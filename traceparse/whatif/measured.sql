-- What a forecast measures of the run (whatif/measured.py): means per rank per profiled step window of the vocabulary,
-- and each kind of collective's cost against its size. Reads ranks, window_totals, window_strategy_comm,
-- compute_intervals, comm_ops, collective_arrivals and optimizer_spans (vocabulary/optimizer_spans.sql, run first).
-- TEMP views of the connection.

-- whatif_world: the job's world size (vocabulary/world.sql, run first), else the ranks loaded.
CREATE OR REPLACE TEMP VIEW whatif_world AS
SELECT coalesce(world_size, loaded) AS world_size FROM world;

-- whatif_times: step time and compute, means over the rank-step windows, and how many windows there are.
CREATE OR REPLACE TEMP VIEW whatif_times AS
SELECT avg(window_ns) AS step_ns, avg(compute_ns) AS compute_ns, count(*) AS windows
FROM window_totals WHERE step IS NOT NULL;

-- whatif_exposed: per strategy, its exposed communication (comm_ns - hidden_ns) summed, per rank-step window.
CREATE OR REPLACE TEMP VIEW whatif_exposed AS
SELECT strategy, sum(comm_ns - hidden_ns) / greatest((SELECT windows FROM whatif_times), 1) AS exposed_ns
FROM window_strategy_comm WHERE step IS NOT NULL GROUP BY 1;

-- whatif_step_times, whatif_step_exposed: the same per profiled step (means over that step's rank windows), from which
-- each step's own forecast gives a forecast's range (whatif/__init__.py).
CREATE OR REPLACE TEMP VIEW whatif_step_times AS
SELECT step, avg(window_ns) AS step_ns, avg(compute_ns) AS compute_ns, count(*) AS windows
FROM window_totals WHERE step IS NOT NULL GROUP BY step;

CREATE OR REPLACE TEMP VIEW whatif_step_exposed AS
SELECT c.step, c.strategy, sum(c.comm_ns - c.hidden_ns) / any_value(t.windows) AS exposed_ns
FROM window_strategy_comm c JOIN whatif_step_times t ON t.step = c.step GROUP BY c.step, c.strategy;

-- whatif_optimizer: the compute inside the main thread's optimizer annotations (optimizer_spans), per rank-step window.
CREATE OR REPLACE TEMP VIEW whatif_optimizer AS
SELECT sum(e - s) / greatest((SELECT windows FROM whatif_times), 1) AS optimizer_ns FROM interval_intersect(
    'SELECT rank AS k, rank AS g, start_ns AS s, end_ns AS e FROM optimizer_spans',
    'SELECT rank AS k, start_ns AS s, end_ns AS e FROM compute_intervals WHERE step IS NOT NULL');

-- whatif_ops: the communication operations of the profiled steps, each with its size (bytes: the larger of input and
-- output, the full tensor of an all-gather or a reduce-scatter) and its own time (the execution, else the CPU call).
CREATE OR REPLACE TEMP VIEW whatif_ops AS
SELECT rank, op_id, coalesce(strategy, 'untagged') AS strategy, op, group_size,
       greatest(bytes_in, coalesce(bytes_out, 0))::DOUBLE AS b, coalesce(exec_dur_ns, host_dur_ns)::DOUBLE AS t,
       comm_done_ns(exec_ts_ns, exec_dur_ns, host_ts_ns, host_dur_ns) AS done_ns
FROM comm_ops WHERE step IS NOT NULL;

-- whatif_calls: per (strategy, op, group size) the collectives a rank issues per profiled step window and their mean
-- size: the calls the forecast costs per call (whatif/calls.py).
CREATE OR REPLACE TEMP VIEW whatif_calls AS
SELECT strategy, op, group_size, count(*) / greatest((SELECT windows FROM whatif_times), 1) AS per_step, avg(b) AS bytes
FROM whatif_ops WHERE is_collective(op) AND group_size > 1
GROUP BY ALL;

-- whatif_transfers: each collective of the profiled steps, its time against its size: matched across its group
-- (collective_arrivals), from its last member's arrival to its last member's completion (the transfer, without the
-- waits for a late member); a collective no member of which could be matched, its own time.
CREATE OR REPLACE TEMP VIEW whatif_transfers AS
WITH matched AS (
    SELECT a.strategy, a.op, len(a.group_ranks) AS group_size, max(o.b) AS bytes,
           max(o.done_ns) - any_value(a.last_arrival_ns) AS ns
    FROM collective_arrivals a JOIN whatif_ops o USING (rank, op_id)
    WHERE a.step IS NOT NULL GROUP BY a.match_key, a.strategy, a.op, len(a.group_ranks)
)
SELECT strategy, op, group_size, bytes, ns FROM matched
UNION ALL
SELECT strategy, op, group_size, b, t FROM whatif_ops o
WHERE is_collective(op) AND group_size > 1 AND t IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM collective_arrivals a WHERE a.rank = o.rank AND a.op_id = o.op_id);
