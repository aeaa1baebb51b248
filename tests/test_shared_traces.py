"""Every public trace (fixtures/public_traces.toml, read from ../shared/traces) loads, and the store agrees with the
JSON.

Expected values are computed here from the file itself with plain gzip + json,
never copied from traceparse's output.
"""

from __future__ import annotations

import decimal
import gzip
import json
import math
import re
from collections import Counter, defaultdict
from functools import lru_cache

import pytest
from conftest import public_trace
from traces import load, rows, scalar

from fixtures import public_traces

pytestmark = pytest.mark.slow

NAMES = public_traces.names()


@lru_cache(maxsize=None)
def raw(path, exact=False):
    """The trace document, parsed with plain json (floats as Decimal when ``exact``)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        if exact:
            return json.load(f, parse_float=decimal.Decimal)
        return json.load(f)


def complete(doc):
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in evs if e.get("ph") == "X"]


_stores = {}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Load a real trace once per module; return a read-only connection."""

    def get(path):
        if path not in _stores:
            db = tmp_path_factory.mktemp("real") / "store.duckdb"
            _stores[path] = load([path], db=db)
        return _stores[path]

    yield get
    for con in _stores.values():
        con.close()
    _stores.clear()


RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


@pytest.mark.parametrize("rel", NAMES)
def test_real_trace_loads_and_counts_match(rel, store):
    path = public_trace(rel)
    doc = raw(path)
    con = store(path)
    evs = complete(doc)

    assert scalar(con, "SELECT count(*) FROM events") == len(evs)
    n_kernels = sum(1 for e in evs if e.get("cat") == "kernel")
    assert scalar(con, "SELECT count(*) FROM events WHERE cat = 'kernel'") == n_kernels

    cpu_steps = sorted(
        int(e["name"].split("#", 1)[1])
        for e in evs
        if str(e.get("name", "")).startswith("ProfilerStep#") and not str(e.get("cat") or "").startswith("gpu")
    )
    assert sorted(r[0] for r in con.execute("SELECT step FROM steps").fetchall()) == cpu_steps

    info = doc.get("distributedInfo") if isinstance(doc, dict) else None
    info = info if isinstance(info, dict) else {}
    ranks = rows(con, "SELECT rank, rank_source, world_size, n_complete FROM ranks")
    assert len(ranks) == 1
    r = ranks[0]
    assert r["n_complete"] == len(evs)
    if isinstance(info.get("rank"), int):
        assert (r["rank"], r["rank_source"]) == (info["rank"], "distributedInfo.rank")
    else:
        m = RANK_IN_NAME.search(path.name)
        if m:
            assert (r["rank"], r["rank_source"]) == (int(m.group(1)), "file name")
        else:
            # a single file with no rank anywhere: rank 0, assumed, and said so
            assert (r["rank"], r["rank_source"]) == (0, "assumed")
        issues = rows(con, "SELECT * FROM load_issues WHERE severity = 'warning'")
        assert any("rank" in i["what"] for i in issues), issues
    assert r["world_size"] == (info.get("world_size") if isinstance(info.get("world_size"), int) else None)

    # every event with a step lies inside that step's window
    bad = scalar(
        con,
        """SELECT count(*) FROM events e JOIN steps s ON s.rank = e.rank AND s.step = e.step
           WHERE NOT (e.ts_ns >= s.start_ns AND e.ts_ns < s.end_ns)""",
    )
    assert bad == 0


# --- communication from record_param_comms -------------------------------------------

RPC_TRACES = [
    "hta/nccl_parser_config/nccl_data.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "tracelens/b200_vllm_tp8_rank0.json.gz",
    "tracelens/mi300_resnet_ddp_rank0.json.gz",
]
COLL_OP = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce",
    "broadcast": "broadcast",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
}
DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
               "Byte": 1, "Char": 1, "Bool": 1}


def outermost_rpc(evs):
    """record_param_comms CPU events not nested inside another record_param_comms on the same thread."""
    by_thread = defaultdict(list)
    for i, e in enumerate(evs):
        if e.get("name") == "record_param_comms" and not str(e.get("cat") or "").startswith("gpu"):
            by_thread[(e.get("pid"), e.get("tid"))].append((e["ts"], -e["dur"], i, e))
    out = []
    for items in by_thread.values():
        items.sort(key=lambda t: t[:3])
        open_end = None
        for ts, neg_dur, _, e in items:
            end = ts - neg_dur
            if open_end is not None and end <= open_end:
                continue  # inside the enclosing call
            out.append(e)
            open_end = end
    return out


