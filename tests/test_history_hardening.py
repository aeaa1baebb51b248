"""Hostile and damaged input around the run history and the regression gate: a label that is not UTF-8, a
history that cannot be written, what killed writers leave, damaged histories, a NaN in a history, a
misspelt threshold, a run missing ranks. Each case: the exit code, one line on stderr naming the file (or
option) and the problem, nothing written where nothing should be, nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from conftest import public_trace

from traceparse.history import store as history
from traceparse.cli import main

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "runs"
DDP2 = RUNS / "ddp2"


def run_cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(stderr: str, *says):
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceparse: error: "), stderr
    assert "Traceback" not in stderr and "internal error" not in stderr
    for s in says:
        assert str(s) in lines[0], (s, lines[0])


def listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.fixture(scope="module")
def ddp2_store(tmp_path_factory) -> Path:
    """The store of ddp2, loaded once: the analyses below read it (--db) instead of parsing again."""
    path = tmp_path_factory.mktemp("store") / "ddp2.duckdb"
    r = run_cli("analyze", DDP2, "--db", path, "--format", "json")
    assert r.exit_code == 0, r.output
    return path


def record(store: Path, hist: Path, *more):
    return run_cli("analyze", DDP2, "--db", store, "-q", "--record", hist, *more)


@pytest.fixture(scope="module")
def good_history(tmp_path_factory, ddp2_store) -> bytes:
    """The bytes of a history of two runs of ddp2."""
    path = tmp_path_factory.mktemp("good") / "h.duckdb"
    for commit in ("a", "b"):
        assert record(ddp2_store, path, "--label", f"commit={commit}").exit_code == 0
    return path.read_bytes()


# --- 1. a label that is not UTF-8 ------------------------------------------------------------------------

def test_a_label_that_is_not_utf8_is_refused_before_any_work(tmp_path):
    report, hist = tmp_path / "report.txt", tmp_path / "h.duckdb"
    cmd = [sys.executable, "-m", "traceparse.cli", "analyze", str(DDP2), "-q", "-o", str(report),
           "--record", str(hist), "--label", b"commit=\xff"]  # an argument of undecodable bytes, as a shell passes it
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr, "--label", "commit=\\xff", "not valid UTF-8")
    assert listing(tmp_path) == []  # no report, no history, no lock file


# --- 2. a history that cannot be written ------------------------------------------------------------------

@contextmanager
def read_only(path: Path):
    """``path`` (a file or folder) read-only: by its mode bits, or, as root (whom they do not stop), by a
    read-only bind mount of it onto itself; skips where neither can be done."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    mounted = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True).returncode == 0
    try:
        if not mounted or subprocess.run(["mount", "-o", "remount,ro,bind", str(path)],
                                         capture_output=True).returncode:
            pytest.skip("running as root without a read-only bind mount: nothing here is read-only to root")
        yield
    finally:
        if mounted:
            subprocess.run(["umount", str(path)], check=True)


@pytest.mark.parametrize("what, says", [
    ("file", "cannot write to the history"),  # a read-only history in a writable folder
    ("folder", "cannot write to the history"),  # a history in a read-only folder: no lock file, no journal
    ("new", "cannot create the history"),  # no history yet, in a read-only folder
])
def test_a_history_that_cannot_be_written_fails_before_the_analysis(what, says, tmp_path, ddp2_store, good_history):
    folder = tmp_path / "hist"
    folder.mkdir()
    hist, report = folder / "h.duckdb", tmp_path / "report.txt"
    if what != "new":
        hist.write_bytes(good_history)
    before = listing(folder), hist.exists() and hist.read_bytes()
    with read_only(hist if what == "file" else folder):
        r = run_cli("analyze", DDP2, "--db", ddp2_store, "-q", "-o", report, "--record", hist, "--label", "c=1")
    assert r.exit_code == 2, r.output
    one_line_error(r.stderr, hist, says)
    assert not report.exists()  # refused before the analysis: its report is not written either
    assert (listing(folder), hist.exists() and hist.read_bytes()) == before


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_a_history_in_a_folder_where_nothing_can_be_created(tmp_path, ddp2_store):
    """/proc is a folder that os.access calls writable (to root) yet refuses new files: tried, not guessed."""
    report = tmp_path / "report.txt"
    r = run_cli("analyze", DDP2, "--db", ddp2_store, "-q", "-o", report, "--record", "/proc/h.duckdb")
    assert r.exit_code == 2, r.output
    one_line_error(r.stderr, "/proc/h.duckdb", "cannot create the history")
    assert not report.exists() and not Path("/proc/h.duckdb").exists()


