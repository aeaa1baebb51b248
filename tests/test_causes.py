"""Why the steps are slow (traceparse/document/causes.py): the causes the checks priced by replay in one list, the
costliest first, on a run whose slow rank is known from its configuration, and as the report's first lines."""

import json

from conftest import FIXTURE_RUNS

from traceparse.document import analyze
from traceparse.document.causes import causes
from traceparse.render.text import render


def test_the_causes_are_the_checks_priced_causes_costliest_first():
    checks = {
        "imbalance": {"cost": {"cause": {"rank": 3, "kind": "stall", "saved_per_step_ns": 2_000_000, "share": 0.02,
                                         "steps_seen": 1, "steps": 1}}},
        "overlap": {"per_strategy": {
            "dp": {"cost": {"saved_per_step_ns": 9_000_000, "share": 0.09}, "cannot_hide": None},
            "pp": {"cost": {"saved_per_step_ns": 5_000_000, "share": 0.05}, "cannot_hide": "inline"},
            "tp": {"cost": {"saved_per_step_ns": 0, "share": 0.0}, "cannot_hide": None},  # costs nothing: left out
        }},
    }
    got = causes(checks)
    assert [(c["check"], c["cause"]) for c in got] == [("overlap", "dp communication"), ("overlap", "pp communication"),
                                                      ("imbalance", "rank 3")]
    assert got[1]["note"] == "cannot be hidden here: inline"
    assert got[2]["note"].endswith("seen once")
    assert causes({}) == []


def test_a_runs_slow_rank_is_its_first_cause_and_the_reports_first_line():
    """straggler_ddp4: rank 2 does extra matmuls every step (its configuration, truth.json)."""
    run = FIXTURE_RUNS / "straggler_ddp4"
    slow = json.loads((run / "truth.json").read_text())["imbalance"]["straggler_rank"]
    doc = analyze([run], use_cache=False)
    first = doc["causes"][0]
    assert (first["check"], first["cause"], first["kind"]) == ("imbalance", f"rank {slow}", "work")
    assert first["share"] == doc["checks"]["imbalance"]["cost"]["cause"]["share"]
    shares = [c["share"] for c in doc["causes"]]
    assert shares == sorted(shares, reverse=True)
    lines = render(doc).splitlines()
    assert lines[3].startswith(f"why the steps are slow, by replay (explain: causes): rank {slow} costs ")
    assert lines[4].startswith("  then dp communication costs ")


def test_a_heavy_pipeline_stage_is_priced_by_replay():
    """pp4_1f1b_heavy_m4: stage 2 runs more layers (its configuration, truth.json). Its ops at the mean stage's
    compute shorten every step, by no more than the stage's measured compute."""
    run = FIXTURE_RUNS / "pp4_1f1b_heavy_m4"
    heavy = json.loads((run / "truth.json").read_text())["imbalance"]["heavy_stage"]
    doc = analyze([run], use_cache=False)
    imb = doc["checks"]["imbalance"]
    assert imb["heavy_stage"] == heavy
    cost = imb["heavy_stage_cost"]
    most = max(p["compute_ns"] for p in imb["pp_stages"] if p["stage"] == heavy)
    assert all(0 < s["saved_ns"] <= most for s in cost["per_step"])
    (cause,) = [c for c in doc["causes"] if c["cause"] == f"pipeline stage {heavy}"]
    assert cause["saved_per_step_ns"] == cost["saved_per_step_ns"]
    assert "By replay, its ops at the mean stage's compute would save" in " ".join(imb["findings"])
