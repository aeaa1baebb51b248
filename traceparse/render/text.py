"""Render the documents of traceparse.document for a terminal.

A value the trace does not give (None) prints as ``-``, never as 0.
"""

from traceparse.analyzers.base import SEVERITY, at_least
from traceparse.axes import LAYOUT_KEYS


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


def table(headers, rows) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(r):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def render(doc: dict) -> str:
    run, s = doc["run"], doc["summary"]
    out = [
        f"run: {len(run['files'])} file(s), ranks {_ranks(run['ranks'])}, world size {run['world_size'] or 'unknown'}, "
        f"backend {', '.join(run['backend']) or 'unknown'}, devices {', '.join(run['devices']) or 'not recorded'}",
        f"steps: {', '.join(map(str, run['steps'])) or 'none (no ProfilerStep annotations)'}; "
        f"{run['events']:,} events; clock: {'; '.join(run['clock'])}",
        "",
        render_findings(doc),
        "",
        render_layout(doc),
        "",
        render_collectives(doc),
        "",
        render_volume(doc),
        "",
        render_checks(doc),
        "",
        render_imbalance(doc),
        "per rank: totals over its step windows (explain: step_time, profiled_window, compute_time, comm_time); "
        "comm total counts the communication the steps launched, also where it runs past them; "
        "comm % = comm in windows / windows total",
        table(
            ["rank", "steps", "step mean", "step max", "windows total", "compute total", "comm ops total",
             "comm total", "comm in windows", "comm %"],
            [[r["rank"], r["steps"], ms(r["step_mean_ns"]), ms(r["step_max_ns"]), ms(r["window_ns"]),
              ms(r["compute_ns"]), r["comm_ops"], ms(r["comm_ns"]), ms(r.get("comm_in_window_ns")),
              pct(r["comm_fraction"])] for r in s["per_rank"]],
        ),
        "",
        "communication by op: totals over all ranks and the whole trace (explain: comm_ops)",
        table(
            ["op", "source", "ops total", "ranks", "input bytes total", "time total", "no size"],
            [[c["op"], c["source"], c["ops"], c["ranks"], size(c["bytes_in"]), ms(c["time_ns"]), c["ops_without_size"]]
             for c in s["comm"]],
        ) if s["comm"] else "no communication operations found",
        "",
        "busy time per thread / stream: totals over the rank's profiled span (explain: busy_time)",
        table(
            ["rank", "kind", "pid", "tid", "name", "events", "busy", "busy %"],
            [[b["rank"], b["kind"], b["pid"], b["tid"], (b["thread_name"] or "")[:32], b["events"], ms(b["busy_ns"]),
              pct(b["busy_fraction"])] for b in s["threads"]],
        ),
        "",
        "heaviest kernels / ops: totals over all ranks and the whole trace (explain: top_kernels)",
        table(
            ["name", "kind", "calls total", "time total", "share", "ranks"],
            [[k["name"][:70], k["kind"], k["calls"], ms(k["total_ns"]), pct(k["share"]), k["ranks"]]
             for k in s["top_kernels"]],
        ),
        "",
        _issues(doc["load_issues"]),
    ]
    return "\n".join(out)


def _ranks(ranks):
    if ranks and ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def _issues(issues):
    if not issues:
        return "load issues: none"
    lines = [f"load issues ({len(issues)}):"]
    lines += [f"  {i['severity']}: {i['file'] or 'run'}: {i['what']}" for i in issues]
    return "\n".join(lines)


def render_layout(doc) -> str:
    lay = doc["layout"]
    keys = LAYOUT_KEYS
    out = ["layout (inferred; explain: layout)", "  " + "  ".join(f"{k}={_val(lay[k])}" for k in keys)]
    out += [f"  {k}: {lay['evidence'][k]}" for k in keys if lay[k] not in (1, None) or k in ("dp", "zero_stage")]
    out += _metadata_lines(doc.get("metadata") or {})
    check = doc.get("layout_check", {})
    for c in check.get("stated", []):
        out.append(f"  {c.get('source', 'stated')} {c['key']}={c['stated']}: {c['status']} (inferred {_val(c['inferred'])})")
    out += [f"  warning: {w}" for w in check.get("lint", [])]
    return "\n".join(out)


def _metadata_lines(meta) -> list[str]:
    """The configuration the traces declare (profiler plugin), the values the checks take from it."""
    if not meta.get("present"):
        return []
    vals = meta["values"]
    head = (f"  metadata (traceparse profiler plugin v{meta['version']}, torch {meta.get('torch_version') or '?'}, "
            f"ranks {_ranks(meta['ranks'])}): " + "  ".join(f"{k}={_val(v)}" for k, v in vals.items()))
    return [head] + [f"  metadata note: {n}" for n in meta["notes"]]


INPUT_BYTES = "input bytes"  # what the ranks pass to the calls (comm_ops.bytes_in): explain input_bytes
VOLUME = "volume (notes' count: all-reduce 2x)"  # what docs/parallelism.md's formulas count: explain volume


def render_collectives(doc) -> str:
    rows = doc["collectives"]
    if not rows:
        return "collectives: none"
    return "\n".join([
        f"collectives per rank per step (explain: collectives, input_bytes; {INPUT_BYTES}: the tensors passed to the "
        "calls, not the notes' volume)",
        table(
            ["strategy", "variant", "op", "count", INPUT_BYTES, "time", "no size", "rule"],
            [[r["strategy"], r["variant"] or "", r["op"], r["count"], size(r["input_bytes_per_rank_per_step"]),
              ms(r["time_per_rank_per_step_ns"]), r["ops_without_size"], r["rule_id"] or ""] for r in rows],
        ),
        _untagged_line(doc["untagged"]),
    ])


