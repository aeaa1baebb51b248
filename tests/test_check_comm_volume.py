"""comm_volume on the fixture runs (against truth.json) and on real GPU traces.

Every expected number is computed here from truth.json (model, layout, comm rows)
or from the raw trace JSON, with the formulas of docs/parallelism.md 3 and 4.
"""

import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

import math

import pytest
from conftest import fast_few, public_trace, run_check
from document_tables import truth_volume
from test_repeat_runs import windowed
from traces import step, trace, write, x

from traceparse.analyzers import comm_volume
from traceparse.analyzers.context import Context
from traceparse.thresholds import check_thresholds as thresholds
from traceparse.layout.stated import inferred_layout
from traceparse.load.run import open_run

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
# a run profiled in several windows is read window by window (tests/test_repeat_runs.py), not as one folder
NAMES = sorted(p.name for p in RUNS.glob("*") if (p / "truth.json").exists() and not windowed(p)) if RUNS.exists() else []
TOL = thresholds()["comm_volume"]["warn_tolerance"]
MODEL_KEYS = ("layers", "hidden", "heads", "kv_heads", "seq", "micro_batch", "dtype_bytes", "params", "experts", "top_k")
LAYOUT_KEYS = ("dp", "tp", "pp", "cp", "sp", "ep", "zero_stage", "microbatches", "virtual_stages")
# where the notes' formula does not describe what the fixture's implementation sends (asserted as findings below)
NOT_THE_FORMULA = {("zero1_dp4", "dp"), ("quiet_zero1_dp2", "dp"), ("ring_cp4", "cp"), ("tp2_sp", "tp"),
                   # the same implementations on a 2-D mesh: backward keeps K and V; norm and logits traffic
                   ("dp2_cp2_ring", "cp"), ("dp2_tp2_sp", "tp"),
                   # HSDP: the replicate group's gradient all-reduce beside ZeRO-3 is not in the notes' table
                   ("hsdp_r2_s2", "dp")}
NOT_MODELLED = {"hsdp_r2_s2"}  # Phi_dp from HSDP's two dp groups is not inferred (see docs/checks.md, comm_volume)


@pytest.fixture(scope="module")
def check(store):
    return lambda name, stated=None: run_check(comm_volume, store(RUNS / name), stated)


def truth(name):
    return json.loads((RUNS / name / "truth.json").read_text())


def stated_from(t):
    """What a user who knows the configuration states: the layout and the model dims."""
    out = {k: t["layout"][k] for k in LAYOUT_KEYS if t["layout"][k] is not None}
    out.update({k: t["model"][k] for k in MODEL_KEYS})
    return out


def truth_per_op(t):
    """{(strategy, variant, op): [bytes_in, bytes_out]} per rank per step from truth's comm rows."""
    out = defaultdict(lambda: [0, 0])
    for r in t["comm"]:
        key = (r["strategy"], r["variant"], r["op"])
        out[key][0] += r["count"] * r["bytes_in"]
        out[key][1] += r["count"] * r["bytes_out"]
    return {k: [v[0] / t["world_size"], v[1] / t["world_size"]] for k, v in out.items()}


def formula(t, strategy):
    """docs/parallelism.md 3/4 evaluated from truth's model and layout, per rank per step."""
    m, lay = t["model"], t["layout"]
    d, bsh, mb = m["dtype_bytes"], m["micro_batch"] * m["seq"] * m["hidden"], lay["microbatches"]
    layers = m["layers"] / lay["pp"]
    if strategy == "dp":
        phi = m["params"] / (lay["tp"] * lay["pp"])
        return {2: (mb + 1), 3: 3 * mb}.get(lay["zero_stage"], 2) * d * phi
    if strategy == "tp":
        return 8 * d * bsh * layers * mb
    if strategy == "pp":
        return 2 * d * bsh * mb * (lay["pp"] * lay["virtual_stages"] - 1) / lay["pp"]
    if strategy == "sp":
        return 4 * (m["kv_heads"] / m["heads"] + 1) * d * bsh / lay["sp"] * layers * mb
    if strategy == "cp":
        return 6 * (m["kv_heads"] / m["heads"]) * d * bsh * layers * mb
    if strategy == "ep":
        return 4 * d * m["top_k"] * bsh * layers * mb


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
def test_measured_bytes_per_op_equal_truth(name, check):
    t = truth(name)
    got = {(r["strategy"], r["variant"], r["op"]): [r["bytes_in"], r["bytes_out"]] for r in check(name).numbers["per_op"]}
    assert got == truth_per_op(t)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
