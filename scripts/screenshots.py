"""The screenshots of the README and docs/: the post-mortem page (docs/img/report.png) and the dashboard
(docs/img/dashboard.png).

    python scripts/screenshots.py [--only report|dashboard] [--out-dir docs/img]

The report: the page of fixtures/runs/pp4_1f1b_m4 (a 4-stage 1F1B pipeline with its bubble) as
``traceparse analyze fixtures/runs/pp4_1f1b_m4 --format html -o PAGE`` writes it, opened in headless
Chromium (tests/browser.py: Debian's chromium driven by Playwright) 1200 px wide, the top 1600 px
kept: the findings, the step split, the timeline and the heat map. The dashboard: the fixture runs of
tests/history_runs.py (ddp4 as commit=a, then straggler_ddp4 as commit=b, job llama-8b; dp2_tp2 under
another job) recorded with ``traceparse analyze ... -o REPORT --record HISTORY --label ...``, and
``traceparse dashboard HISTORY -o PAGE`` written beside the reports. tests/test_report_html.py and
tests/test_dashboard.py take the same shots into temporary folders.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import browser  # noqa: E402

RUN = ROOT / "fixtures" / "runs" / "pp4_1f1b_m4"
OUT = ROOT / "docs" / "img" / "report.png"
DASHBOARD = ROOT / "docs" / "img" / "dashboard.png"
WIDTH, HEIGHT = 1200, 1600


def report_png(out: Path = OUT, run: Path = RUN) -> browser.Seen:
    """Write the page of ``run`` to a temporary folder and its screenshot to ``out``; what the browser saw."""
    from click.testing import CliRunner

    from traceparse.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        r = CliRunner().invoke(main, ["analyze", str(run), "--db", str(Path(tmp) / "s.duckdb"), "--format", "html",
                                      "-o", str(page), "-q"])
        if r.exit_code != 0:
            raise SystemExit(f"traceparse analyze failed ({r.exit_code}): {r.output}")
        out.parent.mkdir(parents=True, exist_ok=True)
        return browser.open_page(page, screenshot=out, width=WIDTH, height=HEIGHT)


def write_dashboard(history: Path, page: Path):
    from click.testing import CliRunner

    from traceparse.cli import main

    r = CliRunner().invoke(main, ["dashboard", str(history), "-o", str(page)])
    if r.exit_code != 0:
        raise SystemExit(f"traceparse dashboard failed ({r.exit_code}): {r.output}")


def dashboard_png(recorded, out: Path = DASHBOARD) -> browser.Seen:
    """Write the dashboard of ``recorded`` (history_runs.Recorded) beside its reports and its screenshot to
    ``out``; what the browser saw."""
    page = recorded.folder / "dashboard.html"
    write_dashboard(recorded.path, page)
    out.parent.mkdir(parents=True, exist_ok=True)
    return browser.open_page(page, screenshot=out, width=WIDTH)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["report", "dashboard"], help="take one of the two (default: both)")
    ap.add_argument("--out-dir", type=Path, default=OUT.parent, help="where the PNGs go (default docs/img)")
    args = ap.parse_args(argv)
    why = browser.missing()
    if why:
        print(f"screenshots: {why}", file=sys.stderr)
        return 2
    shots = []
    if args.only in (None, "report"):
        shots.append((args.out_dir / OUT.name, report_png(args.out_dir / OUT.name)))
    if args.only in (None, "dashboard"):
        from history_runs import record_fixture_runs

        with tempfile.TemporaryDirectory() as tmp:
            png = args.out_dir / DASHBOARD.name
            shots.append((png, dashboard_png(record_fixture_runs(Path(tmp)), png)))
    for png, seen in shots:
        print(f"{png}: {png.stat().st_size // 1024} KB, {seen.charts} charts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
