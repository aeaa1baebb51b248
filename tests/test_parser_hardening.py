"""Parser hardening: a bad value inside an otherwise good trace costs that event or that field, counted
in load_issues with its kind; a real cut-off is told apart from a bad value in the middle; numbers
out of range, deep nesting and pathological layout (whitespace runs, huge events, gzip bombs) never
give a traceback, a signal or unbounded memory. Each case is a minimal file written here."""

from __future__ import annotations

import gzip
import pickle
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner
from traces import dumps, load, rows, scalar, write, x

import traceparse.ingest.split as split
import traceparse.ingest.stream as stream
from traceparse.cli import main
from traceparse.errors import TraceError
from traceparse.ingest.columns import DUR_NS, TS_NS, nanoseconds
from traceparse.ingest.split import TraceSplitter
from traceparse.load.run import load_run

MB = 1 << 20
N = 21


# --- raw trace text ---------------------------------------------------------------------------

def good(i: int, **kw) -> bytes:
    ev = x(kw.pop("name", f"op{i}"), 1000 + 10 * i, 5, args={"External id": i})
    ev.update(kw)
    return dumps(ev).encode()


def raw_trace(events: list[bytes], rank=0, world_size=1, head=b"", tail=b"") -> bytes:
    """A trace's bytes: header (``head`` members first), the events as given, then ``tail`` members."""
    info = b'"distributedInfo": {"rank": %d, "world_size": %d}' % (rank, world_size)
    return (b'{' + head + b'"schemaVersion": 1, ' + info + b', "traceEvents": [\n' + b",\n".join(events) + b"\n]"
            + tail + b"}")


def with_bad(bad: bytes, at: int = 10, n: int = N, **kw) -> bytes:
    events = [good(i) for i in range(n)]
    events[at] = bad
    return raw_trace(events, **kw)


def put(tmp_path, data: bytes, name="rank0.json") -> Path:
    f = tmp_path / name
    if name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=1)
    f.write_bytes(data)
    return f


def issues(con) -> list[dict]:
    return rows(con, "SELECT severity, what, count FROM load_issues ORDER BY what")


def the_issue(con, *needles) -> dict:
    """The one load issue containing every needle; no issue says the file was cut off."""
    found = issues(con)
    assert not [i for i in found if "cut off" in i["what"]], found
    hits = [i for i in found if all(n in i["what"] for n in needles)]
    assert len(hits) == 1, (needles, found)
    return hits[0]


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# --- 1. timestamps and durations: the text is checked before any conversion ---------------------------

EXPONENTS = ["1e-999999999", "1e-1000", "-1e-999999999", "0.5e-99999999999", "1E-2147483649", "123.456e-99999",
             "1e-9223372036854775808", "1e30", "99999999999999999999999", "1" + "0" * 60, '"12"', "true", "{}"]