def test_input_bytes_and_volume_are_two_quantities(name, check):
    """Per strategy, input_bytes (what the ranks pass to the calls, each call once) from truth's comm rows beside the
    volume in the notes' count; a strategy of all-reduces only (DDP's dp) has a volume of twice its input bytes."""
    t = truth(name)
    per = check(name).numbers["per_strategy"]
    for s, row in per.items():
        want = sum(r["count"] * r["bytes_in"] for r in t["comm"] if r["strategy"] == s) / t["world_size"]
        assert row["input_bytes"] == pytest.approx(want, rel=1e-12), s
        if {r["op"] for r in t["comm"] if r["strategy"] == s} == {"all_reduce"}:
            assert row["measured_volume_bytes"] == pytest.approx(2 * row["input_bytes"], rel=1e-12), s


def buffered(t) -> bool:
    """ZeRO-2/3 with accumulation whose gradients sync once per step (FSDP2's set_requires_gradient_sync(False)
    on all but the last micro-batch): truth's reduce-scatters per step are fewer rounds than micro-batches."""
    m = t["layout"]["microbatches"]
    counts = [r["count"] for r in t["comm"] if r["strategy"] == "dp" and r["op"] == "reduce_scatter"]
    return t["layout"]["zero_stage"] in (2, 3) and m > 1 and bool(counts) and math.gcd(m, *counts) < m


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
def test_expected_bytes_equal_the_formula_from_truth(name, check):
    t = truth(name)
    res = check(name, stated_from(t))
    strategies = {r["strategy"] for r in t["comm"]}
    assert set(res.numbers["per_strategy"]) == strategies
    for s in strategies:
        row = res.numbers["per_strategy"][s]
        if s == "dp" and t["layout"]["ep"] > 1:
            # stated params include the experts, which DP does not sync: Phi_dp comes from the trace
            assert row["source"]["Phi_dp"] == "trace"
            dense = sum(r["count"] * r["bytes_in"] for r in t["comm"] if r["strategy"] == "dp") / t["world_size"]
            assert row["expected_volume_bytes"] == 2 * dense
            continue
        if s == "dp" and buffered(t):  # the notes reduce-scatter after every micro-batch: no formula for it
            assert row["expected_volume_bytes"] is None and "buffered" in row["formula"], row
            continue
        assert row["expected_volume_bytes"] == pytest.approx(formula(t, s), rel=1e-12), s
        assert set(row["source"].values()) == {"stated"}, row["source"]


@pytest.mark.parametrize("name", fast_few(NAMES))
def test_expected_matches_what_ran_within_the_notes_tolerance(name, check):
    t = truth(name)
    res = check(name, stated_from(t))
    for s, row in res.numbers["per_strategy"].items():
        assert row["measured_volume_bytes"] == pytest.approx(truth_volume(t, s), rel=1e-12), s
        if (name, s) in NOT_THE_FORMULA or (s == "dp" and buffered(t)):
            continue
        assert abs(truth_volume(t, s) / row["expected_volume_bytes"] - 1) <= TOL, (s, row)
        assert row["status"] == "ok"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
def test_inferred_inputs_equal_the_configuration(name, check):
    t = truth(name)
    m, lay = t["model"], t["layout"]
    x = check(name).numbers["inputs"]
    assert (x["b"]["value"], x["S"]["value"], x["H"]["value"]) == (m["micro_batch"], m["seq"], m["hidden"])
    assert x["b"]["source"].startswith("trace")
    if name != "ring_cp4":  # no attention op there: layers come from the norms, N_kv/N_q is assumed
        assert x["L_local"]["value"] == pytest.approx(m["layers"] / lay["pp"])
        assert x["kv_over_q"]["value"] == m["kv_heads"] / m["heads"]
    else:
        assert x["L_local"]["value"] == m["layers"] and x["kv_over_q"]["source"].startswith("assumed")
    if any(r["strategy"] == "dp" for r in t["comm"]) and lay["ep"] == 1 and name not in NOT_MODELLED:
        shard = lay["dp"] if lay["zero_stage"] in (2, 3) else 1
        assert x["Phi_dp"]["value"] == statistics.mean(m["params_per_rank"]) * shard


