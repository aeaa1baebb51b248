"""The README's screenshot of the post-mortem page, docs/img/report.png.

    python scripts/screenshots.py [--out docs/img/report.png]

writes the page of fixtures/runs/pp4_1f1b_m4 (a 4-stage 1F1B pipeline with its bubble) as
``traceparse analyze fixtures/runs/pp4_1f1b_m4 --format html -o PAGE`` does, opens it in headless
Chromium (tests/browser.py: Debian's chromium driven by Playwright) 1200 px wide, and keeps the top
1600 px: the findings, the step split, the timeline and the heat map. tests/test_report_html.py runs it.
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help=f"the PNG to write (default {OUT.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    why = browser.missing()
    if why:
        print(f"screenshots: {why}", file=sys.stderr)
        return 2
    seen = report_png(args.out)
    print(f"{args.out}: {args.out.stat().st_size // 1024} KB, {seen.charts} charts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
