"""Charts are built from the analyze document and checked through their Vega-Lite spec, no browser.

Expected values come from the fixture runs' configuration (truth.json): the ranks, the profiled
steps, the pipeline's degree and micro-batches, the straggler and hot rank, the bytes sent.
"""

import copy
import json
from pathlib import Path

import pytest

from traceparse.document import analyze


class _Charts:
    """traceparse.render.charts, imported when a test first draws: altair's import takes about 2 s, which every
    worker would otherwise pay while collecting."""

    def __getattr__(self, name):
        if name.startswith("_"):  # what pytest asks of every name of a module while collecting
            raise AttributeError(name)
        import traceparse.render.charts as module

        return getattr(module, name)


ch = _Charts()

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    """doc(run) -> the analyze document of fixtures/runs/<run>, once per module."""
    docs = {}

    def get(run):
        if run not in docs:
            docs[run] = analyze([RUNS / run], db=tmp_path_factory.mktemp("store") / "s.duckdb")
        return docs[run]

    return get


def truth(run):
    return json.loads((RUNS / run / "truth.json").read_text())


def nodes(s):
    """Every (sub)chart of spec ``s``: itself, its layers, concatenations and facet specs."""
    yield s
    for key in ("layer", "hconcat", "vconcat", "concat"):
        for sub in s.get(key, []):
            yield from nodes(sub)
    if "spec" in s:
        yield from nodes(s["spec"])


def mark_of(node):
    m = node.get("mark")
    return m.get("type") if isinstance(m, dict) else m


def rows_of(s, mark=None) -> list:
    """The data rows of the (sub)charts of spec ``s`` drawn with ``mark``, from its named datasets."""
    return [row for n in nodes(s) if "data" in n and (mark is None or mark_of(n) == mark)
            for row in s["datasets"][n["data"]["name"]]]


def marks(s) -> set:
    return {mark_of(n) for n in nodes(s) if "mark" in n}


@pytest.mark.slow
def test_step_split_has_each_rank_and_profiled_step_split_three_ways(doc):
    t = truth("pp4_1f1b_m4")
    s = ch.spec(ch.step_split(doc("pp4_1f1b_m4")))
    rows = rows_of(s)
    assert s["mark"]["type"] == "bar" and s["encoding"]["x"]["stack"] == "zero"
    assert {r["rank"] for r in rows} == set(range(t["world_size"]))
    assert len({(r["rank"], r["step"]) for r in rows}) == t["world_size"] * t["profiled_steps"]
    assert {r["part"] for r in rows} == {"compute", "exposed communication", "idle"}
    assert s["encoding"]["color"]["field"] == "part" and s["encoding"]["x"]["field"] == "ms"


@pytest.mark.slow
def test_bubble_chart_draws_the_1f1b_formula_and_its_replay(doc):
    lay = truth("pp4_1f1b_m4")["layout"]
    p, m = lay["pp"], lay["microbatches"]
    s = ch.spec(ch.bubble_per_stage(doc("pp4_1f1b_m4")))
    bars, lines = rows_of(s, "bar"), rows_of(s, "rule")
    assert sorted(r["stage"] for r in bars) == list(range(p))
    # 1F1B with equal forward and backward cost idles (p - 1) / (m + p - 1) of the step; so does its replay
    assert [line["bubble"] for line in lines] == pytest.approx([(p - 1) / (m + p - 1)] * 2)
    assert len(lines) == 2 and any("formula" in line["what"] for line in lines)
    assert any("simulated" in line["what"] for line in lines)
    assert all(0 < r["measured"] < 1 for r in bars)


@pytest.mark.slow
def test_bubble_chart_is_left_out_without_a_pipeline(doc):
    assert truth("straggler_ddp4")["layout"]["pp"] == 1
    d = doc("straggler_ddp4")
    assert ch.bubble_per_stage(d) is None and "bubble" not in ch.charts(d)


@pytest.mark.slow  # over 2 s: the fast tier keeps its area's other tests
def test_heat_map_outlines_the_configured_straggler(doc):
    t = truth("straggler_ddp4")
    s = ch.spec(ch.imbalance_heatmap(doc("straggler_ddp4")))
    assert [p["title"] for p in s["hconcat"]] == ["step time (ms)", "compute (busy) (ms)", "compute floor (ms)",
                                                  "wait at collectives (ms)"]
    outlined = {(r["rank"], r["role"]) for r in rows_of(s, "rect") if "role" in r}
    assert outlined == {(t["imbalance"]["straggler_rank"], "straggler")}
    cells = [r for r in rows_of(s, "rect") if "value" in r]
    assert {(r["rank"], r["step"]) for r in cells} >= {(r, st) for r in range(t["world_size"])
                                                       for st in doc("straggler_ddp4")["run"]["steps"]}
    assert "rank 2 outlined: straggler" in s["title"]["subtitle"]


