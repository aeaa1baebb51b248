"""A new store starts as a copy of the store's empty schema (its tables with their comments, ``schema.ddl``, and its
macros, ``macros.sql``), made once per schema and DuckDB version in the cache folder
(``schema-<key>.store-template``). Writing the schema costs the same however small the run (its 318 COMMENT ON
statements about 70 ms, each a change of a table in the catalog); copying the file costs about 1 ms. Where no copy
can be had (a cache folder that cannot be written), the schema is written into the new store instead. The template
is the user's own file, as the cache is, so it is vetted as a store is (``trust.vet``), once per process and template,
on the first store copied from it (``store.build.create_store``): one changed to hold a view or macro of someone
else's is removed and made again. The stores this process builds from a vetted template are not vetted again on
read (``trust.vouch``)."""

import hashlib
import os
import shutil
from functools import cache
from pathlib import Path

import duckdb

from traceparse.cache_dir import cache_dir, temp_beside
from traceparse.store.query import sql_file
from traceparse.store.schema import ddl
from traceparse.store.trust import file_identity, vouch

_MADE: dict[str, Path] = {}  # key -> a template this process made or found (its cache folder may have changed since)


@cache
def schema_sql() -> str:
    """What a fresh store holds: the tables with their comments, then the macros."""
    return ddl() + "\n" + sql_file("traceparse.store", "macros.sql")


@cache
def _key() -> str:
    return hashlib.sha256(f"{duckdb.__version__}\n{schema_sql()}".encode()).hexdigest()[:16]


def fresh_store(db_path) -> tuple | None:
    """Make ``db_path`` (which must not exist: created exclusively, no link followed) a copy of the template; return
    the template's identity as copied (``trust.file_identity``). None where no template can be had or it changed while
    it was copied, the file then not made (the caller writes ``schema_sql``)."""
    template = _template()
    if template is None:
        return None
    try:
        before = file_identity(template)
        with open(template, "rb") as src, open(db_path, "xb") as dst:
            shutil.copyfileobj(src, dst)
        if before is not None and before == file_identity(template):
            return before
        Path(db_path).unlink()
        return None
    except FileExistsError:
        return None
    except OSError:
        Path(db_path).unlink(missing_ok=True)
        return None
    except BaseException:  # an interrupt: no half-copied store left
        Path(db_path).unlink(missing_ok=True)
        raise


def discard():
    """Remove the template (a copy of it was refused: it holds what the schema does not); the next store makes it
    again."""
    path = _MADE.pop(_key(), None) or cache_dir() / f"schema-{_key()}.store-template"
    try:
        if not path.is_symlink():
            path.unlink(missing_ok=True)
    except OSError:
        pass


def _template() -> Path | None:
    key = _key()
    made = _MADE.get(key)
    if made is not None and made.is_file():
        return made
    path = cache_dir() / f"schema-{key}.store-template"  # not *.duckdb: no store of a run
    if path.is_file() and not path.is_symlink():
        _MADE[key] = path
        return path
    temp = temp_beside(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(temp))
        try:
            con.execute(schema_sql())
        finally:
            con.close()
        os.replace(temp, path)
        vouch(path)  # made here, from the schema
    except (OSError, duckdb.IOException):  # a cache folder that cannot be written: the schema is written instead
        _remove(temp)
        return None
    except BaseException:
        _remove(temp)
        raise
    _MADE[key] = path
    return path


def _remove(temp: Path):
    for leftover in (temp, Path(f"{temp}.wal")):
        try:
            leftover.unlink(missing_ok=True)
        except OSError:  # its folder could not be made either
            pass