# --- 3. what writers killed while creating a history leave ----------------------------------------------

CREATOR = """
import json, sys
from traceparse.history import store as history
history.record(sys.argv[1], json.load(open(sys.argv[2])), {"writer": "killed"})
"""


def killed_creator(hist: Path, doc_file: Path) -> int:
    """A writer killed once its temporary history exists beside ``hist``; its pid."""
    p = subprocess.Popen([sys.executable, "-c", CREATOR, str(hist), str(doc_file)], cwd=ROOT)
    deadline = time.time() + 60
    while not list(hist.parent.glob(f".{hist.name}.{p.pid}.*.new")) and p.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    p.kill()
    p.wait()
    return p.pid


def test_what_killed_writers_left_is_removed_by_the_next(tmp_path, ddp2_store):
    import traceparse

    doc_file = tmp_path / "doc.json"
    doc_file.write_text(json.dumps(traceparse.analyze([DDP2], db=ddp2_store)))
    folder = tmp_path / "hist"
    folder.mkdir()
    hist = folder / "h.duckdb"
    pids = [killed_creator(hist, doc_file) for _ in range(3)]
    left = [n for n in listing(folder) if n.startswith(".h.duckdb.")]
    assert left and all(int(n.split(".")[3]) in pids for n in left), left
    alive = subprocess.Popen(["sleep", "60"])  # a temporary file of a writer still running is kept
    try:
        kept = folder / f".h.duckdb.{alive.pid}.1.new"
        kept.write_bytes(b"")
        r = record(ddp2_store, hist, "--label", "writer=next")
        assert r.exit_code == 0, r.output
        assert listing(folder) == sorted([kept.name, "h.duckdb", "h.duckdb.lock"])
    finally:
        alive.kill()
        alive.wait()
    history.record(hist, json.loads(doc_file.read_text()), {"writer": "library"})  # record() removes them too
    assert listing(folder) == ["h.duckdb", "h.duckdb.lock"]
    assert [r["labels"]["writer"] for r in history.read(hist).runs] == ["next", "library"]


# --- 4 and 6. a damaged history ---------------------------------------------------------------------------

def _random(b: bytes) -> bytes:
    return os.urandom(len(b))


def _zero_header(b: bytes) -> bytes:
    return bytes(4096) + b[4096:]


def _zero_block(b: bytes) -> bytes:  # the first 256 KiB block after DuckDB's three 4 KiB headers
    return b[:12288] + bytes(256 * 1024) + b[12288 + 256 * 1024:]


