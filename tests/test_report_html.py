"""The post-mortem page (``analyze --format html -o``) in real headless Chromium: one file that makes no
request, the findings first, every chart the document has data for drawn, names from a trace shown as
text and never run; and the screenshot of the README and docs/report.md."""

import gzip
import html as markup
import json
import re
import sys
from pathlib import Path

import browser
import pytest
from click.testing import CliRunner
from conftest import public_trace

from traceparse.cli import main
from traceparse.document import analyze


def charts(doc):
    """The page's charts (imported here, not at collection: altair's import takes about 2 s)."""
    from traceparse.render.charts import charts as made

    return made(doc)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "runs"
PUBLIC_DDP = "tracelens/mi300_resnet_ddp_rank0.json.gz"  # one rank of an 8-GPU DDP job


def configuration(name) -> tuple[int, int]:
    """(ranks loaded, pipeline degree): from truth.json for a fixture run; the public trace is one rank
    of a data-parallel job."""
    if name == "public":
        return 1, 1
    t = json.loads((RUNS / name / "truth.json").read_text())
    return t["world_size"], t["layout"]["pp"]


def charts_called_for(name) -> int:
    """Every run here has step windows and tagged communication: the step split, the timeline, the critical path,
    the overlap and the volume charts; more than one rank adds the imbalance heat map, a pipeline the bubble
    chart."""
    ranks, pp = configuration(name)
    return 5 + (ranks > 1) + (pp > 1)


def sections_with_data(doc) -> set:
    """The charts whose document sections hold data."""
    c = doc["checks"]
    has = {
        "step-split": bool(doc["summary"]["per_step"]),
        "timeline": bool(doc["timeline"]["rows"]),
        "critical-path": any(s["segments"] for s in (doc.get("critical_path") or {}).get("steps") or []),
        "imbalance": c["imbalance"]["status"] != "not_applicable",
        "bubble": any(s["measured"] is not None for s in c["bubble"].get("per_stage") or []),
        "overlap": any(v.get("hidden_ns") is not None or v.get("exposed_ns") is not None
                       for v in (c["overlap"].get("per_strategy") or {}).values()),
        "volume": any(v.get("measured_volume_bytes") is not None or v.get("expected_volume_bytes") is not None
                      for v in (c["comm_volume"].get("per_strategy") or {}).values()),
    }
    return {k for k, v in has.items() if v}


