-- The pipeline stage of each rank: its position in the group of its pp-tagged operations.
SELECT DISTINCT rank, list_position(group_ranks, rank) - 1 AS stage
FROM comm_ops WHERE strategy = 'pp' AND group_ranks IS NOT NULL
ORDER BY stage, rank
