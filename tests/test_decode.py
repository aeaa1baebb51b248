"""The compiled decoder (traceparse/ingest/decode.c) against msgspec: where it answers, the staged tables and the
file's summary are those msgspec's decode gives, on every bundled run's traces, every public trace, and seeded
damage around each decision it makes (values of every type where it reads an id, a time or a name; escapes;
numbers out of range; bytes removed or added; files cut short). The values it reads are checked against JSON's
own meaning, worked out here."""

from __future__ import annotations

import gzip
import os
import random
import re

import pyarrow.parquet as pq
import pytest
from conftest import FIXTURE_RUNS, committed_runs, needed, public_trace_files
from traces import dumps, trace, write, x

import traceparse.ingest.split as split
from traceparse.errors import TraceError
from traceparse.ingest import column_batch, rank
from traceparse.ingest.column_batch import ColumnBatch
from traceparse.ingest.split import TraceSplitter

pytestmark = pytest.mark.skipif(column_batch._decode is None,
                                reason="the compiled decoder is not built (no C compiler where it was installed)")


def parsed(path, out, monkeypatch, decoder: str):
    """(summary, {table: Arrow table}) of ``path`` decoded by ``decoder``, or ("error", message)."""
    monkeypatch.setenv("TRACEPARSE_DECODER", decoder)
    try:
        summary = rank.parse_rank_file(path, out)
    except TraceError as e:
        return ("error", str(e).replace(str(out), "OUT")), None
    summary.pop("stage")
    return summary, {name: pq.read_table(out / f"{name}.parquet") for name in rank.SCHEMAS}


def assert_same(path, tmp_path, monkeypatch):
    a, ta = parsed(path, tmp_path / "msgspec", monkeypatch, "msgspec")
    b, tb = parsed(path, tmp_path / "compiled", monkeypatch, "compiled")
    assert a == b
    if ta is not None:
        for name in ta:
            assert ta[name].equals(tb[name]), name


def batches(path) -> list:
    return list(TraceSplitter(path, columns=True).batches())


BUNDLED = sorted(p for p in FIXTURE_RUNS.glob("*/rank0.json*"))


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.parent.name)
def test_bundled_runs_same_tables(path, tmp_path, monkeypatch):
    committed_runs()
    assert_same(path, tmp_path, monkeypatch)


@pytest.mark.parametrize("path", public_trace_files(), ids=lambda p: p.name[:40])
def test_public_traces_same_tables_and_read_compiled(path, tmp_path, monkeypatch):
    path = needed(path)
    assert_same(path, tmp_path, monkeypatch)
    # the decoder answers for every batch of a real trace (else the comparison above would prove nothing)
    assert all(isinstance(b, ColumnBatch) for b in batches(path))


# --- values, by JSON's meaning --------------------------------------------------------------------------------

def one(tmp_path, event: str, header: str = "") -> dict:
    """The events table's row of a trace holding ``event`` (JSON text) after a plain op, decoded by the compiled
    decoder (which must answer), and the file's load issues."""
    f = tmp_path / "t.json"
    f.write_text('{"schemaVersion": 1, "traceEvents": [' + dumps(x("op", 1, 1)) + ", " + event + "]" + header + "}")
    got = batches(f)
    assert got and all(isinstance(b, ColumnBatch) for b in got)
    from traceparse.ingest.columns import event_tables
    from collections import Counter
    problems = Counter()
    tables, _ = event_tables(got[0], 0, problems)
    return {**tables["events"].to_pylist()[-1], "problems": dict(problems)}


def test_times_exact_in_ns(tmp_path):
    row = one(tmp_path, '{"ph": "X", "name": "a", "ts": 1700000000123456.789, "dur": 0.5, "pid": 1, "tid": 2}')
    assert row["ts_ns"] == 1_700_000_000_123_456_789 and row["dur_ns"] == 500
    row = one(tmp_path, '{"ph": "X", "name": "a", "ts": -0, "dur": 7}')
    assert row["ts_ns"] == 0 and row["dur_ns"] == 7000


def test_names_unescaped(tmp_path):
    row = one(tmp_path, r'{"ph": "X", "name": "a\u00e9\"b\\c\/\ud83d\ude00\n", "cat": "cpu_op", "ts": 1, "dur": 1}')
    assert row["name"] == 'a\u00e9"b\\c/\U0001F600\n' and row["cat"] == "cpu_op"
    row = one(tmp_path, '{"ph": "X", "name": "caf\u00e9", "ts": 1, "dur": 1}')
    assert row["name"] == "caf\u00e9" and row["cat"] is None


def test_ids_as_strings_and_out_of_range(tmp_path):
    row = one(tmp_path, '{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": "Spans", "tid": " 7 ", '
                        '"args": {"External id": 9223372036854775808, "correlation": -9223372036854775808, '
                        '"external id": 5, "stream": null, "device": [1]}}')
    assert row["pid"] is None and row["tid"] == 7  # a label is no id; a number written as text is
    assert row["external_id"] is None  # 2^63: beyond int64, and "External id" given, so not the old spelling's 5
    assert row["correlation"] == -(1 << 63) and row["stream"] is None and row["device"] is None
    assert row["problems"] == {"event field(s) 'args.External id' out of range: read as null": 1}
    row = one(tmp_path, '{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"external id": 5}}')
    assert row["external_id"] == 5  # Kineto's spelling before PyTorch 1.11


