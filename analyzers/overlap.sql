-- overlap: per rank, window and strategy, communication and the part hidden under compute, straight
-- from the vocabulary (window_strategy_comm; the per-rank total is window_totals, where strategies
-- communicating at the same moment count once).
SELECT 'strategy' AS scope, rank, step, strategy, comm_ns, hidden_ns, waiting_ns FROM window_strategy_comm
UNION ALL
SELECT 'rank', rank, step, 'all', comm_ns, hidden_ns, NULL FROM window_totals WHERE comm_ns > 0
ORDER BY scope DESC, rank, step, strategy
