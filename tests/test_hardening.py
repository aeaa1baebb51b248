"""Hostile and damaged input outside the parser: header values out of range, a damaged cache entry,
what a killed load leaves behind, and the command's arguments. Each case: exit 0 with the problem
counted in load_issues, or exit 2 with one line naming the file; never a traceback."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import public_trace
from traces import load, rows

from traceparse.cli import main

ROOT = Path(__file__).resolve().parents[1]
DDP2 = ROOT / "fixtures" / "runs" / "ddp2"
DDP4 = ROOT / "fixtures" / "runs" / "ddp4"
BIG = "hta/df_index_resolver/df_index_resolver.json.gz"  # a public trace (conftest.public_trace)


def run_cli(*args, stdin=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=stdin)


def one_line_error(result, *names):
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("traceparse: error")]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    for n in names:
        assert str(n) in lines[0]


def edited(tmp_path, name, edit) -> Path:
    """rank0 of ddp2 with its header edited by ``edit(doc)``, written as ``name``."""
    doc = json.loads(gzip.decompress((DDP2 / "rank0.json.gz").read_bytes()))
    edit(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("name, edit, says", [
    ("rank_negative.json", lambda d: d["distributedInfo"].update(rank=-1), "distributedInfo.rank -1 is not a rank"),
    ("rank_2e31.json", lambda d: d["distributedInfo"].update(rank=2**31), "is not a rank of the job"),
    ("rank_bool.json", lambda d: d["distributedInfo"].update(rank=True), "distributedInfo.rank True"),
    ("world_huge.json", lambda d: d["distributedInfo"].update(world_size=2**40), "is not a world size"),
    ("pg_size_empty.json", lambda d: d["distributedInfo"]["pg_config"][0].update(pg_size="", pg_desc={"a": 1}),
     "size or member ranks are not valid ranks"),
    ("base_time_huge.json", lambda d: d.update(baseTimeNanoseconds=2**63 - 5), "baseTimeNanoseconds"),
])
@pytest.mark.slow
def test_header_values_out_of_range_are_load_issues(tmp_path, name, edit, says):
    path = edited(tmp_path, name, edit)
    con = load(path, tmp_path / "s.duckdb")
    issues = [r["what"] for r in rows(con, "SELECT what FROM load_issues")]
    assert any(says in w for w in issues), issues
    rank = rows(con, "SELECT rank, world_size FROM ranks")[0]
    assert 0 <= rank["rank"] < 2**31
    result = run_cli("analyze", path, "--no-cache", "--format", "json")
    assert result.exit_code == 0, result.output


def _truncate(entry):
    with open(entry, "r+b") as f:
        f.truncate(5000)


def _overwrite_middle(entry):  # same size: only the stamp's time tells
    with open(entry, "r+b") as f:
        f.seek(entry.stat().st_size // 2)
        f.write(os.urandom(4096))


def _directory(entry):
    entry.unlink()
    entry.mkdir()
    (entry / "x").write_text("x")


def _stale_journal(entry):
    Path(f"{entry}.wal").write_bytes(os.urandom(4096))


@pytest.mark.parametrize("damage", [_truncate, _overwrite_middle, _directory, _stale_journal])
@pytest.mark.slow
def test_damaged_cache_entry_is_rebuilt(isolated_dirs, damage):
    assert run_cli("analyze", DDP2, "--format", "json").exit_code == 0
    (entry,) = isolated_dirs["cache"].glob("*.duckdb")
    damage(entry)
    result = run_cli("analyze", DDP2, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["run"]["ranks"] == [0, 1]
    assert entry.is_file() and not Path(f"{entry}.wal").exists()


def test_damaged_named_store_is_still_refused(tmp_path):
    db = tmp_path / "mine.duckdb"
    db.write_bytes(b"not a store")
    one_line_error(run_cli("analyze", DDP2, "--db", db), db)
    assert db.read_bytes() == b"not a store"


def _loading(tmp_path):
    """A load of four copies of a large trace, started in its own session with its own $TMPDIR and
    cache, returned once its workers have begun writing (with its environment)."""
    run = tmp_path / "run"
    run.mkdir()
    for r in range(4):
        shutil.copy(public_trace(BIG), run / f"rank{r}.json.gz")
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "TRACEPARSE_CACHE": str(tmp_path / "cache")}
    (tmp_path / "tmp").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "traceparse.cli", "analyze", str(run), "--allow-mixed"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline and not list((tmp_path / "cache").glob("*.ranks/*/raw/slot=*/*.parquet")):
        time.sleep(0.05)
    return proc, env


def _gone(proc) -> bool:
    """Whether every process of the load's session (workers, forkserver, resource tracker) ended."""
    deadline = time.time() + 15
    while time.time() < deadline and _group_alive(proc.pid):
        time.sleep(0.2)
    return not _group_alive(proc.pid)


