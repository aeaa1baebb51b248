"""Sizes of communication operations on traces whose record_param_comms carry none.

On the public traces (fixtures/public_traces.py), every expected size is read here from the raw JSON with plain
gzip + json (the ``nccl:<op>`` annotation's "Input Dims"/"Input type", the enclosing c10d op's
shapes), never copied from traceparse's output; the tiny hand-written traces cover each source
of a size ('args', 'annotation shapes', 'c10d shapes', 'kernel args', 'peer ranks') and the load
issue left when there is none.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache

import pytest
from conftest import public_trace
from raw_trace import ns, read
from traces import load, rows, scalar, step, trace, write, x

CONTROL = "hta/trace_diff/control/control.json.gz"
TEST = "hta/trace_diff/test/test.json.gz"
NEG_QUEUE = "hta/negative_queue_length_values_check/rank0.json.gz"
DF_INDEX = "hta/df_index_resolver/df_index_resolver.json.gz"
SAMPLED = "hta/trace_filter/sampled_rank-0.json.gz"
RANK_NOT_FOUND = "hta/rank_unavailable/rank_not_found.json.gz"

# what an nccl:<op> annotation is; its recorded inputs are the collective's input tensors
ANNOTATION_OP = {"nccl:all_reduce": "all_reduce", "nccl:all_to_all": "all_to_all",
                 "nccl:_all_gather_base": "all_gather", "nccl:_reduce_scatter_base": "reduce_scatter"}
OUTPUT_IS_INPUT = {"all_reduce"}


@lru_cache(maxsize=None)
def raw_events(rel):
    return [e for e in read(public_trace(rel))["traceEvents"] if e.get("ph") == "X"]


def numel(shape):
    return math.prod(shape)


def expected_from_annotations(rel):
    """{(tid, annotation start ns): (op, in_nelems, out_nelems or None, dtype)} from the raw annotations,
    with the output from the enclosing c10d op's recorded output (its first argument) when there is one."""
    evs = raw_events(rel)
    c10d = [e for e in evs if e.get("cat") == "cpu_op" and e["name"].startswith("c10d::")]
    out = {}
    for e in evs:
        op = ANNOTATION_OP.get(e["name"])
        if op is None or e.get("cat") != "user_annotation":
            continue
        args = e["args"]
        dims, types = args["Input Dims"], args["Input type"]
        n_in = sum(numel(d) for d, t in zip(dims, types, strict=True) if t)
        dtype = next(t for t in types if t)
        start, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
        outer = [c for c in c10d if c["tid"] == e["tid"] and ns(c["ts"]) <= start and ns(c["ts"]) + ns(c["dur"]) >= end]
        n_out = n_in if op in OUTPUT_IS_INPUT else None
        if n_out is None and outer and outer[0]["args"]["Input type"][0] not in ("TensorList", ""):
            n_out = numel(outer[0]["args"]["Input Dims"][0])  # c10d::_allgather_base_/alltoall_base_(output, input, ...)
        out[(e["tid"], start)] = (op, n_in, n_out, dtype)
    return out


def store_ops(con):
    """{(tid, annotation start ns): row} for the store's operations: the nccl: event inside each call."""
    got = rows(con, """
        SELECT c.op, c.in_nelems, c.out_nelems, c.dtype, c.bytes_in, c.bytes_out, c.elem_bytes, c.size_source,
               e.tid, e.ts_ns - r.clock_offset_ns AS ann_ts
        FROM comm_ops c JOIN ranks r ON r.rank = c.rank
        JOIN events e ON e.rank = c.rank AND e.tid = c.tid AND e.name LIKE 'nccl:%'
                     AND e.ts_ns BETWEEN c.host_ts_ns AND c.host_ts_ns + c.host_dur_ns""")
    return {(r["tid"], r["ann_ts"]): r for r in got}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    cache = {}

    def get(rel):
        if rel not in cache:
            cache[rel] = load(public_trace(rel), tmp_path_factory.mktemp("sizes") / "s.duckdb")
        return cache[rel]

    return get


# --- the public traces ----------------------------------------------------------------

