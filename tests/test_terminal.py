"""What ``analyze`` does on a terminal and off it: the load's progress (the callback of load_run and the bar
on stderr), colour for the checks' statuses, and the findings first in the text report."""

from __future__ import annotations

import copy
import io
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import public_trace

from traceparse.cli import main
from traceparse.document import document
from traceparse.load.run import _parse_all, connect, load_run
from traceparse.progress import LoadBar
from traceparse.render.colour import colour_wanted, paint
from traceparse.render.text import render

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DDP4 = ROOT / "fixtures" / "runs" / "ddp4"  # 4 rank files (and a truth.json, read, then skipped)
BIG = "hta/df_index_resolver/df_index_resolver.json.gz"  # 3 MB, a public trace (conftest.public_trace)
RANK_FILES = sorted(DDP4.glob("rank*.json.gz"))
FOLDER_FILES = sorted(RANK_FILES + [DDP4 / "truth.json"])  # the folder's candidates, each read by a worker
SIZES = [f.stat().st_size for f in FOLDER_FILES]

PAINTED = re.compile(rb"\x1b\[[0-9;]*m(ok|warn|fail|not_applicable)\x1b\[0m")
BAR = re.compile(rb"parsing [0-5]/5 files")  # DDP4's folder
BAR_OF_4 = re.compile(rb"parsing [0-4]/4 files")
# the bar drawn at once: the fixture's load may last less than LoadBar's usual delay on a fast machine
BAR_AT_ONCE = ("import sys, traceparse.progress as p; p.SHOW_AFTER_S = 0; sys.argv[0] = 'traceparse'; "
               "from traceparse.cli import main; main()")


# --- the progress callback of load_run --------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "pool"])
def test_progress_called_once_per_file(tmp_path, workers):
    calls = []
    path, reused = load_run([DDP4], db=tmp_path / "s.duckdb", workers=workers, progress=lambda *c: calls.append(c))
    assert reused is False
    total = sum(SIZES)
    assert len(FOLDER_FILES) == 5 and calls[0] == (0, 5, 0, total)  # parsing begins
    assert [c[0] for c in calls[1:]] == [1, 2, 3, 4, 5]  # then once per file, as each finishes
    assert all(c[1] == 5 and c[3] == total for c in calls)
    finished = [b - a for a, b in zip([c[2] for c in calls], [c[2] for c in calls[1:]], strict=False)]
    assert sorted(finished) == sorted(SIZES)  # each step is one file's size; the last call: every byte
    assert calls[-1] == (5, 5, total, total)

    again = []
    assert load_run([DDP4], db=path, progress=lambda *c: again.append(c)) == (path, True)
    assert again == []  # a reused store parses nothing


def test_pool_results_keep_the_order_of_the_files(tmp_path):
    files = [RANK_FILES[3], RANK_FILES[0], RANK_FILES[2], RANK_FILES[1]]
    calls = []
    summaries, _ = _parse_all(files, set(), tmp_path, 2, lambda *c: calls.append(c))
    assert [Path(s["file"]).name for s in summaries] == [f.name for f in files]
    assert len(calls) == 5


def test_bar_drawn_only_after_its_delay(monkeypatch):
    err = io.StringIO()
    err.isatty = lambda: True  # rich draws on what it takes for a terminal
    monkeypatch.setattr(sys, "stderr", err)
    with LoadBar(show_after_s=60) as bar:  # a quick load: closed before the delay
        bar(0, 4, 0, 100)
        bar(4, 4, 100, 100)
    assert err.getvalue() == ""
    with LoadBar(show_after_s=0) as bar:
        bar(0, 4, 0, 100)
        deadline = time.time() + 10
        while "parsing" not in err.getvalue() and time.time() < deadline:
            time.sleep(0.05)
        bar(3, 4, 75, 100)
    assert "parsing 0/4 files" in err.getvalue()


# --- on a pipe: plain text, no bar -------------------------------------------------------

