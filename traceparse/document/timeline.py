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

from traceparse.store.query import rows

MAX_BARS = 3000

SQL_STEPS = """
SELECT step, avg(dur_ns) AS mean_ns FROM step_windows GROUP BY step
HAVING count(DISTINCT rank) = (SELECT count(DISTINCT rank) FROM step_windows)
ORDER BY mean_ns, step NULLS FIRST
"""

# the chosen step is the variable timeline_step (a parameter: the query text is constant)
SQL_BARS = """
SELECT k.rank, k.kind, k.strategy, min(s) AS s, max(e) AS e, count(*) AS intervals,
       arg_max(name, (e - s, -ev_id)) AS name  -- of equally long ones, the first in the file
FROM interval_pieces($$
    SELECT {'rank': rank, 'kind': 'compute', 'strategy': NULL::VARCHAR} AS k, start_ns AS s, end_ns AS e, name, ev_id
    FROM compute_intervals WHERE in_window AND step IS NOT DISTINCT FROM getvariable('timeline_step')
    UNION ALL
    SELECT {'rank': rank, 'kind': 'comm', 'strategy': coalesce(strategy, 'untagged')}, start_ns, end_ns, name, ev_id
    FROM comm_intervals WHERE in_window AND counted AND step IS NOT DISTINCT FROM getvariable('timeline_step')
$$, true)
GROUP BY k, piece ORDER BY k.rank, k.kind, k.strategy NULLS FIRST, s
"""


def chosen_step(con) -> tuple[bool, int | None]:
    """(found, step): the median-length step every rank has (module docstring); step None is the
    whole-trace window."""
    steps = rows(con, SQL_STEPS)
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
    windows = rows(con, "SELECT rank, start_ns, dur_ns FROM step_windows WHERE step IS NOT DISTINCT FROM ? "
                        "ORDER BY rank", [step])
    origin = min(w["start_ns"] for w in windows)
    con.execute("SET VARIABLE timeline_step = ?", [step])
    pieces = rows(con, SQL_BARS)
    bars, gap = merge_close(pieces, max_bars)
    return {
        "step": step,
        "origin_ns": origin,
        "windows": [{"rank": w["rank"], "start_ns": w["start_ns"] - origin, "dur_ns": w["dur_ns"]} for w in windows],
        "rows": [{"rank": b["rank"], "kind": b["kind"], "strategy": b["strategy"], "start_ns": b["s"] - origin,
                  "dur_ns": b["e"] - b["s"], "name": b["name"], "intervals": b["intervals"]} for b in bars],
        "intervals": sum(p["intervals"] for p in pieces),
        "pieces": len(pieces),
        "bars": len(bars),
        "aggregated": gap is not None,
        "merge_gap_ns": gap,
        "merged": len(pieces) - len(bars),
        "max_bars": max_bars,
    }


def _key(b):
    return b["rank"], b["kind"], b["strategy"]


def merge_close(pieces: list[dict], max_bars: int) -> tuple[list[dict], int | None]:
    """``pieces`` (sorted by key, then start) as at most ``max_bars`` bars, or as they are when they fit:
    consecutive pieces of one key whose gap is at most the returned gap become one bar (None: none merged)."""
    if len(pieces) <= max_bars:
        return pieces, None
    gaps = sorted((b["s"] - a["e"] for a, b in pairwise(pieces) if _key(a) == _key(b)), reverse=True)
    keep = max_bars - (len(pieces) - len(gaps))  # the gaps that may stay open: one bar per key, one per gap
    gap = gaps[keep] if 0 <= keep < len(gaps) else gaps[0] if gaps else 0
    out, longest = [], []
    for p in pieces:
        last = out[-1] if out else None
        if last is not None and _key(last) == _key(p) and p["s"] - last["e"] <= gap:
            if p["e"] - p["s"] > longest[-1]:
                last["name"], longest[-1] = p["name"], p["e"] - p["s"]
            last["e"] = max(last["e"], p["e"])
            last["intervals"] += p["intervals"]
        else:
            out.append(dict(p))
            longest.append(p["e"] - p["s"])
    return out, gap