@pytest.mark.parametrize("rel", RPC_TRACES)
def test_record_param_comms_collectives(rel, store):
    path = public_trace(rel)
    evs = complete(raw(path))
    calls = [e for e in outermost_rpc(evs) if e["args"].get("Collective name") not in (None, "wait")]
    assert calls, "the trace was chosen for its record_param_comms args"
    expected = Counter()
    expected_bytes = Counter()
    for e in calls:
        a = e["args"]
        op = COLL_OP.get(a["Collective name"])
        if op is None:
            continue
        expected[op] += 1
        expected_bytes[(op, a["In msg nelems"] * DTYPE_BYTES[a["dtype"]])] += 1
    # symmetric-memory all-reduces (vLLM TP) have no record_param_comms: one op each, sized by the input
    for e in evs:
        if e.get("name", "").startswith("symm_mem::") and "all_reduce" in e["name"] and e.get("cat") == "cpu_op":
            dims = e["args"]["Input Dims"][0]
            expected["all_reduce"] += 1
            expected_bytes[("all_reduce", math.prod(dims) * 2)] += 1  # c10::BFloat16
    assert expected, "no all_reduce/broadcast/all_gather in the trace"

    con = store(path)
    got = Counter(
        dict(con.execute(
            "SELECT op, count(*) FROM comm_ops WHERE op IN ('all_reduce', 'broadcast', 'all_gather') GROUP BY op"
        ).fetchall())
    )
    assert got == expected
    got_bytes = Counter(
        con.execute("SELECT op, bytes_in FROM comm_ops WHERE op IN ('all_reduce', 'broadcast', 'all_gather')").fetchall()
    )
    assert got_bytes == expected_bytes


def test_deepep_custom_kernels_are_comm_ops(store):
    path = public_trace("deepseek/dsv3_ep64_dualpipe_rank0.json.gz")
    evs = complete(raw(path))
    pat = re.compile(r"\bdpsk::ep::internode::(?:notify_)?(?:dispatch|combine)\b")
    deepep = [e for e in evs if e.get("cat") == "kernel" and pat.search(e["name"])]
    assert deepep
    # decoys of the same library that move no tokens between ranks
    assert any("get_dispatch_layout" in e["name"] for e in evs if e.get("cat") == "kernel")

    con = store(path)
    got = rows(con, "SELECT op, name, exec_ts_ns FROM comm_ops WHERE source = 'custom_kernel'")
    assert len(got) == len(deepep)
    assert Counter((r["name"], r["exec_ts_ns"]) for r in got) == Counter((e["name"], e["ts"] * 1000) for e in deepep)
    assert {r["op"] for r in got} == {"all_to_all"}


def test_single_gpu_trace_has_no_communication(store):
    con = store(public_trace("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"))
    assert scalar(con, "SELECT count(*) FROM comm_ops") == 0


# --- exact timestamps -----------------------------------------------------------------

@pytest.mark.parametrize(
    "rel",
    [
        "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",  # float ts, no base
        "hta/nccl_parser_config/nccl_data.json.gz",  # float ts relative to baseTimeNanoseconds
    ],
)
def test_float_timestamps_are_exact_nanoseconds(rel, store):
    path = public_trace(rel)
    doc = raw(path, exact=True)
    evs = complete(doc)
    fractional = [i for i, e in enumerate(evs) if isinstance(e["ts"], decimal.Decimal) and e["ts"] % 1]
    assert fractional, "the trace was chosen for its ns fractions"
    base = doc.get("baseTimeNanoseconds") or 0

    def ns(v):
        n = decimal.Decimal(v) * 1000
        assert n == n.to_integral_value(), f"{v} has sub-ns digits"
        return int(n)

    picks = sorted({fractional[0], fractional[len(fractional) // 2], fractional[-1], 0, len(evs) - 1})
    for i in picks:
        e = evs[i]
        got = store(path).execute("SELECT ts_ns, dur_ns FROM events WHERE ev_id = ?", [i]).fetchone()
        assert got is not None, i
        assert got == (ns(e["ts"]) + base, ns(e["dur"])), (i, e["name"], e["ts"])

    # and all of them, in one pass
    got_all = [r[0] for r in store(path).execute("SELECT ts_ns FROM events ORDER BY ev_id").fetchall()]
    assert got_all == [ns(e["ts"]) + base for e in evs]
