"""A store is untrusted input: a file someone else made (a CI artifact, a colleague's ``--db``) is read as data only.

Every read connection to a store (``open_store``) is an in-memory DuckDB with the store attached read-only, opened
without extension auto-install or auto-load, and checked before any of its tables is read (``vet``): it holds no
view, and no macro or column expression, that traceparse's own schema (``schema.ddl`` and ``macros.sql``) does not
define, else the store is refused (``TraceError``: one line, exit 2). The build folder its ``meta`` row ``parts``
names is a folder of its own ``<store>.ranks`` (``parts.build_folder``). Then (``confine``) DuckDB's external access
is limited to that folder and the store's spill folder (``<store>.tmp``), community extensions are off and the
configuration is locked: whatever the store holds, a query on it reads no other file and writes none elsewhere.

A file vetted once is not vetted again in the same process while it is unchanged (``file_identity``). A store this
process built and put in place is counted as vetted (``vouch``): it is a copy of the schema's template, whose catalog
the build vetted (once per process and template: ``store.build.create_store``), plus what traceparse's own SQL made.

``traceparse sql`` runs the user's own query: its connection (``full_access``) is checked the same way, then keeps
DuckDB's full access (files, extensions) for that query.
"""

import glob
import os
from pathlib import Path

from traceparse.errors import TraceError
from traceparse.store.query import sql_file

ALIAS = "store"  # the name the store is attached under when its file name is not a plain one
# traceparse's own catalog (vet), as this DuckDB renders it: its macros alone, as the schema's tables define no view,
# macro or column expression (``schema.ddl``; a test holds it); made once per process, in a database of this name
OWN = "traceparse_own_catalog"
RESERVED = {"memory", "system", "temp", "main", OWN}
NO_EXTENSIONS = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
NOT_A_STORE = "not a traceparse store (no such file, or not made by traceparse)"


class NotAStore(TraceError):
    """A database without a store's ``meta`` table (another program's DuckDB file, a run history)."""


