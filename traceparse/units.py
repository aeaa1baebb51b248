"""How a number is written in every report and finding: times, byte counts, shares, counts.

One function per kind of quantity, used by every renderer and finding: a unit chosen by the value's magnitude and
4 significant digits (``9.471 ms``, ``30.90 ms``, ``365.0 us``, ``1.234 s``; ``461.3 kB``). A value the trace does
not give (None, or a float that is not finite) writes as ``-``, never as 0, ``None`` or ``nan``.
"""

import math

DIGITS = 4  # significant digits of a time or a size


def _known(x) -> bool:
    return x is not None and not (isinstance(x, float) and not math.isfinite(x))


def _rounded(x: float, digits: int) -> tuple[float, int]:
    """``x`` rounded to ``digits`` significant digits, and the decimals that takes (9.9996 -> 10.00: 2)."""
    if x == 0:
        return 0.0, 0
    exp = math.floor(math.log10(abs(x)))
    if round(abs(x), digits - 1 - exp) >= 10 ** (exp + 1):  # rounding carried into a new digit
        exp += 1
    decimals = digits - 1 - exp
    return round(x, decimals), max(0, decimals)


def significant(x: float, digits: int = DIGITS) -> str:
    """``x`` with ``digits`` significant digits, thousands separated, never in exponent form."""
    if x == 0:
        return "0"
    return f"{x:,.{_rounded(x, digits)[1]}f}"


def _in_units(x: float, units) -> str:
    """``x`` in the largest of ``units`` ((name, size) largest first, the last of size 1: a whole number of it) it
    is at least one of once rounded."""
    for unit, k in units[:-1]:
        if abs(_rounded(x / k, DIGITS)[0]) >= 1:
            return f"{significant(x / k)} {unit}"
    return f"{x:,.0f} {units[-1][0]}"


TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3), ("ns", 1))
SIZE_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1))


def duration(ns, sign: bool = False) -> str:
    """Nanoseconds in s, ms, us or ns by magnitude; ``-`` when unknown. ``sign``: a ``+`` before a positive value
    (a change)."""
    if not _known(ns):
        return "-"
    if ns == 0:
        return "0 ms"
    return ("+" if sign and ns > 0 else "") + _in_units(ns, TIME_UNITS)


ms = duration  # the name most of the reports' code reads it by


def bound(ns) -> str:
    """One end of an interval of allowed offsets, signed: ``unbounded`` where nothing limits it (a clock's bounds)."""
    return "unbounded" if ns is None else duration(ns, sign=True)


def size(b) -> str:
    """Bytes in decimal units (B, kB, MB, GB, TB) by magnitude; ``-`` when unknown. The one way a byte count is
    written in every report and finding, so the same number reads the same everywhere."""
    return _in_units(b, SIZE_UNITS) if _known(b) else "-"


def pct(x) -> str:
    """A fraction as a percentage with one decimal; ``-`` when unknown."""
    return f"{100 * x:.1f}%" if _known(x) else "-"


def number(x, digits: int = DIGITS) -> str:
    """A plain quantity (a ratio, a count, a rate): an integer as itself, a float to ``digits`` significant
    digits; ``-`` when unknown."""
    if not _known(x):
        return "-"
    if isinstance(x, int) or float(x).is_integer() and abs(x) < 10 ** digits:
        return f"{int(x):,}"
    return significant(float(x), digits)


def in_unit(v, unit: str) -> str:
    """A value in its metric unit (``run_metrics``' units): ns as a duration, bytes as a size, a fraction or ratio
    as a number, a rank as ``rank N``; ``-`` when unknown."""
    if not _known(v):
        return "-"
    if unit == "ns":
        return duration(v)
    if unit == "bytes":
        return size(v)
    if unit == "rank":
        return f"rank {v}"
    return number(v) if isinstance(v, int | float) else str(v)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` with its noun, singular for one: ``1 step``, ``3 steps``, ``0 steps``."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def first_of(items, most: int = 8) -> str:
    """``items`` in a message: the first ``most``, then how many there are in all (``1, 2, ... (40 in all)``)."""
    items = [str(i) for i in items]
    return ", ".join(items[:most]) + (f", ... ({len(items)} in all)" if len(items) > most else "")
