"""Tiny hand-written traces covering the shapes of Kineto JSON that traceparse must read.

Every expected value below is read off the hand-written input.
"""

from __future__ import annotations

import json

import pytest
from traces import Num, dumps, load, rows, scalar, step, thread_name, trace, write, x


def events_of(con):
    return rows(con, "SELECT name, cat, pid, tid, ts_ns, dur_ns, step FROM events ORDER BY ev_id")


# --- timestamps -----------------------------------------------------------------------

def test_integer_microseconds(tmp_path):
    f = write(tmp_path / "rank0.json", trace([x("a", 1000, 5), x("b", 1712195495406752, 1)]))
    con = load(f, tmp_path / "s.duckdb")
    assert [(e["name"], e["ts_ns"], e["dur_ns"]) for e in events_of(con)] == [
        ("a", 1_000_000, 5_000),
        ("b", 1_712_195_495_406_752_000, 1_000),
    ]


def test_float_microseconds_keep_nanosecond_fractions(tmp_path):
    # float64 cannot hold 1712195495406752.123: the loader must read the JSON text exactly
    assert float("1712195495406752.123") * 1000 != 1712195495406752123
    evs = [
        x("a", Num("1712195495406752.123"), Num("1.5")),
        x("b", Num("1712195495406752.999"), Num("0.001")),
        x("c", Num("1712195495406753.0"), Num("2")),
        x("d", Num("7.5e2"), Num("1E1")),
    ]
    f = write(tmp_path / "rank0.json", trace(evs))
    con = load(f, tmp_path / "s.duckdb")
    assert [(e["name"], e["ts_ns"], e["dur_ns"]) for e in events_of(con)] == [
        ("a", 1712195495406752123, 1500),
        ("b", 1712195495406752999, 1),
        ("c", 1712195495406753000, 2000),
        ("d", 750_000, 10_000),
    ]


def test_timestamps_relative_to_base_time(tmp_path):
    base = 1_711_964_646_000_000_000
    evs = [x("a", Num("4458676522690.655"), Num("18.404")), x("b", 12, 3)]
    f = write(tmp_path / "rank0.json", trace(evs, base=base))
    con = load(f, tmp_path / "s.duckdb")
    assert [(e["ts_ns"], e["dur_ns"]) for e in events_of(con)] == [
        (base + 4458676522690655, 18404),
        (base + 12000, 3000),
    ]
    r = rows(con, "SELECT base_time_ns, clock_offset_ns FROM ranks")[0]
    assert r == {"base_time_ns": base, "clock_offset_ns": base}


# --- file shapes ----------------------------------------------------------------------

SIMPLE = [
    thread_name(1, 1, "main"),
    x("aten::mm", 100, 10, args={"External id": 3}),
    x("aten::add", 120, 5),
    x("kern", 130, 4, cat="kernel", pid=0, tid=7, correlation=9, stream=7, device=0),
]


def _simple_rows(con):
    return [(e["name"], e["cat"], e["pid"], e["tid"], e["ts_ns"], e["dur_ns"]) for e in events_of(con)]


SIMPLE_ROWS = [
    ("aten::mm", "cpu_op", 1, 1, 100_000, 10_000),
    ("aten::add", "cpu_op", 1, 1, 120_000, 5_000),
    ("kern", "kernel", 0, 7, 130_000, 4_000),
]


def test_bare_array_of_events(tmp_path):
    f = write(tmp_path / "rank0.json", SIMPLE)
    con = load(f, tmp_path / "s.duckdb")
    assert _simple_rows(con) == SIMPLE_ROWS
    r = rows(con, "SELECT rank, rank_source, world_size, n_events, n_complete FROM ranks")[0]
    assert r == {"rank": 0, "rank_source": "file name", "world_size": None, "n_events": 4, "n_complete": 3}


