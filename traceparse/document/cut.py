"""Ranks cut short: a trace file that ends inside traceEvents (a crashed job) holds its rank's events only up to a
point (``ranks.kept_until_ns``); the steps it did not finish are left out for every rank (the vocabulary's
``incomplete_steps``, vocabulary/complete_steps.sql). The analyze document's ``cut_short`` says, per such rank, where
its record stops and what the verdicts leave out; its first sentence is the report's first finding."""

from traceparse.store.query import sql_file, table_rows
from traceparse.units import duration


def cut_short(con) -> list[dict]:
    """``[{rank, file, kept_until_ns, into_ns, in_step, complete_steps, left_out_steps, finding}]``, one per rank cut
    short inside traceEvents; ``into_ns``: kept_until_ns after the start of the rank's first ProfilerStep (else its
    first event); ``in_step``: the step of that rank whose window holds kept_until_ns (None between or after steps)."""
    con.execute(sql_file(__package__, "cut.sql"))
    cut = table_rows(con, "cut_ranks", "rank")
    if not cut:
        return []
    left_out = [r["step"] for r in table_rows(con, "incomplete_steps", "step", columns="step")]
    complete = [r["step"] for r in table_rows(con, "cut_complete_steps", "step")]
    out = []
    for c in cut:
        rank, until = c["rank"], c["kept_until_ns"]
        (where_,) = table_rows(con, f"cut_where({int(rank)}, {int(until)})")
        start, step = where_["start_ns"], where_["step"]
        into = until - start if start is not None else None
        where = f"in step {step}" if step is not None else "outside its steps"
        kept = (f"the checks judge only the complete step{'s' if len(complete) != 1 else ''} "
                f"{', '.join(map(str, complete))}" if complete else "no step is complete: the per-step checks have no data")
        gone = (f"step{'s' if len(left_out) != 1 else ''} {', '.join(map(str, left_out))} "
                f"{'are' if len(left_out) != 1 else 'is'} left out for every rank" if left_out else "no step is left out")
        finding = (f"Rank {rank}'s trace is cut short (its file ends inside traceEvents): its events stop "
                   f"{duration(into)} into its profile, {where}; {gone}, so {kept}. Totals over the whole trace "
                   "still hold its partial record.")
        out.append({"rank": rank, "file": c["file"], "kept_until_ns": until, "into_ns": into, "in_step": step,
                    "complete_steps": complete, "left_out_steps": left_out, "finding": finding})
    return out