def test_zero1_flags_torch_zero_redundancy_optimizer(check):
    t = truth("zero1_dp4")
    row = check("zero1_dp4", stated_from(t)).numbers["per_strategy"]["dp"]
    phi_bytes = t["model"]["params"] * t["model"]["dtype_bytes"]
    assert truth_volume(t, "dp") == 3 * phi_bytes  # all-reduce 2 delta Phi + broadcasts delta Phi
    assert row["ratio"] == pytest.approx(1.5)
    res = check("zero1_dp4", stated_from(t))
    assert row["status"] == "fail" and res.status == "fail"
    assert any("ZeroRedundancyOptimizer" in f and "3 delta Phi" in f for f in res.findings)


def test_zero3_fsdp2_root_not_regathered(check):
    """FSDP2 keeps the root unit gathered after forward: less than 2 delta Phi of all-gathers, within tolerance."""
    t = truth("fsdp2_zero3_dp4")
    row = check("fsdp2_zero3_dp4", stated_from(t)).numbers["per_strategy"]["dp"]
    assert truth_volume(t, "dp") < 3 * t["model"]["params"] * t["model"]["dtype_bytes"]
    assert row["ratio"] < 1 and row["status"] == "ok"


def test_ring_attention_flags_kv_not_resent_in_backward(check):
    t = truth("ring_cp4")
    res = check("ring_cp4", stated_from(t))
    row = res.numbers["per_strategy"]["cp"]
    assert row["ratio"] == pytest.approx(truth_volume(t, "cp") / formula(t, "cp")) and row["ratio"] == pytest.approx(4 / 6)
    assert row["status"] == "warn"
    assert any(f.startswith("cp (ring)") and "dK, dV" in f for f in res.findings)


def test_tp_sequence_parallel_flags_extra_collectives(check):
    t = truth("tp2_sp")
    res = check("tp2_sp", stated_from(t))
    row = res.numbers["per_strategy"]["tp"]
    assert row["ratio"] == pytest.approx(truth_volume(t, "tp") / formula(t, "tp"))
    assert row["status"] != "ok"
    assert any(f.startswith("tp (megatron_sp)") and "other sizes" in f for f in res.findings)


def test_ep_without_top_k_has_no_expectation(check):
    row = check("ep4").numbers["per_strategy"]["ep"]
    assert row["expected_volume_bytes"] is None and row["ratio"] is None and "top_k" in row["formula"]


def _raw_comm(path):
    """record_param_comms in ProfilerStep windows of a raw GPU trace: (bytes per step, steps)."""
    ev = json.loads(gzip.open(path).read())["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") in ("user_annotation", "cpu_op")]
    size = {"BFloat16": 2, "Float": 4, "Half": 2, "Long": 8, "Int": 4, "Byte": 1}
    out = defaultdict(int)
    for e in ev:
        a = e.get("args", {})
        if e.get("name") == "record_param_comms" and a.get("Collective name") in ("allreduce", "broadcast") \
                and any(s <= e["ts"] < t for s, t in steps):
            out[a["Collective name"]] += a["In msg nelems"] * size[a["dtype"]]
    return out, len(set(steps))


@pytest.mark.slow
def test_gpu_ddp_bytes_and_bandwidth():
    path = public_trace("tracelens/mi300_resnet_ddp_rank0.json.gz")
    raw, steps = _raw_comm(path)
    with open_run([path], use_cache=False) as con:
        res = comm_volume.run(Context(con, inferred_layout(con), {}, thresholds()["comm_volume"]))
        ops = con.execute("SELECT op, bytes_in, exec_dur_ns, group_size FROM comm_ops WHERE strategy = 'dp' "
                          "AND step IS NOT NULL").fetchall()
    rows = {r["op"]: r for r in res.numbers["per_op"] if r["strategy"] == "dp"}
    assert rows["all_reduce"]["bytes_in"] == raw["allreduce"] / steps
    assert rows["broadcast"]["bytes_in"] == raw["broadcast"] / steps
    for op in ("all_reduce", "broadcast"):
        mine = [(b, d, n) for o, b, d, n in ops if o == op and d]
        factor = (lambda n: 2 * (n - 1) / n) if op == "all_reduce" else (lambda _n: 1)
        assert rows[op]["algbw_gbps"] == pytest.approx(statistics.median(b / d for b, d, _ in mine))
        assert rows[op]["busbw_gbps"] == pytest.approx(statistics.median(b * factor(n) / d for b, d, n in mine))
        assert rows[op]["bus_bytes"] == pytest.approx(sum(b * factor(n) for b, _, n in mine) / steps)
    # DDP: one all-reduce of the gradients per step, 2 delta Phi with Phi from those all-reduces
    assert res.numbers["per_strategy"]["dp"]["ratio"] == pytest.approx(1 + raw["broadcast"] / (2 * raw["allreduce"]))


