"""How a text report fits its terminal: the width, the prose wrapped, the tables narrowed.

The width is the terminal's (``COLUMNS`` when set; ``DEFAULT`` when the output is no terminal: a pipe, a file),
never under ``NARROWEST``. A command renders inside ``fitted(width)``: every ``plain_table.table`` made there fits
the width (headers on two lines, long names shortened with ``...``, then the rightmost columns left out, said under
the table), and ``wrap`` then breaks each longer line of prose at spaces, its continuation indented under its
first word (a word longer than the width, a path, is never broken; nor is a relation such as ``p = 0.13``). Outside ``fitted`` (the JSON, the HTML page, the
library's ``render``) nothing is narrowed.
"""

import re
import shutil
import textwrap
from contextlib import contextmanager
from contextvars import ContextVar

DEFAULT = 100  # columns when the output is not a terminal
NARROWEST = 40
SMALL_RUN = 8  # runs of up to this many ranks show every per-rank table whole; a larger one is summarized
WIDTH: ContextVar[int | None] = ContextVar("traceparse_width", default=None)


def terminal_width() -> int:
    """The width a text report is fitted to: ``COLUMNS``, else the terminal's, else ``DEFAULT``."""
    return max(NARROWEST, shutil.get_terminal_size((DEFAULT, 24)).columns)


@contextmanager
def fitted(width: int | None):
    """Tables made inside fit ``width`` columns (None: as wide as they are)."""
    token = WIDTH.set(width)
    try:
        yield width
    finally:
        WIDTH.reset(token)


def fitted_text(make, width: int | None) -> str:
    """The text report ``make()`` renders inside ``fitted(width)``, its prose then wrapped: what every text command
    prints (at ``terminal_width()``)."""
    with fitted(width):
        return wrap(make(), width)


def wrap(text: str, width: int | None) -> str:
    """Each line of ``text`` longer than ``width`` broken at spaces: its continuation lines indented two more than
    it (under the text of a ``- `` item)."""
    if width is None:
        return text
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        body = line.lstrip(" ")
        indent = " " * (len(line) - len(body))
        body = RELATION.sub(lambda m: m.group(0).replace(" ", NBSP), body)  # "p = 0.13" stays on one line
        out.append(textwrap.fill(body, width, initial_indent=indent, subsequent_indent=indent + "  ",
                                 break_long_words=False, break_on_hyphens=False).replace(NBSP, " "))
    return "\n".join(out)


NBSP = "\u00a0"
RELATION = re.compile(r"(?<!\S)\S{1,12} (?:=|<=|>=|<|>|->) \S")  # a short name, a relation, the start of a value
