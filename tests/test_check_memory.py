"""memory: the ZeRO memory model (docs/parallelism.md 3.1) on fixture runs, and the measured peak on a GPU trace.

Expected bytes are computed here from truth.json (model.params, dtype_bytes, optimizer.n_opt,
layout) with the table of docs/parallelism.md 3.1; the peak from the raw trace JSON.
"""

import gzip
import json

import pytest
from conftest import committed_runs, fast_few, public_trace, run_check

from traceparse.analyzers import memory
from traceparse.analyzers.context import Context
from traceparse.thresholds import check_thresholds as thresholds
from traceparse.layout.stated import inferred_layout
from traceparse.load.run import open_run

ZERO_RUNS = ["ddp4", "zero1_dp4", "fsdp2_zero2_dp4", "fsdp2_zero3_dp4"]
RUNS = committed_runs(*ZERO_RUNS)
DELTA_OPT = 4


@pytest.fixture(scope="module")
def check(store):
    return lambda name, stated=None: run_check(memory, store(RUNS / name), stated)


def truth(name):
    return json.loads((RUNS / name / "truth.json").read_text())


def zero_table(t):
    """(parameters, gradients, optimizer state) bytes per device, docs/parallelism.md 3.1."""
    phi, d, k = t["model"]["params"], t["model"]["dtype_bytes"], t["optimizer"]["n_opt"]
    z, n = t["layout"]["zero_stage"], t["layout"]["dp"]
    return (d * phi / (n if z == 3 else 1), d * phi / (n if z >= 2 else 1), (k + 1) * DELTA_OPT * phi / (n if z >= 1 else 1))


@pytest.mark.parametrize("stated", [False, True], ids=["inferred", "stated"])
@pytest.mark.parametrize("name", fast_few(ZERO_RUNS))
def test_zero_table(name, stated, check):
    t = truth(name)
    st = {"params": t["model"]["params"], "dtype_bytes": t["model"]["dtype_bytes"], "n_opt": t["optimizer"]["n_opt"],
          "dp": t["layout"]["dp"], "zero_stage": t["layout"]["zero_stage"]} if stated else {}
    res = check(name, st)
    got = res.numbers["per_device_bytes"]
    p, g, o = zero_table(t)
    assert (got["parameters"], got["gradients"], got["optimizer_state"]) == (p, g, o)
    assert got["total"] == p + g + o
    x = res.numbers["inputs"]
    assert x["Phi_device"]["value"] == t["model"]["params"]
    assert x["Phi_device"]["source"].startswith("stated" if stated else "trace")
    assert x["N_DP"]["value"] == t["layout"]["dp"] and x["zero_stage"]["value"] == t["layout"]["zero_stage"]
    # CPU runs record no memory events: no measured peak, so the model is reported but compared with nothing
    assert res.numbers["measured_peak_bytes"] is None and res.numbers["measured_over_model"] is None
    assert res.status == "not_applicable" and res.reason.startswith("no measured peak")
    assert res.document()["reason"] == res.reason and res.document()["per_device_bytes"]["total"] == p + g + o


def test_ddp4_is_2_delta_plus_3_delta_opt_phi(check):
    t = truth("ddp4")
    assert check("ddp4").numbers["per_device_bytes"]["total"] == (2 * 4 + 3 * 4) * t["model"]["params"]


def test_optimizer_from_the_annotation(check):
    x = check("zero1_dp4").numbers["inputs"]  # Optimizer.step#ZeroRedundancyOptimizer.step wraps AdamW
    assert x["optimizer"]["value"] == "AdamW" and "AdamW" in truth("zero1_dp4")["optimizer"]["name"]
    assert x["n_opt"]["value"] == truth("zero1_dp4")["optimizer"]["n_opt"]


@pytest.mark.parametrize("run", fast_few(["pp4_gpipe_m4", "pp4_1f1b_m4", "pp4_interleaved_m4", "pp4_1f1b_heavy_m4"]))
def test_pipeline_stage_parameters_leave_out_the_received_activation(check, run):
    """A stage's input activation is a leaf that requires grad; its AccumulateGrad is not a parameter."""
    t = truth(run)
    assert check(run).numbers["inputs"]["Phi_device"]["value"] == max(t["model"]["params_per_rank"])


