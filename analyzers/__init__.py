"""Checks: one analyzer per module (installed as traceparse.analyzers)."""