def quoted(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + str(text).replace("'", "''") + "'"


def openable(path):
    """``path``, once DuckDB can open a file by that name: DuckDB reads a backslash as a folder separator on every
    system (``a\\b/s.duckdb`` opens ``a/b/s.duckdb``) and, in a reader's pattern, as an escape, so a path holding
    one is refused (TraceError naming it) rather than read or written somewhere else."""
    if "\\" in str(path):
        raise TraceError(path, "its path holds a backslash, which DuckDB reads as a folder separator: a store cannot "
                               "be kept there; use a folder without one (the cache: set TRACEPARSE_CACHE)")
    return path


def literal_path(path) -> str:
    """``path`` as an SQL string that DuckDB's file readers take as that one file: its glob characters escaped
    (``[*]``, ``[?]``, ``[[]``), then quoted. A path holding ``[``, ``*`` or ``?`` would otherwise be a pattern."""
    return quoted(glob.escape(str(openable(path))))


def alias_of(store: Path) -> str:
    """The name the store is attached under: its file's stem, as DuckDB names a database it opens, when that is a
    plain identifier; else ``store``."""
    stem = store.stem
    if stem.isidentifier() and stem.isascii() and stem.lower() not in RESERVED:
        return stem
    return ALIAS


def journals(path) -> list[str]:
    """The names under which DuckDB looks for the journal (write-ahead log) of the database file ``path``: beside
    it, ``<path>.wal``; for a path holding ``?``, which DuckDB reads as the start of a database's parameters, also
    ``<before the ?>.wal?<after>``."""
    path = str(path)
    names = [path + ".wal"]
    if "?" in path:
        at = path.index("?")
        names.append(path[:at] + ".wal" + path[at:])
    return names


def writable_by_duckdb(path) -> bool:
    """Whether DuckDB can write the database file ``path``: not when its real path holds ``?`` (its journal would
    go to the folder ``journals`` names, which is not there)."""
    return "?" not in os.path.realpath(path)


def duckdb_config() -> dict:
    """DuckDB settings of every store connection: ``TRACEPARSE_MEMORY_LIMIT`` (e.g. ``4GB``; default DuckDB's,
    80% of the machine) bounds DuckDB's memory, which spills past it to ``<store>.tmp`` beside the store."""
    limit = os.environ.get("TRACEPARSE_MEMORY_LIMIT")
    return {"memory_limit": limit} if limit else {}


ROW_GROUP_ROWS = 122_880  # DuckDB's row group: the unit its operators run in parallel over


def sized(con, events: int | None):
    """One DuckDB thread on ``con`` for a run of fewer events than one row group holds: its tables are a row group
    each (a small run's files are parsed in one batch: one file per table), so a second thread has nothing to take
    and only adds its scheduling (docs/speed.md, Small runs)."""
    if events is not None and events < ROW_GROUP_ROWS:
        con.execute("SET threads = 1")


def open_store(store, full_access: bool = False):
    """A read-only connection to the store file ``store`` (settings of ``duckdb_config``), checked (``vet``).
    DuckDB's errors (no such file, not a DuckDB file, a damaged one) are raised as they are; a DuckDB file without
    a store's ``meta`` table is ``NotAStore``. ``confine`` it once its build folder is known, then ``lock`` it."""
    import duckdb  # here: a cached document is read without it (traceparse.document.cache.kept)

    given, store = store, Path(openable(store)).absolute()
    limits = duckdb_config()
    config = {**limits, **NO_EXTENSIONS, "temp_directory": f"{store}.tmp"}
    if not full_access:
        config["allow_community_extensions"] = False
    try:
        con = duckdb.connect(config=config)
    except (duckdb.InvalidInputException, duckdb.ParserException) as e:
        if not limits:
            raise
        raise TraceError("TRACEPARSE_MEMORY_LIMIT", str(e).splitlines()[0]) from None  # the limit cannot be read
    try:
        if not full_access:
            real = os.path.realpath(store)  # DuckDB opens the file by its real path
            con.execute("SET allowed_paths = ?", [sorted({str(store), real, *journals(store), *journals(real)})])
        alias = alias_of(store)
        con.execute(f'ATTACH {quoted(store)} AS "{alias}" (READ_ONLY)')
        con.execute(f'USE "{alias}"')
        if not has_meta(con):
            raise NotAStore(given, NOT_A_STORE)
        vet(con, given)
        sized(con, con.execute("SELECT sum(n_events) FROM ranks").fetchone()[0])
    except BaseException:
        con.close()
        raise
    return con


def confine(con, store, folder: Path | None, full_access: bool = False):
    """Limit ``con`` (``open_store``) to its store, the build ``folder`` and the spill folder. With ``full_access``
    (``traceparse sql``): extensions as DuckDB's defaults have them again, for the user's query."""
    if full_access:
        con.execute("SET autoinstall_known_extensions = true")
        con.execute("SET autoload_known_extensions = true")
        return
    store = Path(store).absolute()
    folders = [f"{store}.tmp", f"{os.path.realpath(store)}.tmp"] + ([str(folder)] if folder is not None else [])
    # DuckDB checks the pattern a reader is given (literal_path: escaped) as well as the files it matches
    allowed = sorted({f + "/" for f in folders} | {glob.escape(f) + "/" for f in folders})
    con.execute("SET allowed_directories = ?", [allowed])
    con.execute("SET enable_external_access = false")


def lock(con, full_access: bool = False):
    """No setting of ``con`` can change from here on (external access, extensions)."""
    if not full_access:
        con.execute("SET lock_configuration = true")


def has_meta(con) -> bool:
    """Whether the attached database has the ``meta`` table of a store (a table: a view would run on read)."""
    return bool(con.execute("SELECT 1 FROM duckdb_tables() WHERE database_name = current_database() "
                            "AND schema_name = 'main' AND table_name = 'meta'").fetchall())


def vet(con, store):
    """Refuse (``TraceError``) a store holding a view, a macro or a column expression that traceparse's schema does
    not define: each would run a query of its maker's on read. Reads the catalog only, nothing of the store's. A
    file this process has vetted and that is unchanged since (``file_identity``: the same file, size and times) is
    not read again."""
    identity = file_identity(store)
    if identity is not None and identity in _VETTED:
        return
    database = con.execute("SELECT current_database()").fetchone()[0]
    own = _OWN.get("catalog")
    if own is None:  # traceparse's own, read in the same query as the store's (each reading costs 20 ms)
        con.execute(f"ATTACH ':memory:' AS {OWN}")
        try:
            con.execute(f"USE {OWN}")
            con.execute(sql_file("traceparse.store", "macros.sql"))
            catalogs = _catalogs(con, [database, OWN])  # by database name, whichever is in use
        finally:
            con.execute(f'USE "{database}"')
            con.execute(f"DETACH {OWN}")
        own = _OWN.setdefault("catalog", catalogs[OWN])
    else:
        catalogs = _catalogs(con, [database])
    foreign = sorted(catalogs[database] - own)
    if foreign:
        kind, name, _ = foreign[0]
        raise TraceError(store, f"holds a {kind} {name} that is not traceparse's (a store is read as data only, "
                         "never as code); refused: load the traces again into a store of your own")
    if identity is not None and identity == file_identity(store):  # not changed while it was read
        _VETTED.add(identity)


_OWN: dict[str, frozenset] = {}
_VETTED: set[tuple] = set()


def vouch(path, identity: tuple | None = None):
    """Count the file ``path`` (its ``identity`` then, else now) as vetted in this process: a store it has just
    built and put in place, or the template whose copy it vetted."""
    identity = identity if identity is not None else file_identity(path)
    if identity is not None:
        _VETTED.add(identity)


def vetted(identity: tuple | None) -> bool:
    """Whether the file of ``identity`` (``file_identity``) was vetted in this process and is unchanged since."""
    return identity is not None and identity in _VETTED


def file_identity(store) -> tuple | None:
    """(device, inode, size, modification and change times in ns) of the file ``store``, by its real path; a
    change of its content changes the change time, which no user can set. None when it cannot be read."""
    try:
        st = os.stat(os.path.realpath(store))
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _catalogs(con, databases: list[str]) -> dict[str, frozenset]:
    """Per database of ``databases``: (kind, name, definition) of every view, macro and column expression."""
    where = "database_name IN (SELECT unnest(?::VARCHAR[]))"
    views = con.execute("SELECT database_name, schema_name, view_name, sql FROM duckdb_views() "
                        f"WHERE {where} AND NOT internal", [databases])
    out = [(d, "view", f"{s}.{n}", sql) for d, s, n, sql in views.fetchall()]
    macros = con.execute("SELECT database_name, schema_name, function_name, function_type, parameters::VARCHAR, "
                         f"macro_definition FROM duckdb_functions() WHERE {where} AND NOT internal", [databases])
    out += [(d, "macro", f"{s}.{n}", f"{kind}({params}) {body}") for d, s, n, kind, params, body in macros.fetchall()]
    cols = con.execute("SELECT database_name, schema_name, table_name, column_name, column_default "
                       f"FROM duckdb_columns() WHERE {where} AND column_default IS NOT NULL", [databases])
    out += [(d, "column expression", f"{s}.{t}.{c}", e) for d, s, t, c, e in cols.fetchall()]
    return {db: frozenset(row[1:] for row in out if row[0] == db) for db in databases}
