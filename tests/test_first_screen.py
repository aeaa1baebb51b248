"""The text report's first screen fits a terminal on any job: a 64-rank replica of ddp4 (bench/replicate.py)
reports in under 60 lines, its per-rank tables summarized (min / median / max rank, the ranks a check names,
the ranks beyond the spread listed) behind a one-line hint; ``--full`` prints every rank, JSON is whole, and a
run of up to 8 ranks reads as before."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceparse.cli import main
from traceparse.render.text import SMALL_RUN, render

pytestmark = pytest.mark.slow  # builds a 64-rank replica of ddp4 (bench/replicate.py)

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "runs"
RANKS = 64
FIRST_SCREEN = 60


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    """(the 64-rank run's folder, its store): replicated once, loaded once."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import replicate  # bench/ is no package
    finally:
        sys.path.remove(str(ROOT / "bench"))
    root = tmp_path_factory.mktemp("r64")
    replicate.replicate(RUNS / "ddp4", root / "run", RANKS)
    return root / "run", root / "store.duckdb"


def analyze(replica, *args):
    run, store = replica
    r = CliRunner().invoke(main, ["analyze", str(run), "--db", str(store), "-q", *args])
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.fixture(scope="module")
def replica_doc(replica):
    return json.loads(analyze(replica, "--format", "json"))


def table_ranks(text: str, title: str, column: int = 0) -> set[int]:
    """The ranks in ``column`` of the table under the line starting with ``title``."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(title))
    out = set()
    for line in lines[at + 3:]:
        if not line.strip() or not line[0].isdigit():
            break
        out.add(int(line.split()[column]))
    return out


def test_the_first_screen_of_64_ranks_fits_a_terminal(replica):
    text = analyze(replica)
    lines = text.splitlines()
    assert len(lines) < FIRST_SCREEN, text
    assert "findings: " in text and "checks (explain: <check>)" in text and "load issues: none" in text
    # the per-rank tables summarized, with the hint that names --full
    hint = next(line for line in lines if line.startswith(f"({RANKS} ranks: min / median / max by step mean"))
    assert hint.endswith("--full)")
    rows = table_ranks(text, "per rank, per step, summarized")
    assert 3 <= len(rows) < 8
    assert not any(line.startswith("busy time per thread") for line in lines)  # behind --full


def test_full_prints_every_rank(replica):
    text = analyze(replica, "--full")
    every = set(range(RANKS))
    assert table_ranks(text, "imbalance per rank, per step") == every
    assert table_ranks(text, "per rank: totals over its step windows") == every
    assert table_ranks(text, "busy time per thread / stream") == every
    assert "--full" not in text  # nothing left out, nothing to point at


def test_json_is_whole(replica_doc):
    s = replica_doc["summary"]
    assert {r["rank"] for r in s["per_rank"]} == set(range(RANKS))
    assert {t["rank"] for t in s["threads"]} == set(range(RANKS))
    assert len(s["top_kernels"]) == 10  # --top's default, whatever the text shows


def test_the_summary_shows_min_median_max_and_the_ranks_a_check_names(replica_doc):
    doc = copy.deepcopy(replica_doc)
    step = {r["rank"]: r["step_mean_ns"] for r in doc["checks"]["imbalance"]["per_rank"]}
    ordered = sorted(step, key=lambda r: (step[r], r))
    doc["checks"]["imbalance"]["straggler_rank"] = 40
    doc["checks"]["memory"]["findings"] = ["Rank 17 peaks highest."]
    text = render(doc)
    rows = {int(line.split()[0]): line.split()[1] for line in text.splitlines()
            if re.match(r"^\d+ \((min|median|max|named)\)", line)}
    assert rows[ordered[0]] == "(min)" and rows[ordered[-1]] == "(max)"
    assert rows[ordered[(len(ordered) - 1) // 2]] == "(median)"
    assert rows[40] == "(named)" and rows[17] == "(named)"
    assert "and the ranks a check names" in text


def test_kernels_follow_an_explicit_top(replica):
    text = analyze(replica, "--top", "7")
    assert "the heaviest" not in text  # --top given: that many, whatever the run's size
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("heaviest kernels / ops"))
    assert len([line for line in lines[at + 3:] if line.strip()]) == 7 + 1  # the rows, then the load issues line


def test_pipeline_stages_summarize_to_one_row_per_stage(replica_doc):
    doc = copy.deepcopy(replica_doc)
    doc["checks"]["imbalance"]["pp_stages"] = [
        {"stage": r // 16, "rank": r, "compute_ns": 1000 * r, "compute_per_microbatch_ns": 100 * r,
         "compute_floor_per_microbatch_ns": 50 * r} for r in range(RANKS)]
    text = render(doc)
    assert table_ranks(text, "pipeline stages, per micro-batch", 1) == {15, 31, 47, 63}  # each stage's heaviest
    assert f"({RANKS} ranks in 4 stages; all of them: --full)" in text
    assert len(table_ranks(render(doc, full=True), "pipeline stages, per micro-batch", 1)) == RANKS


@pytest.mark.parametrize("run", ["ddp4"])
def test_small_runs_print_every_table_as_before(run, tmp_path):
    r = CliRunner().invoke(main, ["analyze", str(RUNS / run), "--db", str(tmp_path / "s.duckdb"), "-q"])
    assert r.exit_code == 0, r.output
    doc = json.loads(CliRunner().invoke(main, ["analyze", str(RUNS / run), "--db", str(tmp_path / "s.duckdb"),
                                               "--format", "json"]).stdout)
    assert len(doc["summary"]["per_rank"]) <= SMALL_RUN
    assert r.stdout.rstrip("\n") == render(doc, full=True)
    assert "--full" not in r.stdout


def test_a_pipeline_of_64_stages_lists_the_spread_and_the_heavy_stage(tmp_path):
    """pp4_1f1b_m4 replicated to 64 ranks is one 64-stage pipeline: its stages table shows the stages with the least,
    median and most compute floor and the stage the checks call heavy; --full lists all 64."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import replicate
    finally:
        sys.path.remove(str(ROOT / "bench"))
    replicate.replicate(RUNS / "pp4_1f1b_m4", tmp_path / "run", RANKS)
    pair = (tmp_path / "run", tmp_path / "store.duckdb")
    doc = json.loads(analyze(pair, "--format", "json"))
    stages = {r["stage"] for r in doc["checks"]["imbalance"]["pp_stages"]}
    assert stages == set(range(RANKS))
    shown = table_ranks(analyze(pair), "pipeline stages, per micro-batch")
    assert 3 <= len(shown) <= 4 and doc["checks"]["imbalance"]["heavy_stage"] in shown
    assert table_ranks(analyze(pair, "--full"), "pipeline stages, per micro-batch") == stages
