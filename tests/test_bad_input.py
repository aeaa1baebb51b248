"""Bad input: a clear TraceError naming the file, and no half-written store; or, for
cut-off traces, every complete event kept and the loss recorded."""

from __future__ import annotations

import gzip
import json
import os
import random
import zlib

import pytest
from click.testing import CliRunner
from conftest import committed_runs
from traces import dumps, load, rows, scalar, trace, write, x

from traceparse.cli import main
from traceparse.errors import TraceError
from traceparse.load.run import load_run

FIXTURES = committed_runs("ddp2")

def assert_refused(tmp_path, paths, *names, match=None, **kw):
    """load_run raises a TraceError naming every one of ``names``, and leaves no store behind."""
    db = tmp_path / "out" / "s.duckdb"
    with pytest.raises(TraceError) as ei:
        load_run(paths, db=db, **kw)
    msg = str(ei.value)
    for n in names:
        assert str(n) in msg, msg
    if match:
        assert match in msg.lower(), msg
    assert "\n" not in msg
    assert not db.exists()
    leftovers = [p.name for p in db.parent.iterdir()] if db.parent.exists() else []
    assert leftovers == [], leftovers
    return ei.value


def test_empty_file(tmp_path):
    f = tmp_path / "rank0.json"
    f.write_bytes(b"")
    assert_refused(tmp_path, [f], f.name, match="empty")


def test_whitespace_only_file(tmp_path):
    f = tmp_path / "rank0.json"
    f.write_bytes(b"  \n\t\n")
    assert_refused(tmp_path, [f], f.name)


def test_empty_gzip_file(tmp_path):
    f = tmp_path / "rank0.json.gz"
    f.write_bytes(gzip.compress(b""))
    assert_refused(tmp_path, [f], f.name)


@pytest.mark.parametrize("text", [b"hello, world\n", b"<html><body>502</body></html>", b"\x00\x01\x02binary"])
def test_not_json(tmp_path, text):
    f = tmp_path / "rank0.json"
    f.write_bytes(text)
    assert_refused(tmp_path, [f], f.name, match="json")


@pytest.mark.parametrize("doc", [{"schemaVersion": 1, "distributedInfo": {"rank": 0}}, {}, {"events": []}])
def test_json_without_trace_events(tmp_path, doc):
    f = tmp_path / "rank0.json"
    f.write_text(json.dumps(doc))
    assert_refused(tmp_path, [f], f.name, match="traceevents")


def test_corrupt_gzip(tmp_path):
    f = tmp_path / "rank0.json.gz"
    f.write_bytes(b"\x1f\x8b" + random.Random(1).randbytes(4000))
    assert_refused(tmp_path, [f], f.name, match="gzip")


