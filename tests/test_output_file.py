"""``traceparse analyze -o FILE``: every format goes to the file instead of stdout, whole or not at all."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from traceparse.cli import main

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "ddp2"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return tmp_path_factory.mktemp("store") / "s.duckdb"


def analyze(db, *args):
    return CliRunner().invoke(main, ["analyze", str(RUN), "--db", str(db), *map(str, args)])


@pytest.mark.parametrize("fmt", ["text", "json", "html"])
@pytest.mark.slow
def test_the_file_holds_what_stdout_would(db, tmp_path, fmt):
    out = tmp_path / f"report.{fmt}"
    r = analyze(db, "--format", fmt, "-o", out)
    assert r.exit_code == 0, r.output
    assert r.stdout == "" and f"report written to {out}" in r.stderr
    plain = analyze(db, "--format", fmt, "--color", "never")
    assert plain.exit_code == 0
    assert out.read_text(encoding="utf-8") == plain.stdout
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary file left beside it


def test_a_failed_report_leaves_the_old_file_whole(db, tmp_path, monkeypatch):
    out = tmp_path / "report.html"
    out.write_text("the previous report")
    # a string that cannot be encoded: the write fails half-way through the temporary file
    monkeypatch.setattr("traceparse.render.html.render_html", lambda _doc: "<p>half</p>" * 1000 + "\ud800")
    r = analyze(db, "--format", "html", "--output", out)
    assert r.exit_code == 3, r.output
    assert out.read_text() == "the previous report"
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_a_folder_that_does_not_exist_is_bad_input(db, tmp_path):
    out = tmp_path / "missing" / "report.txt"
    r = analyze(db, "-o", out)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and str(out) in r.stderr
    assert not out.parent.exists()
