-- The cause a host-side op names: what a thread was doing while the GPU waited for it (gpu_time.sql: the GPU's
-- idle causes), and the kind of a rank's excess over its peers (savings.py: 'dataloader', its input).
-- reads: 
CREATE OR REPLACE TEMP MACRO host_cause(n) AS (
    CASE
        WHEN n IS NULL THEN 'python'
        WHEN regexp_matches(n, '(?i)dataloader') THEN 'dataloader'
        WHEN is_optimizer(n) THEN 'optimizer'
        WHEN regexp_matches(n, '(?i)synchronize|^aten::(item|_local_scalar_dense)$') THEN 'synchronize'
        WHEN is_comm_call(n) THEN 'communication'
        ELSE 'cpu_op'
    END
);