def test_unreadable_file(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("running as root: chmod 000 does not stop root from reading")
    f = write(tmp_path / "rank0.json", trace([x("a", 1, 1)]))
    f.chmod(0)
    try:
        assert_refused(tmp_path, [f], f.name)
    finally:
        f.chmod(0o644)


def test_missing_file(tmp_path):
    assert_refused(tmp_path, [tmp_path / "nope.json"], "nope.json")


def test_glob_matching_nothing(tmp_path):
    assert_refused(tmp_path, [str(tmp_path / "rank*.json")], "rank*.json")


def test_folder_without_traces(tmp_path):
    d = tmp_path / "empty_run"
    d.mkdir()
    (d / "truth.json").write_text('{"world_size": 2}')
    assert_refused(tmp_path, [d], "empty_run")


def test_duplicate_ranks_name_both_files(tmp_path):
    a = write(tmp_path / "a" / "trace.json", trace([x("a", 1, 1)], rank=0, world_size=2))
    b = write(tmp_path / "b" / "trace.json", trace([x("b", 1, 1)], rank=0, world_size=2))
    err = assert_refused(tmp_path, [a, b], a, b, match="rank 0")
    assert err.path in (str(a), str(b))


def test_missing_rank_among_several_files(tmp_path):
    a = write(tmp_path / "a.json", trace([x("a", 1, 1)], rank=0, world_size=2))
    b = write(tmp_path / "b.json", trace([x("b", 1, 1)], rank=None, world_size=2))
    assert_refused(tmp_path, [a, b], b.name, match="rank")


def _mixed(tmp_path):
    a = write(tmp_path / "rank0.json", trace([x("a", 1, 1)], rank=0, world_size=2))
    b = write(tmp_path / "rank1.json", trace([x("b", 1, 1)], rank=1, world_size=4))
    return a, b


def test_mixed_runs_refused(tmp_path):
    a, b = _mixed(tmp_path)
    err = assert_refused(tmp_path, [a, b], match="world size")
    assert err.path in (str(a), str(b))
    assert "--allow-mixed" in str(err)


def test_mixed_runs_allowed_with_warning(tmp_path):
    a, b = _mixed(tmp_path)
    con = load([a, b], tmp_path / "s.duckdb", allow_mixed=True)
    assert rows(con, "SELECT rank, world_size FROM ranks ORDER BY rank") == [
        {"rank": 0, "world_size": 2},
        {"rank": 1, "world_size": 4},
    ]
    issues = rows(con, "SELECT severity, what FROM load_issues")
    assert [i["severity"] for i in issues] == ["warning"]
    assert "world size" in issues[0]["what"]


# --- cut-off traces -------------------------------------------------------------------

def _events(n):
    rnd = random.Random(n)
    return [
        x(f"aten::op_{i}_{rnd.getrandbits(64):x}", 1000 + 10 * i, 5, args={"External id": i, "Input Dims": [[i, 3]]})
        for i in range(n)
    ]


def _text_and_spans(doc):
    """The trace's JSON text and, per event, the (start, end) offset of its text."""
    text = dumps(doc)
    spans, pos = [], 0
    for e in doc["traceEvents"]:
        piece = dumps(e)
        start = text.index(piece, pos)
        spans.append((start, start + len(piece)))
        pos = start + len(piece)
    return text, spans


@pytest.mark.parametrize("where", [0.5, 0.0, 0.99], ids=["middle", "start", "end"])
@pytest.mark.slow
def test_truncated_trace_keeps_complete_events(tmp_path, where):
    doc = trace(_events(100), rank=0, world_size=1)
    text, spans = _text_and_spans(doc)
    start, end = spans[60]
    cut = start + max(1, int((end - start) * where))
    assert start < cut < end
    f = tmp_path / "rank0.json"
    f.write_text(text[:cut])
    kept = sum(1 for s, e in spans if e <= cut)
    assert kept == 60

    con = load(f, tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == kept
    assert [r[0] for r in con.execute("SELECT external_id FROM events ORDER BY ev_id").fetchall()] == list(range(kept))
    issues = rows(con, "SELECT file, severity, what, count FROM load_issues")
    assert len(issues) == 1
    assert (issues[0]["file"], issues[0]["severity"]) == (str(f.resolve()), "warning")


def test_trace_cut_after_last_event(tmp_path):
    # the array's closing bracket and the rest of the header are missing
    doc = trace(_events(10), rank=0)
    text, spans = _text_and_spans(doc)
    f = tmp_path / "rank0.json"
    f.write_text(text[: spans[-1][1]])
    con = load(f, tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == 10
    assert scalar(con, "SELECT count(*) FROM load_issues WHERE severity = 'warning'") == 1


def test_truncated_gzip_keeps_complete_events(tmp_path):
    doc = trace(_events(3000), rank=0, world_size=1)
    text, spans = _text_and_spans(doc)
    data = gzip.compress(text.encode())
    cut = data[: len(data) // 2]
    # what a reader can get out of the first half of the compressed bytes
    prefix = zlib.decompressobj(wbits=31).decompress(cut)
    assert 0 < len(prefix) < len(text)
    kept = sum(1 for s, e in spans if e <= len(prefix))
    assert 0 < kept < 3000

    f = tmp_path / "rank0.json.gz"
    f.write_bytes(cut)
    con = load(f, tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == kept
    assert [r[0] for r in con.execute("SELECT external_id FROM events ORDER BY ev_id").fetchall()] == list(range(kept))
    issues = rows(con, "SELECT file, severity, what FROM load_issues")
    assert [(i["file"], i["severity"]) for i in issues] == [(str(f.resolve()), "warning")]
    assert "gzip" in issues[0]["what"]


def test_failed_load_does_not_touch_existing_store(tmp_path):
    good = write(tmp_path / "rank0.json", trace([x("a", 1, 1)], rank=0))
    db = tmp_path / "s.duckdb"
    load(good, db).close()
    parts = tmp_path / "s.duckdb.ranks"
    before = db.read_bytes(), sorted((p.relative_to(parts), p.read_bytes()) for p in parts.rglob("*") if p.is_file())
    names = sorted(p.name for p in tmp_path.iterdir())  # the store, and its per-rank folder if it has one
    bad = tmp_path / "rank1.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError):
        load_run([bad], db=db)
    assert (db.read_bytes(), sorted((p.relative_to(parts), p.read_bytes()) for p in parts.rglob("*") if p.is_file())) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names, "rank1.json"])


@pytest.mark.slow
def test_truncated_trace_larger_than_one_batch(tmp_path):
    # > 8 MB of events: the cut lands in a later batch than the first
    doc = trace(_events(60000), rank=0)
    text, spans = _text_and_spans(doc)
    assert len(text) > 9 << 20
    start, end = spans[50000]
    cut = (start + end) // 2
    f = tmp_path / "rank0.json"
    f.write_text(text[:cut])
    con = load(f, tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == 50000
    assert scalar(con, "SELECT count(DISTINCT external_id) FROM events") == 50000
    assert scalar(con, "SELECT max(external_id) FROM events") == 49999
    assert [r[0] for r in con.execute("SELECT severity FROM load_issues").fetchall()] == ["warning"]


def test_one_bad_file_among_several(tmp_path):
    good = [write(tmp_path / f"rank{r}.json", trace([x("a", 1, 1)], rank=r, world_size=3)) for r in (0, 1)]
    bad = tmp_path / "rank2.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + bytes(200))
    assert_refused(tmp_path, good + [bad], bad.name, match="gzip")


def test_cut_off_with_no_complete_event_is_an_error(tmp_path):
    f = tmp_path / "rank0.json"
    f.write_text('{"traceEvents": [{"ph": "X", "na')
    assert_refused(tmp_path, [f], f, match="no complete event")


def test_trace_cut_after_closed_array_loses_no_event(tmp_path):
    doc = trace(_events(10), rank=0)
    text = dumps(doc)
    end = text.rindex("]") + 1
    f = tmp_path / "rank0.json"
    f.write_text(text[:end] + ', "traceNa')
    con = load(f, tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == 10
    what = scalar(con, "SELECT what FROM load_issues")
    assert "after traceEvents" in what and "0 partial" in what


# --- no event with a usable duration ----------------------------------------------------

def _all_durations(src, value):
    """``src`` (a gzipped trace) with every event's ``dur`` set by ``value(dur)``."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for e in doc["traceEvents"]:
        if "dur" in e:
            e["dur"] = value(e["dur"])
    return doc


@pytest.mark.parametrize("value", [lambda d: -d - 1, lambda _: "abc"], ids=["negative", "not_a_number"])
def test_no_usable_duration_is_refused(tmp_path, value):
    """A rank none of whose complete events has a usable duration has no time to place anything in: refused,
    naming the file, alone or beside a good rank (before: an internal error, exit 3)."""
    ddp2 = FIXTURES / "ddp2"
    bad = write(tmp_path / "run" / "rank0.json", _all_durations(ddp2 / "rank0.json.gz", value))
    n = sum(e.get("ph") == "X" for e in json.loads(bad.read_text())["traceEvents"])
    assert_refused(tmp_path, [bad], bad.name, match=f"none of its {n} complete (ph=x) events has a usable duration")
    (tmp_path / "run" / "rank1.json.gz").write_bytes((ddp2 / "rank1.json.gz").read_bytes())
    assert_refused(tmp_path, [tmp_path / "run"], bad.name, match="usable duration")


def test_no_usable_duration_cli(tmp_path):
    bad = write(tmp_path / "rank0.json", _all_durations(FIXTURES / "ddp2" / "rank0.json.gz", lambda d: -d - 1))
    r = CliRunner().invoke(main, ["analyze", str(bad)])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert r.stderr.startswith(f"traceparse: error: {bad.resolve()}: none of its ") and r.stderr.count("\n") <= 1
    cache = os.environ["TRACEPARSE_CACHE"]
    assert not os.path.exists(cache) or os.listdir(cache) == []  # no store, not even half of one
