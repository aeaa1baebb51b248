-- The analyze document's GPU section (traceparse/document/gpu.py), from vocabulary/gpu_time.sql's tables (run
-- first, by gpu.gpu_tables). TEMP views and macros of the connection.

-- gpu_doc_temporal: each span's idle, compute and other time, and their shares of the span.
CREATE OR REPLACE TEMP VIEW gpu_doc_temporal AS
SELECT rank, step, scope, span_ns, idle_ns, compute_ns, non_compute_ns,
       round(idle_ns / nullif(span_ns, 0), 4) AS idle, round(compute_ns / nullif(span_ns, 0), 4) AS compute,
       round(non_compute_ns / nullif(span_ns, 0), 4) AS non_compute
FROM gpu_temporal;

-- gpu_doc_queue: each stream's queue of launched, not yet started work, and the share of its span it ran dry.
CREATE OR REPLACE TEMP VIEW gpu_doc_queue AS
SELECT rank, stream, max_length, round(mean_length, 3) AS mean_length, span_ns, dry_ns,
       round(dry_ns / nullif(span_ns, 0), 4) AS dry_share, dry_count
FROM gpu_queue;

-- gpu_doc_clipped: a load issue (file, severity, what, count) per stream whose HTA idle breakdown came out negative.
CREATE OR REPLACE TEMP VIEW gpu_doc_clipped AS
SELECT c.rank, c.stream, r.file, 'warning' AS severity,
       'GPU stream ' || c.stream || ': ' || c.overlapping || ' activit'
       || CASE WHEN c.overlapping = 1 THEN 'y overlaps' ELSE 'ies overlap' END
       || ' the one before it on the stream, which made HTA''s idle breakdown negative (kernel wait '
       || c.signed_kernel_wait_ns || ' ns, idle ' || c.signed_idle_ns || ' ns): the stream''s gaps are '
       || 'measured from the latest end before each activity instead, none below 0' AS what,
       c.overlapping AS count
FROM gpu_stream_clipped c JOIN ranks r ON r.rank = c.rank;

-- gpu_doc_idle_causes: per rank, step and cause, its idle time, its share of the step's GPU span, and the three ops
-- that took most of it.
CREATE OR REPLACE TEMP VIEW gpu_doc_idle_causes AS
WITH by_op AS (
    SELECT rank, step, cause, name, sum(ns) AS ns FROM gpu_idle_parts GROUP BY ALL
),
ranked AS (
    SELECT *, row_number() OVER (PARTITION BY rank, step, cause ORDER BY ns DESC, name) AS i FROM by_op
)
SELECT r.rank, r.step, r.cause, sum(r.ns)::BIGINT AS idle_ns,
       round(sum(r.ns) / any_value(s.end_ns - s.start_ns), 4) AS share,
       list({'name': r.name, 'ns': r.ns::BIGINT} ORDER BY r.ns DESC, r.name)
           FILTER (WHERE r.i <= 3 AND r.name IS NOT NULL) AS ops
FROM ranked r JOIN gpu_step_spans s ON s.rank = r.rank AND s.step IS NOT DISTINCT FROM r.step
GROUP BY r.rank, r.step, r.cause;

-- gpu_doc_host_waits: each launching thread's waits while its GPU sat idle (from the moment it went idle to the
-- launch of its next activity), which the replay takes away (savings.host_wait_cost).
CREATE OR REPLACE TEMP VIEW gpu_doc_host_waits AS
SELECT rank, tid, a, least(launch_ns, b) AS launched, b FROM gpu_gaps WHERE launch_ns > a AND tid IS NOT NULL;

-- gpu_doc_launch(delay_cutoff, runtime_cutoff): per rank its launches' delay quantiles, the outliers beyond HTA's
-- cutoffs, and the activities shorter on the GPU than their launch call on the CPU (their share of HTA's span).
CREATE OR REPLACE TEMP MACRO gpu_doc_launch(delay_cutoff, runtime_cutoff) AS TABLE
WITH span AS (SELECT rank, span_ns FROM gpu_temporal WHERE scope = 'hta')
SELECT rank, count(*) AS launches,
       quantile_disc(delay_ns, 0.5) AS delay_p50_ns, quantile_disc(delay_ns, 0.9) AS delay_p90_ns,
       quantile_disc(delay_ns, 0.99) AS delay_p99_ns, max(delay_ns) AS delay_max_ns,
       count(*) FILTER (WHERE delay_ns > delay_cutoff) AS delay_outliers,
       count(*) FILTER (WHERE cpu_ns > runtime_cutoff) AS runtime_outliers,
       count(*) FILTER (WHERE gpu_ns < cpu_ns) AS short_gpu,
       coalesce(sum(gpu_ns) FILTER (WHERE gpu_ns < cpu_ns), 0)::BIGINT AS short_gpu_ns,
       round(coalesce(sum(gpu_ns) FILTER (WHERE gpu_ns < cpu_ns), 0) / nullif(any_value(span_ns), 0), 4)
           AS short_gpu_share
FROM gpu_launches JOIN span USING (rank) GROUP BY rank;
