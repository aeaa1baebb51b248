"""A job profiled in several windows (a repeating ``torch.profiler.schedule``): a folder with several files per rank
is analyzed as the latest window of each rank, said in one line on stderr naming ``--window``, and ``--window STEP``
loads another. Windows are told apart by the traces' ProfilerStep#N, whatever the files are named."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import committed_runs

from traceparse.cli import main

RUN = committed_runs("ddp2_windows") / "ddp2_windows"  # schedule(wait=1, warmup=1, active=2, repeat=4), 2 ranks
WINDOWS = "steps 2-3, 6-7, 10-11, 14-15"


def analyze(*args):
    r = CliRunner().invoke(main, ["analyze", "--format", "json", *map(str, args)])
    return r, (json.loads(r.stdout) if r.exit_code in (0, 1) else None)


def steps(doc) -> list:
    return doc["run"]["steps"]


@pytest.mark.slow
def test_a_folder_of_windows_loads_the_latest_of_each_rank_and_says_so(tmp_path):
    r, doc = analyze(RUN, "--db", tmp_path / "s.duckdb")
    assert r.exit_code == 0, r.output
    assert steps(doc) == [14, 15] and doc["run"]["ranks"] == [0, 1]
    said = [line for line in r.stderr.splitlines() if "profiled windows" in line]
    assert said == [f"traceparse: warning: {RUN}: 8 trace files hold 4 profiled windows ({WINDOWS}): analyzing the "
                    "latest of each rank, steps 14-15; choose another with --window STEP (a step in it, e.g. "
                    "--window 2)"]


@pytest.mark.slow
def test_window_selects_another_window(tmp_path):
    r, doc = analyze(RUN, "--window", 6, "--db", tmp_path / "s.duckdb")
    assert r.exit_code == 0, r.output
    assert steps(doc) == [6, 7] and "profiled windows" not in r.stderr  # asked for: said among the info issues
    assert any(i["what"] == f"analyzing steps 6-7 (--window 6) of 4 profiled windows ({WINDOWS})"
               for i in doc["load_issues"])
    r, doc = analyze(RUN, "--window", "latest", "--db", tmp_path / "l.duckdb")
    assert r.exit_code == 0 and steps(doc) == [14, 15]


@pytest.mark.slow
def test_windows_are_told_apart_by_their_steps_not_their_names(tmp_path):
    """Files named as torch's tensorboard_trace_handler names them (host_pid.time.pt.trace.json.gz)."""
    for i, f in enumerate(sorted(RUN.glob("rank*.json.gz"), key=lambda p: p.name[::-1])):
        shutil.copy(f, tmp_path / f"node1_{4242 + i}.{1700000000 + i}.pt.trace.json.gz")
    r, doc = analyze(tmp_path, "--no-cache")
    assert r.exit_code == 0, r.output
    assert steps(doc) == [14, 15] and doc["run"]["ranks"] == [0, 1] and "--window STEP" in r.stderr
    r, doc = analyze(tmp_path, "--no-cache", "--window", 11)
    assert r.exit_code == 0 and steps(doc) == [10, 11]


def test_a_window_that_is_not_there_is_refused():
    r, _ = analyze(RUN, "--window", 5, "--no-cache")
    assert r.exit_code == 2
    assert r.stderr == f"traceparse: error: --window: no profiled window holds step 5; the windows: {WINDOWS}\n"
    r, _ = analyze(RUN, "--window", "first", "--no-cache")
    assert r.exit_code == 2 and "'first' is not a profiler step number or 'latest'" in r.stderr


def test_two_files_of_one_rank_that_are_not_windows_are_still_refused(tmp_path):
    """The same window twice (overlapping steps) is no pair of windows: 'claims rank 0, as does ...'."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(RUN / "rank0.step8.json.gz", tmp_path / name / "rank0.json.gz")
    r, _ = analyze(tmp_path, "--no-cache")
    assert r.exit_code == 2 and "claims rank 0, as does" in r.stderr


def test_the_readme_shows_the_snippet_the_job_below_runs():
    from readme_snippet_job import REPO, snippet

    assert f"```python\n{snippet()}```" in (REPO / "README.md").read_text()


@pytest.mark.slow
def test_docs_snippet_with_a_repeating_schedule_is_analyzed_as_written(tmp_path):
    """docs/profiler.md's snippet run as written in a real 2-process gloo job (8 steps of a DDP model, its
    ``schedule(wait=1, warmup=1, active=2)`` repeating): two windows per rank; ``traceparse analyze runs/exp1``
    analyzes the latest and names --window; ``--window`` loads the other."""
    pytest.importorskip("torch")
    job = Path(__file__).with_name("readme_snippet_job.py")
    done = subprocess.run([sys.executable, str(job), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "runs" / "exp1"
    assert sorted(p.name for p in run.iterdir()) == ["rank0.step4.json.gz", "rank0.step8.json.gz",
                                                      "rank1.step4.json.gz", "rank1.step8.json.gz"]
    r, doc = analyze(run, "--db", tmp_path / "latest.duckdb")
    assert r.exit_code == 0, r.output
    assert steps(doc) == [6, 7] and doc["run"]["ranks"] == [0, 1]
    assert ("4 trace files hold 2 profiled windows (steps 2-3, 6-7): analyzing the latest of each rank, steps 6-7; "
            "choose another with --window STEP (a step in it, e.g. --window 2)") in r.stderr
    r, doc = analyze(run, "--window", 2, "--db", tmp_path / "first.duckdb")
    assert r.exit_code == 0, r.output
    assert steps(doc) == [2, 3] and doc["run"]["ranks"] == [0, 1]