@pytest.mark.slow
def test_control_records_sizes_only_on_the_nccl_annotations():
    """What the next tests rest on: record_param_comms of the control trace carry no args at all, the c10d
    op records its tensor list as [] (no size), and every nccl: annotation has Input Dims."""
    evs = raw_events(CONTROL)
    rpc = [e for e in evs if e["name"] == "record_param_comms"]
    assert rpc and not any("In msg nelems" in e.get("args", {}) or "Input Dims" in e.get("args", {}) for e in rpc)
    c10d = [e for e in evs if e["name"].startswith("c10d::")]
    assert c10d and all(e["args"]["Input type"][0] == "TensorList" and e["args"]["Input Dims"][0] == [] for e in c10d)
    ann = [e for e in evs if e["name"].startswith("nccl:")]
    assert Counter(e["name"] for e in ann) == {"nccl:all_reduce": 18, "nccl:all_to_all": 42}
    assert all(e["args"]["Input Dims"] for e in ann)


@pytest.mark.parametrize("rel", [CONTROL, TEST, NEG_QUEUE, SAMPLED, RANK_NOT_FOUND])
@pytest.mark.slow
def test_sizes_equal_the_annotation_shapes(stores, rel):
    con = stores(rel)
    expected = expected_from_annotations(rel)
    got = store_ops(con)
    assert expected and set(got) == set(expected)
    for key, (op, n_in, n_out, dtype) in expected.items():
        r = got[key]
        assert (r["op"], r["in_nelems"], r["out_nelems"], r["dtype"]) == (op, n_in, n_out, dtype), key
        assert r["size_source"] == "annotation shapes"
        width = {"float": 4, "int": 4, "long": 8, "unsigned char": 1, "signed char": 1}[dtype]
        assert (r["elem_bytes"], r["bytes_in"]) == (width, n_in * width)
        assert r["bytes_out"] == (None if n_out is None else n_out * width)


def test_control_has_no_operation_without_size_now(stores):
    """Before: all 18 all-reduces and 42 all-to-alls had no size; every one now has its input's."""
    con = stores(CONTROL)
    assert rows(con, "SELECT op, count(*) AS n, count(bytes_in) AS sized FROM comm_ops GROUP BY op ORDER BY op") == [
        {"op": "all_reduce", "n": 18, "sized": 18},
        {"op": "all_to_all", "n": 42, "sized": 42},
    ]
    # an all-to-all's output is not recorded anywhere in this trace (its splits may differ): unknown
    assert scalar(con, "SELECT count(*) FROM comm_ops WHERE op = 'all_to_all' AND out_nelems IS NOT NULL") == 0
    assert scalar(con, "SELECT count(*) FROM load_issues WHERE file IS NOT NULL") == 0


@pytest.mark.slow
def test_zero_sized_all_to_all_is_zero_not_unknown(stores):
    """negative_queue records all-to-alls of 0 elements: a known 0, distinct from unknown."""
    zero = [k for k, v in expected_from_annotations(NEG_QUEUE).items() if v[1] == 0]
    assert zero
    got = store_ops(stores(NEG_QUEUE))
    assert all(got[k]["bytes_in"] == 0 for k in zero)


@pytest.mark.slow
def test_trace_without_any_size_says_why(stores):
    """df_index_resolver: no record carries a size (no args, no shapes, no kernel args, one rank of two)."""
    evs = raw_events(DF_INDEX)
    assert not any("Input Dims" in e.get("args", {}) or "In msg nelems" in e.get("args", {}) for e in evs)
    n = sum(1 for e in evs if e["name"] == "c10d::allreduce_")
    con = stores(DF_INDEX)
    assert scalar(con, "SELECT count(*) FROM comm_ops WHERE op = 'all_reduce' AND bytes_in IS NULL") == n == 2020
    assert scalar(con, "SELECT count(*) FROM comm_ops WHERE size_source IS NOT NULL") == 0
    issues = rows(con, "SELECT file, severity, what, count FROM load_issues WHERE file IS NOT NULL")
    assert len(issues) == 1
    i = issues[0]
    assert (i["file"], i["severity"], i["count"]) == (str(public_trace(DF_INDEX).resolve()), "info", n)
    assert i["what"].startswith(f"{n} all_reduce operations carry no size: ")
    for why in ("record_param_comms without 'In msg nelems'", "no recorded shapes (record_shapes off)",
                "NCCL kernel's args", "process group unknown"):
        assert why in i["what"], i["what"]


