"""whatif refuses what it cannot forecast: a layout the sweep excludes (with the sweep's reason), a schedule or a
number of virtual stages that does not exist, a pipeline too large to replay; --layout and --given refuse a key
given twice and say which option is wrong. What it does forecast has no negative term."""

from pathlib import Path

import pytest
from conftest import refused

from traceparse.document import document
from traceparse.errors import TraceError
from traceparse.load.run import open_run
from traceparse.whatif import sweep_document, whatif_document
from traceparse.whatif.forecast import MAX_ACTIONS
from traceparse.whatif.measured import LAYOUT
from traceparse.whatif.sweep import excluded

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
GPIPE = str(RUNS / "pp4_gpipe_m4")  # 4 stages, 4 layers, m = 4


@pytest.mark.parametrize("target,words", [
    ("virtual_stages=8", ["--layout: gpipe runs 1 stage(s) per rank", "not 8"]),  # was: exposed comm -5.5 ms
    ("virtual_stages=1000000", ["--layout: gpipe runs 1 stage(s) per rank"]),
    ("pp_schedule=zbv_zero_bubble,virtual_stages=3", ["zbv_zero_bubble runs 2 stage(s) per rank", "not 3"]),
    ("pp_schedule=bogus", ["--layout: pp_schedule = 'bogus' is not one of gpipe, 1f1b, interleaved_1f1b, "
                           "interleaved_zero_bubble, zbv_zero_bubble, dualpipe_v"]),
    ("microbatches=1000000000", ["--layout: 2 x microbatches x virtual_stages x pp = 8,000,000,000 actions",
                                 f"at most {MAX_ACTIONS:,}"]),  # was: MemoryError
    (f"microbatches={MAX_ACTIONS // 8 + 1}", [f"at most {MAX_ACTIONS:,}"]),
    ("pp_schedule=interleaved_1f1b,virtual_stages=1000", ["pp x virtual_stages = 4,000 stages"]),
    ("pp_schedule=interleaved_1f1b,virtual_stages=3", [excluded({"tp": 1, "pp": 4, "virtual_stages": 3}, {}, 4.0, None)]),
    ("layers=3", [excluded({"tp": 1, "pp": 4}, {}, 3, None), "(whatif --sweep excludes this layout)"]),
    ("layers=6", ["6 layers do not divide into 4 equal stages"]),
])
@pytest.mark.slow
def test_an_impossible_target_is_refused(cli, target, words):
    refused(cli("whatif", GPIPE, "--layout", target), *words)


@pytest.mark.slow
def test_the_run_own_split_is_not_refused(cli):
    """pp4_1f1b_heavy_m4 holds 5 layers on 4 stages, which the sweep excludes: the run shows that it runs."""
    for args in (["--balanced"], ["--layout", "microbatches=8"]):
        assert cli("whatif", RUNS / "pp4_1f1b_heavy_m4", *args)[0] == 0


@pytest.mark.slow
def test_the_largest_replay_is_forecast(cli):
    code, out, _ = cli("whatif", GPIPE, "--layout", f"microbatches={MAX_ACTIONS // 8}")
    assert code == 0 and out.startswith("target: ")


@pytest.mark.parametrize("command", [
    ["analyze", GPIPE, "--layout"], ["layout", GPIPE, "--layout"], ["compare", GPIPE, GPIPE, "--layout"],
    ["whatif", GPIPE, "--layout"], ["whatif", GPIPE, "--layout", "microbatches=8", "--given"],
])
def test_a_key_given_twice_is_refused(cli, command):
    err = refused(cli(*command, "dp=2,dp=4"), "dp given twice (dp=2, dp=4)")
    assert f"error: {command[-1]}: " in err


def test_a_key_at_the_top_and_in_the_model_table_is_refused(cli, tmp_path):
    f = tmp_path / "layout.toml"
    f.write_text("layers = 4\n[model]\nlayers = 8\n")
    refused(cli("analyze", GPIPE, "--layout", f), f"{f}: --layout: layers given twice")


