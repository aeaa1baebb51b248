"""Where and within what a load runs: TRACEPARSE_MEMORY_LIMIT bounds DuckDB's memory on every store connection
(the build and the reads), --stage names the staging folder; a value that cannot be used is bad input: one line,
exit 2, nothing left behind."""

import tempfile
from pathlib import Path

from click.testing import CliRunner

from traceparse.cli import main
from traceparse.load.run import connect, load_run

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "ddp2"


def test_the_limit_is_set_on_the_store_connections(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEPARSE_MEMORY_LIMIT", "300MB")
    path, _ = load_run([RUN], db=tmp_path / "run.duckdb")
    con = connect(path)
    # DuckDB reports the limit in binary units: 300 MB = 286.1 MiB
    assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "286.1 MiB"


def test_an_unreadable_limit_is_one_line_and_exit_2(monkeypatch):
    monkeypatch.setenv("TRACEPARSE_MEMORY_LIMIT", "lots")
    r = CliRunner().invoke(main, ["analyze", "--no-cache", "-q", str(RUN)])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and "TRACEPARSE_MEMORY_LIMIT" in r.output


def test_a_stage_folder_that_cannot_be_used_is_one_line_and_exit_2(tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where the --no-cache store's folder goes
    (tmp_path / "a-file").write_text("")
    for stage in (tmp_path / "missing", tmp_path / "a-file"):
        r = CliRunner().invoke(main, ["analyze", "--no-cache", "-q", "--stage", str(stage), str(RUN)])
        assert r.exit_code == 2 and r.output.count("\n") == 1 and str(stage) in r.output, r.output
    assert not list((tmp_path / "tmp").iterdir())  # the --no-cache store's folder is gone too


def test_the_stage_folder_holds_the_staging_and_is_left_empty(tmp_path):
    (tmp_path / "stage").mkdir()
    r = CliRunner().invoke(main, ["analyze", "--no-cache", "-q", "--format", "json", "--stage", str(tmp_path / "stage"),
                                  str(RUN)])
    assert r.exit_code == 0 and '"world_size": 2' in r.output
    assert not list((tmp_path / "stage").iterdir())


def test_a_dead_loads_spill_folder_and_document_are_removed(tmp_path, monkeypatch):
    """DuckDB spills a store being built to <file>.tmp; a load killed mid-build leaves it (and a half-written kept
    document) in the cache: the next load removes them."""
    import subprocess
    import sys

    from traceparse.load.run import remove_stale_leftovers

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    cache = tmp_path / "cache"
    spill = cache / f".abc.duckdb.{pid}.tmp.tmp"
    spill.mkdir(parents=True)
    (spill / "duckdb_temp_storage-0.tmp").write_bytes(b"x")
    (cache / f".analyze.abc.duckdb.{pid}.tmp").write_text("{")
    monkeypatch.setenv("TRACEPARSE_CACHE", str(cache))
    remove_stale_leftovers()
    assert list(cache.iterdir()) == []
