"""The timeline section of the analyze document: what each rank did during one profiled step.

Selected from the vocabulary (compute_intervals, comm_intervals, step_windows), never derived again:

- the step: among the steps every rank has a window for, the one whose window length, averaged over
  the ranks, is the median (the lower one of an even count; ties: the lower step number); on traces
  without ProfilerStep#N, the whole-trace window when every rank has one;
- the bars: per rank, kind ('compute' or 'comm') and strategy (communication only; 'untagged' when no
  rule tagged it), the union of the intervals anchored in that step's window (compute_intervals; the
  counted comm_intervals, the ones that make communication time), as interval_pieces gives it: nested,
  overlapping and touching intervals are one bar, named after its longest interval;
- the origin: one for all ranks, the earliest start of the step's windows, so a rank that starts late
  or waits for another shows where it does (the ranks share one clock);
- past ``max_bars`` bars, the bars of the same rank, kind and strategy separated by at most
  ``merge_gap_ns`` are merged, the gap being the least that brings the count under the bound; the
  section says so (aggregated, merged).
"""

from itertools import pairwise

from traceparse.store.query import sql_file, table_rows

MAX_BARS = 3000

def chosen_step(con) -> tuple[bool, int | None]:
    """(found, step): the median-length step every rank has (module docstring); step None is the
    whole-trace window."""
    con.execute(sql_file(__package__, "timeline.sql"))
    steps = table_rows(con, "timeline_steps", "mean_ns, step NULLS FIRST")
    if not steps:
        return False, None
    return True, steps[(len(steps) - 1) // 2]["step"]


def timeline(con, max_bars: int = MAX_BARS) -> dict:
    """The ``timeline`` section: ``{step, origin_ns, windows, rows, intervals, pieces, bars, aggregated,
    merge_gap_ns, merged, max_bars}``; rows: rank, kind, strategy, start_ns (from the common origin),
    dur_ns, name (the longest interval in the bar), intervals (how many it covers)."""
    found, step = chosen_step(con)
    if not found:
        return {"step": None, "rows": [], "reason": "no step window that every rank has"}
    con.execute("SET VARIABLE timeline_step = ?", [step])
    windows = table_rows(con, "timeline_windows", "rank")
    origin = min(w["start_ns"] for w in windows)
    # tuples, not dicts: a thousand ranks' pieces of a step are hundreds of thousands
    pieces = table_rows(con, "timeline_bars", "rank, kind, strategy NULLS FIRST, s", ", ".join(PIECE), tuples=True)
    bars, gap = merge_close(pieces, max_bars)
    bars = [dict(zip(PIECE, b, strict=True)) for b in bars]
    return {
        "step": step,
        "origin_ns": origin,
        "windows": [{"rank": w["rank"], "start_ns": w["start_ns"] - origin, "dur_ns": w["dur_ns"]} for w in windows],
        "rows": [{"rank": b["rank"], "kind": b["kind"], "strategy": b["strategy"], "start_ns": b["s"] - origin,
                  "dur_ns": b["e"] - b["s"], "name": b["name"], "intervals": b["intervals"]} for b in bars],
        "intervals": sum(p[INTERVALS] for p in pieces),
        "pieces": len(pieces),
        "bars": len(bars),
        "aggregated": gap is not None,
        "merge_gap_ns": gap,
        "merged": len(pieces) - len(bars),
        "max_bars": max_bars,
    }


PIECE = ("rank", "kind", "strategy", "s", "e", "name", "intervals")  # a piece's fields, in its tuple's order
S, E, NAME, INTERVALS = (PIECE.index(f) for f in ("s", "e", "name", "intervals"))


def _key(b):
    return tuple(b[:3])  # rank, kind, strategy (of a piece's tuple or a bar's list)


def merge_close(pieces: list[tuple], max_bars: int) -> tuple[list[tuple], int | None]:
    """``pieces`` (tuples of ``PIECE``, sorted by key, then start) as at most ``max_bars`` bars, or as they are when
    they fit: consecutive pieces of one key whose gap is at most the returned gap become one bar (None: none
    merged)."""
    if len(pieces) <= max_bars:
        return pieces, None
    gaps = sorted((b[S] - a[E] for a, b in pairwise(pieces) if _key(a) == _key(b)), reverse=True)
    keep = max_bars - (len(pieces) - len(gaps))  # the gaps that may stay open: one bar per key, one per gap
    gap = gaps[keep] if 0 <= keep < len(gaps) else gaps[0] if gaps else 0
    out, longest = [], []
    for p in pieces:
        last = out[-1] if out else None
        if last is not None and _key(last) == _key(p) and p[S] - last[E] <= gap:
            if p[E] - p[S] > longest[-1]:
                last[NAME], longest[-1] = p[NAME], p[E] - p[S]
            last[E] = max(last[E], p[E])
            last[INTERVALS] += p[INTERVALS]
        else:
            out.append(list(p))
            longest.append(p[E] - p[S])
    return out, gap
