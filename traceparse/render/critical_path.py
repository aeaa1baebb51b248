"""The analyze document's ``critical_path`` for a terminal: per step, its length, where it runs (by rank, by
cause) and its longest pieces."""

from traceparse.escape import terminal
from traceparse.render.plain_table import table
from traceparse.units import ms, pct

SHOWN = 3  # ranks and pieces a step shows


def _shares(d: dict, length: int, label=str) -> str:
    return ", ".join(f"{label(k)} {pct(v / length)}" for k, v in list(d.items())[:SHOWN]) if length else "-"


def render_critical_path(doc: dict, summarized: bool = False) -> str:
    """The section; ``summarized`` (a report of many ranks): its finding only, the table behind --full."""
    cp = doc.get("critical_path") or {}
    if cp.get("status") != "ok":
        return f"critical path: not applicable ({cp.get('reason') or 'no critical path section'})"
    out = ["critical path: per step, the chain of work and transfers that ended last (explain: critical_path)"]
    out += [f"  {terminal(f)}" for f in cp["findings"]]
    if summarized:  # one line on the first screen of a large run
        return "critical path (explain: critical_path; per step: --full): " + "; ".join(map(terminal, cp["findings"]))
    rows = []
    for s in cp["steps"]:
        n = s["length_ns"]
        top = s["top"][0] if s["top"] else None
        rows.append([s["step"] if s["step"] is not None else "whole trace", ms(n), s["end_rank"],
                     _shares(s["by_rank"], n, lambda r: f"rank {r}"), _shares(s["by_cause"], n),
                     f"rank {top['rank']} {top['cause']} {(top['name'] or '')[:40]} {pct(top['share'])}" if top else "-"])
    out.append(table(["step", "length", "ends on", "through", "by cause", "longest piece"], rows))
    return "\n".join(out)
