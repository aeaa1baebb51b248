-- memory_samples: the allocator's samples the memory check reads (profile_memory's [memory] events that carry a
-- total_allocated): each rank's accelerators only, when the trace has any accelerator sample (a GPU job's host
-- allocations are not its device memory), else its CPU. Reads memory. A TEMP view of the connection.
-- reads: memory
CREATE OR REPLACE TEMP VIEW memory_samples AS
WITH m AS (SELECT * FROM memory WHERE total_allocated IS NOT NULL),
     acc AS (SELECT count(*) FILTER (WHERE device_type <> 0) > 0 AS any FROM m)
SELECT m.* FROM m, acc WHERE device_type <> 0 OR NOT acc.any;
