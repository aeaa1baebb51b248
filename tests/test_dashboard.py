"""``traceparse dashboard``: the page of the fixture runs' history (tests/history_runs.py), read as HTML
and in real headless Chromium."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from browser import not_blank
from click.testing import CliRunner
from history_runs import JOB, MARKUP

from traceparse.history import store as history
from traceparse.cli import main

pytestmark = pytest.mark.slow

DEGREES = ("dp", "tp", "pp", "cp", "sp", "ep")
ROOT = Path(__file__).resolve().parents[1]


def write_dashboard(history_path: Path, page: Path):
    r = CliRunner().invoke(main, ["dashboard", str(history_path), "-o", str(page)])
    assert r.exit_code == 0, r.output


def specs_of(page: str) -> dict:
    return json.loads(re.search(r"^const specs = (.*);$", page, re.M).group(1))


def points(spec: dict) -> list[dict]:
    return spec["layer"][1]["data"]["values"] if "data" in spec["layer"][1] else spec["data"]["values"]


def expected_groups(recorded) -> set[str]:
    """The metric groups with a direction that the fixture runs have, from their truth.json: step time, imbalance
    and what the costliest rank costs (cost) always, per-strategy groups for each parallel degree above 1, the
    bubble with a pipeline."""
    layouts = [recorded.truth(name)["layout"] for name, _, _ in recorded.runs]
    strategies = any(lay[k] > 1 for lay in layouts for k in DEGREES)
    return ({"step_time", "imbalance", "cost"} | ({"exposed_comm", "overlap", "volume"} if strategies else set())
            | ({"bubble"} if any(lay["pp"] > 1 for lay in layouts) else set()))


@pytest.fixture(scope="module")
def page(recorded_history):
    """The dashboard written beside the runs' reports."""
    out = recorded_history.folder / "dashboard.html"
    write_dashboard(recorded_history.path, out)
    return out.read_text()


def test_one_chart_per_metric_group_of_the_runs(page, recorded_history):
    specs = specs_of(page)
    assert set(specs) == {f"chart-{g}" for g in expected_groups(recorded_history)}
    assert page.count('class="chart"') == len(specs)


def test_the_straggler_run_is_the_regression_marked_and_listed(page, recorded_history):
    straggler = next(r["run_id"] for r in history.read(recorded_history.path).runs if r["labels"]["commit"] == "b")
    table = re.search(r'<table class="dash" id="regression-table">(.*?)</table>', page, re.S).group(1)
    rows = re.findall(r'<tr class="regressed"><td>(\d+)</td><td class="labels">([^<]*)</td><td>([^<]*)</td>'
                      r"<td>\d+</td><td>[^<]*</td><td>([^<]*)</td>", table)
    assert rows and {int(run) for run, *_ in rows} == {straggler}
    assert {labels for _, labels, _, _ in rows} == {f"commit=b job={JOB}"}
    rank = recorded_history.truth("straggler_ddp4")["imbalance"]["straggler_rank"]
    assert ("imbalance.straggler", f"rank {rank}") in {(m, after) for _, _, m, after in rows}
    marked = {(p["run"], p["group"]) for s in specs_of(page).values() for p in points(s) if p["regressed"]}
    assert {run for run, _ in marked} == {straggler} and ("imbalance" in {g for _, g in marked})


def test_points_link_to_their_reports_beside_the_dashboard(page, recorded_history, tmp_path):
    runs = history.read(recorded_history.path).runs
    want = {r["run_id"]: report.name for r, (_, _, report) in zip(runs, recorded_history.runs, strict=True)}
    got = {p["run"]: p["href"] for s in specs_of(page).values() for p in points(s)}
    assert got == want
    elsewhere = tmp_path / "d.html"
    write_dashboard(recorded_history.path, elsewhere)  # not beside the reports: absolute file: URLs
    hrefs = {p["href"] for s in specs_of(elsewhere.read_text()).values() for p in points(s)}
    assert hrefs == {report.resolve().as_uri() for _, _, report in recorded_history.runs}


def test_labels_reach_the_page_only_escaped(page):
    assert MARKUP not in page and "<script>alert" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count('<option value="') == 1 + 2  # every series, then the two jobs


@pytest.mark.parametrize("kind", ["missing", "text"])
def test_a_path_that_is_not_a_history_exits_2(kind, tmp_path):
    target = tmp_path / "h.duckdb"
    if kind == "text":
        target.write_text("not a history\n")
    r = CliRunner().invoke(main, ["dashboard", str(target), "-o", str(tmp_path / "d.html")])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "d.html").exists()


def test_the_page_in_chromium(recorded_history, browser_page, tmp_path):  # noqa: ARG001 -- skips without Chromium
    sys.path.insert(0, str(ROOT / "scripts"))
    import screenshots  # docs/dashboard.md's screenshot, taken here into a temporary folder

    png = tmp_path / "dashboard.png"
    seen = screenshots.dashboard_png(recorded_history, png)
    assert seen.console_errors == [] and seen.page_errors == []
    assert seen.requests == [] and seen.dialogs == []
    assert seen.charts == len(expected_groups(recorded_history)) and seen.chart_errors == 0
    assert MARKUP in seen.text  # the label shown as text, and nothing ran
    assert not_blank(png) and png.stat().st_size < 400_000
    assert int.from_bytes(png.read_bytes()[16:20], "big") == screenshots.WIDTH  # PNG IHDR width