def test_pipe_has_no_bar_and_no_escape():
    p = subprocess.run([sys.executable, "-c", BAR_AT_ONCE, "analyze", str(DDP4), "--no-cache"],
                       capture_output=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert b"\x1b[" not in p.stdout and b"\x1b[" not in p.stderr
    assert not BAR.search(p.stderr)
    assert b"checks (explain: <check>)" in p.stdout


@pytest.fixture(scope="module")
def ddp4_store(tmp_path_factory):
    db = tmp_path_factory.mktemp("ddp4") / "s.duckdb"
    load_run([DDP4], db=db)
    return db


def test_color_option_on_a_pipe(ddp4_store):
    def out(*args):
        r = CliRunner().invoke(main, ["analyze", str(DDP4), "--db", str(ddp4_store), *args], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        return r.stdout

    plain = out()  # auto: not a terminal
    assert "\x1b[" not in plain
    coloured = out("--color", "always")  # forced, even on a pipe
    assert PAINTED.search(coloured.encode())
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain  # the same words, only coloured


def test_colour_wanted(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert colour_wanted("auto", Tty()) and not colour_wanted("auto", io.StringIO())
    monkeypatch.setenv("NO_COLOR", "")  # empty: as if unset (no-color.org)
    assert colour_wanted("auto", Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colour_wanted("auto", Tty())
    assert colour_wanted("always", io.StringIO()) and not colour_wanted("never", Tty())


def test_paint_colours_statuses_only():
    text = "checks (explain: <check>)\n  overlap: fail (findings at the top)\n    - ok: warn is not a status here"
    painted = paint(text)
    assert PAINTED.findall(painted.encode()) == [b"fail"]
    assert re.sub(r"\x1b\[[0-9;]*m", "", painted) == text


# --- on a terminal ------------------------------------------------------------------------

def run_in_pty(args, env=None, interrupt_when=None, returncode=0, timeout=300) -> bytes:
    """Output (stdout and stderr together) of ``python ARGS`` run with a pseudo-terminal as its
    stdin, stdout and stderr; SIGINT (Ctrl-C) is sent to it once ``interrupt_when(output so far)``."""
    master, slave = pty.openpty()
    env = {**{k: v for k, v in os.environ.items() if k != "NO_COLOR"}, "TERM": "xterm-256color", **(env or {})}
    proc = subprocess.Popen([sys.executable, *args], stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT,
                            close_fds=True)
    os.close(slave)
    out, deadline = b"", time.time() + timeout
    try:
        while time.time() < deadline:
            if interrupt_when is not None and interrupt_when(out):
                proc.send_signal(signal.SIGINT)
                interrupt_when = None
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            out += data
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    assert proc.returncode == returncode, out.decode(errors="replace")[-3000:]
    return out


def test_terminal_has_colour_and_a_bar():
    out = run_in_pty(["-c", BAR_AT_ONCE, "analyze", str(DDP4), "--no-cache"], env={"NO_COLOR": ""})
    assert PAINTED.search(out), out[-2000:]
    assert BAR.search(out), out[:2000]
    assert out.rindex(b"parsing ") < out.index(b"run: 4 file(s)")  # the bar is gone before the report
    assert b"truth.json" not in out  # a JSON document without trace events beside the traces: skipped unsaid


def test_interrupt_on_a_terminal_erases_the_bar(tmp_path, isolated_dirs):
    """Ctrl-C while the bar shows: the bar goes, one line, exit 130, nothing left in $TMPDIR or the cache."""
    for r in range(4):
        shutil.copy(public_trace(BIG), tmp_path / f"rank{r}.json.gz")

    def parsing(out):
        return BAR_OF_4.search(out) and list(isolated_dirs["cache"].glob("*.ranks/*/raw/slot=*/*.parquet"))

    out = run_in_pty(["-c", BAR_AT_ONCE, "analyze", str(tmp_path), "--allow-mixed"], interrupt_when=parsing,
                     returncode=130)
    assert BAR_OF_4.search(out)
    assert out.endswith(b"\x1b[2Ktraceparse: interrupted\r\n"), out[-300:]  # the bar's line cleared first
    assert b"Traceback" not in out
    deadline = time.time() + 15
    while list(isolated_dirs["tmp"].iterdir()) and time.time() < deadline:
        time.sleep(0.2)
    assert list(isolated_dirs["tmp"].iterdir()) == []
    assert list(isolated_dirs["cache"].glob("*.ranks")) == []


def test_no_color_and_quiet_on_a_terminal():
    out = run_in_pty(["-c", BAR_AT_ONCE, "analyze", str(DDP4), "--no-cache", "--quiet"], env={"NO_COLOR": "1"})
    assert b"\x1b[" not in out  # no colour (NO_COLOR), no bar (--quiet)
    assert b"findings: 1 of 5 checks at warn or fail" in out and b"overlap: warn" in out  # ddp4: dp costs 23%


def test_json_on_a_terminal_is_plain_and_unchanged(tmp_path):
    db = tmp_path / "s.duckdb"
    out = run_in_pty(["-c", BAR_AT_ONCE, "analyze", str(DDP4), "--db", str(db), "--format", "json"])
    assert b"\x1b[" not in out and not BAR.search(out)
    piped = CliRunner().invoke(main, ["analyze", str(DDP4), "--db", str(db), "--format", "json"])
    assert json.loads(out.decode()) == json.loads(piped.stdout)


def test_plain_python_m_on_a_terminal_colours():
    out = run_in_pty(["-m", "traceparse.cli", "analyze", str(DDP4), "--no-cache"])
    assert PAINTED.search(out), out[-2000:]


# --- the findings first -------------------------------------------------------------------

@pytest.fixture(scope="module")
def ddp4_doc(ddp4_store):
    con = connect(ddp4_store)
    try:
        return document(con)
    finally:
        con.close()


def test_findings_come_before_the_tables(ddp4_doc):
    doc = copy.deepcopy(ddp4_doc)
    # ddp4 warns on overlap (dp costs 23% of the step) and is balanced; a fail set here shows both kinds
    doc["checks"]["imbalance"].update(status="fail", findings=["A finding at fail."])
    flagged = {cid: c for cid, c in doc["checks"].items() if c["status"] in ("warn", "fail")}
    assert {c["status"] for c in flagged.values()} == {"warn", "fail"}
    lines = render(doc).splitlines()
    top = lines.index(f"findings: {len(flagged)} of {len(doc['checks'])} checks at warn or fail (explain: <check>)")
    first_table = next(i for i, line in enumerate(lines) if line.startswith("--"))
    checks = lines.index("checks (explain: <check>)")
    assert 0 < top < lines.index("layout (inferred; explain: layout)") < first_table < checks
    section = lines[top + 1:lines.index("", top)]
    heads = [line for line in section if not line.startswith("    - ")]
    order = [cid for cid, _ in sorted(flagged.items(), key=lambda kv: kv[1]["status"] != "fail")]
    assert heads == [f"  {cid}: {flagged[cid]['status']}" for cid in order]  # fail first, then warn
    for cid in order:
        for f in flagged[cid]["findings"]:
            assert f"    - {f}" in section, (cid, f)
    listed = lines[checks + 1:checks + 1 + len(doc["checks"])]  # every check's status, still listed
    assert [line.split(":")[0].strip() for line in listed] == list(doc["checks"])
    for cid in flagged:
        assert f"  {cid}: {flagged[cid]['status']} (findings at the top)" in listed


def test_no_findings_is_one_line(ddp4_doc):
    doc = copy.deepcopy(ddp4_doc)
    for c in doc["checks"].values():
        if c["status"] in ("warn", "fail"):
            c["status"], c["findings"] = "ok", []
    text = render(doc)
    assert "findings: no check at warn or fail" in text and "findings at the top" not in text
