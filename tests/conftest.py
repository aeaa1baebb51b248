"""Shared fixtures: where the public traces are, and an isolated cache/temp dir per test."""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
for _p in (TESTS, TESTS.parent):  # `import traces`, `import fixtures` whatever pytest's import mode
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))



def package_sources(folders=("traceparse", "analyzers"), suffixes=(".py", ".sql")):
    """(path relative to the repository, path) of each source file under ``folders``, in order: what the tests that
    scan the package's code read (tests/test_layers.py, test_definitions.py, test_vocabulary_modules.py)."""
    for folder in folders:
        for path in sorted((TESTS.parent / folder).rglob("*")):
            if path.suffix in suffixes and "__pycache__" not in path.parts:
                yield path.relative_to(TESTS.parent).as_posix(), path


# Real GPU traces of other projects, never committed here: read from TRACEPARSE_PUBLIC_TRACES or
# ../shared/traces (fixtures/public_traces.py; sources, checksums and licenses in fixtures/public_traces.toml)
from fixtures import public_traces  # noqa: E402

# set by .ci/run: a public trace missing there fails its test instead of skipping it
REQUIRE_PUBLIC = "TRACEPARSE_REQUIRE_PUBLIC_TRACES"


def public_trace_files() -> list[Path]:
    """Every public trace the tests use, present or not (a test of a missing one skips: ``public_trace``)."""
    return public_traces.files()


def public_trace(rel: str) -> Path:
    """Path of the public trace ``rel`` (its name under the traces folder); when it is missing the test skips with
    one line saying which and how to get it (fails where TRACEPARSE_REQUIRE_PUBLIC_TRACES is set, as in CI)."""
    why = public_traces.missing(rel)
    if why:
        if os.environ.get(REQUIRE_PUBLIC):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return public_traces.path(rel)


def needed(path):
    """``path`` itself, once it is there: a path of ``public_trace_files()`` goes through ``public_trace`` (the test
    skips, saying which, when it is missing); anything else is returned as it is."""
    files = public_trace_files()
    if isinstance(path, Path) and path in files:
        return public_trace(public_traces.names()[files.index(path)])
    return path


# Runs of fixtures/generate.py (real multi-process jobs), committed with their truth.json
FIXTURE_RUNS = TESTS.parent / "fixtures" / "runs"


def committed_runs(*names: str) -> Path:
    """``fixtures/runs``, once the committed runs ``names`` (at least one run when none is named) are found there
    with their truth.json. They are part of the repository: a missing one (moved, deleted, not checked out) is an
    error of the module that needs them, never a silent skip."""
    have = {p.name for p in FIXTURE_RUNS.glob("*") if (p / "truth.json").is_file()}
    missing = [n for n in names if n not in have] if names else ([] if have else ["(any run)"])
    if missing:
        raise FileNotFoundError(f"committed fixture runs missing under {FIXTURE_RUNS}: {', '.join(missing)}")
    return FIXTURE_RUNS


# the fixture runs a test parametrized over every run keeps in the fast tier (pytest -m "not slow")
FAST_RUNS = ("ddp2", "dp2_tp2", "pp4_1f1b_m4", "fsdp2_zero3_dp4")


def fast_few(names):
    """``names`` (fixture runs) as parameters: those of ``FAST_RUNS`` in the fast tier, the others marked slow."""
    return [n if n in FAST_RUNS else pytest.param(n, marks=pytest.mark.slow) for n in names]


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path_factory, monkeypatch):
    """Cache and temporary files of traceparse go to per-test folders, never to ~/.cache or /tmp. A text report is
    as wide as it is (``COLUMNS`` very large), so a test reads a sentence on one line; tests/test_rendering.py holds
    the fitting at a set width."""
    base = tmp_path_factory.mktemp("isolated")
    cache, tmp = base / "cache", base / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TRACEPARSE_CACHE", str(cache))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setenv("COLUMNS", "10000")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return {"cache": cache, "tmp": tmp}


@contextmanager
def parquet_parts():
    """Loads within write the ranks' tables as Parquet in the store's per-rank folder, as a run larger than one row
    group does, however small the run (``load.run.in_store``): for tests of that folder."""
    from traceparse.load import run

    with pytest.MonkeyPatch.context() as m:
        m.setattr(run, "in_store", lambda _parsed: False)
        yield


@pytest.fixture
def per_rank_parquet():
    """``parquet_parts`` for the whole test."""
    with parquet_parts():
        yield


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    """store(*paths) -> read-only connection to the store of those traces, loaded once per session."""
    from traceparse.load.run import connect, load_run

    cons = {}

    def get(*paths):
        key = tuple(Path(p).resolve() for p in paths)
        if key not in cons:
            path, _ = load_run(list(key), db=tmp_path_factory.mktemp("store") / "s.duckdb")
            cons[key] = connect(path)
        return cons[key]

    yield get
    for con in cons.values():
        con.close()


@pytest.fixture(scope="session")
def doc(store):
    """doc(path) -> the analyze document of a fixture run or public trace (``store``'s), made once per session."""
    from traceparse.document import document

    done = {}

    def get(path):
        if path not in done:
            done[path] = document(store(needed(path)))
        return done[path]

    return get


def run_check(module, con, stated=None):
    """Run one analyzer on a store as traceparse.analyzers does."""
    from traceparse.analyzers.context import Context
    from traceparse.thresholds import check_thresholds as thresholds
    from traceparse.layout.stated import inferred_layout

    return module.run(Context(con, inferred_layout(con), stated or {}, thresholds().get(module.SPEC.id, {})))


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One cache folder for a module's CLI calls (``cli``)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def cli(shared_cache, monkeypatch):
    """cli(*args) -> (exit code, stdout, stderr) of ``traceparse ARGS`` in this process, the runs' stores cached
    across the module's tests."""
    from click.testing import CliRunner

    from traceparse.cli import main

    monkeypatch.setenv("TRACEPARSE_CACHE", str(shared_cache))

    def run(*args):
        r = CliRunner().invoke(main, [str(a) for a in args])
        return r.exit_code, r.stdout, r.stderr
    return run


def refused(got, *words) -> str:
    """Of ``cli``'s (code, stdout, stderr): exit 2, nothing on stdout, one line on stderr naming ``words``; the line."""
    code, out, err = got
    assert (code, out) == (2, ""), got
    assert err.count("\n") == 1 and err.startswith("traceparse: error: "), err
    for w in words:
        assert w in err, err
    return err


@pytest.fixture
def browser_page():
    """``open_page(path, screenshot=None, ...)`` of tests/browser.py; skips, saying why, without
    Chromium or Playwright."""
    import browser

    why = browser.missing()
    if why:
        pytest.skip(why)
    return browser.open_page


@pytest.fixture(scope="session")
def recorded_history(tmp_path_factory):
    """A history of three real fixture runs recorded through ``analyze --record`` (tests/history_runs.py)."""
    from history_runs import record_fixture_runs

    return record_fixture_runs(tmp_path_factory.mktemp("history"))
