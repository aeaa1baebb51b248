-- recorded_inputs: each op whose inputs the profiler recorded (record_shapes=True: op_args), with its rank, event,
-- name and profiled step, and what was recorded: its inputs' shapes (input_dims) and scalar values (concrete_inputs),
-- as JSON. Reads events and op_args. The model facts read parameter, activation and router shapes from it
-- (layout/model_facts.sql). A TEMP view of the connection.
-- reads: events, op_args
CREATE OR REPLACE TEMP VIEW recorded_inputs AS
SELECT e.rank, e.ev_id, e.name, e.step, a.input_dims, a.concrete_inputs
FROM events e JOIN op_args a USING (rank, ev_id);
