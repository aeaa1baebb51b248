-- The analyze document's timeline section (traceparse/document/timeline.py), from the vocabulary. TEMP views of the
-- connection; the chosen step is the variable timeline_step (set before reading timeline_bars).

-- timeline_steps: the steps every rank has a window for, with their window length averaged over the ranks.
CREATE OR REPLACE TEMP VIEW timeline_steps AS
SELECT step, avg(dur_ns) AS mean_ns FROM step_windows GROUP BY step
HAVING count(DISTINCT rank) = (SELECT count(DISTINCT rank) FROM step_windows);

-- timeline_windows: each rank's window of the chosen step.
CREATE OR REPLACE TEMP VIEW timeline_windows AS
SELECT rank, start_ns, dur_ns FROM step_windows WHERE step IS NOT DISTINCT FROM getvariable('timeline_step');

-- timeline_bars: per rank, kind and strategy, the union of the intervals anchored in the chosen step's window
-- (interval_pieces: nested, overlapping and touching intervals one bar), named after its longest interval (of
-- equally long ones, the first in the file).
CREATE OR REPLACE TEMP VIEW timeline_bars AS
SELECT k.rank, k.kind, k.strategy, min(s) AS s, max(e) AS e, count(*) AS intervals,
       arg_max(name, (e - s, -ev_id)) AS name
FROM interval_pieces($$
    SELECT {'rank': rank, 'kind': 'compute', 'strategy': NULL::VARCHAR} AS k, start_ns AS s, end_ns AS e, name, ev_id
    FROM compute_intervals WHERE in_window AND step IS NOT DISTINCT FROM getvariable('timeline_step')
    UNION ALL
    SELECT {'rank': rank, 'kind': 'comm', 'strategy': coalesce(strategy, 'untagged')}, start_ns, end_ns, name, ev_id
    FROM comm_intervals WHERE in_window AND counted AND step IS NOT DISTINCT FROM getvariable('timeline_step')
$$, true)
GROUP BY k, piece;
