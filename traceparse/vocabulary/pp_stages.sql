-- pp_stages: the pipeline stage of each rank, the one definition: its position in the group_ranks (stage order) of its
-- pp-tagged operations. One row per member of each pp group a loaded rank names (group_ranks, basis 'group'; loaded:
-- the member itself runs pp-tagged operations in that group); without any known group, the ranks with pp-tagged
-- operations in rank order (basis 'pp ranks').
-- reads: comm_ops
CREATE OR REPLACE TEMP VIEW pp_stages AS
WITH pp AS (SELECT DISTINCT rank, group_ranks FROM comm_ops WHERE strategy = 'pp'),
grp AS (
    SELECT DISTINCT group_ranks, 'group' AS basis FROM pp WHERE len(group_ranks) > 0
    UNION ALL
    SELECT list_sort(list(DISTINCT rank)), 'pp ranks' FROM pp
    HAVING count(*) > 0 AND count(*) FILTER (WHERE len(group_ranks) > 0) = 0
),
members AS (
    SELECT unnest(group_ranks) AS rank, generate_subscripts(group_ranks, 1) - 1 AS pos, group_ranks, basis FROM grp
)
SELECT m.rank, min(m.pos) AS stage, m.group_ranks, m.basis,
       m.basis = 'pp ranks' OR EXISTS (SELECT 1 FROM pp WHERE pp.rank = m.rank AND pp.group_ranks = m.group_ranks)
           AS loaded
FROM members m
GROUP BY m.rank, m.group_ranks, m.basis;