def write_page(paths, out: Path, db: Path) -> str:
    r = CliRunner().invoke(main, ["analyze", *map(str, paths), "--db", str(db), "--format", "html", "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """page(name) -> (document, path of its page, page HTML), written once per module."""
    made = {}

    def get(name):
        if name not in made:
            tmp = tmp_path_factory.mktemp(name)
            paths = [public_trace(PUBLIC_DDP)] if name == "public" else [RUNS / name]
            html = write_page(paths, tmp / "report.html", tmp / "s.duckdb")
            made[name] = (analyze(paths, db=tmp / "s.duckdb"), tmp / "report.html", html)
        return made[name]

    return get


NAMES = ["pp4_1f1b_m4", "straggler_ddp4", "dp2_tp2", "public"]


@pytest.mark.parametrize("name", NAMES)
def test_the_page_draws_every_chart_offline(page, browser_page, name, tmp_path):
    doc, path, html = page(name)
    assert list(charts(doc)) == [cid for cid in re.findall(r'<div class="chart" id="([^"]+)"', html)]
    assert set(charts(doc)) == sections_with_data(doc) and len(charts(doc)) == charts_called_for(name)
    seen = browser_page(path, screenshot=tmp_path / "page.png", width=1200)
    assert seen.console_errors == [] and seen.page_errors == []
    assert seen.requests == [] and seen.dialogs == []
    assert seen.chart_errors == 0 and seen.charts == charts_called_for(name)
    assert browser.not_blank(seen.screenshot)
    text = seen.text
    assert text.index("Findings") < text.index("Evidence") < text.index("Full report")


@pytest.mark.parametrize("name", ["pp4_1f1b_m4", "straggler_ddp4"])
def test_findings_come_first_worst_first(page, name):
    doc, _, html = page(name)
    findings = html[html.index('<section id="findings">'):html.index('<section id="charts">')]
    order = {"fail": 0, "warn": 1, "ok": 2, "not_applicable": 3}
    statuses = re.findall(r'<span class="status [a-z_]+">([a-z_]+)</span>', findings)
    assert statuses == sorted((c["status"] for c in doc["checks"].values()), key=order.get)
    for c in doc["checks"].values():
        for sentence in c["findings"]:
            assert markup.escape(sentence, quote=True) in findings
    assert '<script src' not in html and 'http-equiv="Content-Security-Policy"' in html


def test_the_pipeline_page_names_its_bubble_first(page):
    # the configured 4-stage 1F1B pipeline with m=4 idles (p - 1) / (m + p - 1) = 3/7 of a step at best; on gloo
    # its send/recv run inline, so what the excess costs is reported, not graded: the bubble is the first check the
    # findings name, at ok, and the pp communication the replay prices is the first cause
    _, _, html = page("pp4_1f1b_m4")
    findings = html[html.index('<section id="findings">'):html.index('<section id="charts">')]
    checks = re.findall(r'<span class="status [a-z_]+">[a-z_]+</span> <b>([a-z_]+)</b>', findings)
    assert checks[0] == "bubble"
    assert '<span class="status ok">ok</span> <b>bubble</b>' in findings
    assert f"{3 / 7:.1%}" in findings and "(reported, not graded)" in findings
    assert findings.index("pp communication") < findings.index("<b>bubble</b>")


HOSTILE = {"aten::linear": "</script><script>alert(1)</script>", "aten::sqrt": "<img src=x onerror=alert(2)>",
           "DistributedDataParallel.forward": '"><svg onload=alert(3)>'}


def hostile_copy(tmp_path) -> list[Path]:
    """fixtures/runs/ddp2 with kernel and annotation names, its folder and its file names made of markup."""
    folder = tmp_path / "run</script><script>alert(4)</script>"  # the slashes make folders: the path holds it
    folder.mkdir(parents=True)
    out = []
    for src in sorted((RUNS / "ddp2").glob("rank*.json.gz")):
        trace = json.load(gzip.open(src))
        for e in trace["traceEvents"]:
            e["name"] = HOSTILE.get(e.get("name"), e.get("name"))
        dst = folder / f"<img src=x onerror=alert(5)>{src.name.removesuffix('.gz')}"
        dst.write_text(json.dumps(trace))
        out.append(dst)
    return out


def test_names_from_a_trace_show_as_text_and_run_nothing(browser_page, tmp_path):
    paths = hostile_copy(tmp_path)
    html = write_page(paths, tmp_path / "page.html", tmp_path / "s.duckdb")
    assert "<script>alert" not in html and "<img src=x" not in html and "<svg onload" not in html
    assert "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)" in html  # reached a chart's data, escaped
    seen = browser_page(tmp_path / "page.html")
    assert seen.dialogs == [] and seen.page_errors == [] and seen.console_errors == [] and seen.requests == []
    assert seen.chart_errors == 0 and seen.charts == 6  # the five of a tagged run, and the critical path
    assert HOSTILE["aten::linear"] in seen.text  # the heaviest-ops table shows the kernel's name as text
    assert str(paths[0]) in seen.text or paths[0].name in seen.text


def png_size(png: Path) -> tuple[int, int]:
    head = png.read_bytes()[16:24]
    return int.from_bytes(head[:4], "big"), int.from_bytes(head[4:], "big")


def test_readme_screenshot(browser_page, tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import screenshots

    assert browser_page  # skips without Chromium or Playwright
    seen = screenshots.report_png(tmp_path / "report.png")
    assert seen.console_errors == [] and seen.requests == [] and seen.charts == charts_called_for("pp4_1f1b_m4")
    for png in (tmp_path / "report.png", ROOT / "docs" / "img" / "report.png"):
        assert browser.not_blank(png) and png.stat().st_size < 400_000
        assert png_size(png) == (screenshots.WIDTH, screenshots.HEIGHT)