@pytest.mark.slow
def test_kernels_without_launch_stay_unknown(stores):
    """trace_diff/test: NCCL kernels whose launch the profiler did not record have no size anywhere."""
    evs = raw_events(TEST)
    launched = {e["args"]["correlation"] for e in evs if e.get("cat") == "cuda_runtime"}
    orphans = Counter(e["name"].split("_")[1] for e in evs if e.get("cat") == "kernel" and e["name"].startswith("nccl")
                      and e["args"]["correlation"] not in launched)
    assert orphans == {"AllReduce": 3, "SendRecv": 1}
    con = stores(TEST)
    assert rows(con, "SELECT op, count(*) AS n FROM comm_ops WHERE bytes_in IS NULL GROUP BY op ORDER BY op") == [
        {"op": "all_reduce", "n": orphans["AllReduce"]}, {"op": "send_recv", "n": orphans["SendRecv"]}]
    (what, count), = con.execute("SELECT what, count FROM load_issues WHERE file IS NOT NULL").fetchall()
    assert count == 4
    assert "3 all_reduce operations carry no size: an NCCL kernel with no CPU-side call" in what
    assert "1 send_recv operation carries no size" in what


# --- tiny hand-written traces: one per source -----------------------------------------

def _launch(ts, corr, kernel="ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", **kargs):
    return [
        x("cudaLaunchKernel", ts, 5, cat="cuda_runtime", correlation=corr),
        x(kernel, ts + 100, 40, cat="kernel", pid=0, tid=7, args={"correlation": corr, "stream": 7, **kargs}),
    ]


def _one(con):
    got = rows(con, "SELECT op, in_nelems, out_nelems, dtype, bytes_in, bytes_out, size_source FROM comm_ops")
    assert len(got) == 1, got
    return got[0]


def _load(tmp_path, evs, rank=0, world_size=2, **kw):
    f = write(tmp_path / f"rank{rank}.json", trace(evs, rank=rank, world_size=world_size, **kw))
    return load(f, tmp_path / "s.duckdb")


def test_args_first(tmp_path):
    evs = [
        x("record_param_comms", 1000, 80, args={"Collective name": "allreduce", "In msg nelems": 8,
                                                "Out msg nelems": 8, "dtype": "Float"}),
        x("nccl:all_reduce", 1010, 60, cat="user_annotation", args={"Input Dims": [[8]], "Input type": ["float"]}),
        *_launch(1020, 1),
    ]
    assert _one(_load(tmp_path, evs)) == {"op": "all_reduce", "in_nelems": 8, "out_nelems": 8, "dtype": "Float",
                                          "bytes_in": 32, "bytes_out": 32, "size_source": "args"}


def test_annotation_shapes(tmp_path):
    # an older trace: record_param_comms with no args, the c10d op's tensor list recorded as []
    evs = [
        x("c10d::allreduce_", 990, 100, args={"Input Dims": [[], [], [], []],
                                              "Input type": ["TensorList", "", "Scalar", "Scalar"]}),
        x("record_param_comms", 1000, 80),
        x("nccl:all_reduce", 1010, 60, cat="user_annotation", args={"Input Dims": [[16, 64]], "Input type": ["float"]}),
        *_launch(1020, 1),
    ]
    con = _load(tmp_path, evs)
    assert _one(con) == {"op": "all_reduce", "in_nelems": 1024, "out_nelems": 1024, "dtype": "float",
                         "bytes_in": 4096, "bytes_out": 4096, "size_source": "annotation shapes"}
    assert scalar(con, "SELECT count(*) FROM load_issues WHERE file IS NOT NULL") == 0


def test_annotation_of_all_to_all_single_gives_the_input_only(tmp_path):
    evs = [
        x("record_param_comms", 1000, 80),
        x("nccl:all_to_all", 1010, 60, cat="user_annotation", args={"Input Dims": [[4, 10]], "Input type": ["long"]}),
        *_launch(1020, 1, kernel="ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"),
    ]
    assert _one(_load(tmp_path, evs)) == {"op": "all_to_all", "in_nelems": 40, "out_nelems": None, "dtype": "long",
                                          "bytes_in": 320, "bytes_out": None, "size_source": "annotation shapes"}


def test_list_all_to_all_annotation_is_not_its_size(tmp_path):
    # c10d::alltoall_ (a list): ProcessGroupNCCL's annotation records only the first input tensor
    evs = [
        x("c10d::alltoall_", 990, 100, args={"Input Dims": [[], [], []], "Input type": ["TensorList", "TensorList", ""]}),
        x("record_param_comms", 1000, 80),
        x("nccl:all_to_all", 1010, 60, cat="user_annotation", args={"Input Dims": [[4]], "Input type": ["float"]}),
        *_launch(1020, 1, kernel="ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"),
    ]
    con = _load(tmp_path, evs)
    op = _one(con)
    assert (op["op"], op["in_nelems"], op["bytes_in"], op["size_source"]) == ("all_to_all", None, None, None)
    (what,) = con.execute("SELECT what FROM load_issues WHERE file IS NOT NULL").fetchone()
    assert what.startswith("1 all_to_all operation carries no size: ") and "list all_to_all" in what


