-- world: the job's size, one row. stated: the world size the traces' distributedInfo states, where every trace that
-- states one states the same (traces that disagree, loaded with --allow-mixed, state no size); loaded: the ranks
-- loaded; world_size: stated, else the ranks loaded where no rank records any communication (nothing says another
-- rank exists), else unknown (NULL: one rank's trace of a larger job that names no size). Reads ranks and comm_ops.
-- A TEMP view of the connection, made by each reader: store/derive.sql (in a rank's task: its batch's ranks),
-- tagging/features.sql, layout/infer.py, whatif/measured.sql, document/summary.py.
-- reads: comm_ops, ranks
CREATE OR REPLACE TEMP VIEW world AS
SELECT stated, loaded,
       coalesce(stated, CASE WHEN NOT EXISTS (SELECT 1 FROM comm_ops) THEN loaded END) AS world_size
FROM (SELECT CASE WHEN count(DISTINCT world_size) = 1 THEN max(world_size) END AS stated, count(*) AS loaded
      FROM ranks);
