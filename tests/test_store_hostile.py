"""A store is untrusted input (traceparse/store/trust.py): a store someone else made (a CI artifact) reads its
per-rank Parquet from its own ``.ranks`` folder only, runs no view or macro of its maker's, reads no other file, and
makes traceparse remove nothing it did not make. Each refusal is one line and exit 2, with nothing deleted or written.
Any folder name works: ``[``, ``]``, ``*``, ``?``, ``{``, quotes."""

import os
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from conftest import parquet_parts

from traceparse.cli import main
from traceparse.errors import TraceError
from traceparse.load.run import connect, load_run, open_run
from traceparse.store.parts import LOCK, folder_of, sweep

pytestmark = pytest.mark.usefixtures("per_rank_parquet")  # a store with its per-rank folder, as a larger run's

ROOT = Path(__file__).resolve().parent.parent
DDP2 = ROOT / "fixtures" / "runs" / "ddp2"
WEIRD = "a[b]c*d?e{f}g'h"  # every character a glob, a DuckDB path or an SQL string could take for syntax


def run_cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result, *says):
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("traceparse: error: "), result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    for s in says:
        assert str(s) in lines[0], (s, lines[0])


def tree(folder: Path) -> dict:
    """Every file and folder under ``folder`` (links as links) with its size and time: a change of any shows."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(folder))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """The store of ddp2, loaded once; each test edits a copy (``copy_store``)."""
    with parquet_parts():
        store, _ = load_run([DDP2], db=tmp_path_factory.mktemp("base") / "base.duckdb")
    return store


def copy_store(base: Path, folder: Path, name="given.duckdb") -> Path:
    """A copy of the store ``base`` with its per-rank folder, as a store handed over (a CI artifact) would be."""
    folder.mkdir(parents=True, exist_ok=True)
    store = folder / name
    shutil.copyfile(base, store)
    shutil.copytree(folder_of(base), folder_of(store), symlinks=True)
    return store


def edit(store: Path, *sql, params=None):
    con = duckdb.connect(str(store))
    try:
        for q in sql:
            con.execute(q, params or [])
    finally:
        con.close()


def token(store: Path) -> str:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute("SELECT value FROM meta WHERE key = 'parts'").fetchone()[0]
    finally:
        con.close()


def victim(tmp_path: Path) -> Path:
    """A folder of the user's that a Bazel package would be: it holds a BUILD file."""
    v = tmp_path / "project" / "pkg"
    v.mkdir(parents=True)
    (v / LOCK).write_text("cc_library(name = 'x')\n")
    (v / "main.cc").write_text("int main() {}\n")
    return v


def commands(store: Path, base: Path):
    """Every command that opens a store the user gives."""
    return {
        "sql": ("sql", "--db", store, "SELECT 1"),
        "compare": ("compare", "--base-db", store, "--new-db", base),
        "analyze": ("analyze", DDP2, "--db", store, "-q"),
        "whatif": ("whatif", DDP2, "--db", store, "--layout", "dp=1"),
    }


COMMANDS = ("sql", "compare", "analyze", "whatif")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", ["absolute", "dotdot", "dotdot_deep"])
def test_a_parts_token_outside_its_folder_is_refused_and_nothing_removed(base, tmp_path, kind, command):
    target = victim(tmp_path)
    store = copy_store(base, tmp_path / "given")
    named = {"absolute": str(target), "dotdot": "../project/pkg", "dotdot_deep": "../../given/../project/pkg"}[kind]
    if kind == "dotdot":  # ../project/pkg from the .ranks folder: the victim beside the store's folder
        target = folder_of(store).parent / "project" / "pkg"
        target.mkdir(parents=True)
        (target / LOCK).write_text("x")
    edit(store, "UPDATE meta SET value = ? WHERE key = 'parts'", params=[named])
    before, victims = tree(tmp_path), tree(target)
    one_line_error(run_cli(*commands(store, base)[command]), store.name, "meta row 'parts'", "refused")
    assert tree(target) == victims and (target / LOCK).is_file()  # untouched
    assert tree(tmp_path) == before  # nothing deleted or written, beside the store or elsewhere