@pytest.mark.parametrize("indent", [None, 2, "\t"], ids=["minified", "indented", "tabs"])
@pytest.mark.slow
def test_minified_and_indented_json_load_the_same(tmp_path, indent):
    f = write(tmp_path / "t.json", trace(SIMPLE, rank=0), indent=indent)
    con = load(f, tmp_path / "s.duckdb")
    assert _simple_rows(con) == SIMPLE_ROWS
    assert rows(con, "SELECT rank, external_id, correlation, stream, device, thread_name FROM events ORDER BY ev_id") == [
        {"rank": 0, "external_id": 3, "correlation": None, "stream": None, "device": None, "thread_name": "main"},
        {"rank": 0, "external_id": None, "correlation": None, "stream": None, "device": None, "thread_name": "main"},
        {"rank": 0, "external_id": None, "correlation": 9, "stream": 7, "device": 0, "thread_name": None},
    ]


def test_header_after_events(tmp_path):
    # key order is not fixed: distributedInfo may come after traceEvents
    text = '{"traceEvents": ' + json.dumps(SIMPLE) + ', "distributedInfo": {"rank": 5, "world_size": 8}}'
    f = tmp_path / "t.json"
    f.write_text(text)
    con = load(f, tmp_path / "s.duckdb")
    assert _simple_rows(con) == SIMPLE_ROWS
    assert rows(con, "SELECT rank, world_size FROM ranks") == [{"rank": 5, "world_size": 8}]


def test_gzipped_trace(tmp_path):
    f = write(tmp_path / "t.json.gz", trace(SIMPLE, rank=2, world_size=4))
    assert f.read_bytes()[:2] == b"\x1f\x8b"
    con = load(f, tmp_path / "s.duckdb")
    assert _simple_rows(con) == SIMPLE_ROWS
    assert rows(con, "SELECT rank, world_size FROM ranks") == [{"rank": 2, "world_size": 4}]


def test_folder_input_skips_non_trace_json(tmp_path):
    run = tmp_path / "run"
    write(run / "rank0.json.gz", trace([x("a", 1, 1)], rank=0, world_size=2))
    write(run / "sub" / "rank1.json", trace([x("b", 2, 1), x("c", 3, 1)], rank=1, world_size=2))
    (run / "truth.json").write_text(json.dumps({"world_size": 2, "comm": [{"op": "all_reduce", "count": 3}]}))
    (run / "notes.txt").write_text("not a trace")
    (run / "rank2.json").write_text('{"schemaVersion": 1, "deviceProperties": [')  # a trace cut before its events
    con = load([run], tmp_path / "s.duckdb")
    assert rows(con, "SELECT rank, n_complete FROM ranks ORDER BY rank") == [
        {"rank": 0, "n_complete": 1},
        {"rank": 1, "n_complete": 2},
    ]
    assert sorted(r[0] for r in con.execute("SELECT file FROM ranks").fetchall()) == sorted(
        str(p.resolve()) for p in (run / "rank0.json.gz", run / "sub" / "rank1.json")
    )
    # a JSON document without trace events is evidently no trace: skipped, never loaded, and not a load issue; a file
    # that is not JSON (a trace cut short) is skipped and said (info)
    assert rows(con, "SELECT file, severity, what FROM load_issues") == [
        {"file": str((run / "rank2.json").resolve()), "severity": "info",
         "what": "skipped: no trace events in its first 4 MB"}]


@pytest.mark.parametrize("name", ["rank-3.json", "rank3.json", "worker3.json", "job.worker_3.pt.trace.json.gz"])
@pytest.mark.slow
def test_rank_from_file_name(tmp_path, name):
    f = write(tmp_path / name, trace([x("a", 1, 1)], rank=None, world_size=4))
    con = load(f, tmp_path / "s.duckdb")
    assert rows(con, "SELECT rank, rank_source FROM ranks") == [{"rank": 3, "rank_source": "file name"}]
    issues = rows(con, "SELECT file, severity, what FROM load_issues ORDER BY file NULLS LAST")
    assert [(i["file"], i["severity"]) for i in issues] == [(str(f.resolve()), "warning"), (None, "info")]
    assert "file name" in issues[0]["what"]
    assert issues[1]["what"].startswith("1 of 4 ranks loaded; missing ranks: 0, 1, 2")


