"""Tagging rules: the rule files themselves, and the tags on real GPU traces whose truth is
known from their source (see fixtures/public_traces.toml)."""

import json

import pytest
from click.testing import CliRunner
from conftest import public_trace

from traceparse.cli import main
from traceparse.load.run import open_run
from traceparse.store.schema import FEATURES as COLUMNS
from traceparse.tagging.rules import load_rules, matches, validate

RULES = load_rules()


def test_rule_files_are_valid():
    assert validate() == []


def test_rules_validate_command():
    r = CliRunner().invoke(main, ["rules", "validate"])
    assert r.exit_code == 0, r.output
    assert f"{len(RULES)} rule files valid" in r.output


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_rule_examples(rule):
    from traceparse.store.build import macro_connection

    con = macro_connection()
    for ex in rule.must_match:
        assert matches(con, rule, ex), ex
    for ex in rule.must_not_match:
        assert not matches(con, rule, ex), ex
    assert rule.id == rule.file.removesuffix(".toml")
    assert "docs/parallelism.md" in rule.why


def test_rules_name_only_known_feature_columns():
    for rule in RULES:
        for ex in rule.must_match + rule.must_not_match:
            assert set(ex) <= set(COLUMNS), (rule.id, ex)


def test_explain_prints_a_rule():
    r = CliRunner().invoke(main, ["explain", "p2p_chain"])
    assert r.exit_code == 0
    assert "docs/parallelism.md 3.2" in r.output and "when:" in r.output


def tags_of(rel):
    with open_run([public_trace(rel)], use_cache=False) as con:
        return con.execute("SELECT op, strategy, variant, count(*) FROM comm_ops GROUP BY ALL").fetchall(), \
            {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM layout").fetchall()}


def test_vllm_tp8_inference_is_tp_or_unknown_never_dp():
    tags, _ = tags_of("tracelens/b200_vllm_tp8_rank0.json.gz")
    assert {s for _, s, _, _ in tags} <= {"tp", None}
    assert any(op == "all_reduce" and s == "tp" for op, s, _, _ in tags)


@pytest.mark.slow
def test_resnet_ddp_all_reduces_are_dp():
    tags, _ = tags_of("tracelens/mi300_resnet_ddp_rank0.json.gz")
    assert {s for op, s, _, _ in tags if op in ("all_reduce", "broadcast")} == {"dp"}
    assert {s for _, s, _, _ in tags} <= {"dp", None}


def test_deepseek_deepep_kernels_are_ep():
    tags, layout = tags_of("deepseek/dsv3_ep64_dualpipe_rank0.json.gz")
    assert {(op, s, v) for op, s, v, _ in tags} == {("all_to_all", "ep", "moe")}
    assert layout["ep"] == 64  # the world of the trace (world_size 64): DeepEP spans it


@pytest.mark.slow
def test_recommendation_embedding_all_to_all_is_ep_and_all_reduce_is_dp():
    tags, layout = tags_of("hta/trace_diff/control/control.json.gz")
    by_op = {op: (s, v) for op, s, v, _ in tags}
    assert by_op["all_to_all"] == ("ep", "embedding")
    assert by_op["all_reduce"][0] == "dp"
    assert "pp" not in {s for _, s, _, _ in tags}
    assert layout["pp"] == 1


def test_single_gpu_training_has_no_strategy():
    tags, layout = tags_of("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")
    assert tags == []
    assert all(layout[k] == 1 for k in ("tp", "pp", "cp", "sp", "ep"))


@pytest.mark.slow
def test_layout_command_checks_a_stated_layout(tmp_path):
    from pathlib import Path

    run = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "dp2_tp2"
    if not run.exists():
        pytest.skip("fixture run dp2_tp2 not generated")
    r = CliRunner().invoke(main, ["layout", str(run), "--layout", "dp=2,tp=4,kv_heads=1", "--format", "json",
                                  "--db", str(tmp_path / "s.duckdb")])
    assert r.exit_code == 1, r.output  # tp contradicts the trace (tests/test_layout_exit.py)
    doc = json.loads(r.stdout)
    status = {c["key"]: c["status"] for c in doc["layout_check"]["stated"]}
    assert status == {"dp": "agrees", "tp": "contradicts"}
    assert any("key/value heads" in w for w in doc["layout_check"]["lint"])