@pytest.mark.parametrize("command", ["sql", "compare"])
@pytest.mark.parametrize("link", ["build", "ranks"])
def test_a_per_rank_folder_that_is_a_link_is_refused(base, tmp_path, link, command):
    """A build folder (or the whole .ranks folder) that is a link to a folder of the user's is not its own."""
    target = victim(tmp_path)
    store = copy_store(base, tmp_path / "given")
    tok = token(store)
    if link == "build":
        shutil.rmtree(folder_of(store) / tok)
        os.symlink(target, folder_of(store) / tok)
    else:
        (target / tok).mkdir()
        (target / tok / LOCK).write_text("")
        shutil.rmtree(folder_of(store))
        os.symlink(target, folder_of(store))
    before, victims = tree(tmp_path), tree(target)
    one_line_error(run_cli(*commands(store, base)[command]), store.name, "is a link", "refused")
    assert tree(target) == victims and tree(tmp_path) == before


FOREIGN = {
    "view": "CREATE VIEW leak AS SELECT * FROM read_csv('{secret}')",
    "view_over_a_table": "CREATE VIEW main.x AS SELECT count(*) FROM meta",
    "macro_replaced": "CREATE OR REPLACE MACRO norm_op(s) AS ((SELECT count(*) FROM read_csv('{secret}'))::VARCHAR)",
    "macro_added": "CREATE MACRO leak() AS TABLE SELECT * FROM read_csv('{secret}')",
    "schema_with_a_view": "CREATE SCHEMA other; CREATE VIEW other.v AS SELECT 42",
    "column_default": "CREATE TABLE extra (a INTEGER DEFAULT 3)",
}


def test_the_own_catalog_is_the_schemas_and_the_macros():
    """trust.vet makes its own catalog from the macros alone: the tables of the schema define no view, macro or
    column expression, so the catalog of the whole schema is the same."""
    from traceparse.store.query import sql_file
    from traceparse.store.schema import ddl
    from traceparse.store.trust import _catalogs

    catalogs = []
    for statements in ([ddl(), sql_file("traceparse.store", "macros.sql")], [sql_file("traceparse.store", "macros.sql")]):
        con = duckdb.connect()
        for q in statements:
            con.execute(q)
        catalogs.append(_catalogs(con, ["memory"])["memory"])
        con.close()
    assert catalogs[0] == catalogs[1] and len(catalogs[0]) > 0


def test_a_store_changed_after_it_was_vetted_is_vetted_again(base, tmp_path):
    """One process vets an unchanged file once (trust.vet): a store given code after that is refused all the same."""
    store = copy_store(base, tmp_path / "given")
    connect(store).close()
    edit(store, FOREIGN["view_over_a_table"])
    with pytest.raises(TraceError, match="not traceparse's"):
        connect(store)


@pytest.mark.parametrize("command", ["sql", "compare"])
@pytest.mark.parametrize("kind", list(FOREIGN))
def test_a_store_holding_code_of_its_makers_is_refused(base, tmp_path, kind, command):
    secret = tmp_path / "secret.csv"
    secret.write_text("token\nhunter2\n")
    store = copy_store(base, tmp_path / "given")
    edit(store, FOREIGN[kind].format(secret=secret))
    before = tree(tmp_path)
    one_line_error(run_cli(*commands(store, base)[command]), store.name, "not traceparse's", "refused")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("command", ["sql", "compare"])
