"""Charts are built from the analyze document and checked through their Vega-Lite spec."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceparse.cli import main
from traceparse.report.charts import bubble_per_stage, charts, overlap_per_strategy, step_time_per_rank

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "pp4_1f1b_heavy_m4"
pytestmark = pytest.mark.skipif(not RUN.exists(), reason="fixture run not generated")


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    r = CliRunner().invoke(main, ["analyze", str(RUN), "--format", "json",
                                  "--db", str(tmp_path_factory.mktemp("c") / "s.duckdb")])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def values(spec):
    return spec["data"]["values"] if "data" in spec else spec["layer"][0]["data"]["values"]


def test_step_time_chart_has_one_bar_per_rank(doc):
    spec = step_time_per_rank(doc).to_dict()
    got = {v["rank"]: v["ms"] for v in values(spec)}
    assert got == {r["rank"]: r["step_mean_ns"] / 1e6 for r in doc["summary"]["per_rank"]}
    assert spec["mark"]["type"] == "bar"


def test_overlap_chart_splits_each_strategy_into_hidden_and_exposed(doc):
    spec = overlap_per_strategy(doc).to_dict()
    per = doc["checks"]["overlap"]["per_strategy"]
    assert {(v["strategy"], v["part"]) for v in values(spec)} == {(s, p) for s in per for p in ("hidden", "exposed")}


def test_bubble_chart_draws_the_expected_line(doc):
    spec = bubble_per_stage(doc).to_dict()
    assert [v["stage"] for v in values(spec)] == [s["stage"] for s in doc["checks"]["bubble"]["per_stage"]]
    assert spec["layer"][1]["data"]["values"] == [{"expected": doc["checks"]["bubble"]["expected"]}]


def test_html_page_embeds_every_chart(doc, tmp_path):
    r = CliRunner().invoke(main, ["analyze", str(RUN), "--format", "html", "--db", str(tmp_path / "s.duckdb")])
    assert r.exit_code == 0
    assert r.output.count('class="chart"') == len(charts(doc))
