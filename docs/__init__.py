"""The reference shipped as package data: parallelism.md, which findings cite and ``traceparse docs`` prints."""