def _truncated(b: bytes) -> bytes:
    return b[:len(b) // 2]


def _short(b: bytes) -> bytes:
    return b[:100]


@pytest.mark.parametrize("damage", [_random, _zero_header, _zero_block, _truncated, _short])
def test_a_damaged_history_is_refused_and_nothing_is_left_beside_it(damage, tmp_path, ddp2_store, good_history):
    folder = tmp_path / "hist"
    folder.mkdir()
    hist, report, page = folder / "h.duckdb", tmp_path / "report.txt", tmp_path / "d.html"
    hist.write_bytes(damage(good_history))
    before = hist.read_bytes()
    r = run_cli("analyze", DDP2, "--db", ddp2_store, "-q", "-o", report, "--record", hist)
    assert r.exit_code == 2, r.output
    one_line_error(r.stderr, hist, "is a damaged traceparse history", "record into a new history")
    assert "the store is damaged" not in r.stderr and not report.exists()
    r = run_cli("dashboard", hist, "-o", page)
    assert r.exit_code == 2, r.output
    one_line_error(r.stderr, hist, "is a damaged traceparse history")
    assert not page.exists()
    assert listing(folder) == ["h.duckdb"] and hist.read_bytes() == before


def test_a_damaged_history_found_after_the_check_leaves_no_lock(tmp_path, good_history):
    """The lock file of a history that turns out damaged only when read goes too, whoever made it."""
    hist = tmp_path / "h.duckdb"
    hist.write_bytes(good_history)
    history.read(hist)  # a history then: its lock file stays
    assert listing(tmp_path) == ["h.duckdb", "h.duckdb.lock"]
    hist.write_bytes(_truncated(good_history))
    with pytest.raises(history.NotAHistory):
        history.read(hist)
    assert listing(tmp_path) == ["h.duckdb"]


def test_a_folder_is_said_to_be_one(tmp_path, ddp2_store):
    r = run_cli("dashboard", tmp_path, "-o", tmp_path / "d.html")
    assert r.exit_code == 2
    one_line_error(r.stderr, tmp_path, "is a folder")
    r = record(ddp2_store, tmp_path)
    assert r.exit_code == 2
    one_line_error(r.stderr, tmp_path, "is a folder")
    assert listing(tmp_path) == []


# --- 5. a history written by another program ---------------------------------------------------------------

def test_a_history_without_its_runs_table_exits_2(tmp_path):
    hist = tmp_path / "h.duckdb"
    with duckdb.connect(str(hist)) as con:
        con.execute("CREATE TABLE history_meta (key VARCHAR, value VARCHAR)")
        con.execute("INSERT INTO history_meta VALUES ('format', ?), ('schema_version', ?)",
                    [history.FORMAT, str(history.SCHEMA_VERSION)])
    before = hist.read_bytes()
    r = run_cli("dashboard", hist, "-o", tmp_path / "d.html")
    assert r.exit_code == 2, r.output
    one_line_error(r.stderr, hist, "damaged", "table runs")
    assert listing(tmp_path) == ["h.duckdb"] and hist.read_bytes() == before


def nan_history(folder: Path, good_history: bytes) -> Path:
    """Two runs of ddp2, the second one's mean step time NaN and its imbalance infinite."""
    hist = folder / "h.duckdb"
    hist.write_bytes(good_history)
    with duckdb.connect(str(hist)) as con:
        con.execute("UPDATE metrics SET value = 'nan'::DOUBLE WHERE run_id = 2 AND id = 'step_time.mean'")
        con.execute("UPDATE metrics SET value = 'inf'::DOUBLE WHERE run_id = 2 AND id = 'imbalance.max_over_mean'")
    return hist


@pytest.mark.slow  # over 1.5 s: the fast tier keeps its area's other tests
def test_a_nan_metric_is_drawn_as_missing(tmp_path, good_history):
    hist, page = nan_history(tmp_path, good_history), tmp_path / "d.html"
    r = run_cli("dashboard", hist, "-o", page)
    assert r.exit_code == 0, r.output
    specs = json.loads(next(ln for ln in page.read_text().splitlines() if ln.startswith("const specs = "))
                       .removeprefix("const specs = ").removesuffix(";"))
    drawn = {(p["run"], p["metric"]) for s in specs.values() for p in s["data"]["values"]}
    assert (1, "step_time.mean") in drawn and (2, "step_time.p95") in drawn
    assert (2, "step_time.mean") not in drawn and (2, "imbalance.max_over_mean") not in drawn
    assert history.read(hist).metric_sets()[2].keys().isdisjoint({"step_time.mean", "imbalance.max_over_mean"})


@pytest.mark.slow
def test_the_dashboard_logs_no_warning_in_chromium(tmp_path, good_history, ddp2_store, browser_page):  # noqa: ARG001
    """Vega warns of an 'Infinite extent' when a layer of a chart is empty: the regressed points of a chart
    without regressions, every point of a series picked that has none in a chart. Neither happens."""
    import browser
    from playwright.sync_api import sync_playwright

    hist = nan_history(tmp_path, good_history)
    r = run_cli("analyze", RUNS / "pp4_gpipe_m4", "-q", "--record", hist, "--label", "job=pp")  # a bubble chart
    assert r.exit_code == 0, r.output
    page_file = tmp_path / "d.html"
    assert run_cli("dashboard", hist, "-o", page_file).exit_code == 0
    logged = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=browser.chromium_path(), args=["--no-sandbox"])
        try:
            page = b.new_page()
            page.on("console", lambda m: m.type in ("warning", "error") and logged.append(m.text))
            page.on("pageerror", lambda e: logged.append(str(e)))
            page.goto(page_file.resolve().as_uri(), wait_until="load")
            page.wait_for_function("() => [...document.querySelectorAll('.chart')].every(c => c.querySelector('svg'))",
                                   timeout=30_000)
            shown = {}
            for value in page.eval_on_selector_all("#series option", "os => os.map(o => o.value)"):
                page.select_option("#series", value)
                page.wait_for_timeout(300)
                shown[value] = page.locator(".chart:visible").count()
        finally:
            b.close()
    assert logged == []
    assert shown['{"job":"pp"}'] == shown[""] == shown["{}"] + 1  # ddp2's series hides the bubble chart


