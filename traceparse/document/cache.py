"""Documents kept beside their store: a repeated ``analyze``, ``layout`` or ``tags`` of an unchanged store reads
its document instead of running the checks again.

A document is kept in ``<store>.<kind>-<key>.json`` next to the store file, where ``key`` hashes the store (its
load key, size and modification time: a store loaded again is another store), traceparse's version and code
(rules included), the command and its options. Writing one removes that store's older document of the same
command. Anything unreadable is built again; a folder that cannot be written keeps nothing.
"""

import glob
import hashlib
import json
import os
from pathlib import Path

from traceparse.store.query import table_rows
from traceparse.version import __version__


def store_file(con) -> Path | None:
    """The file of the store ``con`` reads (None for an in-memory database)."""
    got = table_rows(con, "duckdb_databases()", columns="path", where="database_name = current_database()")
    return Path(got[0]["path"]) if got and got[0]["path"] else None


def _kept_path(store: Path, load_key: str | None, kind: str, options: dict) -> Path:
    """Where the document of ``kind`` and ``options`` of the store file ``store`` (its ``meta`` key ``load_key``)
    is kept."""
    from traceparse.load.run import code_identity

    st = store.stat()
    digest = hashlib.sha256(json.dumps([__version__, code_identity(), load_key, st.st_size, st.st_mtime_ns, kind,
                                        options], sort_keys=True, default=str).encode()).hexdigest()[:20]
    return store.with_name(f"{store.name}.{kind}-{digest}.json")


def kept(store: Path, load_key: str, kind: str, options: dict) -> dict | None:
    """The document kept for the store file ``store`` made for ``load_key`` (a cache entry known from its stamp:
    ``load.run.kept_store``), read without opening the store; None when none is kept."""
    try:
        return json.loads(_kept_path(store, load_key, kind, options).read_text())
    except (OSError, ValueError):
        return None


def cached(con, kind: str, options: dict, build, keep: bool = True) -> dict:
    """The document ``build()`` returns for this store, command (``kind``) and ``options``, read back when kept.
    The temporary file (``traceparse.cache_dir.temp_beside``) of a killed process is removed with the cache's other
    leftovers."""
    store = store_file(con) if keep else None
    if store is None:
        return build()
    load_key = table_rows(con, "meta", columns="value", where="key = 'key'")
    path = _kept_path(store, load_key[0]["value"] if load_key else None, kind, options)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    doc = build()
    from traceparse.cache_dir import temp_beside

    tmp = temp_beside(path)
    try:
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
        for old in store.parent.glob(f"{glob.escape(store.name)}.{kind}-*.json"):
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:
        tmp.unlink(missing_ok=True)
    return doc
