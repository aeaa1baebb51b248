"""A new store starts as a copy of the schema's template (traceparse/store/template.py): the same tables, columns,
comments and macros as a store whose schema is written statement by statement; written instead where the cache
folder cannot hold a template; a template that is not traceparse's schema is made again; a store this process built
is read without being vetted again, unless it changed since."""

from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURE_RUNS

from traceparse.errors import TraceError
from traceparse.load.run import connect, load_run
from traceparse.store import template, trust

RUN = FIXTURE_RUNS / "ddp2"
CATALOG = {
    "tables": "SELECT table_name, comment FROM duckdb_tables() WHERE database_name = current_database()",
    "columns": "SELECT table_name, column_name, data_type, comment, column_index FROM duckdb_columns() "
               "WHERE database_name = current_database()",
    "macros": "SELECT function_name, macro_definition FROM duckdb_functions() "
              "WHERE database_name = current_database() AND function_type LIKE '%macro'",
}


def catalog(path) -> dict:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {k: sorted(con.execute(q).fetchall(), key=str) for k, q in CATALOG.items()}
    finally:
        con.close()


@pytest.fixture(autouse=True)
def no_template_of_this_process(monkeypatch):
    monkeypatch.setattr(template, "_MADE", {})


def test_a_copy_of_the_template_is_the_schema_written_statement_by_statement(tmp_path):
    written = _written(tmp_path)
    copied = tmp_path / "copied.duckdb"
    assert template.fresh_store(copied)
    got, want = catalog(copied), catalog(written)
    assert got == want
    assert len(want["columns"]) > 200 and all(c[3] for c in want["columns"])  # every column commented
    assert {m[0] for m in want["macros"]} >= {"interval_union", "interval_intersect"}


def test_a_store_is_never_copied_over_a_file_or_a_link(tmp_path):
    there = tmp_path / "there.duckdb"
    there.write_text("precious")
    link = tmp_path / "link.duckdb"
    link.symlink_to(tmp_path / "elsewhere")
    assert not template.fresh_store(there) and there.read_text() == "precious"
    assert not template.fresh_store(link) and not (tmp_path / "elsewhere").exists()


def test_a_cache_folder_that_cannot_hold_a_template_gets_the_schema_written(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("TRACEPARSE_CACHE", str(blocker / "cache"))  # below a file: no folder can be made
    store, _ = load_run([RUN], db=tmp_path / "s.duckdb")
    con = connect(store)
    try:
        assert con.execute("SELECT count(*) FROM comm_ops").fetchone()[0] > 0
    finally:
        con.close()
    assert set(catalog(_written(tmp_path))["columns"]) <= set(catalog(store)["columns"])  # (tagging adds its own)


def test_a_template_that_is_not_the_schema_is_made_again(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRACEPARSE_CACHE", str(cache))
    assert template.fresh_store(tmp_path / "first.duckdb")  # the template made
    [made] = cache.glob("schema-*.store-template")
    con = duckdb.connect(str(made))
    con.execute("CREATE VIEW planted AS SELECT 1 AS x")
    con.close()
    monkeypatch.setattr(template, "_MADE", {})
    monkeypatch.setattr(trust, "_VETTED", set())  # as a process that never saw it
    store, _ = load_run([RUN], db=tmp_path / "s.duckdb")
    assert "planted" not in {v for (v,) in duckdb.connect(str(made), read_only=True).execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}  # made again
    monkeypatch.setattr(trust, "_VETTED", set())  # read as another process reads it: vetted
    con = connect(store)
    try:
        assert con.execute("SELECT count(*) FROM comm_ops").fetchone()[0] > 0
    finally:
        con.close()


def test_a_store_built_here_is_not_vetted_again_but_one_changed_since_is(tmp_path, monkeypatch):
    store, _ = load_run([RUN], db=tmp_path / "s.duckdb")
    read, real = [], trust._catalogs
    monkeypatch.setattr(trust, "_catalogs", lambda con, dbs: read.append(dbs) or real(con, dbs))
    connect(store).close()
    assert read == []  # built and put in place by this process
    con = duckdb.connect(str(store))  # someone else's view, written into it since
    con.execute("CREATE VIEW planted AS SELECT 1 AS x")
    con.close()
    with pytest.raises(TraceError, match="planted"):
        connect(store).close()
    assert read


def _written(tmp_path) -> Path:
    path = tmp_path / "written.duckdb"
    con = duckdb.connect(str(path))
    con.execute(template.schema_sql())
    con.close()
    return path
