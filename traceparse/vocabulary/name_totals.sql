-- name_totals: what ran, by name: per rank, event category, name and profiled step (NULL: outside every step), how
-- many events and their total duration. Reads events, once per connection (a TEMP table:
-- the readers below ask it several questions). The summary's heaviest kernels or ops (document/summary.sql), why a run
-- has no GPU activity (document/no_gpu.sql), whether FSDP ran (analyzers/overlap.py), the model facts' calls by name
-- and optimizer classes (layout/model_facts.sql), the forward passes per step (layout/infer.sql).
-- reads: events
CREATE OR REPLACE TEMP TABLE name_totals AS
SELECT rank, cat, name, step, count(*) AS calls, sum(dur_ns)::BIGINT AS total_ns
FROM events GROUP BY ALL;