def test_a_store_of_another_schema_is_refused_in_one_line(base, tmp_path, command):
    """A store another version of traceparse made (its schema_version not this one's: its tables are others) is
    refused with one line saying to analyze its traces again, not read until a table it lacks fails; analyze --db
    builds such a store anew (its key, which holds the schema version, is another)."""
    store = copy_store(base, tmp_path / "given")
    edit(store, "UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    one_line_error(run_cli(*commands(store, base)[command]), store.name, "a store of schema 4", "analyze its traces")
    edit(store, "UPDATE meta SET value = 'another' WHERE key = 'key'")
    assert run_cli(*commands(store, base)["analyze"]).exit_code == 0
    assert run_cli(*commands(store, base)["sql"]).exit_code == 0


def test_a_damaged_per_rank_folder_is_one_line(base, tmp_path):
    store = copy_store(base, tmp_path / "given")
    shutil.rmtree(folder_of(store) / token(store) / "events")
    before = tree(tmp_path)
    one_line_error(run_cli("sql", "--db", store, "SELECT count(*) FROM events"), store.name, "events",
                   "load the traces again")
    assert tree(tmp_path) == before


def test_a_reader_removes_no_folder_it_did_not_make(base, tmp_path):
    """A store whose .ranks folder says another build is current: its own folder, no longer named, used to be
    removed by its last reader. A process that did not make it removes nothing."""
    store = copy_store(base, tmp_path / "given")
    (folder_of(store) / "CURRENT").write_text("0123456789abcdef")
    before = tree(tmp_path)
    r = run_cli("sql", "--db", store, "SELECT count(*) AS n FROM events")
    assert r.exit_code == 0, r.output
    con = connect(store)
    con.close()
    del con
    assert tree(tmp_path) == before


def test_a_store_folder_removes_nothing_of_someone_elses(tmp_path):
    """Sweeping the folder of a store that is gone removes build folders (a token's name, a BUILD file, not a link)
    and traceparse's own files only: anything else keeps the folder and itself."""
    container = tmp_path / "gone.duckdb.ranks"
    build = container / "0123456789abcdef"
    build.mkdir(parents=True)
    (build / LOCK).write_text("")
    mine = container / "notes"  # not a build folder's name, though it holds a BUILD file
    mine.mkdir()
    (mine / LOCK).write_text("keep")
    (container / "readme.txt").write_text("keep")
    os.symlink(victim(tmp_path), container / "fedcba9876543210")
    (container / "CURRENT").write_text("")
    sweep(container)
    assert not build.exists()
    assert (mine / LOCK).read_text() == "keep" and (container / "readme.txt").is_file()
    assert (tmp_path / "project" / "pkg" / LOCK).is_file()
    (mine / LOCK).unlink()
    mine.rmdir()
    (container / "readme.txt").unlink()
    os.unlink(container / "fedcba9876543210")
    sweep(container)  # only traceparse's files left: the folder goes
    assert not container.exists()


def test_a_given_store_reads_no_other_file(base, tmp_path):
    """What runs on a store the user gave (analyze, compare, whatif) runs confined to the store and its folder:
    no other file, no extension installed or loaded, no setting changed back."""
    secret = tmp_path / "secret.csv"
    secret.write_text("token\nhunter2\n")
    store = copy_store(base, tmp_path / "given")
    con = connect(store)
    try:
        assert con.execute("SELECT count(*) FROM events").fetchone()[0] > 0  # its own folder: read
        for q in (f"SELECT * FROM read_csv('{secret}')", f"SELECT * FROM read_text('{secret}')",
                  f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'", f"ATTACH '{tmp_path / 'other.duckdb'}' AS o",
                  "INSTALL spatial", "LOAD spatial", "SET enable_external_access = true",
                  "SET lock_configuration = false", "SET allowed_directories = ['/']"):
            with pytest.raises(duckdb.Error):
                con.execute(q)
    finally:
        con.close()
    with open_run([DDP2], db=store) as con:  # --db with the traces: the same
        with pytest.raises(duckdb.PermissionException):
            con.execute(f"SELECT * FROM read_csv('{secret}')")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["given", "secret.csv"]


def test_sql_keeps_full_access_for_the_users_own_query(base, tmp_path):
    secret = tmp_path / "mine.csv"
    secret.write_text("n\n1\n2\n3\n")
    store = copy_store(base, tmp_path / "given")
    r = run_cli("sql", "--db", store, "--format", "csv",
                f"SELECT (SELECT count(*) FROM read_csv('{secret}')) AS mine, count(DISTINCT rank) AS ranks "
                "FROM events")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == ["mine,ranks", "3,2"]


@pytest.fixture(scope="module")
def weird_store(base, tmp_path_factory) -> Path:
    """The store of ddp2 in a folder named ``WEIRD`` (in one so named): a copy, read back by each command."""
    return copy_store(base, tmp_path_factory.mktemp("weird") / WEIRD / WEIRD, "s.duckdb")


@pytest.mark.slow
def test_analyze_db_in_a_folder_of_any_name(weird_store):
    r = run_cli("analyze", DDP2, "--db", weird_store, "-q", "--format", "json")  # its own: reused
    assert r.exit_code == 0, r.output


@pytest.mark.slow
def test_analyze_db_builds_in_a_folder_of_any_name(tmp_path):
    store = tmp_path / WEIRD / "s.duckdb"
    store.parent.mkdir()
    for _ in range(2):  # built, then reused
        r = run_cli("analyze", DDP2, "--db", store, "-q", "--format", "json")
        assert r.exit_code == 0, r.output
    assert (folder_of(store) / token(store) / LOCK).is_file()
    assert sorted(p.name for p in store.parent.iterdir() if not p.name.endswith(".json")) == [
        "s.duckdb", "s.duckdb.ranks"]  # nothing else beside it (a kept document aside)


def test_sql_db_in_a_folder_of_any_name(weird_store):
    r = run_cli("sql", "--db", weird_store, "--format", "csv", "SELECT count(DISTINCT rank) AS ranks FROM events")
    assert r.exit_code == 0 and r.output.splitlines() == ["ranks", "2"], r.output


def test_compare_db_in_a_folder_of_any_name(weird_store, base):
    r = run_cli("compare", "--base-db", weird_store, "--new-db", base, "--format", "json")
    assert r.exit_code == 0, r.output


def test_whatif_db_in_a_folder_of_any_name(weird_store):
    r = run_cli("whatif", DDP2, "--db", weird_store, "--layout", "dp=1")
    assert r.exit_code == 0, r.output


@pytest.mark.slow
@pytest.mark.parametrize("where", ["cache", "home"])
def test_a_cache_in_a_folder_of_any_name(tmp_path, monkeypatch, where):
    folder = tmp_path / WEIRD
    if where == "cache":
        monkeypatch.setenv("TRACEPARSE_CACHE", str(folder / "cache"))
    else:
        monkeypatch.delenv("TRACEPARSE_CACHE")
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        monkeypatch.setenv("HOME", str(folder))
    for _ in range(2):  # built, then read back
        r = run_cli("analyze", DDP2, "-q", "--format", "json")
        assert r.exit_code == 0, r.output
    assert list(folder.rglob("*.duckdb"))


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_store_whose_publish_lock_is_no_file_is_read_without_it(base, tmp_path, kind):
    """The lock a reader takes while it opens a store (parts.opening) is taken on a regular file only: a FIFO in its
    place would block the open, a link would lead elsewhere."""
    import threading

    from traceparse.store.parts import PUBLISH

    store = copy_store(base, tmp_path / "given")
    lock = folder_of(store) / PUBLISH
    lock.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(lock)
    else:
        (tmp_path / "elsewhere").write_text("")
        lock.symlink_to(tmp_path / "elsewhere")
    got = []

    def read():
        con = connect(store)
        try:
            got.append(con.execute("SELECT count(DISTINCT rank) FROM events").fetchone()[0])
        finally:
            con.close()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(timeout=60)
    assert got == [2]
