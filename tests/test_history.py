"""The run history: what ``analyze --record`` stores, checked against the fixtures' truth.json; label and
path validation; concurrent writer processes and writers killed mid-write."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from history_runs import JOB, RUNS, RUNS_DIR, labels_args

from traceparse.history import store as history
from traceparse.cli import main

REPO = Path(__file__).resolve().parents[1]
WRITERS = 6


def rank_files(name: str) -> list[str]:
    return sorted(str(p.resolve()) for p in (RUNS_DIR / name).glob("rank*.json.gz"))


def by_run(hist) -> dict[int, dict]:
    out = {}
    for m in hist.metrics:
        out.setdefault(m["run_id"], {})[m["id"]] = m["value"]
    return out


@pytest.mark.slow  # over 2 s: the fast tier keeps its area's other tests
def test_each_recorded_run_is_stored_with_its_labels_files_report_and_layout(recorded_history):
    hist = history.read(recorded_history.path)
    assert [r["labels"] for r in hist.runs] == [labels for _, labels in RUNS]
    assert len({r["run_id"] for r in hist.runs}) == len(RUNS)
    values = by_run(hist)
    for run, (name, labels, report) in zip(hist.runs, recorded_history.runs, strict=True):
        assert run["files"] == rank_files(name)
        assert run["report"] == str(report.resolve()) and report.is_file()
        assert run["label_key"] == history.label_key(dict(reversed(list(labels.items()))))
        truth = recorded_history.truth(name)
        for key, want in truth["layout"].items():
            if want is not None:
                assert values[run["run_id"]][f"layout.{key}"] == want, (name, key)
        assert values[run["run_id"]].get("imbalance.straggler") == truth["imbalance"]["straggler_rank"], name
    assert values[hist.runs[0]["run_id"]]["layout.dp"] == 4
    times = [r["recorded_at"] for r in hist.runs]
    assert times == sorted(times)


def test_the_history_is_plain_sql(recorded_history):
    with duckdb.connect(str(recorded_history.path), read_only=True) as con:
        jobs = con.execute("SELECT labels['job'] FROM runs ORDER BY run_id").fetchall()
        per_run = con.execute("SELECT run_id, count(*) FROM metrics GROUP BY ALL ORDER BY run_id").fetchall()
    assert [j for (j,) in jobs] == [labels["job"] for _, labels in RUNS]
    assert all(n > 0 for _, n in per_run) and len(per_run) == len(RUNS)


def test_the_straggler_run_regressed_against_the_previous_run_of_its_job(recorded_history):
    hist = history.read(recorded_history.path)
    compared = history.compare_previous(hist)
    ids = {r["labels"]["commit"] + r["labels"]["job"]: r["run_id"] for r in hist.runs}
    straggler_run = ids["b" + JOB]
    assert set(compared) == {straggler_run}  # the other two are the first runs of their series
    previous, doc = compared[straggler_run]
    assert previous == ids["a" + JOB]
    regressed = {m["id"]: m for m in doc["metrics"] if m["regressed"]}
    truth = recorded_history.truth("straggler_ddp4")["imbalance"]["straggler_rank"]
    assert regressed["imbalance.straggler"]["new"] == truth == 2
    assert "step_time.mean" in regressed  # rank 2's extra matmuls hold every rank at the all-reduce


def test_the_dashboard_judges_as_compare_does(recorded_history, tmp_path):
    """The history keeps each metric's per-step values, so the dashboard's regressions are compare's between the
    same two runs, metric for metric, the step-to-step variation included."""
    from traceparse.history.compare import compare_runs, load_thresholds
    from traceparse.history.dashboard import dashboard_data
    from traceparse.document import analyze

    hist = history.read(recorded_history.path)
    stored = {m["id"]: m["samples"] for m in hist.metrics if m["run_id"] == hist.runs[1]["run_id"]}
    assert len(stored["step_time.mean"]) == recorded_history.truth("straggler_ddp4")["profiled_steps"]
    data, _ = dashboard_data(hist, tmp_path / "dash.html")
    shown = {(r["metric"], r["note"]) for r in data["regressions"] if r["run"] == hist.runs[1]["run_id"]}
    direct = compare_runs(analyze([RUNS_DIR / "ddp4"]), analyze([RUNS_DIR / "straggler_ddp4"]), load_thresholds())
    assert shown == {(m["id"], m["note"]) for m in direct["metrics"] if m["regressed"]}
    assert ("imbalance.straggler", "rank 2 became a straggler") in shown


def test_a_history_from_before_samples_gains_them_at_its_next_record(pp_doc, tmp_path):
    """A history whose metrics table has no samples column (recorded before it) is read, its runs without samples,
    and the next record adds the column."""
    path, doc = tmp_path / "old.duckdb", json.loads(pp_doc.read_text())
    history.record(path, doc, {"job": "a"})
    with duckdb.connect(str(path)) as con:
        con.execute("ALTER TABLE metrics DROP COLUMN samples")
    assert all(m["samples"] is None for m in history.read(path).metrics)
    history.record(path, doc, {"job": "a"})
    hist = history.read(path)
    assert [m["samples"] is None for m in hist.metrics if m["id"] == "step_time.mean"] == [True, False]


def test_series_by_names_the_labels_that_make_runs_comparable(recorded_history):
    hist = history.read(recorded_history.path)
    ids = [r["run_id"] for r in hist.runs]
    by_commit = history.compare_previous(hist, by=("commit",))  # ddp4 and dp2_tp2 are both commit=a
    assert {run: prev for run, (prev, _) in by_commit.items()} == {ids[2]: ids[0]}
    assert history.series({"commit": "a", "job": JOB}) == {"job": JOB}


@pytest.mark.parametrize("label", ["commit", "=abc", "commit=", "two words=x", "a=line\nbreak"])
def test_a_label_that_is_not_key_value_exits_2_in_one_line(label, tmp_path):
    r = CliRunner().invoke(main, ["analyze", str(RUNS_DIR / "ddp2"), "--record", str(tmp_path / "h.duckdb"),
                                  "--label", label])
    assert r.exit_code == 2, r.output
    assert len(r.stderr.strip().splitlines()) == 1 and "key=value" in r.stderr
    assert not (tmp_path / "h.duckdb").exists()


def test_a_label_given_twice_or_without_record_exits_2(tmp_path):
    r = CliRunner().invoke(main, ["analyze", str(RUNS_DIR / "ddp2"), "--record", str(tmp_path / "h.duckdb"),
                                  "--label", "a=1", "--label", "a=2"])
    assert r.exit_code == 2 and "twice" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = CliRunner().invoke(main, ["analyze", str(RUNS_DIR / "ddp2"), "--label", "a=1"])
    assert r.exit_code == 2 and "--record" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def fingerprint(path: Path):
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns, sorted(os.listdir(path.parent))


@pytest.mark.parametrize("kind", ["text", "empty", "store"])
def test_a_path_that_is_not_a_history_exits_2_and_is_left_untouched(kind, recorded_history, tmp_path):
    target = tmp_path / "h.duckdb"
    if kind == "store":  # a DuckDB file, a traceparse store: not a history
        target.write_bytes((recorded_history.folder / "ddp4.duckdb").read_bytes())
    else:
        target.write_text("" if kind == "empty" else "step,ms\n1,20\n")
    before = fingerprint(target)
    r = CliRunner().invoke(main, ["analyze", str(RUNS_DIR / "ddp4"), "--db", str(recorded_history.folder / "ddp4.duckdb"),
                                  "--record", str(target), "--label", "commit=a"])
    assert r.exit_code == 2, r.output
    assert len(r.stderr.strip().splitlines()) == 1 and "not a traceparse history" in r.stderr
    assert fingerprint(target) == before


# --- concurrency -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pp_doc(tmp_path_factory) -> Path:
    """The analyze document of a real pipeline run (a categorical metric: its schedule), as a JSON file."""
    import traceparse

    folder = tmp_path_factory.mktemp("doc")
    doc = traceparse.analyze([RUNS_DIR / "pp4_gpipe_m4"], db=folder / "s.duckdb")
    (folder / "doc.json").write_text(json.dumps(doc))
    return folder / "doc.json"


# a writer process: records the document ROUNDS times from START on (a shared start time) and prints each run id
WRITER = """
import json, sys, time
from traceparse.history import store as history
path, doc_file, who, rounds, start = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
doc = json.load(open(doc_file))
time.sleep(max(0.0, start - time.time()))
for i in range(rounds):
    print(history.record(path, doc, {"writer": who, "round": str(i)}), flush=True)
