"""The analyze document's ``gpu`` section for a terminal and for the post-mortem page: per rank and step, where the
GPU's time went and what kept it idle; per stream, HTA's idle categories and the queue; per rank, how work was
launched. A run of more than ``SMALL_RUN`` ranks shows its whole-span rows and the named causes only."""

from traceparse.render.page import text as esc
from traceparse.escape import terminal
from traceparse.render.fit import SMALL_RUN
from traceparse.render.plain_table import table
from traceparse.units import ms, pct



def _step(r) -> str:
    return "HTA span" if r["scope"] == "hta" else "whole trace" if r["step"] is None else str(r["step"])


def _causes_of(gpu: dict) -> dict:
    """{(rank, step): 'cause share, ...'} biggest first."""
    out = {}
    for c in gpu.get("idle_causes") or []:
        out.setdefault((c["rank"], c["step"]), []).append(c)
    return {k: ", ".join(f"{c['cause']} {pct(c['share'])}" for c in v[:3]) for k, v in out.items()}


def _spread(gpu: dict) -> list[dict]:
    """A run of many ranks: the HTA-span rows of the ranks with the least, the median and the most idle."""
    hta = sorted((r for r in gpu["temporal"] if r["scope"] == "hta"), key=lambda r: (r["idle"] or 0, r["rank"]))
    picks = [hta[0], hta[(len(hta) - 1) // 2], hta[-1]] if hta else []
    return list({r["rank"]: r for r in picks}.values())


def render_gpu(doc: dict, full: bool = False) -> str:
    gpu = doc.get("gpu") or {}
    if gpu.get("status") in (None, "not_applicable"):
        return f"gpu: not applicable ({gpu.get('reason') or 'no GPU section'})"
    many = not full and len({r["rank"] for r in gpu["temporal"]}) > SMALL_RUN
    causes = _causes_of(gpu)
    shown = _spread(gpu) if many else gpu["temporal"]
    out = [f"gpu [{gpu['status']}]: where each GPU's time went, per step and over HTA's span "
           "(explain: gpu.temporal, gpu.idle_causes)"]
    out += [f"  {terminal(f)}" for f in gpu["findings"]]
    out.append(table(
        ["rank", "step", "GPU span", "compute", "non-compute", "idle", "idle by cause (share of the span)"],
        [[r["rank"], _step(r), ms(r["span_ns"]), pct(r["compute"]), pct(r["non_compute"]), pct(r["idle"]),
          causes.get((r["rank"], r["step"]), "") if r["scope"] == "step" else ""] for r in shown]))
    if many:
        out.append(f"({len({r['rank'] for r in gpu['temporal']})} ranks: HTA's span of the min / median / max rank by "
                   "idle; every rank and step, idle per stream, launches and queues: --full)")
        return "\n".join(out)
    out += ["", "GPU idle per stream, HTA's categories over HTA's span (explain: gpu.idle)", table(
        ["rank", "stream", "host wait", "kernel wait", "other", "idle"],
        [[r["rank"], r["stream"], ms(r["host_wait_ns"]), ms(r["kernel_wait_ns"]), ms(r["other_ns"]), ms(r["idle_ns"])]
         for r in gpu["idle"]])]
    out += ["", "kernel launches over HTA's span (explain: gpu.launch)", table(
        ["rank", "launches", "delay p50", "delay p99", "delay max", "delay > 100 us", "launch call > 50 us",
         "GPU shorter than launch", "their GPU share"],
        [[r["rank"], r["launches"], ms(r["delay_p50_ns"]), ms(r["delay_p99_ns"]), ms(r["delay_max_ns"]),
          r["delay_outliers"], r["runtime_outliers"], r["short_gpu"], pct(r["short_gpu_share"])]
         for r in gpu["launch"]])]
    out += ["", "queue per stream over HTA's span (explain: gpu.queue)", table(
        ["rank", "stream", "max queued", "mean queued", "dry (nothing queued or running)", "dry %", "times dry"],
        [[r["rank"], r["stream"], r["max_length"], r["mean_length"], ms(r["dry_ns"]), pct(r["dry_share"]),
          r["dry_count"]] for r in gpu["queue"]])]
    return "\n".join(out)


def gpu_html(doc: dict) -> str:
    """The page's GPU section: the temporal breakdown and the idle causes per rank and step, as tables."""
    gpu = doc.get("gpu") or {}
    if gpu.get("status") in (None, "not_applicable"):
        return ""
    causes = {}
    for c in gpu["idle_causes"]:
        causes.setdefault((c["rank"], c["step"]), []).append(c)
    head = "".join(f"<th>{h}</th>" for h in ("rank", "step", "GPU span", "compute", "non-compute", "idle",
                                             "idle by cause"))
    rows = []
    for r in gpu["temporal"]:
        why = "; ".join(f"{c['cause']} {pct(c['share'])}" + (f" ({c['ops'][0]['name'][:60]})" if c["ops"] else "")
                        for c in causes.get((r["rank"], r["step"]), [])[:4]) if r["scope"] == "step" else ""
        rows.append("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in (
            r["rank"], _step(r), ms(r["span_ns"]), pct(r["compute"]), pct(r["non_compute"]), pct(r["idle"]), why))
            + "</tr>")
    said = "".join(f"<li>{esc(f)}</li>" for f in gpu["findings"])
    return (f'<section id="gpu"><h2>The GPU side of each step</h2><p>Where each GPU\'s time went and what kept it '
            f"idle (<code>traceparse explain gpu.temporal</code>, <code>gpu.idle_causes</code>).</p>"
            f'{f"<ul class=findings>{said}</ul>" if said else ""}'
            f'<div style="overflow-x:auto"><table><tr>{head}</tr>{"".join(rows)}</table></div></section>')
