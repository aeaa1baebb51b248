#!/usr/bin/env python
"""docs/glossary.md from the checks' specs, the metric glossary and their meanings
(traceparse/document/glossary_page.py): every check and metric in one template, the text `traceparse explain`
prints.

  python scripts/glossary.py            # print the page
  python scripts/glossary.py --write    # write docs/glossary.md
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from traceparse.document.glossary_page import page  # noqa: E402

PAGE = ROOT / "docs" / "glossary.md"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    text = page()
    if args.write:
        PAGE.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