"""

# a writer that stops inside its transaction, just before COMMIT, and says so
HELD_WRITER = """
import json, sys, time
import duckdb
from traceparse.history import store as history
real_connect = duckdb.connect
class Held:
    def __init__(self, con): self.con = con
    def execute(self, sql, *args):
        if sql == "COMMIT":
            print("inside", flush=True)
            time.sleep(120)
        return self.con.execute(sql, *args)
    def __getattr__(self, name): return getattr(self.con, name)
duckdb.connect = lambda *a, **k: Held(real_connect(*a, **k))
history.record(sys.argv[1], json.load(open(sys.argv[2])), {"writer": "held"})
"""


def python(code: str, *args, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def complete(path: Path, doc_file: Path) -> history.History:
    """The history at ``path``, every run holding every metric of the document (no half-written run)."""
    from traceparse.history.run_metrics import run_metrics

    hist = history.read(path)
    want = set(run_metrics(json.loads(doc_file.read_text())))
    counts = by_run(hist)
    assert all(set(counts[r["run_id"]]) == want for r in hist.runs)
    return hist


@pytest.mark.slow
def test_writer_processes_at_once_each_record_every_run_once(pp_doc, tmp_path):
    path, rounds = tmp_path / "h.duckdb", 4
    start = time.time() + 3  # every writer has started and imported by then
    procs = [python(WRITER, path, pp_doc, w, rounds, start) for w in range(WRITERS)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * WRITERS, [e for _, e in outs]
    hist = complete(path, pp_doc)
    got = sorted((r["labels"]["writer"], r["labels"]["round"]) for r in hist.runs)
    assert got == sorted((str(w), str(i)) for w in range(WRITERS) for i in range(rounds))
    printed = sorted(int(line) for out, _ in outs for line in out.split())
    assert printed == sorted(r["run_id"] for r in hist.runs)
    values = by_run(hist)[hist.runs[0]["run_id"]]
    assert values["layout.pp_schedule"] == "gpipe" and values["layout.pp"] == 4  # truth.json of pp4_gpipe_m4


@pytest.mark.slow
def test_cli_writers_at_once_each_record_their_run_once(tmp_path):
    store, path = tmp_path / "ddp2.duckdb", tmp_path / "h.duckdb"
    r = CliRunner().invoke(main, ["analyze", str(RUNS_DIR / "ddp2"), "--db", str(store), "--format", "json"])
    assert r.exit_code == 0, r.output  # the store the writers share (read-only), so they reach --record together
    cmd = [sys.executable, "-m", "traceparse.cli", "analyze", str(RUNS_DIR / "ddp2"), "--db", str(store),
           "--format", "json", "-q", "--record", str(path)]
    procs = [subprocess.Popen([*cmd, *labels_args({"i": str(i)})], cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for i in range(WRITERS)]
    errs = [p.communicate(timeout=180)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * WRITERS, errs
    hist = history.read(path)
    assert sorted(r["labels"]["i"] for r in hist.runs) == [str(i) for i in range(WRITERS)]
    assert all(r["files"] == rank_files("ddp2") for r in hist.runs)


@pytest.mark.slow
def test_a_history_held_too_long_is_busy_and_untouched(pp_doc, tmp_path, monkeypatch):
    path = tmp_path / "h.duckdb"
    doc = json.loads(pp_doc.read_text())
    history.record(path, doc, {"writer": "first"})
    holder = python(HELD_WRITER, path, pp_doc)  # another writer, in its transaction
    try:
        assert holder.stdout.readline().strip() == "inside"
        with pytest.raises(history.HistoryBusy):
            history.record(path, doc, {"writer": "second"}, wait_s=0.5)
        monkeypatch.setattr(history, "WAIT_S", 0.5)
        r = CliRunner().invoke(main, ["analyze", str(RUNS_DIR / "ddp2"), "--record", str(path), "--label", "w=3"])
        assert r.exit_code == 75 and "busy" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output
    finally:
        holder.kill()
        holder.wait()
    other = python("import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('open', flush=True); "
                   "time.sleep(120)", path)  # a program other than traceparse writing to it
    try:
        assert other.stdout.readline().strip() == "open"
        with pytest.raises(history.HistoryBusy):
            history.record(path, doc, {"writer": "third"}, wait_s=0.5)
    finally:
        other.kill()
        other.wait()
    assert [r["labels"]["writer"] for r in complete(path, pp_doc).runs] == ["first"]


def open_files(pid: int) -> set[str]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            out.add(os.readlink(fd))
        except OSError:
            pass
    return out


# a writer that says each time it opens the history with DuckDB
COUNTED_WRITER = """
import json, sys
import duckdb
from traceparse.history import store as history
real_connect = duckdb.connect
def connect(*args, **kwargs):
    print("duckdb.connect", file=sys.stderr, flush=True)
    return real_connect(*args, **kwargs)
