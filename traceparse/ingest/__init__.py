"""Per-rank parsing of Kineto / Chrome JSON traces into columnar (Parquet) output."""