def _group_alive(pgid) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_killed_load_leaves_nothing_behind(tmp_path):
    """kill -9 while the pool parses: workers, forkserver and resource tracker go; the next load
    removes the per-rank folder and half-written stores the killed one left."""
    proc, env = _loading(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert _gone(proc), "a worker, the forkserver or the resource tracker outlived the load"
    assert list((tmp_path / "cache").glob("*.ranks/*/raw"))  # the killed load's ranks, half written
    subprocess.run([sys.executable, "-m", "traceparse.cli", "analyze", str(DDP2), "--no-cache"], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == []
    assert [p.name for p in (tmp_path / "cache").glob(".*.tmp*")] == []
    assert list((tmp_path / "cache").glob("*.ranks")) == []


@pytest.mark.slow
def test_interrupted_load_exits_130_with_one_line(tmp_path):
    """Ctrl-C (SIGINT to the loading process) while the pool parses: one line, exit 130, no worker
    left and nothing in $TMPDIR or the cache."""
    proc, _ = _loading(tmp_path)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (130, "traceparse: interrupted\n")
    assert _gone(proc)
    assert list((tmp_path / "tmp").iterdir()) == []
    assert [p.name for p in (tmp_path / "cache").glob(".*.tmp*")] == []
    assert list((tmp_path / "cache").glob("*.ranks")) == []


def test_empty_argument_is_refused():
    one_line_error(run_cli("analyze", ""), '""')


def test_folder_skips_empty_and_non_trace_files_alike(tmp_path):
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "bad.json").write_text("hello")
    shutil.copy(DDP2 / "rank0.json.gz", tmp_path)
    result = run_cli("analyze", tmp_path, "--no-cache", "--format", "json")
    assert result.exit_code == 0, result.output
    skipped = {Path(i["file"]).name: i["what"] for i in json.loads(result.stdout)["load_issues"]
               if i["what"].startswith("skipped")}
    assert skipped == {"empty.json": "skipped: empty file", "bad.json": "skipped: no trace events in its first 4 MB"}


@pytest.mark.slow
def test_a_file_name_with_an_undecodable_byte_loads(tmp_path):
    """b'rank0-\\xff.json' is not UTF-8: the name is shown and stored with the byte escaped."""
    name = os.fsdecode(b"rank0-\xff.json")
    (tmp_path / name).write_bytes(gzip.open(DDP2 / "rank0.json.gz").read())
    for cache in (["--no-cache"], []):
        result = run_cli("analyze", tmp_path, "--format", "json", *cache)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["run"]["files"] == [f"{tmp_path.resolve()}/rank0-\\xff.json"]


def test_a_newline_in_a_file_name_stays_on_the_error_line(tmp_path):
    (tmp_path / "rank0\nx.json").write_bytes(b"")
    one_line_error(run_cli("analyze", tmp_path, "--no-cache"), tmp_path, "skipped 1: rank0\\nx.json (empty file)")


def test_db_naming_a_directory(tmp_path):
    one_line_error(run_cli("analyze", DDP2, "--db", tmp_path), tmp_path, "is a directory")


def test_layout_file_missing():
    one_line_error(run_cli("analyze", DDP2, "--no-cache", "--layout", "nofile.toml"), "nofile.toml")


def test_sql_with_a_path_and_no_query_prompts_on_that_run():
    result = run_cli("sql", DDP2, stdin="SELECT count(*) AS n FROM ranks")  # the last query needs no ';'
    assert result.exit_code == 0, result.output
    assert "n" in result.output and "2" in result.output.split("n", 1)[1]


def test_some_ranks_missing_is_a_load_issue():
    result = run_cli("analyze", DDP4 / "rank0.json.gz", DDP4 / "rank1.json.gz", "--no-cache", "--format", "json")
    assert result.exit_code == 0, result.output
    issues = [i["what"] for i in json.loads(result.stdout)["load_issues"]]
    assert any(w.startswith("2 of 4 ranks loaded; missing ranks: 2, 3") for w in issues), issues


@pytest.mark.parametrize("content", [b"[model]\nheads = 0\n", b"[model]\nhidden = inf\n", b"[model]\nparams = 1e400\n",
                                     b"tp = 99999999999999999999\n", b"dp = -4\n", b"\xff\xfe\x00", b"model = 3\n"])
def test_layout_file_values_out_of_range(tmp_path, content):
    path = tmp_path / "layout.toml"
    path.write_bytes(content)
    one_line_error(run_cli("analyze", DDP2, "--no-cache", "--layout", path), path)


@pytest.mark.parametrize("text, says", [("dp=0", "dp = 0 is out of range"), ("pp=inf", "pp = inf is not a whole number"),
                                        ("dp=2.5", "not a whole number"), ("zero_stage=4", "out of range (0 to 3)")])
def test_layout_string_values_out_of_range(text, says):
    one_line_error(run_cli("analyze", DDP2, "--no-cache", "--layout", text), says)


def test_layout_accepts_params_in_scientific_notation():
    from traceparse.layout.stated import parse_stated

    assert parse_stated("params=7e9,zero_stage=0") == {"params": 7_000_000_000, "zero_stage": 0}


@pytest.mark.parametrize("top", ["-1", "99999999999999999999", "x"])
def test_top_out_of_range_is_one_line(top):
    one_line_error(run_cli("analyze", DDP2, "--no-cache", "--top", top), "--top")


@pytest.mark.parametrize("query", ["SELECT CAST('x' AS INTEGER)", "SELECT 9223372036854775807 + 1", "SELEC 1"])
@pytest.mark.slow
def test_failing_sql_query_is_one_line(query):
    one_line_error(run_cli("sql", query, DDP2, "--no-cache"), "query failed")


def test_db_under_a_regular_file():
    one_line_error(run_cli("analyze", DDP2 / "rank0.json.gz", "--db", DDP2 / "rank0.json.gz" / "run.duckdb"),
                   "its folder is a file")
