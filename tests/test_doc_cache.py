"""A repeated analyze, layout or tags reads the document kept beside the store; a changed file, option or
version builds it again (traceparse.document.cache)."""

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceparse.document.cache
import traceparse.document
from traceparse.cli import main

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "ddp2"
BUILDERS = {"analyze": "document", "layout": "layout_document", "tags": "tags_document"}


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture
def traces(tmp_path, isolated_dirs):  # noqa: ARG001 (the cache goes to a per-test folder)
    shutil.copytree(RUN, tmp_path / "run")
    return tmp_path / "run"


def never_built(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("the document was built again")

    for name in BUILDERS.values():
        monkeypatch.setattr(traceparse.document, name, refuse)


def kept(isolated_dirs, kind):
    return sorted(isolated_dirs["cache"].glob(f"*.duckdb.{kind}-*.json"))


@pytest.mark.parametrize("kind", sorted(BUILDERS))
@pytest.mark.slow
def test_a_repeated_command_reads_the_kept_document(traces, isolated_dirs, monkeypatch, kind):
    first = run(kind, "--format", "json", traces)
    assert len(kept(isolated_dirs, kind)) == 1
    never_built(monkeypatch)
    assert run(kind, "--format", "json", traces) == first


@pytest.mark.slow
def test_other_options_files_or_version_build_it_again(traces, isolated_dirs, monkeypatch):
    base = run("analyze", "--format", "json", traces)
    calls = []
    real = traceparse.document.document

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(traceparse.document, "document", counted)
    top3 = run("analyze", "--format", "json", "--top", "3", traces)  # another option
    assert len(calls) == 1 and top3 != base
    assert len(kept(isolated_dirs, "analyze")) == 1  # the store's older analyze document is replaced
    stated = run("analyze", "--format", "json", "--layout", "dp=2", traces)
    assert len(calls) == 2 and stated["layout_check"]["stated"] != base["layout_check"]["stated"]
    monkeypatch.setattr(traceparse.document.cache, "__version__", "0.0.0-other")  # another traceparse
    run("analyze", "--format", "json", "--layout", "dp=2", traces)
    assert len(calls) == 3
    f = traces / "rank1.json.gz"  # a changed file: another store
    os.utime(f, ns=(1, 1))
    run("analyze", "--format", "json", "--layout", "dp=2", traces)
    assert len(calls) == 4 and len(list(isolated_dirs["cache"].glob("*.duckdb"))) == 2


@pytest.mark.slow
def test_a_damaged_document_is_built_again(traces, isolated_dirs):
    first = run("analyze", "--format", "json", traces)
    (doc,) = kept(isolated_dirs, "analyze")
    doc.write_text(doc.read_text()[:100])
    assert run("analyze", "--format", "json", traces) == first
    assert json.loads(doc.read_text()) == first


@pytest.mark.slow
def test_no_cache_keeps_no_document(traces, isolated_dirs, tmp_path, monkeypatch):
    run("analyze", "--format", "json", "--no-cache", traces)
    assert not isolated_dirs["cache"].exists() or not list(isolated_dirs["cache"].iterdir())
    db = tmp_path / "mine.duckdb"  # a store the user names keeps its documents beside it
    first = run("tags", "--format", "json", "--db", db, traces)
    assert [p.name[len("mine.duckdb."):-len(".json")].split("-")[0] for p in tmp_path.glob("mine.duckdb.*.json")] == ["tags"]
    never_built(monkeypatch)
    assert run("tags", "--format", "json", "--db", db, traces) == first


def test_a_cached_analyze_opens_no_store(traces, isolated_dirs):
    """A repeated analyze of a cached store reads its kept document from the cache entry's stamp alone: in a fresh
    process, DuckDB is never imported, and the report is the first one's."""
    import subprocess
    import sys

    first = run("analyze", traces, "--format", "json")
    code = ("import sys; from traceparse.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "assert 'duckdb' not in sys.modules, 'DuckDB imported'")
    again = subprocess.run([sys.executable, "-c", code, "analyze", str(traces), "--format", "json"],
                           env={**os.environ, "TRACEPARSE_CACHE": str(isolated_dirs["cache"])},
                           capture_output=True, text=True, check=True)
    assert json.loads(again.stdout) == first