@pytest.mark.parametrize("event", [
    '{"ph": "X", "name": "a", "ts": 1.2345, "dur": 1}',  # more than 3 decimals: rounded by the slow path
    '{"ph": "X", "name": "a", "ts": 1e3, "dur": 1}',
    '{"ph": "X", "name": "a", "ts": 9999999999999999.999, "dur": 1}',  # 16 digits, beyond 2^62 ns
    '{"ph": "X", "name": "a", "ts": 1, "dur": 4611686018427388}',
    '{"ph": "X", "name": "a", "ts": "1", "dur": 1}',
    '{"ph": "X", "name": "a", "ts": 1, "dur": -1}',
    '{"ph": "X", "name": "a", "ts": 1}',
    '{"ph": "X", "name": 5, "ts": 1, "dur": 1}',
    '{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1.0}',
    '{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": true}',
    '{"ph": "X", "name": "a", "name": "b", "ts": 1, "dur": 1}',
    '{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"zz": 1e999}}',
    '{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": []}',
    '{"ph": "\\u0058", "name": "a", "ts": 1, "dur": 1}',
    '{"ph": "X", "name": "\\ud800", "ts": 1, "dur": 1}',
])
def test_declines_what_it_does_not_read_as_msgspec_would(event, tmp_path, monkeypatch):
    f = tmp_path / "t.json"
    f.write_text('{"traceEvents": [' + dumps(x("op", 1, 1)) + ", " + event + "]}")
    assert not any(isinstance(b, ColumnBatch) for b in batches(f))
    assert_same(f, tmp_path, monkeypatch)


# --- seeded damage ----------------------------------------------------------------------------------------------

VALUES = ['"7"', '"Spans"', "7.0", "true", "null", "[1]", "99999999999999999999", "-0", '"\\u0037"', '"1.5"',
          "1.5e3", "1.2345", "-5", "01", '"a\\u00e9\\"b"', '"\\ud83d\\ude00"', '"\\ud800"', "5", '["x"]', '"\xff"',
          "1e999", '{"a": [1, {"b": null}]}', '"ProfilerStep#3"', '"[memory]"', '"M"', '"X"', "", "1 2"]
ARGS = ['"External id": "12", ', '"external id": 5, ', '"Collective name": "allreduce", ', '"stream": 1e999, ',
        '"zz": 1e999, ', '"zz": "\xff", ', '"stream": 1, "stream": 2, ', '"Input Dims": [[2, 3]], ',
        '"In msg nelems": "x", ', '"\\u0073tream": 4, ', '"device": 18446744073709551615, ']
KEYS = ["pid", "tid", "ts", "dur", "name", "cat", "ph"]


def damaged(text: str, rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:  # a value of a key the decoder reads replaced
        key = rng.choice(KEYS)
        spots = [m for m in re.finditer(rf'"{key}": ("[^"]*"|[^,}}]*)', text)]
        m = rng.choice(spots)
        return text[:m.start(1)] + rng.choice(VALUES) + text[m.end(1):]
    if kind == 1:  # args added
        spots = [m.end() for m in re.finditer(r'"args": \{', text)]
        at = rng.choice(spots)
        return text[:at] + rng.choice(ARGS) + text[at:]
    if kind == 2:  # a byte removed or added
        at = rng.randrange(text.index("traceEvents"), len(text))
        return text[:at] + text[at + 1:] if rng.random() < 0.5 else text[:at] + rng.choice('{}[],:"\\ 0e.-') + text[at:]
    return text[:rng.randrange(text.index("traceEvents"), len(text))]  # cut short


SEEDS = int(os.environ.get("TRACEPARSE_DECODE_SEEDS", "48"))  # a longer campaign: docs/testing.md


@pytest.mark.parametrize("seed", range(SEEDS))
def test_seeded_damage_same_tables(seed, tmp_path, monkeypatch):
    """A real trace (the bundled ddp2's rank 0) damaged at one spot, read in batches of 64 KB (several batches and
    the tail), decoded both ways: the same tables, or the same error."""
    monkeypatch.setattr(split, "BATCH", 64 << 10)
    monkeypatch.setattr(split, "MAX_FAST", 128 << 10)
    text = gzip.decompress((committed_runs("ddp2") / "ddp2" / "rank0.json.gz").read_bytes()).decode()
    rng = random.Random(seed)
    f = tmp_path / "rank0.json"
    f.write_bytes(damaged(text, rng).encode("utf-8", "surrogateescape").replace("\xff".encode(), b"\xff"))
    assert_same(f, tmp_path, monkeypatch)


def test_small_batches_read_compiled(tmp_path, monkeypatch):
    """A whole trace read in small batches: every batch, the tail included, by the compiled decoder."""
    monkeypatch.setattr(split, "BATCH", 64 << 10)
    monkeypatch.setattr(split, "MAX_FAST", 128 << 10)
    f = tmp_path / "rank0.json"
    f.write_bytes(gzip.decompress((committed_runs("ddp2") / "ddp2" / "rank0.json.gz").read_bytes()))
    got = batches(f)
    assert len(got) > 2 and all(isinstance(b, ColumnBatch) for b in got)
    assert_same(f, tmp_path, monkeypatch)


def test_header_after_events_kept(tmp_path, monkeypatch):
    doc = trace([x("op", 1, 1)], rank=1, world_size=2)
    f = write(tmp_path / "t.json", {"traceEvents": doc["traceEvents"], "distributedInfo": doc["distributedInfo"]})
    assert all(isinstance(b, ColumnBatch) for b in batches(f))
    summary = rank.parse_rank_file(f, tmp_path / "out")
    assert (summary["rank"], summary["world_size"]) == (1, 2)
    assert_same(f, tmp_path, monkeypatch)
