"""TRACEPARSE_MEMORY_LIMIT bounds DuckDB's memory on every store connection (the build and the reads);
a value DuckDB cannot read is bad input: one line, exit 2."""

from pathlib import Path

from click.testing import CliRunner

from traceparse.cli import main
from traceparse.load import connect, load_run

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
