"""How a number is written in every report and finding: times, byte counts, shares.

A value the trace does not give (None) writes as ``-``, never as 0.
"""


def ms(ns):
    """Nanoseconds as milliseconds; ``-`` when unknown."""
    return "-" if ns is None else f"{ns / 1e6:,.3f} ms"


def size(b):
    """Bytes in decimal units (B, kB, MB, GB; 2 decimals); ``-`` when unknown. The one way a byte count is
    written in every report and finding, so the same number reads the same everywhere."""
    if b is None:
        return "-"
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= k:
            return f"{b / k:,.2f} {unit}"
    return f"{b:,.0f} B"


def pct(x):
    """A fraction as a percentage; ``-`` when unknown."""
    return "-" if x is None else f"{100 * x:.1f}%"


def first_of(items, most: int = 8) -> str:
    """``items`` in a message: the first ``most``, then how many there are in all (``1, 2, ... (40 in all)``)."""
    items = [str(i) for i in items]
    return ", ".join(items[:most]) + (f", ... ({len(items)} in all)" if len(items) > most else "")