@pytest.mark.parametrize("run", ["pp4_interleaved_zb_m4", "pp4_zbv_m8", "pp4_dualpipev_m8"])
@pytest.mark.slow  # over 2 s: the fast tier keeps its area's other tests
def test_a_split_backward_leaves_phi_unknown_rather_than_short(check, run):
    """Zero-bubble schedules compute some weight gradients without AccumulateGrad: counting them would miss
    parameters, so without stated params Phi is unknown."""
    res = check(run)
    assert res.status == "not_applicable" and res.reason.startswith("Phi cannot be known")


def test_ep_counts_the_local_experts(check):
    t = truth("ep4")
    res = check("ep4")
    assert res.numbers["inputs"]["Phi_device"]["value"] == max(t["model"]["params_per_rank"])


def test_tp_without_stated_params_is_not_applicable(check):
    res = check("tp2")
    assert res.status == "not_applicable" and "Phi" in res.reason
    t = truth("tp2")
    res = check("tp2", {"params": t["model"]["params"], "tp": 2})
    assert res.numbers["inputs"]["Phi_device"]["value"] == t["model"]["params"] / 2


def _raw_peak(path):
    ev = json.loads(gzip.open(path).read())["traceEvents"]
    return max(e["args"]["Total Allocated"] for e in ev
               if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type") not in (0, None))


@pytest.mark.slow
def test_gpu_measured_peak():
    path = public_trace("hta/df_index_resolver/df_index_resolver.json.gz")
    with open_run([path], use_cache=False) as con:
        lay = inferred_layout(con)
        alone = memory.run(Context(con, lay, {}, thresholds()["memory"]))
        res = memory.run(Context(con, lay, {"params": 25_000_000, "n_opt": 1}, thresholds()["memory"]))
    assert alone.status == "not_applicable"  # no sizes on its collectives, no shapes: Phi unknown
    peak = _raw_peak(path)
    assert res.numbers["measured_peak_bytes"] == peak
    total = (2 * res.numbers["inputs"]["delta"]["value"] + 2 * DELTA_OPT) * 25_000_000
    assert res.numbers["per_device_bytes"]["total"] == total
    assert res.numbers["measured_over_model"] == pytest.approx(peak / total)
    assert res.status == ("warn" if peak / total > thresholds()["memory"]["warn_over_model"] else "ok")


@pytest.mark.slow
def test_optimizer_not_modelled_is_not_applicable():
    """A measured peak but no optimizer state model (n_opt unknown): no total to compare with, not 'ok'."""
    path = public_trace("hta/df_index_resolver/df_index_resolver.json.gz")
    with open_run([path], use_cache=False) as con:
        lay = inferred_layout(con)
        res = memory.run(Context(con, lay, {"params": 25_000_000, "optimizer": "Unknown"}, thresholds()["memory"]))
    assert res.numbers["measured_peak_bytes"] == _raw_peak(path)
    per_device = res.numbers["per_device_bytes"]
    assert per_device["optimizer_state"] is None and per_device["total"] is None
    assert res.numbers["measured_over_model"] is None
    assert res.status == "not_applicable" and res.reason.startswith("optimizer state not modelled")


@pytest.mark.parametrize("inside, n_opt", [(("aten::mul_", "aten::add_"), 1), (("aten::add_",), 0), ((), None)])
def test_sgd_keeps_a_momentum_buffer_when_its_step_multiplies(tmp_path, inside, n_opt):
    """SGD keeps one state tensor per parameter with momentum (buf.mul_(momentum).add_(grad)), none without (the step
    only adds); a step with neither op inside says nothing (n_opt unknown): read from the ops inside the rank's
    Optimizer.step#SGD.step annotation on its main thread."""
    from traces import load, step, trace, write, x

    from traceparse.layout import model_facts

    events = [step(1, 0, 1000), x("aten::mm", 10, 100),
              x("Optimizer.step#SGD.step", 500, 300, cat="user_annotation")]
    events += [x(name, 510 + 40 * k, 20) for k, name in enumerate(inside)]
    con = load(write(tmp_path / "rank0.json", trace(events, rank=0, world_size=1)), tmp_path / "s.duckdb")
    got = model_facts.optimizer(Context(con=con, layout={}, stated={}, limits={}))
    assert got["name"]["value"] == "SGD" and got["n_opt"]["value"] == n_opt
