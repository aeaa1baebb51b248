"""traceparse: parallelism-aware analysis of PyTorch profiler traces of distributed jobs."""

__version__ = "0.1.0"