@pytest.mark.slow
def test_heat_map_outlines_the_configured_hot_expert_rank(doc):
    t = truth("ep4")
    s = ch.spec(ch.imbalance_heatmap(doc("ep4")))
    outlined = {(r["rank"], r["role"]) for r in rows_of(s, "rect") if "role" in r}
    assert outlined == {(t["imbalance"]["hot_rank"], "hot rank (most routed tokens)")}


@pytest.mark.slow  # over 2 s: the fast tier keeps its area's other tests
def test_heat_map_of_a_pipeline_has_no_wait_panel(doc):
    # send/recv are not matched across ranks: a pipeline-only run has no wait at collectives
    assert {c["op"] for c in truth("pp4_1f1b_m4")["comm"]} == {"send", "recv"}
    s = ch.spec(ch.imbalance_heatmap(doc("pp4_1f1b_m4")))
    assert [p["title"] for p in s["hconcat"]] == ["step time (ms)", "compute (busy) (ms)", "compute floor (ms)"]
    assert not [r for r in rows_of(s, "rect") if "role" in r]


@pytest.mark.slow
def test_overlap_chart_splits_each_configured_strategy(doc):
    strategies = {c["strategy"] for c in truth("dp2_tp2")["comm"]}
    s = ch.spec(ch.overlap_per_strategy(doc("dp2_tp2")))
    assert {(r["strategy"], r["part"]) for r in rows_of(s)} >= {(st, p) for st in strategies
                                                                for p in ("hidden", "exposed")}


def test_volume_chart_measures_the_configured_sends(doc):
    t = truth("pp4_1f1b_m4")
    sent = sum(c["bytes_in"] * c["count"] for c in t["comm"] if c["op"] == "send")
    s = ch.spec(ch.volume_per_strategy(doc("pp4_1f1b_m4")))
    got = {(r["strategy"], r["kind"]): r["MB"] for r in rows_of(s)}
    assert got[("pp", "measured")] == pytest.approx(sent / t["world_size"] / 1e6)
    assert s["mark"]["type"] == "bar" and s["encoding"]["column"]["field"] == "strategy"


@pytest.mark.slow  # over 2 s: the fast tier keeps its area's other tests
def test_timeline_has_a_compute_and_a_comm_lane_per_rank(doc):
    t = truth("dp2_tp2")
    d = doc("dp2_tp2")
    s = ch.spec(ch.step_timeline(d))
    bars = [r for r in rows_of(s, "bar") if "series" in r]
    assert {r["rank"] for r in bars} == set(range(t["world_size"]))
    assert {r["series"] for r in bars} == {"compute"} | {f"comm: {c['strategy']}" for c in t["comm"]}
    layer = s["layer"][-1]["encoding"]
    assert (layer["x"]["field"], layer["x2"]["field"], layer["y"]["field"]) == ("start_ms", "end_ms", "lane")
    assert all(r["end_ms"] >= r["start_ms"] for r in bars)
    assert str(d["timeline"]["step"]) in s["title"]["text"]


def test_unknown_values_are_left_out_never_zero(doc):
    d = copy.deepcopy(doc("pp4_1f1b_m4"))
    d["checks"]["overlap"]["per_strategy"]["pp"]["hidden_ns"] = None
    d["summary"]["per_step"][0]["compute_ns"] = None
    d["checks"]["bubble"]["per_stage"][0]["measured"] = None
    d["checks"]["comm_volume"]["per_strategy"]["pp"]["expected_volume_bytes"] = None
    assert {r["part"] for r in rows_of(ch.spec(ch.overlap_per_strategy(d)))} == {"exposed"}
    first = d["summary"]["per_step"][0]
    split = [r for r in rows_of(ch.spec(ch.step_split(d))) if (r["rank"], r["step"]) == (first["rank"], first["step"])]
    assert {r["part"] for r in split} == {"exposed communication", "idle"}
    assert 0 not in [r["stage"] for r in rows_of(ch.spec(ch.bubble_per_stage(d)), "bar")]
    assert {r["kind"] for r in rows_of(ch.spec(ch.volume_per_strategy(d)))} == {"measured"}


def test_a_chart_without_data_is_left_out(doc):
    d = copy.deepcopy(doc("pp4_1f1b_m4"))
    d["checks"]["overlap"]["per_strategy"] = {"pp": {"hidden_ns": None, "exposed_ns": None}}
    d["timeline"]["rows"] = []
    d["checks"]["bubble"]["per_stage"] = []
    assert list(ch.charts(d)) == ["step-split", "critical-path", "imbalance", "volume"]
    d["critical_path"] = {"status": "not_applicable", "reason": "no step every rank has a window for", "steps": []}
    assert list(ch.charts(d)) == ["step-split", "imbalance", "volume"]
