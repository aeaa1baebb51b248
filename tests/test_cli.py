"""The ``traceparse`` command: output, exit codes, the store cache, and the README's schema."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import public_trace
from traces import step, trace, write, x

from traceparse.cli import main
from traceparse.load.run import load_run
from traceparse.store.schema import TABLES

REPO = Path(__file__).resolve().parents[1]
SMALL_REAL = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def invoke(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env, catch_exceptions=False)


def plain_json(path):
    with gzip.open(path, "rt") if path.name.endswith(".gz") else open(path) as f:
        return json.load(f)


def expected_steps(doc):
    return sorted(
        int(e["name"].split("#", 1)[1])
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
        and not str(e.get("cat") or "").startswith("gpu")
    )


@pytest.fixture
def tiny(tmp_path):
    """A hand-written two-step trace of rank 1 of 2 with five complete events."""
    evs = [step(4, 100, 100), x("aten::mm", 110, 20), step(5, 200, 100), x("aten::mm", 210, 20), x("k", 220, 5, cat="kernel", pid=0, tid=7)]
    return write(tmp_path / "in" / "rank1.json", trace(evs, rank=1, world_size=2))


# --- analyze --------------------------------------------------------------------------

def test_analyze_text(tmp_path):
    f = public_trace(SMALL_REAL)
    doc = plain_json(f)
    r = invoke("analyze", "--db", tmp_path / "s.duckdb", f)
    assert r.exit_code == 0, r.output
    first = r.stdout.splitlines()[0]
    assert str(doc["distributedInfo"]["rank"]) in first
    assert str(doc["distributedInfo"]["world_size"]) in first
    for n in expected_steps(doc):
        assert str(n) in r.stdout


def test_analyze_json(tmp_path):
    f = public_trace(SMALL_REAL)
    doc = plain_json(f)
    r = invoke("analyze", "--format", "json", "--db", tmp_path / "s.duckdb", f)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert isinstance(out["version"], int)
    run = out["run"]
    assert run["files"] == [str(f.resolve())]
    assert run["ranks"] == [doc["distributedInfo"]["rank"]]
    assert run["world_size"] == doc["distributedInfo"]["world_size"]
    assert run["steps"] == expected_steps(doc)
    assert run["events"] == sum(1 for e in doc["traceEvents"] if e.get("ph") == "X")
    world = doc["distributedInfo"]["world_size"]  # one rank of the job: the others are missing, said as info
    assert [(i["severity"], i["count"]) for i in out["load_issues"]] == [("info", world - 1)]
    assert out["load_issues"][0]["what"].startswith(f"1 of {world} ranks loaded")


def test_analyze_json_reports_load_issues(tmp_path):
    f = write(tmp_path / "worker7.json", trace([x("a", 1, 1)], rank=None))
    r = invoke("analyze", "--format", "json", "--db", tmp_path / "s.duckdb", f)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["run"]["ranks"] == [7]
    assert [(i["file"], i["severity"]) for i in out["load_issues"]] == [(str(f.resolve()), "warning")]
    # warnings also reach stderr, one line each
    assert "warning" in r.stderr and f.name in r.stderr


@pytest.mark.parametrize("content", [b"", b"not json", b'{"a": 1}', b"\x1f\x8b\x08\x00garbage"],
                         ids=["empty", "not-json", "no-traceEvents", "corrupt-gzip"])
def test_analyze_bad_file_exit_2_one_line(tmp_path, content):
    f = tmp_path / "rank0.json"
    f.write_bytes(content)
    db = tmp_path / "s.duckdb"
    r = invoke("analyze", "--db", db, f)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert str(f) in lines[0] and lines[0].startswith("traceparse: error:")
    assert r.stdout == ""
    assert not db.exists()


def test_analyze_missing_file_exit_2(tmp_path):
    r = invoke("analyze", "--no-cache", tmp_path / "nope.json")
    assert r.exit_code == 2
    assert "nope.json" in r.stderr


def test_analyze_folder_of_ranks(tmp_path):
    for rank in (0, 1, 2):
        write(tmp_path / "run" / f"rank{rank}.json.gz", trace([step(1, 0, 10), x("a", 1, 1)], rank=rank, world_size=3))
    r = invoke("analyze", "--format", "json", "--db", tmp_path / "s.duckdb", tmp_path / "run")
    assert r.exit_code == 0, r.output
    run = json.loads(r.stdout)["run"]
    assert (run["ranks"], run["world_size"], run["steps"]) == ([0, 1, 2], 3, [1])


@pytest.mark.slow
def test_console_script_subprocess(tmp_path):
    f = public_trace(SMALL_REAL)
    exe = shutil.which("traceparse", path=str(Path(sys.executable).parent)) or shutil.which("traceparse")
    if exe is None:
        pytest.skip("the traceparse console script is not installed")
    env = dict(os.environ, TRACEPARSE_CACHE=str(tmp_path / "cache"), TMPDIR=str(tmp_path))
    p = subprocess.run([exe, "analyze", "--format", "json", str(f)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["run"]["ranks"] == [plain_json(f)["distributedInfo"]["rank"]]
    bad = tmp_path / "bad.json"
    bad.write_text("not json at all")
    p = subprocess.run([exe, "analyze", str(bad)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and str(bad) in p.stderr


# --- sql, schema, explain -------------------------------------------------------------

def test_sql_count_events(tmp_path, tiny):
    n = sum(1 for e in plain_json(tiny)["traceEvents"] if e.get("ph") == "X")
    r = invoke("sql", "SELECT count(*) FROM events", tiny, "--db", tmp_path / "s.duckdb")
    assert r.exit_code == 0, r.output
    assert re.search(rf"(?m)^\s*{n}\s*$", r.stdout), r.stdout
    r = invoke("sql", "--format", "csv", "SELECT count(*) AS n FROM events", "--db", tmp_path / "s.duckdb")
    assert r.exit_code == 0, r.output
    assert list(csv.reader(io.StringIO(r.stdout))) == [["n"], [str(n)]]
    r = invoke("sql", "--format", "json", "SELECT step FROM steps ORDER BY step", "--db", tmp_path / "s.duckdb")
    assert json.loads(r.stdout) == [{"step": 4}, {"step": 5}]


def test_sql_macros_available(tmp_path, tiny):
    r = invoke("sql", "--format", "csv", "SELECT norm_op('nccl:all_reduce') AS op, dtype_bytes('c10::BFloat16') AS b",
               tiny, "--db", tmp_path / "s.duckdb")
    assert r.exit_code == 0, r.output
    assert list(csv.reader(io.StringIO(r.stdout)))[1] == ["all_reduce", "2"]


def test_sql_bad_query_exit_2(tmp_path, tiny):
    r = invoke("sql", "SELEC nonsense", tiny, "--db", tmp_path / "s.duckdb")
    assert r.exit_code == 2
    assert len(r.stderr.strip().splitlines()) == 1


def test_sql_without_paths_or_db_is_usage_error():
    r = invoke("sql", "SELECT 1")
    assert r.exit_code == 2


def test_sql_missing_db_exit_2(tmp_path):
    db = tmp_path / "missing.duckdb"
    r = CliRunner().invoke(main, ["sql", "SELECT 1", "--db", str(db)])
    assert r.exit_code == 2
    assert str(db) in r.stderr


def test_schema_lists_every_table_and_column():
    r = invoke("schema")
    assert r.exit_code == 0
    for table, (_, cols) in TABLES.items():
        assert f"`{table}`" in r.stdout
        for c, _t, _doc in cols:
            assert f"`{c}`" in r.stdout, (table, c)


def test_explain():
    r = invoke("explain", "step_time")
    assert r.exit_code == 0
    assert r.stdout.startswith("step_time")
    r = invoke("explain", "nope")
    assert r.exit_code == 2
    assert "nope" in r.stderr and r.stdout == ""


def test_explain_an_unknown_id_is_one_line_with_the_closest():
    r = invoke("explain", "overlapp")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == ("traceparse: error: unknown id 'overlapp'; did you mean: overlap? "
                        "(every id: traceparse explain --list)\n")
    r = invoke("explain", "Step_Tme")  # letter case aside
    assert r.stderr.startswith("traceparse: error: unknown id 'Step_Tme'; did you mean: step_time, ")
    r = invoke("explain", "bogus_id")  # nothing close: no guess
    assert r.stderr == "traceparse: error: unknown id 'bogus_id' (every id: traceparse explain --list)\n"


def test_explain_list_prints_every_id_wrapped():
    from traceparse.analyzers import specs
    from traceparse.document.glossary import METRICS
    from traceparse.store.schema import VOCABULARY
    from traceparse.tagging.comm_kernels import load_rules as load_kernel_rules
    from traceparse.tagging.rules import load_rules

    r = invoke("explain", "--list", env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.stdout.splitlines()) <= 100  # wrapped
    listed = re.findall(r"[\w.]+", " ".join(line for line in r.stdout.splitlines() if line.startswith("    ")))
    expected = [*sorted(METRICS), *sorted(specs()), *(r.id for r in load_rules()), *(r.id for r in load_kernel_rules()),
                *VOCABULARY]
    assert listed == expected
    assert all(invoke("explain", i).exit_code == 0 for i in expected[::7])  # each listed id explains
    assert invoke("explain", env={"COLUMNS": "80"}).stdout == r.stdout  # without ID, the same
    assert invoke("explain", "overlap", "--list").exit_code == 2


def test_explain_a_check_prints_short_labelled_lines():
    from traceparse.analyzers import specs

    spec = specs()["imbalance"]
    r = invoke("explain", "imbalance", env={"COLUMNS": "100"})  # the width off a terminal
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == f"imbalance: {spec.title}"
    for label in ("definition", "numerator", "denominator", "needs", "notes"):
        if getattr(spec, label):
            assert f"  {label}:" in lines, label
    assert max(len(line) for line in lines[1:]) <= 110  # wrapped (a word longer than the width stays whole)
    words = lambda text: re.sub(r"\s+", " ", text).split()  # noqa: E731
    body = " ".join(line.strip() for line in lines if not line.lstrip().startswith(("read:",)))
    for label in ("definition", "notes"):
        assert " ".join(words(getattr(spec, label))) in " ".join(words(body)), label  # nothing lost in the wrap


def test_explain_names_the_docs_section_it_cites():
    r = invoke("explain", "p2p_chain")
    assert r.exit_code == 0, r.output
    assert "docs/parallelism.md 3.2" in r.stdout and r.stdout.rstrip().endswith("read: traceparse docs 3.2")
    r = invoke("explain", "layout")
    assert "read: traceparse docs 1; traceparse docs 3.1; traceparse docs 3.2; traceparse docs 5" in r.stdout
    assert "docs/parallelism.md 1, 3.1, 3.2, 5" in r.stdout  # a citation is never split across lines


def test_docs_prints_the_contents_and_a_section():
    text = (Path(__file__).resolve().parents[1] / "docs" / "parallelism.md").read_text()
    r = invoke("docs")
    assert r.exit_code == 0, r.output
    assert "3.2 Pipeline parallel" in r.stdout and "6 What the trace shows" in r.stdout
    r = invoke("docs", "3.2")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("### 3.2 Pipeline parallel")
    assert r.stdout.strip() in text and "### 3.3" not in r.stdout
    r = invoke("docs", "3")
    assert "### 3.1 " in r.stdout and "### 3.5 " in r.stdout and "## 4." not in r.stdout
    r = invoke("docs", "9.9")
    assert r.exit_code == 2 and "3.2" in r.stderr and r.stdout == ""


def test_the_docs_are_package_data():
    from importlib.resources import files

    from traceparse.document.glossary import METRICS
    from traceparse.document.reference import parallelism_text, section

    assert files("traceparse.docs").joinpath("parallelism.md").read_text().startswith("# Parallelism reference")
    text = parallelism_text()
    cited = {n for _, definition, reported in METRICS.values()
             for m in re.finditer(r"docs/parallelism\.md ((?:\d+(?:\.\d+)*)(?:, \d+(?:\.\d+)*)*)",
                                  definition + " " + reported)
             for n in m.group(1).split(", ")}
    assert cited and all(section(text, n) for n in cited), cited


def test_version():
    from traceparse import __version__

    r = invoke("--version")
    assert r.exit_code == 0 and __version__ in r.stdout


# --- internal errors: exit 3, one line; the traceback only with --debug ----------------

def _boom(*_args, **_kwargs):
    raise RuntimeError("boom: a bug\nsecond line of the message")


@pytest.mark.parametrize("command, target", [("analyze", "document"), ("layout", "layout_document"),
                                             ("tags", "tags_document")])
def test_internal_error_exit_3_one_line(tmp_path, tiny, monkeypatch, command, target):
    import traceparse.document

    monkeypatch.setattr(traceparse.document, target, _boom)
    r = invoke(command, "--db", tmp_path / "s.duckdb", tiny)
    assert r.exit_code == 3
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("traceparse: internal error: RuntimeError: boom: a bug — please report it")
    assert "--debug" in lines[0] and "second line" not in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_internal_error_traceback_with_debug(tmp_path, tiny, monkeypatch):
    import traceparse.document

    monkeypatch.setattr(traceparse.document, "document", _boom)
    r = invoke("--debug", "analyze", "--db", tmp_path / "s.duckdb", tiny)
    assert r.exit_code == 3
    assert r.stderr.startswith("Traceback (most recent call last):")
    assert "in _boom" in r.stderr and "RuntimeError: boom: a bug" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("traceparse: internal error: RuntimeError: boom: a bug")


def test_bad_input_stays_exit_2_with_debug(tmp_path):
    f = tmp_path / "rank0.json"
    f.write_text("not json")
    r = invoke("--debug", "analyze", "--db", tmp_path / "s.duckdb", f)
    assert r.exit_code == 2
    assert len(r.stderr.strip().splitlines()) == 1 and str(f) in r.stderr


@pytest.mark.parametrize("args", [["analyze"], ["analyze", "--nope", "x.json"], ["no-such-command"],
                                  ["--debug", "analyze", "--format", "yaml", "x.json"]],
                         ids=["missing-paths", "unknown-option", "unknown-command", "bad-choice"])
def test_usage_errors_stay_exit_2(args):
    r = invoke(*args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceparse: error: ") and "--help" in lines[0], r.stderr


# --- unknown is never zero: df_index_resolver records no collective sizes --------------
# (the control trace, which once served here, carries its sizes in its nccl: annotations'
# shapes; it still has no memory events)

UNSIZED = "hta/df_index_resolver/df_index_resolver.json.gz"
CONTROL = "hta/trace_diff/control/control.json.gz"


@pytest.fixture(scope="module")
def unsized(tmp_path_factory):
    """(trace path, store path) of a trace without any collective size, loaded once."""
    f = public_trace(UNSIZED)
    db = tmp_path_factory.mktemp("unsized") / "s.duckdb"
    load_run([f], db=db)
    return f, db


@pytest.fixture(scope="module")
def control(tmp_path_factory):
    """(trace path, store path) of the control trace (no memory events), loaded once."""
    f = public_trace(CONTROL)
    db = tmp_path_factory.mktemp("control") / "s.duckdb"
    load_run([f], db=db)
    return f, db


@pytest.mark.slow
def test_unsized_trace_records_no_sizes(unsized):
    """What the tests below rest on: no event of the trace carries a message size or recorded shapes."""
    evs = plain_json(unsized[0])["traceEvents"]
    comms = [e.get("args", {}) for e in evs if e.get("name") == "record_param_comms"]
    assert comms and not any("In msg nelems" in a or "Out msg nelems" in a for a in comms)
    assert not any("Input Dims" in e.get("args", {}) or "In msg nelems" in e.get("args", {}) for e in evs)


@pytest.mark.slow
def test_control_trace_records_no_sizes_in_args(control):
    """The control trace's record_param_comms carry no message size either (its sizes are in the shapes of
    its nccl: annotations, tests/test_sizes.py), and it has no memory events."""
    doc = plain_json(control[0])
    comms = [e.get("args", {}) for e in doc["traceEvents"] if e.get("name") == "record_param_comms"]
    assert comms and not any("In msg nelems" in a or "Out msg nelems" in a for a in comms)
    assert not any(e.get("name") == "[memory]" for e in doc["traceEvents"])


@pytest.mark.slow
def test_unknown_sizes_are_null_in_json(unsized, control):
    f, db = unsized
    r = invoke("analyze", "--format", "json", "--db", db, f)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["collectives"]
    per_rank_step = len(doc["run"]["ranks"]) * len(doc["run"]["steps"])
    for row in doc["collectives"]:
        assert row["input_bytes_per_rank_per_step"] is None, row
        assert row["ops_without_size"] == round(row["count"] * per_rank_step) > 0, row  # every operation unsized
    for c in doc["summary"]["comm"]:
        assert (c["bytes_in"], c["bytes_out"], c["ops_without_size"]) == (None, None, c["ops"]), c
    for r in doc["summary"]["per_rank"]:
        assert r["comm_ops"] > 0 and r["comm_bytes_in"] is None, r
    cv = doc["checks"]["comm_volume"]
    assert cv["status"] == "not_applicable" and "no strategy has both" in cv["reason"]
    for s, row in cv["per_strategy"].items():
        assert row["measured_volume_bytes"] is None and row["ratio"] is None and row["status"] == "not_applicable", s
        assert s in cv["reason"]
    # no memory events: no measured peak (the control trace, where the model itself is known)
    f, db = control
    r = invoke("analyze", "--format", "json", "--db", db, f)
    assert r.exit_code == 0, r.output
    mem = json.loads(r.stdout)["checks"]["memory"]
    assert mem["measured_peak_bytes"] is None and mem["measured_over_model"] is None
    assert mem["status"] == "not_applicable" and "no measured peak" in mem["reason"]


def _table_rows(text, header_start):
    """Rows (lists of cells split on 2+ spaces) of the table whose header line starts with ``header_start``."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    header = re.split(r"\s{2,}", lines[at].strip())
    out = []
    for line in lines[at + 2:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != len(header):
            break
        out.append(dict(zip(header, cells, strict=True)))
    return out


@pytest.mark.slow  # over 2 s: the fast tier keeps its area's other tests
def test_unknown_sizes_print_dash_in_text(unsized):
    f, db = unsized
    r = invoke("analyze", "--db", db, f)
    assert r.exit_code == 0, r.output
    assert "0.00 MB" not in r.stdout
    coll = _table_rows(r.stdout, "strategy ")
    assert coll and all(row["input bytes"] == "-" and int(row["no size"]) > 0 for row in coll), coll
    comm = _table_rows(r.stdout, "op  ")
    assert comm and all(row["input bytes total"] == "-" and row["no size"] == row["ops total"] for row in comm), comm
    assert "comm_volume: not_applicable (no strategy has both" in r.stdout
    assert "memory: not_applicable (" in r.stdout


def test_tags_unknown_sizes(unsized):
    f, db = unsized
    r = invoke("tags", "--format", "json", "--db", db, f)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["tags"] and all(t["bytes_in"] is None and t["ops_without_size"] == t["ops"] for t in doc["tags"])
    assert doc["untagged"]["all_ops"] == sum(t["ops"] for t in doc["tags"])
    r = invoke("tags", "--db", db, f)
    rows_ = _table_rows(r.stdout, "strategy")
    assert rows_ and all(row["input bytes total"] == "-" for row in rows_), r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("untagged: ")


# --- the store cache ------------------------------------------------------------------

def test_cache_reused(tmp_path, tiny, monkeypatch):
    cache = tmp_path / "cache"
    env = {"TRACEPARSE_CACHE": str(cache)}
    r = invoke("analyze", tiny, env=env)
    assert r.exit_code == 0, r.output
    stores = sorted(cache.glob("*.duckdb"))
    assert len(stores) == 1
    mtime = stores[0].stat().st_mtime_ns

    r = invoke("analyze", "--format", "json", tiny, env=env)
    assert r.exit_code == 0, r.output
    assert sorted(cache.glob("*.duckdb")) == stores
    assert stores[0].stat().st_mtime_ns == mtime

    monkeypatch.setenv("TRACEPARSE_CACHE", str(cache))
    path, reused = load_run([tiny])
    assert (path, reused) == (stores[0], True)


def test_cache_invalidated_when_file_changes(tmp_path, tiny, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRACEPARSE_CACHE", str(cache))
    _, reused = load_run([tiny])
    assert reused is False
    write(tiny, trace([x("a", 1, 1)], rank=1, world_size=2))
    os.utime(tiny, ns=(1, 1))  # a different mtime whatever the clock's resolution
    path, reused = load_run([tiny])
    assert reused is False
    r = invoke("sql", "--format", "csv", "SELECT count(*) AS n FROM events", "--db", path)
    assert r.stdout.splitlines()[1] == "1"


def test_no_cache_leaves_cache_dir_empty(tmp_path, tiny):
    cache = tmp_path / "cache"
    r = invoke("analyze", "--no-cache", tiny, env={"TRACEPARSE_CACHE": str(cache)})
    assert r.exit_code == 0, r.output
    assert not cache.exists() or list(cache.iterdir()) == []


def test_no_cache_keeps_no_store_anywhere(tiny, isolated_dirs):
    tmp = isolated_dirs["tmp"]
    before = set(tmp.rglob("*"))
    r = invoke("analyze", "--no-cache", tiny)
    assert r.exit_code == 0, r.output
    assert sorted(set(tmp.rglob("*")) - before) == []


def test_db_option_does_not_overwrite_other_files(tmp_path, tiny):
    other = tmp_path / "notes.txt"
    other.write_text("precious\n")
    r = CliRunner().invoke(main, ["analyze", "--db", str(other), str(tiny)])
    assert other.read_text() == "precious\n"
    assert r.exit_code == 2


# --- README ---------------------------------------------------------------------------

def test_schema_doc_documents_every_column():
    """docs/schema.md has a heading naming each store table, and every column of it below that heading."""
    doc = REPO / "docs" / "schema.md"
    assert doc.exists(), f"{doc} is missing: the store's tables and columns are documented there"
    text = doc.read_text()
    lines = text.splitlines()
    headings = [i for i, line in enumerate(lines) if line.lstrip().startswith("#")]
    missing = []
    for table, (_, cols) in TABLES.items():
        at = next((i for i in headings if f"`{table}`" in lines[i]), None)
        if at is None:
            missing.append(f"table {table} (no heading naming `{table}`)")
            continue
        end = next((i for i in headings if i > at), len(lines))
        section = "\n".join(lines[at:end])
        missing += [f"{table}.{c}" for c, _t, _d in cols if f"`{c}`" not in section]
    assert not missing, f"docs/schema.md does not document: {', '.join(missing)}"