@pytest.mark.parametrize("given,words", [("params=x", "--given: params = 'x' is not a number"),
                                         ("nope=1", "--given: unknown keys nope"),
                                         ("pp_schedule=bogus", "--given: pp_schedule = 'bogus' is not one of")])
def test_given_errors_name_given(cli, given, words):
    refused(cli("whatif", GPIPE, "--layout", "microbatches=8", "--given", given), words)


@pytest.mark.slow
def test_what_the_sweep_excludes_whatif_refuses_with_its_reason():
    """Every candidate of ddp4's sweep (2 layers; ranks_per_node 2): whatif --layout of it is refused with the
    sweep's reason exactly when the sweep excludes it."""
    given = {"ranks_per_node": 2}
    with open_run([RUNS / "ddp4"]) as con:
        doc = document(con, 10, {})
        rows = sweep_document(con, doc, given)["candidates"]
        assert any(r["excluded"] for r in rows) and not all(r["excluded"] for r in rows)
        for r in rows:
            target = {k: r["layout"][k] for k in LAYOUT if r["layout"][k] is not None}
            if r["excluded"]:
                with pytest.raises(TraceError, match=r["excluded"].replace("(", r"\(").replace(")", r"\)")):
                    whatif_document(con, doc, target, given)
            else:
                whatif_document(con, doc, target, given)


def terms(p: dict):
    yield from (("step", p["step_time_ns"]), ("compute", p["compute_ns"]), ("other", p["other_ns"]),
                ("bubble", p["bubble"]), ("bubble_replay", p["bubble_replay"]),
                ("memory", p["memory_per_device_bytes"]), ("activations", p["activation_bytes"]))
    yield from ((f"exposed {k}", v) for k, v in p["exposed_comm_ns"].items())
    yield from ((f"bytes {k}", v) for k, v in p["bytes_per_rank_per_step"].items())


TARGETS = ["microbatches=1", "microbatches=3", "microbatches=64", f"microbatches={MAX_ACTIONS // 8}",
           "virtual_stages=2", "virtual_stages=8", "virtual_stages=1000000", "layers=3", "layers=16",
           "pp_schedule=gpipe", "pp_schedule=1f1b,microbatches=2", "pp_schedule=interleaved_1f1b,virtual_stages=2",
           "pp_schedule=interleaved_1f1b,virtual_stages=4,layers=16,microbatches=64",
           "pp_schedule=interleaved_zero_bubble,microbatches=8", "pp_schedule=zbv_zero_bubble",
           "pp_schedule=dualpipe_v,microbatches=8", "pp=2", "pp=1", "pp=2,layers=8,pp_schedule=gpipe",
           "dp=2,pp=2", "tp=2,pp=2,zero_stage=1", "balanced", "balanced,microbatches=16", "dp=2,zero_stage=3"]


@pytest.mark.parametrize("run", ["pp4_gpipe_m4", "pp4_1f1b_heavy_m4", "pp4_gpipe_m4_memory", "pp4_interleaved_m4",
                                 "pp4_zbv_m8", "ddp4"])
@pytest.mark.slow
def test_no_forecast_term_is_negative(run):
    from traceparse.layout.stated import parse_stated

    forecasts = 0
    with open_run([RUNS / run]) as con:
        doc = document(con, 10, {})
        for text in TARGETS:
            target = {**parse_stated(text.replace("balanced", "").strip(",")), "balanced": "balanced" in text}
            try:
                p = whatif_document(con, doc, target)["prediction"]
            except TraceError:
                continue
            forecasts += 1
            negative = {k: v for k, v in terms(p) if v is not None and v < 0}
            assert not negative, (run, text, negative)
    assert forecasts >= len(TARGETS) // 2


def test_without_straggler_needs_a_named_one(cli):
    """A run whose imbalance check names no straggler has none to remove: one line with the check's reason."""
    refused(cli("whatif", RUNS / "ddp4", "--without-straggler"), "--without-straggler: the run has no named straggler")
    code, _, err = cli("whatif", RUNS / "ddp4", "--without-straggler", "--sweep")
    assert code == 2 and "--sweep" in err