@pytest.mark.parametrize("value", EXPONENTS)
@pytest.mark.slow
def test_unusable_ts_costs_that_event_counted(tmp_path, value):
    con = load(put(tmp_path, with_bad(good(10).replace(b'"ts": 1100', b'"ts": ' + value.encode()))), tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == N - 1
    assert scalar(con, "SELECT count(*) FROM events WHERE name = 'op10'") == 0
    assert the_issue(con, "ts is not a plain decimal number within range", "not loaded")["count"] == 1


@pytest.mark.parametrize("value", EXPONENTS)
@pytest.mark.slow
def test_unusable_dur_is_null_counted(tmp_path, value):
    con = load(put(tmp_path, with_bad(good(10).replace(b'"dur": 5', b'"dur": ' + value.encode()))), tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == N
    assert scalar(con, "SELECT dur_ns FROM events WHERE name = 'op10'") is None
    assert the_issue(con, "dur is not a plain decimal number within range", "duration unknown")["count"] == 1


@pytest.mark.slow
def test_huge_negative_exponents_do_not_crash_the_process(tmp_path):
    """pyarrow's decimal cast segfaulted on 1e-999999999: run as its own process, exit code and stderr checked."""
    events = [good(i) for i in range(N)]
    events[3] = good(3).replace(b'"ts": 1030', b'"ts": 1e-999999999')
    events[4] = good(4).replace(b'"dur": 5', b'"dur": 1e-999999999')
    events.append(b'{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, '
                  b'"ts": -1e-999999999, "args": {"Bytes": 512, "Total Allocated": 512, "Device Id": 0, "Device Type": 0}}')
    f = put(tmp_path, raw_trace(events))
    r = subprocess.run([sys.executable, "-m", "traceparse.cli", "analyze", str(f), "--no-cache", "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr


def test_nanoseconds_exact_and_checked():
    raws = [b"1.5e3", b"12.3456", b"0.0005", b"0.0015", b"-2.5", b"1700000000000000.123", b"7", b"", b"null",
            b"1e-1000", b"NaN", b'"5"', b"1" * 41, b"4611686018427388", b"0.1e1"]
    col, missing, bad = nanoseconds(raws, TS_NS)
    assert col.to_pylist() == [1_500_000, 12_346, 0, 2, -2_500, 1_700_000_000_000_000_123, 7_000, None, None,
                               None, None, None, None, None, 1_000]
    assert missing == [7, 8] and bad == [9, 10, 11, 12, 13]
    col, missing, bad = nanoseconds([b"1e16", b"5", b"2305843009213694"], DUR_NS)  # 2^61 ns is out for a duration
    assert col.to_pylist() == [None, 5000, None] and bad == [0, 2]


# --- 2. a bad value costs that event or that field, never the rest of the file -----------------------

BAD_VALUES = [
    ("NaN under a key never read", good(10)[:-1] + b', "zz": NaN}', "NaN or Infinity", "event kept"),
    ("-Infinity in args never read", good(10).replace(b'{"External id": 10}', b'{"External id": 10, "x": -Infinity}'),
     "NaN or Infinity", "event kept"),
    ("Infinity as pid", good(10).replace(b'"pid": 1', b'"pid": Infinity'), "'pid' unreadable", "NaN or Infinity"),
    ("NaN as ts", good(10).replace(b'"ts": 1100', b'"ts": NaN'), "'ts' unreadable", "NaN or Infinity"),
    ("args an array", good(10).replace(b'{"External id": 10}', b"[1, 2]"), "'args' unreadable", "an array where"),
    ("args a number", good(10).replace(b'{"External id": 10}', b"5"), "'args' unreadable", "where an object"),
    ("invalid UTF-8 in the name", good(10).replace(b'"op10"', b'"op\xff10"'), "'name' unreadable", "invalid UTF-8"),
    ("lone surrogate in the name", good(10).replace(b'"op10"', b'"op\\ud800x"'), "'name' unreadable", "escape"),
    ("raw control character in the name", good(10).replace(b'"op10"', b'"op\x0110"'), "'name' unreadable", "control"),
    ("1e400 in args", good(10).replace(b'{"External id": 10}', b'{"External id": 1e400}'), "args.External id",
     "out of range"),
    ("trailing comma in the event", good(10)[:-1] + b",}", "extra comma", "read anyway"),
]


@pytest.mark.parametrize("bad, needles", [(b, n) for _, b, *n in BAD_VALUES], ids=[i for i, *_ in BAD_VALUES])
@pytest.mark.slow
def test_bad_value_costs_only_itself(tmp_path, bad, needles):
    f = put(tmp_path, with_bad(bad))
    con = load(f, tmp_path / "s.duckdb")
    lost_ts = "'ts'" in needles[0]
    assert scalar(con, "SELECT count(*) FROM events") == N - lost_ts
    assert the_issue(con, *needles)["count"] == 1
    assert scalar(con, "SELECT count(DISTINCT external_id) FROM events") >= N - 2
    assert rows(con, "SELECT rank FROM ranks") == [{"rank": 0}]


def test_elements_that_are_not_events_are_counted(tmp_path):
    events = [good(i) for i in range(N)]
    events[3:3] = [b"5", b"NaN", b"[1, {}]", b'"text"', b"null"]
    con = load(put(tmp_path, raw_trace(events)), tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == N
    for kind in ("a number, not", "not JSON (NaN or Infinity)", "an array, not", "a string, not", "null, not"):
        assert the_issue(con, "not loaded", kind)["count"] == 1


def test_boundary_lookalikes_beside_a_bad_value(tmp_path):
    """'},{' inside names (a wrong guess for the fast path) around a bad value: every event is kept exactly."""
    names = [f'x}},{{"{i}' if i % 2 else f"op{i}" for i in range(N)]
    events = [good(i, name=names[i]) for i in range(N)]
    events[7] = events[7][:-1] + b', "zz": NaN}'
    con = load(put(tmp_path, raw_trace(events)), tmp_path / "s.duckdb")
    assert [r["name"] for r in rows(con, "SELECT name FROM events ORDER BY ev_id")] == names
    the_issue(con, "NaN or Infinity")


@pytest.mark.slow
def test_bad_values_in_a_file_of_several_batches(tmp_path):
    """> 8 MB: bad values in the first, a middle and the last batch cost only themselves."""
    n = 60000
    events = [good(i, name=f"aten::op_{i}_{'x' * 100}") for i in range(n)]
    events[100] = events[100][:-1] + b', "zz": NaN}'
    events[30000] = events[30000].replace(b'"cpu_op"', b'"cpu\xffop"')
    events[n - 5] = events[n - 5].replace(b'{"External id": %d}' % (n - 5), b"[]")
    data = raw_trace(events)
    assert len(data) > 9 * MB
    con = load(put(tmp_path, data), tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == n
    assert scalar(con, "SELECT count(DISTINCT external_id) FROM events") == n - 1
    assert [i["count"] for i in issues(con)] == [1, 1, 1], issues(con)


def test_bad_value_then_a_real_cut_off(tmp_path):
    events = [good(i) for i in range(40)]
    events[5] = events[5][:-1] + b', "zz": NaN}'
    data = raw_trace(events)
    cut = data.index(b'"op30"')
    con = load(put(tmp_path, data[:cut]), tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == 30
    found = issues(con)
    assert [i for i in found if "NaN" in i["what"]][0]["count"] == 1
    cut_off = [i for i in found if "cut off inside traceEvents" in i["what"]]
    assert len(cut_off) == 1 and "1 partial event" in cut_off[0]["what"], found


def test_bad_distributed_info_after_the_events(tmp_path):
    """A NaN in a distributedInfo written after traceEvents: the rank, world size and base time are still read
    from it, every event is loaded, and the NaN is one load issue naming the field."""
    events = [good(i) for i in range(N)]
    text = (b'{"schemaVersion": 1, "traceEvents": [' + b", ".join(events)
            + b'], "distributedInfo": {"rank": 3, "world_size": 4, "pg_count": NaN}, "baseTimeNanoseconds": 7}')
    con = load(put(tmp_path, text, "trace.json"), tmp_path / "s.duckdb")
    assert rows(con, "SELECT rank, world_size, base_time_ns FROM ranks") == [{"rank": 3, "world_size": 4, "base_time_ns": 7}]
    assert scalar(con, "SELECT count(*) FROM events") == N
    assert the_issue(con, "'distributedInfo.pg_count'", "NaN or Infinity")["count"] == 1


@pytest.mark.parametrize("value", [b"NaN", b'"\\udfff"', b'"\xff\xfe"', b"[" * 3000 + b"]" * 3000])
@pytest.mark.slow
def test_bad_value_in_the_header_costs_that_member(tmp_path, value):
    events = [good(i) for i in range(N)]
    head = b'"zz_top": ' + value + b", "
    info = b'"distributedInfo": {"rank": 3, "zz": ' + value + b', "world_size": 4}'
    text = b'{' + head + b'"schemaVersion": 1, ' + info + b', "traceEvents": [' + b", ".join(events) + b"]}"
    con = load(put(tmp_path, text, "trace.json"), tmp_path / "s.duckdb")
    assert rows(con, "SELECT rank, world_size FROM ranks") == [{"rank": 3, "world_size": 4}]
    assert scalar(con, "SELECT count(*) FROM events") == N
    found = [i["what"] for i in issues(con)]
    assert any("'distributedInfo.zz' unreadable" in w for w in found), found
    assert any("key traceparse does not read" in w for w in found), found


# --- 3. a null duration is unknown, everywhere ------------------------------------------------------

@pytest.mark.slow
def test_null_duration_loads_counted_and_analyzes(tmp_path):
    evs = [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        x("ProfilerStep#2", 1000, None, cat="user_annotation"),
        x("aten::mm", 10, None),
        x("nccl:all_reduce", 20, None, cat="user_annotation"),
        x("record_param_comms", 21, 5, **{"Collective name": "allreduce", "In msg nelems": 4, "dtype": "Float"}),
        x("ncclDevKernel_AllReduce_Sum_f32", 30, None, cat="kernel", pid=0, tid=7, correlation=1),
        x("aten::add", 1100, 5),
    ]
    evs[2].pop("dur")
    text = raw_trace([dumps(e).encode() for e in evs])
    f = put(tmp_path, text)
    con = load(f, tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == len(evs)
    assert scalar(con, "SELECT count(*) FROM events WHERE dur_ns IS NULL") == 4
    assert rows(con, "SELECT step, dur_ns FROM steps") == [{"step": 1, "dur_ns": 1_000_000}]
    assert the_issue(con, "without a duration (dur missing or null)")["count"] == 4
    assert the_issue(con, "ProfilerStep#N", "without a duration")["count"] == 1
    for fmt in ("json", "text", "html"):
        r = cli("analyze", f, "--no-cache", "--format", fmt)
        assert r.exit_code == 0, r.output[-2000:]


# --- 4. numbers out of range: null and counted (ids), not a step (step numbers) -------------------------

@pytest.mark.parametrize("field, value", [
    ("pid", b"9223372036854775808"), ("tid", b'"1e400"'), ("pid", b'"inf"'), ("tid", b"-9223372036854775809"),
    ("pid", b'"nan"'), ("tid", b"99999999999999999999999"), ("pid", b'"9223372036854775808"'), ("tid", b"9.3e18"),
])
@pytest.mark.slow
def test_pid_tid_out_of_range_are_null(tmp_path, field, value):
    bad = good(10).replace(f'"{field}": 1'.encode(), f'"{field}": '.encode() + value)
    con = load(put(tmp_path, with_bad(bad)), tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == N
    assert scalar(con, f"SELECT {field} FROM events WHERE name = 'op10'") is None
    assert the_issue(con, f"'{field}' out of range", "read as null")["count"] == 1


@pytest.mark.parametrize("key, column", [("External id", "external_id"), ("correlation", "correlation"),
                                         ("stream", "stream"), ("device", "device")])
@pytest.mark.parametrize("value", [b"18446744073709551616", b'"inf"', b'"-1e400"', b"-9223372036854775809"])
@pytest.mark.slow
def test_arg_ids_out_of_range_are_null(tmp_path, key, column, value):
    bad = good(10).replace(b'{"External id": 10}', b'{"' + key.encode() + b'": ' + value + b"}")
    con = load(put(tmp_path, with_bad(bad)), tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == N
    assert scalar(con, f"SELECT {column} FROM events WHERE name = 'op10'") is None
    assert the_issue(con, f"'args.{key}' out of range")["count"] == 1


def rpc(ts, **args):
    return dumps(x("record_param_comms", ts, 5, **{"Collective name": "allreduce", "dtype": "Float", **args})).encode()


@pytest.mark.slow
def test_comm_args_out_of_range(tmp_path):
    events = [good(i) for i in range(N)]
    events[10] = rpc(1100, **{"In msg nelems": 1 << 60, "Out msg nelems": 4, "Group size": 1 << 40, "Seq": 1 << 64,
                              "Global rank start": 0, "Global rank stride": 1 << 33})
    # within int32 but not a group of this job: 2^30 ranks from start/stride are not expanded (guard in derive.sql)
    events[11] = rpc(1110, **{"In msg nelems": 4, "Group size": 1 << 30, "Global rank start": 0, "Global rank stride": 1})
    events[12] = rpc(1120, **{"In msg nelems": 4, "Group size": 2, "Global rank start": 2, "Global rank stride": 1})
    f = put(tmp_path, raw_trace(events, world_size=4))
    con = load(f, tmp_path / "s.duckdb")
    for label in ("In msg nelems", "Group size", "Seq", "Global rank stride"):
        assert the_issue(con, f"'args.{label}' out of range")["count"] == 1
    assert rows(con, "SELECT in_nelems, out_nelems, group_size, seq FROM comm_args ORDER BY ev_id") == [
        {"in_nelems": None, "out_nelems": 4, "group_size": None, "seq": None},
        {"in_nelems": 4, "out_nelems": None, "group_size": 1 << 30, "seq": None},
        {"in_nelems": 4, "out_nelems": None, "group_size": 2, "seq": None}]
    assert rows(con, "SELECT group_ranks, group_source FROM comm_ops ORDER BY op_id") == [
        {"group_ranks": None, "group_source": None}, {"group_ranks": None, "group_source": None},
        {"group_ranks": [2, 3], "group_source": "global rank start/stride"}]
    assert cli("analyze", f, "--no-cache", "--format", "json").exit_code == 0


@pytest.mark.parametrize("number", ["99999999999999999999", "9223372036854775808", "abc", "", "-1", "9" * 400])
@pytest.mark.slow
def test_step_number_out_of_range_is_not_a_step(tmp_path, number):
    events = [good(i) for i in range(N)]
    events[0] = dumps(x("ProfilerStep#1", 0, 100, cat="user_annotation")).encode()
    events[5] = dumps(x(f"ProfilerStep#{number}", 200, 100, cat="user_annotation")).encode()
    f = put(tmp_path, raw_trace(events))
    con = load(f, tmp_path / "s.duckdb")
    assert rows(con, "SELECT step FROM steps") == [{"step": 1}]
    assert the_issue(con, "without a step number below 2^63")["count"] == 1
    assert cli("analyze", f, "--no-cache", "--format", "json").exit_code == 0


def test_memory_values_out_of_range(tmp_path):
    mem = (b'{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1005, "args": '
           b'{"Bytes": 2305843009213693952, "Total Allocated": "inf", "Total Reserved": 5, "Device Id": 0, '
           b'"Device Type": 18446744073709551616}}')
    con = load(put(tmp_path, raw_trace([good(i) for i in range(N)] + [mem])), tmp_path / "s.duckdb")
    assert rows(con, "SELECT bytes, total_allocated, total_reserved, device_type FROM memory") == [
        {"bytes": None, "total_allocated": None, "total_reserved": 5, "device_type": None}]
    for label in ("Bytes", "Total Allocated", "Device Type"):
        the_issue(con, f"'args.{label}' out of range")


@pytest.mark.slow
def test_base_time_plus_timestamps_beyond_range(tmp_path):
    events = [good(i).replace(b'"ts": %d' % (1000 + 10 * i), b'"ts": 1700000000000000') for i in range(N)]
    text = raw_trace(events, tail=b', "baseTimeNanoseconds": %d' % ((1 << 62) - 10))
    f = put(tmp_path, text)
    con = load(f, tmp_path / "s.duckdb")
    assert rows(con, "SELECT base_time_ns, clock_offset_ns FROM ranks") == [{"base_time_ns": None, "clock_offset_ns": 0}]
    the_issue(con, "baseTimeNanoseconds", "beyond 2^62")
    assert cli("analyze", f, "--no-cache", "--format", "json").exit_code == 0


# --- 5. nesting deeper than the decoder goes ----------------------------------------------------------

def nested(depth: int, kind: str) -> bytes:
    if kind == "array":
        return b"[" * depth + b"]" * depth
    if kind == "object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b'[{"a":' * (depth // 2) + b"0" + b"}]" * (depth // 2)


@pytest.mark.parametrize("kind", ["array", "object", "mixed"])
@pytest.mark.parametrize("where", ["event key never read", "args key never read", "args.Input Dims", "name",
                                   "element", "header before", "header after", "distributedInfo"])
@pytest.mark.slow
def test_deep_nesting(tmp_path, where, kind):
    deep = nested(5000, kind)
    events = [good(i) for i in range(N)]
    head = tail = b""
    if where == "event key never read":
        events[10] = events[10][:-1] + b', "zz": ' + deep + b"}"
    elif where == "args key never read":
        events[10] = events[10].replace(b'{"External id": 10}', b'{"External id": 10, "zz": ' + deep + b"}")
    elif where == "args.Input Dims":
        events[10] = events[10].replace(b'{"External id": 10}', b'{"External id": 10, "Input Dims": ' + deep + b"}")
    elif where == "name":
        events[10] = events[10].replace(b'"op10"', deep)
    elif where == "element":
        events.insert(10, deep)
    elif where == "header before":
        head = b'"zz": ' + deep + b", "
    elif where == "header after":
        tail = b', "zz": ' + deep
    else:
        head = b'"distributedInfo": {"zz": ' + deep + b', "rank": 3, "world_size": 4}, '
    text = raw_trace(events, tail=tail, head=head, rank=3, world_size=4)
    con = load(put(tmp_path, text, "trace.json"), tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == N
    assert rows(con, "SELECT rank FROM ranks") == [{"rank": 3}]
    if where == "element" and kind != "object":
        the_issue(con, "not loaded: an array, not an event object")
    else:
        the_issue(con, "nested deeper than")


@pytest.mark.slow
def test_a_million_levels_cost_linear_time(tmp_path):
    events = [good(i) for i in range(N)]
    events[10] = events[10][:-1] + b', "zz": ' + nested(1_000_000, "mixed") + b"}"
    events.insert(3, nested(1_000_000, "array"))
    t = time.perf_counter()
    con = load(put(tmp_path, raw_trace(events)), tmp_path / "s.duckdb")
    assert time.perf_counter() - t < 60
    assert scalar(con, "SELECT count(*) FROM events") == N


# --- 6. layout: linear time, bounded memory --------------------------------------------------------

def gzip_with_run(before: bytes, fill: bytes, size: int, after: bytes) -> bytes:
    """gzip of before + fill repeated to ``size`` bytes + after, without holding the run (full flushes
    make each 1 MiB piece compress alike, so its compressed bytes are repeated)."""
    piece = (fill * (MB // len(fill) + 1))[:MB]
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(before) + c.flush(zlib.Z_FULL_FLUSH)
    first = c.compress(piece) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(piece) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.compress(after) + c.flush()
    n = size // MB
    crc = zlib.crc32(before)
    for _ in range(n):
        crc = zlib.crc32(piece, crc)
    crc = zlib.crc32(after, crc)
    total = len(before) + n * MB + len(after)
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + head + first + again * (n - 1) + tail
            + (crc & 0xFFFFFFFF).to_bytes(4, "little") + (total & 0xFFFFFFFF).to_bytes(4, "little"))


# The child reports its own peak (VmHWM of its address space): the rusage of a child forked from a large
# test process counts the parent's pages it started with.
PARSE = ("import sys, json, re; from traceparse.ingest.rank import parse_rank_file; "
         "s = parse_rank_file(sys.argv[1], sys.argv[2]); "
         "hwm = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)); "
         "print(json.dumps([[s['n_complete'], s['rank'], s['issues']], hwm]))")


def parse_in_child(path: Path, out: Path):
    """Parse in a child process: (summary bits, seconds, peak RSS in MB of that process alone)."""
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", PARSE, str(path), str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    stdout = p.stdout.read()
    stderr = p.stderr.read()
    p.wait()
    assert p.returncode == 0, stderr.decode()[-2000:]
    import json

    summary, hwm_kb = json.loads(stdout)
    return summary, time.perf_counter() - t, hwm_kb / 1024


def tiny() -> bytes:
    return raw_trace([good(i) for i in range(N)], rank=0)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak RSS of a child needs /proc")
@pytest.mark.parametrize("where", ["between events", "inside an event", "before the first key", "after the array"])
@pytest.mark.slow
def test_gzip_bomb_of_128_mib_is_linear_and_bounded(tmp_path, where):
    """128 MiB inflated from ~130 KiB: the old parser held it (twice) and re-scanned it per block."""
    data = tiny()
    fill = b" \n"
    if where == "between events":
        cut = data.index(b"op5") + 40
        cut = data.index(b",", cut) + 1
    elif where == "inside an event":
        cut = data.index(b'"ts": 1070')
    elif where == "before the first key":
        cut = 1
    else:
        cut = data.rindex(b"]") + 1
    f = tmp_path / "rank0.json.gz"
    f.write_bytes(gzip_with_run(data[:cut], fill, 128 * MB, data[cut:]))
    assert f.stat().st_size < 300_000
    (n_complete, rank, found), seconds, rss = parse_in_child(f, tmp_path / "out")
    assert (n_complete, rank) == (N, 0), found
    assert rss < 280, rss
    assert seconds < 120, seconds


def test_event_larger_than_the_limit_refuses_the_file_in_one_line(tmp_path, monkeypatch):
    # (scaled down: blocks of 64 KiB, the scanner after 128 KiB without a boundary, a limit of 1 MiB)
    monkeypatch.setattr(stream, "BLOCK", 64 << 10)
    monkeypatch.setattr(split, "BATCH", 64 << 10)
    monkeypatch.setattr(split, "MAX_FAST", 128 << 10)
    monkeypatch.setattr(split, "MAX_VALUE", 1 * MB)
    events = [good(i) for i in range(N)]
    events[10] = good(10, name="n" * (2 * MB))
    f = put(tmp_path, raw_trace(events))
    with pytest.raises(TraceError) as ei:
        load_run([f], db=tmp_path / "s.duckdb")
    msg = str(ei.value)
    assert str(f) in msg and "larger than 1 MiB" in msg and "\n" not in msg
    assert not (tmp_path / "s.duckdb").exists()


@pytest.mark.slow
def test_no_boundary_for_a_long_stretch(tmp_path):
    """A 20 MiB array under a key never read and a 12 MiB name: nothing to guess a boundary from."""
    events = [good(i) for i in range(N)]
    events[4] = events[4][:-1] + b', "zz": [' + b"0," * (10 * MB) + b"0]}"
    events[9] = good(9, name="n" * (12 * MB))
    con = load(put(tmp_path, raw_trace(events)), tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == N
    assert scalar(con, "SELECT length(name) FROM events WHERE ev_id = 9") == 12 * MB
    assert issues(con) == []


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak RSS of a child needs /proc")
@pytest.mark.slow
def test_many_tiny_events_bounded(tmp_path):
    """Millions of '{}' elements: batches are cut by object count too, so decoded structs stay bounded."""
    data = tiny()
    close = data.rindex(b"]")
    f = tmp_path / "rank0.json.gz"
    f.write_bytes(gzip_with_run(data[:close], b",{}", 12 * MB, data[close:]))
    (n_complete, _, _), _, rss = parse_in_child(f, tmp_path / "out")
    assert n_complete == N
    assert rss < 450, rss


def test_every_path_of_the_splitter_with_small_batches(tmp_path, monkeypatch):
    """Batches of 4 KiB: fast, guided, exact and scan paths and their hand-overs, then a cut at many bytes."""
    monkeypatch.setattr(split, "BATCH", 4096)
    monkeypatch.setattr(split, "MAX_FAST", 8192)
    monkeypatch.setattr(split, "GROUP", 4)
    names, events = [], []
    for i in range(300):
        name = [f"op{i}", f"a}},{{b{i}", f'q\\"}},{{\\"{i}', f"x[{i}]{{"][i % 4]
        ev = good(i, name=name)
        if i % 37 == 5:
            ev = ev[:-1] + b', "zz": NaN}'
        if i % 53 == 7:
            ev = ev + b" " * 20000
        if i % 61 == 9:
            name = "N" * 30000
            ev = good(i, name=name)
        names.append(name)
        events.append(ev)
    events.insert(100, b"5")
    text = raw_trace(events, tail=b', "baseTimeNanoseconds": 5')
    f = put(tmp_path, text)
    sp = TraceSplitter(f)
    got = [e for batch in sp.batches() for e in batch]
    assert [e.name for e in got] == names
    assert sp.salvage is None and sp.header.baseTimeNanoseconds == 5
    n_nan = sum(1 for i in range(300) if i % 37 == 5 and i % 61 != 9)
    assert sp.problems == {"event(s) with an unreadable value under a key traceparse does not read "
                           "(NaN or Infinity (not JSON)): event kept": n_nan,
                           "event(s) in traceEvents not loaded: a number, not an event object": 1}
    # a cut anywhere in the events keeps exactly the events before it
    start = text.index(b"[") + 1
    ends = []
    pos = start
    for ev in events:
        pos = text.index(ev, pos)
        ends.append(pos + len(ev.rstrip()))  # an event followed by blanks is whole before them
        pos += len(ev)
    for cut in range(start + 1, len(text) - 30, 2999):
        f.write_bytes(text[:cut])
        sp = TraceSplitter(f)
        got = [e for batch in sp.batches() for e in batch]
        whole = sum(1 for k, e in enumerate(ends) if e <= cut and events[k] != b"5")
        assert len(got) == whole, cut
        assert sp.salvage is not None and "cut off inside traceEvents" in sp.salvage.reason


# --- several files in parallel ---------------------------------------------------------------------

def test_damage_in_parallel_workers_is_counted_per_file(tmp_path):
    files = [put(tmp_path, with_bad(bad, rank=r, world_size=3), f"rank{r}.json") for r, bad in
             enumerate([good(10)[:-1] + b', "zz": NaN}', good(10).replace(b'"op10"', b'"op\xff"'), good(10)])]
    con = load(files, tmp_path / "s.duckdb", workers=3)
    assert scalar(con, "SELECT count(*) FROM events") == 3 * N
    found = rows(con, "SELECT file, what FROM load_issues ORDER BY file")
    assert [(Path(i["file"]).name, "NaN" in i["what"] or "UTF-8" in i["what"]) for i in found] == [
        ("rank0.json", True), ("rank1.json", True)]


@pytest.mark.slow
def test_error_in_a_worker_reaches_the_user_as_one_line(tmp_path):
    files = [put(tmp_path, with_bad(good(10), rank=r, world_size=3), f"rank{r}.json") for r in range(2)]
    bad = put(tmp_path, b'{"schemaVersion": 1, "distributedInfo": {"rank": 2}}', "rank2.json")
    with pytest.raises(TraceError) as ei:
        load_run(files + [bad], db=tmp_path / "s.duckdb", workers=3)
    assert ei.value.path == str(bad) and "traceEvents" in str(ei.value) and "\n" not in str(ei.value)
    r = cli("analyze", *files, bad, "--no-cache")
    lines = [ln for ln in r.output.splitlines() if ln.startswith("traceparse: error")]
    assert r.exit_code == 2 and len(lines) == 1 and str(bad) in lines[0], r.output
    again = pickle.loads(pickle.dumps(ei.value))
    assert (type(again), again.path, again.problem) == (TraceError, ei.value.path, ei.value.problem)


def test_gzip_damaged_after_a_complete_json_is_said(tmp_path):
    f = tmp_path / "rank0.json.gz"
    f.write_bytes(gzip.compress(tiny()) + b"\x1f\x8b\x08\x00garbage")
    con = load(f, tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == N
    (i,) = issues(con)
    assert i["what"].startswith("1 gzip stream ends early") and i["what"].endswith("after the end of the JSON: nothing lost")


def test_text_after_the_json_is_said(tmp_path):
    con = load(put(tmp_path, tiny() + b"\n}} trailing"), tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == N
    the_issue(con, "text after the end of the JSON")


@pytest.mark.slow
def test_cut_off_inside_the_trailer_keeps_the_members_before(tmp_path):
    events = [good(i) for i in range(N)]
    text = (b'{"schemaVersion": 1, "traceEvents": [' + b", ".join(events)
            + b'], "distributedInfo": {"rank": 3}, "traceName": "abcdef')
    con = load(put(tmp_path, text, "trace.json"), tmp_path / "s.duckdb")
    assert rows(con, "SELECT rank FROM ranks") == [{"rank": 3}]
    assert scalar(con, "SELECT count(*) FROM events") == N
    (i,) = issues(con)
    assert "cut off after traceEvents" in i["what"] and "0 partial" in i["what"]


def test_write_helper_still_round_trips(tmp_path):
    # the hand-made traces of the other tests still load untouched (no new load issue)
    f = write(tmp_path / "rank0.json", {"traceEvents": [x("a", 1, 1), x("b", 2, 1)], "distributedInfo": {"rank": 0}})
    con = load(f, tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == 2
    assert issues(con) == []