duckdb.connect = connect
history.record(sys.argv[1], json.load(open(sys.argv[2])), {"writer": "waiting"})
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see a process's open files")
@pytest.mark.slow
def test_a_waiting_writer_does_not_open_the_history_until_its_turn(pp_doc, tmp_path):
    # DuckDB reads a database's header before it takes its own file lock: a writer whose open straddled
    # another writer's commit would go on from the header of before it, and that run would be lost
    path = tmp_path / "h.duckdb"
    history.record(path, json.loads(pp_doc.read_text()), {"writer": "first"})
    held = python(HELD_WRITER, path, pp_doc)
    try:
        assert held.stdout.readline().strip() == "inside"
        waiting = python(COUNTED_WRITER, path, pp_doc)
        deadline = time.time() + 60
        while str(history.lock_path(path)) not in open_files(waiting.pid) and time.time() < deadline:
            time.sleep(0.02)
        time.sleep(1)  # waiting its turn on the lock file
    finally:
        held.kill()
        held.wait()
    _, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0 and err.count("duckdb.connect") == 1, err
    assert [r["labels"]["writer"] for r in complete(path, pp_doc).runs] == ["first", "waiting"]


def test_a_writer_killed_inside_its_transaction_leaves_the_committed_runs(pp_doc, tmp_path):
    path = tmp_path / "h.duckdb"
    history.record(path, json.loads(pp_doc.read_text()), {"writer": "before"})
    p = python(HELD_WRITER, path, pp_doc)
    assert p.stdout.readline().strip() == "inside", p.stderr.read()
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert [r["labels"]["writer"] for r in complete(path, pp_doc).runs] == ["before"]
    history.record(path, json.loads(pp_doc.read_text()), {"writer": "after"})
    assert [r["labels"]["writer"] for r in complete(path, pp_doc).runs] == ["before", "after"]


def test_a_writer_killed_at_any_moment_leaves_whole_runs(pp_doc, tmp_path):
    path = tmp_path / "h.duckdb"
    p = python(WRITER, path, pp_doc, "k", 1000, 0)
    printed = [p.stdout.readline() for _ in range(3)]
    time.sleep(0.05 + (time.time_ns() % 200) / 1000)  # somewhere in a later run's open, insert or commit
    p.send_signal(signal.SIGKILL)
    p.wait()
    printed += p.stdout.read().split()
    n = len(complete(path, pp_doc).runs)
    assert len(printed) <= n <= len(printed) + 1  # the run being committed when killed may have made it
