"""The package's version, in one place (the store cache and the document cache key on it)."""

__version__ = "0.1.0"