def test_no_communication_is_not_applicable():
    with open_run([public_trace("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")], use_cache=False) as con:
        res = comm_volume.run(Context(con, inferred_layout(con), {}, thresholds()["comm_volume"]))
    assert res.status == "not_applicable" and "no communication" in res.reason


def _run(path, stated=None):
    with open_run([public_trace(path)], use_cache=False) as con:
        return comm_volume.run(Context(con, inferred_layout(con), stated or {}, thresholds()["comm_volume"]))


@pytest.mark.slow
def test_vllm_tp_without_model_dims_is_not_applicable():
    """vLLM TP=8 inference: all-reduce sizes are known but b S H and the layers are not: nothing compared."""
    res = _run("tracelens/b200_vllm_tp8_rank0.json.gz")
    tp = res.numbers["per_strategy"]["tp"]
    assert tp["measured_volume_bytes"] > 0 and tp["expected_volume_bytes"] is None and tp["ratio"] is None
    assert tp["status"] == "not_applicable" and "b S H" in tp["reason"]
    assert res.status == "not_applicable"
    assert res.reason.startswith("no strategy has both a measured and an expected volume") and "tp:" in res.reason
    # stating the model dims gives the formula something to compare with: graded, not "not applicable"
    stated = _run("tracelens/b200_vllm_tp8_rank0.json.gz", {"micro_batch": 1, "seq": 128, "hidden": 4096, "layers": 32})
    assert stated.numbers["per_strategy"]["tp"]["ratio"] is not None
    assert stated.status in ("ok", "warn", "fail") and stated.reason is None


def test_deepseek_ep_without_sizes_is_not_applicable():
    """DeepSeek-V3 DeepEP kernels record no sizes, and no expectation can be formed: nothing compared."""
    res = _run("deepseek/dsv3_ep64_dualpipe_rank0.json.gz")
    ep = res.numbers["per_strategy"]["ep"]
    assert ep["measured_volume_bytes"] is None and ep["ratio"] is None and ep["ops_without_size"] > 0
    assert ep["status"] == "not_applicable" and "no operation has a known size" in ep["reason"]
    assert res.status == "not_applicable" and "ep:" in res.reason
    assert all(r["bytes_in"] is None and r["volume_bytes"] is None for r in res.numbers["per_op"])


def test_untagged_only_is_not_applicable(tmp_path):
    """Communication that no rule tagged has no formula: not applicable, and the unknown size stays null."""
    k = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

    def ar(ts, n=None):
        a = {"stream": 7, "Collective name": "allreduce", "dtype": "BFloat16", "Group size": 2,
             "Process Group Ranks": "[0, 1]"}
        a.update({"In msg nelems": n, "Out msg nelems": n} if n else {})
        return x(k, ts, 40, cat="kernel", pid=0, tid=7, args=a)

    f = write(tmp_path / "rank0.json", trace([step(1, 1000, 1000), ar(1100, 8), ar(1200)], rank=0, world_size=2))
    with open_run([f], use_cache=False) as con:
        res = comm_volume.run(Context(con, inferred_layout(con), {}, thresholds()["comm_volume"]))
    assert res.status == "not_applicable" and "tagged" in res.reason
    (row,) = res.numbers["per_op"]
    assert (row["strategy"], row["bytes_in"], row["ops_without_size"]) == ("untagged", 8 * 2, 1)  # the known sum


def test_cause_leaves_out_operations_without_size():
    """A strategy whose ops are partly unsized: the explanation uses the sized ones, never 0 for the others."""
    values = {"delta": 2, "Phi_dp": 100, "microbatches": 1, "pp": 2, "virtual_stages": 1, "bSH": 10, "delta_pp": 2}
    x_ = {k: {"value": v, "source": "stated"} for k, v in values.items()}
    rows = [{"op": "all_reduce", "volume_bytes": 400, "count": 1}, {"op": "broadcast", "volume_bytes": None, "count": 2}]
    why = comm_volume.cause("dp", "zero0", x_, rows, [], 400, 400, 1, thresholds()["comm_volume"])
    assert "all_reduce 2.00" in why and "broadcast" not in why
    sends = [{"op": "send", "volume_bytes": None, "count": 2}]
    assert "? each" in comm_volume.cause("pp", "p2p", x_, sends, [], None, 40, 1, thresholds()["comm_volume"])