def test_ranks_from_file_names_of_several_files(tmp_path):
    files = [write(tmp_path / f"rank{r}.json", trace([x("a", 1, 1)] * (r + 1), rank=None)) for r in (1, 0)]
    con = load(files, tmp_path / "s.duckdb")
    assert rows(con, "SELECT rank, n_complete FROM ranks ORDER BY rank") == [
        {"rank": 0, "n_complete": 1},
        {"rank": 1, "n_complete": 2},
    ]
    assert scalar(con, "SELECT count(*) FROM load_issues WHERE severity = 'warning'") == 2


# --- communication --------------------------------------------------------------------

def test_gloo_collective_from_shapes(tmp_path):
    evs = [
        step(1, 1000, 1000),
        x("c10d::allreduce_", 1100, 50, args={
            "Input Dims": [[[4, 8]], [], [], [], [], []],
            "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"],
            "Concrete Inputs": ["", "", "", "", "0", "-1"],
        }),
        x("gloo:all_reduce", 1120, 30, cat="user_annotation", tid=2, args={
            "Input Dims": [[4, 8]],
            "Input type": ["float"],
        }),
    ]
    f = write(tmp_path / "rank0.json", trace(evs, rank=0, world_size=2, info={"backend": "gloo"}))
    con = load(f, tmp_path / "s.duckdb")
    ops = rows(con, "SELECT * FROM comm_ops")
    assert len(ops) == 1
    op = ops[0]
    assert (op["op"], op["source"], op["name"]) == ("all_reduce", "c10d", "c10d::allreduce_")
    assert (op["in_nelems"], op["bytes_in"]) == (32, 4 * 8 * 4)
    assert (op["host_ts_ns"], op["host_dur_ns"], op["tid"]) == (1_100_000, 50_000, 1)
    assert (op["exec_ts_ns"], op["exec_dur_ns"], op["exec_stream"]) == (1_120_000, 30_000, 2)
    assert op["kernel"] == "gloo:all_reduce"
    assert op["step"] == 1


def _nccl_allreduce(ts0=1000, corr=7, nelems=1024, ranks="[0, 1]"):
    return [
        x("c10d::allreduce_", ts0, 100, args={
            "Input Dims": [[[nelems]], [], [], [], [], []],
            "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"],
        }),
        x("record_param_comms", ts0 + 10, 80, args={
            "Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
            "dtype": "Float", "Group size": 2, "Process Group Name": "0",
            "Process Group Description": "default_pg", "Process Group Ranks": ranks,
        }),
        x("nccl:all_reduce", ts0 + 20, 60, cat="user_annotation"),
        x("cudaLaunchKernel", ts0 + 30, 10, cat="cuda_runtime", correlation=corr),
        x("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ts0 + 200, 40,
          cat="kernel", pid=0, tid=7, correlation=corr, stream=7, device=0),
    ]


