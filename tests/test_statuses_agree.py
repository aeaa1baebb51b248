"""The summary line, the findings and every section agree on each check's status: the findings' head counts the
checks at warn or fail and names every other section at warn or fail (the GPU section), each check's line in the
text report carries the document's status, and the page's head says the same."""

from __future__ import annotations

import re

import pytest
from conftest import FIXTURE_RUNS, fast_few, needed, public_trace_files

from traceparse.render.html import findings as html_findings
from traceparse.render.text import render, render_findings
from traceparse.status import at_least

RUNS = ["ddp2", "straggler_ddp4", "pp4_1f1b_m4", "quiet_ep2", "dp2_tp2"]


def agree(d: dict):
    text = render(d)
    flagged = [c for c, v in d["checks"].items() if at_least(v["status"], "warn")]
    head = text[text.index("findings: "):].splitlines()
    if flagged:
        assert head[0] == f"findings: {len(flagged)} of {len(d['checks'])} checks at warn or fail (explain: <check>)"
    else:
        assert head[0] == "findings: no check at warn or fail"
    gpu = (d.get("gpu") or {}).get("status") or "not_applicable"
    gpu_flagged = gpu in ("warn", "fail")
    assert any(line.startswith(f"  gpu: {gpu} (its findings") for line in head[:60]) == gpu_flagged
    for cid, c in d["checks"].items():  # the checks section: one line per check, with its status
        assert re.search(rf"^  {re.escape(cid)}: {c['status']}\b", text, re.MULTILINE), cid
    if gpu != "not_applicable":
        assert f"gpu [{gpu}]" in text
    page = html_findings(d)
    assert ("no check at warn or fail" in page) == (not flagged)
    assert (f"gpu: {gpu} (its section below)" in page) == gpu_flagged


@pytest.mark.parametrize("name", fast_few(RUNS))
def test_statuses_agree_on_bundled_runs(doc, name):
    agree(doc(FIXTURE_RUNS / name))


@pytest.mark.slow
@pytest.mark.parametrize("path", public_trace_files(), ids=lambda p: p.name.split(".")[0])
def test_statuses_agree_on_public_gpu_traces(doc, path):
    agree(doc(needed(path)))


def test_a_gpu_section_at_warn_is_said_beside_no_check_at_warn(doc):
    """The contradiction this guards: 'no check at warn or fail' above a `gpu [warn]`."""
    d = {**doc(FIXTURE_RUNS / "ddp2")}
    d["checks"] = {k: {**v, "status": "ok", "findings": []} for k, v in d["checks"].items()}
    d["gpu"] = {**(d.get("gpu") or {}), "status": "warn"}
    lines = render_findings(d).splitlines()
    assert lines == ["findings: no check at warn or fail",
                         "  gpu: warn (its findings in its section, after the checks)"]
    assert "no check at warn or fail; gpu: warn (its section below)" in html_findings(d)