# --- 7. a misspelt threshold ---------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["step_time.maen", "volume.untagged", "overlap.dp_per_microbatch", "bubble.x"])
def test_a_threshold_for_no_metric_is_refused_with_the_valid_ones(key, tmp_path, good_history):
    out = tmp_path / "out"
    r = run_cli("compare", DDP2, DDP2, "--threshold", f"{key}=5%", "-o", out)
    assert r.exit_code == 2, r.output
    one_line_error(r.stderr, "--threshold", f"no gated metric group or id '{key}'", "step_time.mean",
                   "exposed_comm.dp", "volume.dp")
    hist = tmp_path / "h.duckdb"
    hist.write_bytes(good_history)
    r = run_cli("dashboard", hist, "--threshold", f"{key}=5%", "-o", out)
    assert r.exit_code == 2, r.output
    one_line_error(r.stderr, "--threshold", f"'{key}'")
    assert listing(tmp_path) == ["h.duckdb"]


def test_thresholds_for_real_ids_are_taken():
    from traceparse.history.compare import load_thresholds

    keys = ["step_time.mean", "step_time.mean_per_microbatch", "exposed_comm.untagged", "overlap.dp", "volume.ep",
            "imbalance.max_over_mean", "bubble"]
    assert set(load_thresholds([f"{k}=5%" for k in keys]).limits) >= set(keys)


@pytest.mark.parametrize("run", ["dp2_pp2_tp2", "dp2_cp2_ring", "dp4_ep2", "ulysses4", "tp2_sp"])
@pytest.mark.slow
def test_every_id_a_run_gives_is_one_a_threshold_may_name(run):
    """metric_ids lists what run_metrics gives (the ids --threshold accepts): checked on runs of every strategy."""
    import traceparse
    from traceparse.history.run_metrics import PER_MICROBATCH, metric_ids, run_metrics

    given = {i.removesuffix(PER_MICROBATCH) for i in run_metrics(traceparse.analyze([RUNS / run]))}
    assert given - set(metric_ids()) == set()


# --- 8. a run missing ranks ------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["json", "text", "markdown"])
@pytest.mark.slow
def test_a_new_run_missing_a_rank_is_no_pass(fmt):
    r = run_cli("compare", DDP2, DDP2 / "rank0.json.gz", "--format", fmt)
    assert r.exit_code == 1, r.output
    if fmt == "json":
        doc = json.loads(r.stdout)
        assert doc["verdict"] == "incomplete" and doc["new"]["ranks"] == [0]
        (why,) = doc["incomplete"]
    else:
        assert "incomplete" in r.stdout.splitlines()[-1] and "exit 1" in r.stdout.splitlines()[-1]
        why = r.stdout
    assert "the new run lacks rank 1 (1 of 2 loaded; world size 2" in why


@pytest.mark.slow
def test_a_base_run_missing_a_rank_is_no_pass_either():
    r = run_cli("compare", DDP2 / "rank1.json.gz", DDP2, "--format", "json")
    assert r.exit_code == 1, r.output
    assert json.loads(r.stdout)["incomplete"] == [
        "the base run lacks rank 0 (1 of 2 loaded; world size 2, as its traces declare): its metrics cover the "
        "loaded ranks only"]


def test_missing_ranks_against_the_base_when_the_new_run_declares_no_world_size():
    from traceparse.history.compare import missing_ranks

    base = {"ranks": [0, 1, 2, 3], "world_size": 4}
    assert missing_ranks(base, {"ranks": [0, 1, 2, 3], "world_size": None}) == []
    assert "the new run lacks ranks 2, 3 (2 of 4 loaded; the base run's ranks)" in missing_ranks(
        base, {"ranks": [0, 1], "world_size": None})[0]
    assert missing_ranks(base, {"ranks": [0, 1], "world_size": 2}) == []  # another layout, whole


def test_the_same_ranks_in_both_runs_compare_like_for_like():
    """One profiled rank of a 300-rank job (a public GPU trace), in both runs: not incomplete, and said."""
    trace = public_trace("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    r = run_cli("compare", trace, trace, "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "ok" and doc["incomplete"] == []
    assert "both runs hold ranks 34 of 300: compared like for like, the other ranks unseen" in doc["notes"]
    from traceparse.history.compare import missing_ranks

    (why,) = missing_ranks({"ranks": list(range(40)), "world_size": 40}, {"ranks": [0], "world_size": 40})
    assert why.startswith("the new run lacks ranks 1, 2, 3") and ", ..., " not in why and "16, ... (1 of 40" in why
