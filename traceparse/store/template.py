"""A new store starts as a copy of the store's empty schema (its tables with their comments, ``schema.ddl``, and its
macros, ``macros.sql``), made once per schema and DuckDB version in the cache folder
(``schema-<key>.store-template``). Writing the schema costs the same however small the run (its 318 COMMENT ON
statements about 70 ms, each a change of a table in the catalog); copying the file costs about 1 ms. Where no copy
can be had (a cache folder that cannot be written), the schema is written into the new store instead. The template
is the user's own file, as the cache is: one changed to hold a view or macro of someone else's gives stores that
``trust.vet`` refuses on read."""

import hashlib
import os
import shutil
from functools import cache
from pathlib import Path

import duckdb

from traceparse.cache_dir import cache_dir, temp_beside
from traceparse.store.query import sql_file
from traceparse.store.schema import ddl

_MADE: dict[str, Path] = {}  # key -> a template this process made or found (its cache folder may have changed since)


@cache
def schema_sql() -> str:
    """What a fresh store holds: the tables with their comments, then the macros."""
    return ddl() + "\n" + sql_file("traceparse.store", "macros.sql")


@cache
def _key() -> str:
    return hashlib.sha256(f"{duckdb.__version__}\n{schema_sql()}".encode()).hexdigest()[:16]


def fresh_store(db_path) -> bool:
    """Make ``db_path`` (which must not exist: created exclusively, no link followed) a copy of the template; False
    where no template can be had, the file then not made (the caller writes ``schema_sql``)."""
    template = _template()
    if template is None:
        return False
    try:
        with open(template, "rb") as src, open(db_path, "xb") as dst:
            shutil.copyfileobj(src, dst)
        return True
    except FileExistsError:
        return False
    except OSError:
        Path(db_path).unlink(missing_ok=True)
        return False
    except BaseException:  # an interrupt: no half-copied store left
        Path(db_path).unlink(missing_ok=True)
        raise


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