def test_nccl_collective_is_one_operation(tmp_path):
    evs = [step(3, 900, 1000)] + _nccl_allreduce()
    f = write(tmp_path / "rank0.json", trace(evs, rank=0, world_size=2, info={"backend": "nccl"}))
    con = load(f, tmp_path / "s.duckdb")
    ops = rows(con, "SELECT * FROM comm_ops")
    assert len(ops) == 1
    op = ops[0]
    assert (op["op"], op["source"]) == ("all_reduce", "record_param_comms")
    assert (op["dtype"], op["elem_bytes"], op["in_nelems"], op["out_nelems"]) == ("Float", 4, 1024, 1024)
    assert (op["bytes_in"], op["bytes_out"]) == (4096, 4096)
    assert (op["pg_name"], op["pg_desc"], op["group_size"], op["group_ranks"]) == ("0", "default_pg", 2, [0, 1])
    assert (op["host_ts_ns"], op["host_dur_ns"]) == (1_000_000, 100_000)
    assert (op["exec_ts_ns"], op["exec_dur_ns"], op["exec_stream"]) == (1_200_000, 40_000, 7)
    assert op["kernel"].startswith("ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    assert (op["step"], op["group_index"]) == (3, 0)


def test_nccl_collectives_in_order_within_group(tmp_path):
    evs = _nccl_allreduce(1000, 7, 1024) + _nccl_allreduce(2000, 8, 256)
    f = write(tmp_path / "rank1.json", trace(evs, rank=1, world_size=2))
    con = load(f, tmp_path / "s.duckdb")
    got = rows(con, "SELECT group_index, bytes_in, exec_ts_ns FROM comm_ops ORDER BY host_ts_ns")
    assert got == [
        {"group_index": 0, "bytes_in": 4096, "exec_ts_ns": 1_200_000},
        {"group_index": 1, "bytes_in": 1024, "exec_ts_ns": 2_200_000},
    ]


# --- steps ----------------------------------------------------------------------------

def test_profiler_steps_and_event_step(tmp_path):
    evs = [
        x("before", 50, 10),
        step(7, 100, 100),
        x("in7", 100, 10),
        x("in7-late", 199, 50),  # starts inside step 7, ends after it
        step(8, 200, 100),
        x("in8", 250, 10),
        x("gpu-in8", 260, 5, cat="kernel", pid=0, tid=7),
        x("ProfilerStep#8", 205, 80, cat="gpu_user_annotation", pid=0, tid=7),  # the GPU copy is no step
        x("after", 300, 10),
    ]
    f = write(tmp_path / "rank0.json", trace(evs))
    con = load(f, tmp_path / "s.duckdb")
    assert rows(con, "SELECT step, start_ns, end_ns, dur_ns FROM steps ORDER BY step") == [
        {"step": 7, "start_ns": 100_000, "end_ns": 200_000, "dur_ns": 100_000},
        {"step": 8, "start_ns": 200_000, "end_ns": 300_000, "dur_ns": 100_000},
    ]
    got = {e["name"] + ("/" + e["cat"] if e["cat"].startswith("gpu") else ""): e["step"] for e in events_of(con)}
    assert got == {
        "before": None, "ProfilerStep#7": 7, "in7": 7, "in7-late": 7, "ProfilerStep#8": 8,
        "in8": 8, "gpu-in8": 8, "ProfilerStep#8/gpu_user_annotation": 8, "after": None,
    }


def test_nccl_send_peer_from_c10d_op(tmp_path):
    evs = [
        x("c10d::send", 1000, 100, args={
            "Input Dims": [[[16]], [], [], []], "Input type": ["TensorList", "", "Int", "Int"],
            "Concrete Inputs": ["", "", "3", "0"],
        }),
        x("record_param_comms", 1010, 80, args={
            "Collective name": "send", "In msg nelems": 16, "Out msg nelems": 16, "dtype": "Float",
            "Group size": 4, "Process Group Name": "0", "Process Group Ranks": "[0, 1, 2, 3]",
        }),
        x("cudaLaunchKernel", 1030, 10, cat="cuda_runtime", correlation=7),
        x("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 1200, 40, cat="kernel", pid=0, tid=7,
          correlation=7, stream=7),
    ]
    f = write(tmp_path / "rank0.json", trace(evs, rank=0, world_size=4))
    con = load(f, tmp_path / "s.duckdb")
    ops = rows(con, "SELECT op, bytes_in, group_ranks, peer, exec_ts_ns FROM comm_ops")
    assert ops == [{"op": "send", "bytes_in": 64, "group_ranks": [0, 1, 2, 3], "peer": 3, "exec_ts_ns": 1_200_000}]


@pytest.mark.slow
def test_nested_record_param_comms_is_one_operation(tmp_path):
    # a coalesced all-gather: one outer record_param_comms around one per tensor
    def rpc(ts, dur, name, n_in):
        return x("record_param_comms", ts, dur, args={
            "Collective name": name, "In msg nelems": n_in, "Out msg nelems": 4 * n_in, "dtype": "BFloat16",
            "Group size": 4, "Process Group Ranks": "[0, 1, 2, 3]",
        })

    evs = [
        rpc(1000, 200, "allgather_into_tensor_coalesced", 32),
        rpc(1010, 20, "_allgather_base", 16),
        rpc(1040, 20, "_allgather_base", 16),
        x("cudaLaunchKernel", 1100, 10, cat="cuda_runtime", correlation=9),
        x("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 1300, 40, cat="kernel", pid=0,
          tid=7, correlation=9, stream=7),
    ]
    f = write(tmp_path / "rank0.json", trace(evs, rank=0, world_size=4))
    con = load(f, tmp_path / "s.duckdb")
    assert rows(con, "SELECT op, bytes_in, bytes_out, exec_ts_ns FROM comm_ops") == [
        {"op": "all_gather", "bytes_in": 64, "bytes_out": 256, "exec_ts_ns": 1_300_000}
    ]


def test_kernel_linked_by_external_id(tmp_path):
    evs = [
        x("record_param_comms", 1000, 100, args={
            "External id": 42, "Collective name": "allreduce", "In msg nelems": 8, "Out msg nelems": 8,
            "dtype": "BFloat16", "Group size": 2,
        }),
        x("ncclKernel_AllReduce_RING_LL_Sum_bfloat16(ncclWorkElem)", 1200, 40, cat="kernel", pid=0, tid=7,
          args={"External id": 42, "stream": 7}),
    ]
    f = write(tmp_path / "rank0.json", trace(evs, rank=0, world_size=2))
    con = load(f, tmp_path / "s.duckdb")
    assert rows(con, "SELECT op, source, bytes_in, exec_ts_ns, exec_stream FROM comm_ops") == [
        {"op": "all_reduce", "source": "record_param_comms", "bytes_in": 16, "exec_ts_ns": 1_200_000, "exec_stream": 7}
    ]


def test_kernel_without_cpu_call_is_its_own_operation(tmp_path):
    evs = [
        x("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 1200, 40, cat="kernel",
          pid=0, tid=7, args={"stream": 7, "Collective name": "allreduce", "In msg nelems": 8, "Out msg nelems": 8,
                              "dtype": "BFloat16", "Group size": 2, "Process Group Ranks": "[0, 1]"}),
    ]
    f = write(tmp_path / "rank0.json", trace(evs, rank=0, world_size=2))
    con = load(f, tmp_path / "s.duckdb")
    assert rows(con, "SELECT op, source, bytes_in, group_ranks, host_ts_ns, exec_ts_ns FROM comm_ops") == [
        {"op": "all_reduce", "source": "kernel", "bytes_in": 16, "group_ranks": [0, 1], "host_ts_ns": None,
         "exec_ts_ns": 1_200_000}
    ]


# --- compression and odd containers ---------------------------------------------------

@pytest.mark.slow
def test_compression_detected_from_content_not_name(tmp_path):
    import gzip

    gz_named_json = tmp_path / "a" / "rank0.json"
    gz_named_json.parent.mkdir()
    gz_named_json.write_bytes(gzip.compress(dumps(trace(SIMPLE, rank=0)).encode()))
    plain_named_gz = tmp_path / "b" / "rank0.json.gz"
    plain_named_gz.parent.mkdir()
    plain_named_gz.write_text(dumps(trace(SIMPLE, rank=0)))
    for i, f in enumerate((gz_named_json, plain_named_gz)):
        con = load(f, tmp_path / f"s{i}.duckdb")
        assert _simple_rows(con) == SIMPLE_ROWS


def test_concatenated_gzip_members(tmp_path):
    import gzip

    text = dumps(trace(SIMPLE, rank=0)).encode()
    half = len(text) // 2
    f = tmp_path / "rank0.json.gz"
    f.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    con = load(f, tmp_path / "s.duckdb")
    assert _simple_rows(con) == SIMPLE_ROWS
    assert scalar(con, "SELECT count(*) FROM load_issues") == 0


def test_no_events(tmp_path):
    f = write(tmp_path / "rank0.json", trace([], rank=0))
    con = load(f, tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM events") == 0
    assert [r["severity"] for r in rows(con, "SELECT severity FROM load_issues")] == ["warning"]


def test_rank_number_wins_over_worker_number(tmp_path):
    from traceparse.ingest.rank import rank_from_name

    assert rank_from_name(tmp_path / "job-worker-3_rank12.json") == 12
    assert rank_from_name(tmp_path / "worker7.pt.trace.json.gz") == 7
    assert rank_from_name(tmp_path / "trace.json") is None