def test_barrier_does_not_take_its_all_reduce_annotation(tmp_path):
    # NCCL runs a barrier as an all-reduce of one byte: the operation stays a barrier, sized by its own op
    evs = [
        x("c10d::barrier", 990, 100, args={"Input Dims": [[], [], []], "Input type": ["Tensor", "", ""]}),
        x("record_param_comms", 1000, 80),
        x("nccl:all_reduce", 1010, 60, cat="user_annotation", args={"Input Dims": [[1]], "Input type": ["unsigned char"]}),
        *_launch(1020, 1, kernel="ncclKernel_AllReduce_RING_LL_Sum_uint8_t(ncclWorkElem)"),
    ]
    op = _one(_load(tmp_path, evs))
    assert op["op"] == "barrier" and op["size_source"] != "annotation shapes"


def test_c10d_shapes(tmp_path):
    # record_param_comms without sizes inside a c10d op with recorded shapes; the annotation records none
    evs = [
        x("c10d::_allgather_base_", 990, 100, args={"Input Dims": [[64], [16], [], []],
                                                    "Input type": ["c10::BFloat16", "c10::BFloat16", "", "Bool"]}),
        x("record_param_comms", 1000, 80, args={"Collective name": "_allgather_base", "Group size": 4}),
        x("nccl:_all_gather_base", 1010, 60, cat="user_annotation"),
        *_launch(1020, 1, kernel="ncclKernel_AllGather_RING_LL_Sum_bfloat16(ncclWorkElem)"),
    ]
    assert _one(_load(tmp_path, evs, world_size=4)) == {
        "op": "all_gather", "in_nelems": 16, "out_nelems": 64, "dtype": "c10::BFloat16",
        "bytes_in": 32, "bytes_out": 128, "size_source": "c10d shapes"}


def test_annotation_before_c10d_shapes_output_from_c10d(tmp_path):
    evs = [
        x("c10d::_allgather_base_", 990, 100, args={"Input Dims": [[64], [16], [], []],
                                                    "Input type": ["float", "float", "", "Bool"]}),
        x("record_param_comms", 1000, 80),
        x("nccl:_all_gather_base", 1010, 60, cat="user_annotation", args={"Input Dims": [[16]], "Input type": ["float"]}),
        *_launch(1020, 1, kernel="ncclKernel_AllGather_RING_LL_Sum_float(ncclWorkElem)"),
    ]
    assert _one(_load(tmp_path, evs, world_size=4)) == {
        "op": "all_gather", "in_nelems": 16, "out_nelems": 64, "dtype": "float",
        "bytes_in": 64, "bytes_out": 256, "size_source": "annotation shapes"}


def test_empty_tensor_list_shapes_are_unknown_not_zero(tmp_path):
    evs = [
        x("c10d::allreduce_", 990, 100, args={"Input Dims": [[], [], [], []],
                                              "Input type": ["TensorList", "", "Scalar", "Scalar"]}),
        *_launch(1000, 1),
    ]
    con = _load(tmp_path, evs)
    op = _one(con)
    assert (op["in_nelems"], op["out_nelems"], op["bytes_in"]) == (None, None, None)
    (what,) = con.execute("SELECT what FROM load_issues WHERE file IS NOT NULL").fetchone()
    assert "its c10d op records its tensor list without shapes" in what


def test_kernel_args(tmp_path):
    evs = [
        x("record_param_comms", 1000, 80),
        x("nccl:all_reduce", 1010, 60, cat="user_annotation"),
        *_launch(1020, 1, **{"Collective name": "allreduce", "In msg nelems": 100, "Out msg nelems": 100,
                             "dtype": "Half"}),
    ]
    assert _one(_load(tmp_path, evs)) == {"op": "all_reduce", "in_nelems": 100, "out_nelems": 100, "dtype": "Half",
                                          "bytes_in": 200, "bytes_out": 200, "size_source": "kernel args"}


