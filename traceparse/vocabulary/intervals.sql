-- comm_intervals and compute_intervals: every interval of communication and compute (placed_intervals, per rank:
-- interval_geometry.sql), with each operation's op, strategy and variant. Needs the tags (comm_ops.strategy).
-- in_window: placed in one of the rank's step_windows, which hold the complete steps only (complete_steps.sql): an
-- interval of a step left out (incomplete_steps) is in no window.
-- reads: comm_ops, incomplete_steps, placed_intervals

INSERT INTO comm_intervals
WITH v AS (SELECT * EXCLUDE (in_window),
                  in_window AND coalesce(step NOT IN (SELECT step FROM incomplete_steps), true) AS in_window
           FROM placed_intervals WHERE kind = 'comm' AND end_ns >= start_ns)
SELECT v.rank, v.op_id, v.ev_id, v.part, v.name, v.tid, v.stream, v.start_ns, v.end_ns, v.counted,
       o.op, o.strategy, o.variant, v.anchor_ns, CASE WHEN v.in_window THEN v.step END, v.in_window
FROM v LEFT JOIN comm_ops o ON o.rank = v.rank AND o.op_id = v.op_id;

INSERT INTO compute_intervals
WITH v AS (SELECT * EXCLUDE (in_window),
                  in_window AND coalesce(step NOT IN (SELECT step FROM incomplete_steps), true) AS in_window
           FROM placed_intervals WHERE kind = 'compute' AND end_ns > start_ns)
SELECT rank, ev_id, part, name, tid, stream, start_ns, end_ns, anchor_ns, CASE WHEN in_window THEN step END, in_window
FROM v;
