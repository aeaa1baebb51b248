"""A plain-text table: a header, a rule, then the rows; the first column left-aligned, the others right. Every cell
is one line of text as ``escape.terminal`` shows it: a name's control characters (a newline, ESC, CR) and bidi
overrides print as visible escapes, never as themselves."""

from traceparse.escape import terminal


def table(headers, rows) -> str:
    headers = [terminal(h) for h in headers]
    cells = [[terminal(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(r):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])