def test_no_size_anywhere_is_a_load_issue(tmp_path):
    evs = [
        x("record_param_comms", 1000, 80),
        x("nccl:all_reduce", 1010, 60, cat="user_annotation"),
        *_launch(1020, 1),
        x("record_param_comms", 2000, 80),
        x("nccl:all_reduce", 2010, 60, cat="user_annotation"),
        *_launch(2020, 2),
    ]
    f = write(tmp_path / "rank0.json", trace(evs, rank=0, world_size=2))
    con = load(f, tmp_path / "s.duckdb")
    assert scalar(con, "SELECT count(*) FROM comm_ops WHERE bytes_in IS NULL AND size_source IS NULL") == 2
    assert rows(con, "SELECT file, severity, what, count FROM load_issues WHERE file IS NOT NULL") == [{
        "file": str(f.resolve()), "severity": "info", "count": 2,
        "what": "2 all_reduce operations carry no size: record_param_comms without 'In msg nelems', "
                "no recorded shapes (record_shapes off), no 'In msg nelems' in its NCCL kernel's args, "
                "its process group unknown (no other rank to read it from)"}]


# --- peer ranks -----------------------------------------------------------------------

def _rpc_allreduce(ts, corr, sized, seq=None, nelems=256):
    a = {"Collective name": "allreduce", "Group size": 2, "Process Group Name": "0",
         "Process Group Ranks": "[0, 1]"}
    if seq is not None:
        a["Seq"] = seq
    if sized:
        a.update({"In msg nelems": nelems, "Out msg nelems": nelems, "dtype": "Float"})
    return [x("record_param_comms", ts, 80, args=a), *_launch(ts + 10, corr)]


def _two_ranks(tmp_path, evs0, evs1):
    files = [write(tmp_path / f"rank{r}.json", trace(evs, rank=r, world_size=2, info={"backend": "nccl"}))
             for r, evs in ((0, evs0), (1, evs1))]
    return load(files, tmp_path / "s.duckdb")


def test_peer_ranks_by_seq(tmp_path):
    con = _two_ranks(tmp_path, _rpc_allreduce(1000, 1, True, seq=5, nelems=256) + _rpc_allreduce(2000, 2, True, seq=6, nelems=64),
                     _rpc_allreduce(1000, 1, False, seq=6) + _rpc_allreduce(2000, 2, False, seq=7))
    got = rows(con, "SELECT rank, seq, in_nelems, dtype, bytes_in, size_source FROM comm_ops ORDER BY rank, seq")
    assert got == [
        {"rank": 0, "seq": 5, "in_nelems": 256, "dtype": "Float", "bytes_in": 1024, "size_source": "args"},
        {"rank": 0, "seq": 6, "in_nelems": 64, "dtype": "Float", "bytes_in": 256, "size_source": "args"},
        {"rank": 1, "seq": 6, "in_nelems": 64, "dtype": "Float", "bytes_in": 256, "size_source": "peer ranks"},
        {"rank": 1, "seq": 7, "in_nelems": None, "dtype": None, "bytes_in": None, "size_source": None},
    ]
    (file, what) = con.execute("SELECT file, what FROM load_issues WHERE file IS NOT NULL").fetchone()
    assert file.endswith("rank1.json")
    assert what.startswith("1 all_reduce operation carries no size: ")
    assert "no copy with a size on another loaded rank of its group" in what


def test_peer_ranks_by_order_within_step(tmp_path):
    rank0 = [step(1, 900, 2000), *_rpc_allreduce(1000, 1, True, nelems=256), *_rpc_allreduce(2000, 2, True, nelems=64)]
    rank1 = [step(1, 900, 2000), *_rpc_allreduce(1000, 1, False), *_rpc_allreduce(2000, 2, False)]
    con = _two_ranks(tmp_path, rank0, rank1)
    got = rows(con, "SELECT in_nelems, size_source FROM comm_ops WHERE rank = 1 ORDER BY host_ts_ns")
    assert got == [{"in_nelems": 256, "size_source": "peer ranks"}, {"in_nelems": 64, "size_source": "peer ranks"}]


def test_peer_ranks_not_matched_when_the_sequences_differ(tmp_path):
    # rank 1's step shows one all-reduce, rank 0's two: which one it is cannot be told
    rank0 = [step(1, 900, 2000), *_rpc_allreduce(1000, 1, True, nelems=256), *_rpc_allreduce(2000, 2, True, nelems=64)]
    rank1 = [step(1, 900, 2000), *_rpc_allreduce(2000, 2, False)]
    con = _two_ranks(tmp_path, rank0, rank1)
    assert rows(con, "SELECT in_nelems, size_source FROM comm_ops WHERE rank = 1") == [
        {"in_nelems": None, "size_source": None}]
