"""A run history recorded from real fixture runs through the CLI, as CI records one: ddp4 (commit=a)
then straggler_ddp4 (commit=b) as job llama-8b, and dp2_tp2 under a job label that is markup. Each
run writes its HTML report with ``-o`` beside the history. Shared by test_history and test_dashboard
(the ``recorded_history`` fixture of conftest) and scripts/screenshots.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from traceparse.cli import main

RUNS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
JOB = "llama-8b"
MARKUP = "</script><script>alert(1)</script>"
RUNS = (
    ("ddp4", {"commit": "a", "job": JOB}),
    ("straggler_ddp4", {"commit": "b", "job": JOB}),
    ("dp2_tp2", {"commit": "a", "job": MARKUP}),
)


@dataclass
class Recorded:
    path: Path  # the history
    folder: Path  # where it, the reports and the stores lie
    runs: list[tuple[str, dict, Path]]  # (fixture run, labels, report), in recording order

    def truth(self, name: str) -> dict:
        return json.loads((RUNS_DIR / name / "truth.json").read_text())


def labels_args(labels: dict) -> list[str]:
    return [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]


def record_fixture_runs(folder: Path) -> Recorded:
    path, runs = folder / "history.duckdb", []
    for name, labels in RUNS:
        report = folder / f"{name}.html"
        r = CliRunner().invoke(main, ["analyze", str(RUNS_DIR / name), "--db", str(folder / f"{name}.duckdb"),
                                      "--format", "html", "-o", str(report), "--record", str(path),
                                      *labels_args(labels)])
        assert r.exit_code == 0, r.output
        runs.append((name, labels, report))
    return Recorded(path, folder, runs)
