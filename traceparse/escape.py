"""Text from a trace is data: how an op, kernel, thread or group name, a label or a file path is shown.

- ``terminal(text)``: for a terminal (and any plain-text report). Control characters (C0, DEL, C1; ESC starts
  the OSC title and OSC 52 clipboard sequences, CR overwrites a line) print as visible escapes (``\\x1b``,
  ``\\r``, ``\\n``), and invisible format characters (bidi overrides and isolates, the byte-order mark, ...:
  Unicode category Cf, lone surrogates, line and paragraph separators) as ``U+202E``. Printable text (CJK,
  accents, emoji) is kept as it is; so are the zero-width joiners emoji and some scripts are written with.
  ``newlines=True`` keeps the newlines of a block of lines the renderer wrote itself.
- ``markdown_cell(text)``: for a Markdown table cell (and any inline Markdown): ``terminal``'s escapes (a newline
  in a name cannot end the row or the table), then every Markdown-active character backslash-escaped, so the
  text renders as itself and never as a link, an image, HTML, emphasis or a heading. ``code=True``: as a code
  span, where only the table's ``|`` needs escaping.

The HTML page has its own escaping (``traceparse.render.page.text``).
"""

import re
import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_JOINERS = {"\u200c", "\u200d"}  # zero-width (non-)joiner: shape Persian, Indic scripts and emoji sequences
_INVISIBLE = {"Cf", "Cs", "Zl", "Zp"}  # format (bidi controls, BOM), lone surrogates, line / paragraph separators
# ASCII punctuation CommonMark, GFM or GitHub give a meaning inline ($ math, ~ strikethrough, & entities)
_MD_ACTIVE = re.compile(r"([\\`*_\[\]<>#!|~&$])")
# at the start of a line: a list item ('-', '+', '1.', '1)') or a setext heading's underline ('=', '-')
_MD_LINE_START = re.compile(r"^( *)([-+=]|\d{1,9}(?=[.)](?: |$)))")


def _char(c: str, newlines: bool) -> str:
    if c == "\n" and newlines:
        return c
    cat = unicodedata.category(c)
    if cat == "Cc":
        return _NAMED.get(c) or f"\\x{ord(c):02x}"
    if cat in _INVISIBLE and c not in _JOINERS:
        return f"U+{ord(c):04X}"
    return c


def terminal(text, newlines: bool = False) -> str:
    """``text`` (``str()`` of any value) with its control and invisible format characters as visible escapes;
    ``newlines``: the newlines kept (a block of lines), else shown as ``\\n`` (one line)."""
    s = str(text)
    if s.isprintable():  # no control, format or separator character: most names
        return s
    return "".join(_char(c, newlines) for c in s)


def markdown_cell(text, code: bool = False) -> str:
    """``text`` as one line of inline Markdown that renders as itself (see the module's docstring). ``code``: a
    code span (backticks included); text a code span cannot hold as it is (a backtick, a backslash before '|')
    is escaped as plain text instead."""
    s = terminal(text)
    if code and s.strip() and "`" not in s and "\\|" not in s:
        return "`" + s.replace("|", "\\|") + "`"
    s = _MD_ACTIVE.sub(r"\\\1", s)
    return _MD_LINE_START.sub(lambda m: m[1] + (m[2] + "\\" if m[2][0].isdigit() else "\\" + m[2]), s, count=1)
