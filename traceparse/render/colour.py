"""Colour for the text report on a terminal: each check's status (ok green, warn yellow, fail red,
not_applicable dim). The report itself (traceparse.render.text) is plain text; this paints it.

``--color auto`` (the default) colours only when stdout is a terminal and ``NO_COLOR`` is unset or
empty (https://no-color.org); ``always`` and ``never`` override both.
"""

import os
import re

import click

STYLES = {"ok": {"fg": "green"}, "warn": {"fg": "yellow"}, "fail": {"fg": "red", "bold": True},
          "not_applicable": {"dim": True}}

# "  <check>: <status>" as the findings and checks sections print it (traceparse.render.text.check_lines)
STATUS_LINE = re.compile(r"^(  [a-z_][a-z0-9_]*: )(ok|warn|fail|not_applicable)\b", re.MULTILINE)


def colour_wanted(choice: str, stream) -> bool:
    """Colour the report written to ``stream`` under ``--color choice``?"""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(text: str) -> str:
    """``text`` with each check's status coloured; the words and the layout unchanged."""
    return STATUS_LINE.sub(lambda m: m[1] + click.style(m[2], **STYLES[m[2]]), text)
