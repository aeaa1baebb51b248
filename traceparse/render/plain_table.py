"""A plain-text table: a header, a rule, then the rows; the first column left-aligned, the others right. Every cell
is one line of text as ``escape.terminal`` shows it: a name's control characters (a newline, ESC, CR) and bidi
overrides print as visible escapes, never as themselves.

Made inside ``fit.fitted(width)``, a table wider than the width is narrowed, each step only while it is still too
wide: a header wider than its column's cells goes on two lines; the widest text column (a name, a list) is cut to
``SHORTEST`` characters at least (``shorten``: a list loses its last items, a name its middle, to ``...``); then the rightmost columns (never the first) are left out, and a
line under the table names them.
"""

from traceparse.escape import terminal
from traceparse.render.fit import WIDTH

GAP = "  "
SHORTEST = 20  # a text column is never cut narrower
CUT = "..."


def table(headers, rows, indent: str = "", notes=None) -> str:
    """The table, each line after ``indent`` (counted in the width it must fit); ``notes``: per row, a sentence
    printed on the lines under it (indented, wrapped by ``fit.wrap``), or nothing."""
    headers = [terminal(h) for h in headers]
    cells = [[terminal(c) for c in r] for r in rows]
    width = None if WIDTH.get() is None else WIDTH.get() - len(indent)
    heads = [[h] for h in headers]
    left_out = []
    if width is not None and _width(heads, cells) > width:
        heads = [_two_lines(h, _widest(cells, i)) for i, h in enumerate(headers)]
        cells = _cut(heads, cells, width)
        while _width(heads, cells) > width and len(heads) > 1:
            left_out.insert(0, " ".join(heads.pop()).strip())
            cells = [r[:-1] for r in cells]
    widths = [max(max(map(len, h)), _widest(cells, i)) for i, h in enumerate(heads)]

    def line(r):
        return GAP.join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))

    depth = max(map(len, heads))
    head_lines = [line([([""] * (depth - len(h)) + h)[k] for h in heads]) for k in range(depth)]
    notes = notes or [None] * len(cells)
    out = [*head_lines, line(["-" * w for w in widths])]
    for r, note in zip(cells, notes, strict=True):
        out += [line(r)] + ([f"    {terminal(note)}"] if note else [])
    if left_out:
        out.append(f"(not shown at {width} columns: {', '.join(left_out)}; --format json has them all)")
    return "\n".join((indent + line).rstrip() for line in out)


def _widest(cells, i) -> int:
    return max((len(r[i]) for r in cells), default=0)


def _width(heads, cells) -> int:
    return sum(max(max(map(len, h)), _widest(cells, i)) for i, h in enumerate(heads)) + len(GAP) * (len(heads) - 1)


def _two_lines(header: str, cells: int) -> list[str]:
    """``header`` as one line, or as two split at the space that makes the longer of them shortest, when it is
    wider than its column's ``cells``."""
    words = header.split(" ")
    if len(header) <= cells or len(words) < 2:
        return [header]
    splits = [(" ".join(words[:k]), " ".join(words[k:])) for k in range(1, len(words))]
    return list(min(splits, key=lambda s: max(len(s[0]), len(s[1]))))


def _cut(heads, cells, width) -> list[list[str]]:
    """The cells with the widest columns cut (to ``SHORTEST`` at the least, each cut cell ending in ``CUT``) until
    the table fits ``width`` or no column is wider than ``SHORTEST``."""
    while (excess := _width(heads, cells) - width) > 0:
        widths = [(_widest(cells, i), i) for i in range(len(heads)) if _widest(cells, i) > max(SHORTEST, *map(len, heads[i]))]
        if not widths:
            break
        w, i = max(widths)
        keep = max(SHORTEST, max(map(len, heads[i])), w - excess)
        cells = [[shorten(c, keep) if j == i else c for j, c in enumerate(r)] for r in cells]
    return cells


def shorten(text: str, width: int) -> str:
    """``text`` in ``width`` characters. A list (``a, b, c``; no brackets, whose commas separate arguments) keeps its first items whole and ends in ``, ...``;
    anything else loses its middle (``CUT``), two thirds kept from its start and the rest from its end, where a
    name's template arguments, strategy or thread role tell rows apart."""
    if len(text) <= width:
        return text
    items = text.split(", ") if "<" not in text and "(" not in text else [text]  # a kernel's template arguments
    for n in range(len(items) - 1, 0, -1):
        listed = ", ".join(items[:n]) + ", " + CUT
        if len(listed) <= width:
            return listed
    head = (width - len(CUT)) * 2 // 3
    return text[:head] + CUT + text[len(text) - (width - len(CUT) - head):]
