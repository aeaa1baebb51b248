"""What a command is given is never destroyed: ``-o`` writes through special files and symbolic links instead of
replacing them, refuses to name one of the command's own inputs before any work, and every argument that can be
checked is checked before the analysis runs. Each case: the exit code, one line naming the file and the problem,
nothing written where nothing should be and nothing left behind."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import stat
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_hardening import edited

from traceparse.cli import main

ROOT = Path(__file__).resolve().parents[1]
DDP2 = ROOT / "fixtures" / "runs" / "ddp2"


def run_cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result, *names):
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("traceparse: error: "), result.stderr
    for n in names:
        assert str(n) in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def run(tmp_path):
    """A copy of ddp2 (its two rank files and truth.json), with the bytes of every file."""
    folder = tmp_path / "run"
    shutil.copytree(DDP2, folder)
    return folder


def snapshot(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.slow
def test_a_fifo_is_written_through_and_stays_a_fifo(run, tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    r = run_cli("analyze", run, "--no-cache", "--format", "json", "-o", fifo)
    reader.join(30)
    assert r.exit_code == 0, r.output
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert json.loads(got[0])["run"]["ranks"] == [0, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.fifo", "run"]


@pytest.mark.slow
def test_dev_null_stays_a_character_device():
    before = os.stat("/dev/null")
    r = run_cli("analyze", DDP2, "--no-cache", "-o", "/dev/null")
    assert r.exit_code == 0, r.output
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


@pytest.mark.slow
def test_a_full_device_is_one_line_and_stays():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    one_line_error(run_cli("analyze", DDP2, "--no-cache", "-o", "/dev/full"), "/dev/full", "No space left on device")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


@pytest.mark.slow
def test_a_symlink_stays_a_link_and_its_target_gets_the_report(run, tmp_path):
    target, link = tmp_path / "real.txt", tmp_path / "link.txt"
    target.write_text("old")
    target.chmod(0o640)
    link.symlink_to(target.name)
    r = run_cli("analyze", run, "--no-cache", "--format", "json", "-o", link)
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and os.readlink(link) == "real.txt"
    assert json.loads(target.read_text())["run"]["ranks"] == [0, 1]
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the file it replaced kept its permissions
    dangling = tmp_path / "dangling.txt"
    dangling.symlink_to("new.txt")
    assert run_cli("analyze", run, "--no-cache", "-o", dangling).exit_code == 0
    assert dangling.is_symlink() and (tmp_path / "new.txt").read_text().startswith("run: 2 file(s)")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("command", [
    ["analyze", "{run}"], ["hang", "{run}"], ["whatif", "{run}", "--sweep"], ["compare", "{run}", "{run}"],
])
def test_o_naming_an_input_trace_is_refused_before_any_work(run, isolated_dirs, command):
    before = snapshot(run)
    for victim in ("rank0.json.gz", "rank1.json.gz"):
        args = [a.replace("{run}", str(run)) for a in command]
        one_line_error(run_cli(*args, "-o", run / victim), run / victim, "one of this command's inputs")
    assert snapshot(run) == before
    assert not isolated_dirs["cache"].exists()  # refused before anything was loaded


@pytest.mark.slow
def test_o_naming_the_store_or_the_history_is_refused(run, tmp_path):
    store = tmp_path / "s.duckdb"
    assert run_cli("analyze", run, "--db", store).exit_code == 0
    kept = store.read_bytes()
    one_line_error(run_cli("analyze", run, "--db", store, "-o", store), store)
    assert store.read_bytes() == kept
    history = tmp_path / "H.duckdb"
    one_line_error(run_cli("analyze", run, "--no-cache", "--record", history, "-o", history), history)
    assert not history.exists()  # nothing half-made
    assert run_cli("analyze", run, "--no-cache", "--record", history).exit_code == 0
    kept = history.read_bytes()
    one_line_error(run_cli("analyze", run, "--no-cache", "--record", history, "-o", history), history)
    one_line_error(run_cli("dashboard", history, "-o", history), history)
    assert history.read_bytes() == kept


@pytest.mark.slow
def test_a_report_may_live_in_the_run_folder(run):
    """A file of the folder that is no trace (the last report) is not an input: it is replaced."""
    report = run / "report.json"
    for _ in range(2):
        r = run_cli("analyze", run, "--no-cache", "--format", "json", "-o", report)
        assert r.exit_code == 0, r.output
    assert json.loads(report.read_text())["run"]["ranks"] == [0, 1]


def test_options_that_would_be_ignored_are_refused(run):
    one_line_error(run_cli("whatif", run, "--layout", "dp=1", "--device-memory", "80"), "--device-memory")
    one_line_error(run_cli("whatif", run, "--sweep", "--device-memory", "nan"), "--device-memory", "nan")
    one_line_error(run_cli("analyze", run, "--no-cache", "--address", "127.0.0.1:6379"), "--address", "--engine ray")


@pytest.mark.slow
def test_stray_pickles_are_skipped_and_said_notes_skipped(run):
    with open(run / "model.pkl", "wb") as f:
        pickle.dump({"weights": [1, 2]}, f)
    (run / "notes.json").write_text('{"pg_status": "see the dashboard", "owner": "me"}')
    r = run_cli("analyze", run, "--no-cache", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["run"]["ranks"] == [0, 1]
    skipped = {Path(i["file"]).name: i["what"] for i in doc["load_issues"] if i["what"].startswith("skipped")}
    assert set(skipped) == {"model.pkl"}  # notes.json and truth.json: JSON documents without trace events, unsaid
    assert "not a Flight Recorder dump" in skipped["model.pkl"]
    # named by the user, the same file is refused with its reason
    one_line_error(run_cli("analyze", run / "model.pkl", "--no-cache"), "model.pkl", "not a Flight Recorder dump")
    one_line_error(run_cli("analyze", run / "truth.json", "--no-cache"), "truth.json", "without traceEvents")


@pytest.mark.slow
def test_a_group_name_that_is_an_object_loads(tmp_path):
    path = edited(tmp_path, "rank0.json", lambda d: d["distributedInfo"]["pg_config"][0].update(
        pg_name={"a": 1}, pg_desc=[1, 2]))
    r = run_cli("analyze", path, "--no-cache", "--format", "json")
    assert r.exit_code == 0, r.output


@pytest.mark.slow
def test_a_rank_in_the_file_name_beyond_int32_is_no_rank(tmp_path):
    path = edited(tmp_path, "rank9000000000000000000000000000000.json", lambda d: d.pop("distributedInfo"))
    r = run_cli("analyze", path, "--no-cache", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["run"]["ranks"] == [0]
    assert any("9000000000000000000000000000000 is not a rank" in i["what"] for i in doc["load_issues"])


def _analyze_run(path) -> str:
    import traceparse

    doc = traceparse.analyze([path])
    return json.dumps({k: doc[k] for k in ("run", "layout", "collectives")}, sort_keys=True)


@pytest.mark.slow
def test_concurrent_api_calls_from_threads_and_processes(isolated_dirs):
    """The default cache shared by 4 threads, then by 3 processes, each loading the same run at once: every call
    gets the document a lone call gets, and the cache holds only the entry and its stamp (beside the schema's template;
    a small run's store holds its ranks' tables, with no per-rank folder: tests/test_per_rank_parts.py has loads at
    once of a store with one)."""
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        from_threads = list(pool.map(_analyze_run, [DDP2] * 4))
    shutil.rmtree(isolated_dirs["cache"])
    import multiprocessing

    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("fork")) as pool:
        from_processes = list(pool.map(_analyze_run, [DDP2] * 3))
    assert len(set(from_threads + from_processes)) == 1
    alone = json.loads(from_threads[0])
    assert alone["run"]["ranks"] == [0, 1] and alone["layout"]["dp"] == 2
    left = sorted(p.name for p in isolated_dirs["cache"].iterdir() if not p.name.endswith(".store-template"))
    assert len(left) == 2 and left[1] == left[0] + ".stamp", left  # a small run's store has no per-rank folder
