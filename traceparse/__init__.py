"""traceparse: parallelism-aware analysis of PyTorch profiler traces of distributed jobs.

``traceparse.analyze(paths, ...)`` returns the analyze document (see ``traceparse.document``).
"""

from traceparse.version import __version__  # noqa: F401 -- the public name


def analyze(paths, layout=None, top=10, db=None, use_cache=True, allow_mixed=False) -> dict:
    """Load the traces ``paths`` and return the analyze document (``traceparse.document.analyze``)."""
    from traceparse.document import analyze as _analyze

    return _analyze(paths, layout=layout, top=top, db=db, use_cache=use_cache, allow_mixed=allow_mixed)
