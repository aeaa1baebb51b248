-- comm_intervals and compute_intervals: every interval of communication and compute (placed_intervals, per rank:
-- interval_geometry.sql), with each operation's op, strategy and variant. Needs the tags (comm_ops.strategy).

INSERT INTO comm_intervals
SELECT v.rank, v.op_id, v.ev_id, v.part, v.name, v.tid, v.stream, v.start_ns, v.end_ns, v.counted,
       o.op, o.strategy, o.variant, v.anchor_ns, CASE WHEN v.in_window THEN v.step END, v.in_window
FROM placed_intervals v LEFT JOIN comm_ops o ON o.rank = v.rank AND o.op_id = v.op_id
WHERE v.kind = 'comm' AND v.end_ns >= v.start_ns;

INSERT INTO compute_intervals
SELECT rank, ev_id, part, name, tid, stream, start_ns, end_ns, anchor_ns, CASE WHEN in_window THEN step END, in_window
FROM placed_intervals WHERE kind = 'compute' AND end_ns > start_ns;

