"""traceparse: parallelism-aware analysis of PyTorch profiler traces of distributed jobs.

``traceparse.analyze(paths, ...)`` returns the analyze document (see ``traceparse.document``).
"""

__version__ = "0.1.0"


def analyze(paths, layout=None, top=10, db=None, use_cache=True, allow_mixed=False) -> dict:
    """Load the traces ``paths`` and return the analyze document (``traceparse.document.analyze``)."""
    from .document import analyze as _analyze

    return _analyze(paths, layout=layout, top=top, db=db, use_cache=use_cache, allow_mixed=allow_mixed)
