-- The compute floor, a variant of compute derived from compute_intervals (CPU-only ranks): the main
-- thread's compute cut into pieces (nested compute ops merged into their outermost one, touching ones
-- kept apart), each named by its outermost op and its recorded input shapes; per (name, shapes) the
-- piece count times the shortest piece; summed per rank and divided by the rank's step windows.
WITH pieces AS (
    SELECT k.rank AS rank, min(s) AS s, max(e) AS e,
           first(name ORDER BY s, e DESC) AS name, first(dims ORDER BY s, e DESC) AS dims
    FROM interval_pieces(
        'SELECT {''rank'': c.rank} AS k, c.start_ns AS s, c.end_ns AS e, c.name, a.input_dims AS dims
         FROM compute_intervals c LEFT JOIN op_args a ON a.rank = c.rank AND a.ev_id = c.ev_id
         WHERE c.in_window AND c.part = ''cpu_op''', false)
    GROUP BY k, piece
),
floor AS (SELECT rank, name, dims, count(*) * min(e - s) AS ns FROM pieces GROUP BY ALL),
windows AS (SELECT rank, count(*) AS n FROM step_windows GROUP BY rank)
SELECT f.rank, sum(f.ns) / any_value(w.n) AS floor_ns
FROM floor f JOIN windows w USING (rank)
GROUP BY f.rank
ORDER BY f.rank
