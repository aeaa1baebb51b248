"""A small run is parsed in the calling process: a process pool takes longer to start than the parse it would spare
(traceparse/load/run.py, ``_processes``; docs/speed.md, Small runs)."""

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import FIXTURE_RUNS

from traceparse.load import run as load
from traceparse.load.run import POOL_START_S, PARSE_S_PER_MB, load_run
from traceparse.own_process import OWN

PANDAS = importlib.util.find_spec("pandas") is not None


def sized(folder, sizes_mb: list[float], suffix: str) -> list:
    out = []
    for i, mb in enumerate(sizes_mb):
        f = folder / f"rank{i}{suffix}"
        with open(f, "wb") as fh:
            fh.truncate(int(mb * 2**20))
        out.append(f)
    return out


def test_the_pool_starts_only_when_it_spares_more_than_its_start(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    # two processes spare half the parse: worth it from POOL_START_S of it
    gz_mb = 2 * POOL_START_S / PARSE_S_PER_MB["gz"]  # in all, over the two files
    assert load._processes(sized(tmp_path, [gz_mb * 0.4, gz_mb * 0.4], ".json.gz")) == 1
    assert load._processes(sized(tmp_path, [gz_mb * 0.6, gz_mb * 0.6], ".json.gz")) == 2
    json_mb = 2 * POOL_START_S / PARSE_S_PER_MB["json"]
    assert load._processes(sized(tmp_path, [json_mb * 0.4, json_mb * 0.4], ".json")) == 1
    assert load._processes(sized(tmp_path, [json_mb * 0.6, json_mb * 0.6], ".json")) == 2
    assert load._processes(sized(tmp_path, [1000.0], ".json")) == 1  # one file: one process


def test_a_small_run_loads_without_a_pool(tmp_path, monkeypatch):
    def no_pool(*_a, **_k):
        raise AssertionError("a pool was started for a small run")

    monkeypatch.setattr(load, "ProcessPoolExecutor", no_pool)
    path, _ = load_run([FIXTURE_RUNS / "ddp4"], db=tmp_path / "s.duckdb", use_cache=False)
    assert path.is_file()


def _fresh(code: str, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != OWN}  # as a user's shell has it
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.skipif(not PANDAS, reason="pandas is not installed: there is no import to spare")
def test_the_command_line_never_imports_pandas():
    """pyarrow would import pandas (0.2 to 0.3 s) at its first conversion; the command line tells it pandas is missing
    (traceparse/own_process.py)."""
    r = _fresh("import sys\nfrom traceparse.cli import main\n"
               "try:\n    main(['analyze', '--no-cache', '-q', sys.argv[1]])\n"
               "except SystemExit as e:\n    assert not e.code, e.code\n"
               "assert 'pandas' not in sys.modules, 'pandas imported'", FIXTURE_RUNS / "ddp2")
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(not PANDAS, reason="pandas is not installed")
def test_as_a_library_pyarrow_keeps_pandas():
    """In someone else's process traceparse changes nothing: Arrow still converts to pandas after an analysis."""
    r = _fresh("import sys, traceparse, pyarrow as pa\ntraceparse.analyze([sys.argv[1]], use_cache=False)\n"
               "assert pa.table({'a': [1]}).to_pandas()['a'][0] == 1", FIXTURE_RUNS / "ddp2")
    assert r.returncode == 0, r.stderr


def test_duckdb_runs_one_thread_on_a_run_of_fewer_events_than_a_row_group(tmp_path):
    """trust.sized: below one row group (DuckDB's unit of parallel work) a second thread has nothing to take; at or
    above it, DuckDB keeps its own thread count. A small run's store is read with one."""
    import duckdb

    from traceparse.load.run import connect
    from traceparse.store import trust

    con = duckdb.connect()
    default = con.execute("SELECT current_setting('threads')").fetchone()[0]
    trust.sized(con, trust.ROW_GROUP_ROWS)
    assert con.execute("SELECT current_setting('threads')").fetchone()[0] == default
    trust.sized(con, trust.ROW_GROUP_ROWS - 1)
    assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 1
    store, _ = load_run([FIXTURE_RUNS / "ddp2"], db=tmp_path / "s.duckdb")
    reader = connect(store)
    try:
        events = reader.execute("SELECT sum(n_events) FROM ranks").fetchone()[0]
        assert 0 < events < trust.ROW_GROUP_ROWS
        assert reader.execute("SELECT current_setting('threads')").fetchone()[0] == 1
    finally:
        reader.close()
