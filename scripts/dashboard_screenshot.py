"""The README's screenshot of the dashboard, docs/img/dashboard.png.

    python scripts/dashboard_screenshot.py [--out docs/img/dashboard.png]

records the fixture runs of tests/history_runs.py (ddp4 as commit=a, then straggler_ddp4 as commit=b, job
llama-8b; dp2_tp2 under another job) with ``traceparse analyze ... -o REPORT --record HISTORY --label ...``,
writes ``traceparse dashboard HISTORY -o PAGE`` beside the reports and opens it in headless Chromium
(tests/browser.py) 1200 px wide. tests/test_dashboard.py runs it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import browser  # noqa: E402

OUT = ROOT / "docs" / "img" / "dashboard.png"
WIDTH = 1200


def write_dashboard(history: Path, page: Path):
    from click.testing import CliRunner

    from traceparse.cli import main

    r = CliRunner().invoke(main, ["dashboard", str(history), "-o", str(page)])
    if r.exit_code != 0:
        raise SystemExit(f"traceparse dashboard failed ({r.exit_code}): {r.output}")


def dashboard_png(recorded, out: Path = OUT) -> browser.Seen:
    """Write the dashboard of ``recorded`` (history_runs.Recorded) beside its reports and its screenshot to
    ``out``; what the browser saw."""
    page = recorded.folder / "dashboard.html"
    write_dashboard(recorded.path, page)
    out.parent.mkdir(parents=True, exist_ok=True)
    return browser.open_page(page, screenshot=out, width=WIDTH)


def main(argv=None) -> int:
    from history_runs import record_fixture_runs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help=f"the PNG to write (default {OUT.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    why = browser.missing()
    if why:
        print(f"dashboard_screenshot: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        seen = dashboard_png(record_fixture_runs(Path(tmp)), args.out)
    print(f"{args.out}: {args.out.stat().st_size // 1024} KB, {seen.charts} charts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
