"""Where traceparse keeps what it can build again (stores, kept documents, the pages' Vega bundle), and how a file
there is written whole: ``temp_beside`` then ``os.replace``. A foundation module: the loader and the renderers
both keep files here without importing each other."""

import itertools
import os
from pathlib import Path

_TEMP_IDS = itertools.count()


def cache_dir() -> Path:
    """``$TRACEPARSE_CACHE``, else ``$XDG_CACHE_HOME/traceparse``, else ``~/.cache/traceparse``."""
    base = os.environ.get("TRACEPARSE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "traceparse"
    )
    return Path(base)


def temp_beside(path: Path) -> Path:
    """A name beside ``path`` for a file written then renamed over it, used by no other process or thread:
    ``.<name>.<pid>-<n>.tmp``. What a killed process left under such a name in the cache is removed by
    ``traceparse.load.run.remove_stale_leftovers``."""
    return path.with_name(f".{path.name}.{os.getpid()}-{next(_TEMP_IDS)}.tmp")
