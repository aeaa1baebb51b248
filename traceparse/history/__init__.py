"""Runs over time: the metrics of a run (run_metrics), two runs compared (compare), the history store (store)
and the dashboard's data (dashboard)."""