def volume_rows(doc) -> list[list]:
    """Per strategy of comm_volume: the input bytes beside the volume (the notes' count) measured and expected."""
    per = doc["checks"]["comm_volume"].get("per_strategy") or {}
    return [[s, v["variant"] or "", size(v.get("input_bytes")), size(v.get("measured_volume_bytes")),
             size(v.get("expected_volume_bytes")), "-" if v.get("ratio") is None else f"{v['ratio']:.2f}x", v["status"]]
            for s, v in per.items()]


def render_volume(doc) -> str:
    """The comm_volume check's numbers, each under the name its finding uses."""
    rows = volume_rows(doc)
    if not rows:
        return "communication volume: no strategy measured (explain: comm_volume)"
    return "\n".join([
        f"communication volume per rank per step (explain: volume, comm_volume): {VOLUME} counts an all-reduce's "
        f"input twice, the other collectives' once, sends once and receives never; {INPUT_BYTES} as above",
        table(["strategy", "variant", INPUT_BYTES, "volume", "expected volume", "ratio", "status"], rows),
    ])


def _untagged_line(u) -> str:
    return f"untagged: {u['ops']} of {u['all_ops']} operations, {pct(u['time_fraction'])} of communication time"


def render_tags(doc) -> str:
    """``traceparse tags``: the tags_document as a table and the untagged line."""
    return "\n".join([
        table(
            ["strategy", "variant", "op", "rule", "confidence", "ops total", "ranks", "a group", "input bytes total",
             "no size", "time total"],
            [[r["strategy"], r["variant"] or "", r["op"], r["rule_id"] or "", r["confidence"] or "", r["ops"],
              r["ranks"], r["a_group"] or "?", size(r["bytes_in"]), r["ops_without_size"], ms(r["time_ns"])]
             for r in doc["tags"]],
        ),
        _untagged_line(doc["untagged"]),
    ])


def _val(v):
    return "?" if v is None else v


def _flagged(doc) -> dict:
    """The checks at warn or fail, fail first (in the document's order within a status)."""
    bad = [(cid, c) for cid, c in doc["checks"].items() if at_least(c["status"], "warn")]
    return dict(sorted(bad, key=lambda item: -SEVERITY[item[1]["status"]]))


def check_lines(cid, c, findings=True, note=None) -> list[str]:
    """``  <check>: <status> (<reason or note>)`` and, with ``findings``, one ``    - `` line per finding."""
    head = f"  {cid}: {c['status']}"
    if c.get("reason") or note:
        head += f" ({c.get('reason') or note})"
    return [head] + ([f"    - {f}" for f in c.get("findings", [])] if findings else [])


def render_findings(doc) -> str:
    """What to look at first: the checks at warn or fail with their findings."""
    flagged = _flagged(doc)
    if not flagged:
        return "findings: no check at warn or fail"
    out = [f"findings: {len(flagged)} of {len(doc['checks'])} checks at warn or fail (explain: <check>)"]
    for cid, c in flagged.items():
        out += check_lines(cid, c)
    return "\n".join(out)


def render_imbalance(doc) -> str:
    """The numbers imbalance's findings quote: per rank per step, the pipeline stages per micro-batch, and the
    straggler verdict with its evidence; empty (no lines) for one rank."""
    imb = doc["checks"]["imbalance"]
    rows = imb.get("per_rank") or []
    if len(rows) < 2:
        return ""
    out = [f"imbalance per rank, per step (explain: imbalance): straggler {_verdict(imb)}",
           table(["rank", "step mean", "compute", "compute floor", "wait / collective", "last arrivals"],
                 [[r["rank"], ms(r["step_mean_ns"]), ms(r["compute_ns"]), ms(r["compute_floor_ns"]), ms(r["wait_ns"]),
                   r["last_arrivals"]] for r in rows])]
    if imb.get("pp_stages"):
        out += ["", "pipeline stages, per micro-batch: the heavy stage has the most compute floor",
                table(["stage", "rank", "compute", "compute floor"],
                      [[r["stage"], r["rank"], ms(r["compute_per_microbatch_ns"]),
                        ms(r["compute_floor_per_microbatch_ns"])] for r in imb["pp_stages"]])]
    return "\n".join(out) + "\n"


def _verdict(imb) -> str:
    e, verdict = imb.get("straggler") or {}, imb.get("straggler_verdict")
    if verdict == "named":
        return f"rank {e['rank']} (named)"
    if verdict == "unknown":
        return "unknown: " + imb["straggler_reason"]
    if not e:
        return verdict or "none"
    p = "p unknown" if e.get("p") is None else f"p = {e['p']:.2g}"
    return (f"{verdict or 'none'} (most costly: rank {e['rank']}, lateness {ms(e['lateness_ns'])}, {p}, "
            f"others lose {ms(e['lost_per_step_ns'])} a step)")


def render_checks(doc) -> str:
    """Every check's status; the findings of those at warn or fail are in render_findings, at the top."""
    flagged = _flagged(doc)
    out = ["checks (explain: <check>)"]
    for cid, c in doc["checks"].items():
        out += check_lines(cid, c, findings=cid not in flagged, note="findings at the top" if cid in flagged else None)
    return "\n".join(out)
