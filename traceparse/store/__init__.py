"""The DuckDB store: documented schema, loading staged ranks, derived tables."""
