"""Render the documents of traceparse.document for a terminal.

A value the trace does not give (None) prints as ``-``, never as 0.

The analyze report fits a terminal's first screen on any job: a run of more than ``SMALL_RUN`` ranks gets one
summarized per-rank table (the min / median / max rank by step mean and the ranks a check names, the ranks
beyond the spread listed) in place of the per-rank tables, the pipeline stages one row each, and the heaviest
``SHORT_TOP`` kernels; ``render(doc, full=True)`` (``analyze --full``, the HTML page) prints every table whole.

Text from a trace (names, labels, file paths, findings that quote them) is shown by ``escape.terminal``: a table
cell or a one-line item (a finding, a note, a piece of evidence) with its control characters, newlines included,
as visible escapes; each report whole once more with the newlines it wrote kept.
"""

import re
import statistics

from traceparse.axes import AXES, HSDP_KEYS, LAYOUT_KEYS
from traceparse.status import SEVERITY, at_least
from traceparse.render.critical_path import render_critical_path
from traceparse.escape import terminal
from traceparse.render.fit import SMALL_RUN
from traceparse.render.gpu import render_gpu
from traceparse.render.plain_table import table  # noqa: F401  (its home; importers read it from here too)
from traceparse.units import bound, count, duration, first_of, ms, number, pct, size


SHORT_TOP = 4  # the heaviest kernels a summarized report shows unless --top says how many
FULL_HINT = "--full"


def render(doc: dict, full: bool = False, kernels: int | None = None) -> str:
    """The analyze report. ``full``: every per-rank table whole whatever the run's size; else a run of more than
    ``SMALL_RUN`` ranks is summarized (module docstring). ``kernels``: how many of the heaviest kernels to show
    (default: all the document has, ``SHORT_TOP`` in a summarized report)."""
    run, s = doc["run"], doc["summary"]
    many = not full and len(s["per_rank"]) > SMALL_RUN
    out = [
        f"run: {len(run['files'])} file(s), ranks {_ranks(run['ranks'])}, world size {run['world_size'] or 'unknown'}, "
        f"backend {', '.join(map(terminal, run['backend'])) or 'unknown'}, "
        f"devices {', '.join(map(terminal, run['devices'])) or 'not recorded'}",
        f"steps: {', '.join(map(str, run['steps'])) or 'none (no ProfilerStep annotations)'}; "
        f"{run['events']:,} events; clock: {_clock(run['clock'])}",
        "",
        *[f"cut short: {terminal(c['finding'])}" for c in doc.get("cut_short") or []],  # the first finding
        *filter(None, [render_causes(doc)]),
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
        *([render_gpu(doc, full), ""] if not many or doc.get("gpu", {}).get("status") != "not_applicable" else []),
        render_critical_path(doc, summarized=many),
        "",
    ]
    if many:
        out += [render_rank_summary(doc), ""]
    else:
        out += [
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
        ]
    out += [
        "communication by op: totals over all ranks and the whole trace (explain: comm_ops)",
        table(
            ["op", "source", "ops total", "ranks", "input bytes total", "time total", "no size"],
            [[c["op"], c["source"], c["ops"], c["ranks"], size(c["bytes_in"]), ms(c["time_ns"]), c["ops_without_size"]]
             for c in s["comm"]],
        ) if s["comm"] else "no communication operations found",
        "",
    ]
    if not many:
        out += [
            "busy time per thread / stream: totals over the rank's profiled span (explain: busy_time)",
            table(
                ["rank", "kind", "pid", "tid", "name", "events", "busy", "busy %"],
                [[b["rank"], b["kind"], b["pid"], b["tid"], (b["thread_name"] or "")[:32], b["events"],
                  ms(b["busy_ns"]), pct(b["busy_fraction"])] for b in s["threads"]],
            ),
            "",
        ]
    top = s["top_kernels"]
    shown = top[:kernels if kernels is not None else SHORT_TOP if many else len(top)]
    head = "heaviest kernels / ops: totals over all ranks and the whole trace (explain: top_kernels)"
    if len(shown) < len(top):
        head += f"; the heaviest {len(shown)} of {len(top)} (all of them: {FULL_HINT}, or --top N)"
    out += [
        head,
        table(
            ["name", "kind", "calls total", "time total", "share", "ranks"],
            [[k["name"][:70], k["kind"], k["calls"], ms(k["total_ns"]), pct(k["share"]), k["ranks"]] for k in shown],
        ),
        "",
        _issues(doc["load_issues"]),
    ]
    return terminal("\n".join(out), newlines=True)


def _clock(clock: dict) -> str:
    """Each file's clock method, then the clocks moved (with the bounds the traces allow), or that the clocks of a
    run on several hosts are consistent with one."""
    said = "; ".join(clock["methods"])
    if not clock["clocks"]:
        return said
    if not clock["applied"]:
        return f"{said}; {len(clock['clocks'])} {clock['by']}s' clocks consistent with one (clocks)"
    moved = [f"{terminal(c['clock'])} (rank {_ranks(c['ranks'])}) moved {duration(c['shift_ns'], sign=True)}, "
             f"allowed {bound(c['low_ns'])} to {bound(c['high_ns'])}" for c in clock["clocks"] if c["shift_ns"]]
    return f"{said}; {'; '.join(moved)} (clocks)"


def _ranks(ranks):
    if ranks and ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def _issues(issues):
    if not issues:
        return "load issues: none"
    lines = [f"load issues ({len(issues)}):"]
    lines += [f"  {i['severity']}: {terminal(i['file'] or 'run')}: {terminal(i['what'])}" for i in issues]
    return "\n".join(lines)


def render_layout(doc) -> str:
    lay = doc["layout"]
    keys = LAYOUT_KEYS
    out = ["layout (inferred; explain: layout)", "  " + "  ".join(f"{k}={_val(lay[k])}" for k in keys)]
    out += [f"  {k}: {terminal(lay['evidence'][k])}" for k in keys if lay[k] not in (1, None) or k in ("dp", "zero_stage")
            or lay[k] is None and k in AXES + HSDP_KEYS]  # a degree unknown: why
    out += _metadata_lines(doc.get("metadata") or {})
    check = doc.get("layout_check", {})
    for c in check.get("stated", []):
        out.append(f"  {terminal(c.get('source', 'stated'))} {c['key']}={terminal(c['stated'])}: {c['status']} "
                   f"(inferred {_val(c['inferred'])})")
    out += [f"  warning: {terminal(w)}" for w in check.get("lint", [])]
    return terminal("\n".join(out), newlines=True)


def _metadata_lines(meta) -> list[str]:
    """The configuration the traces declare (profiler plugin), the values the checks take from it."""
    if not meta.get("present"):
        return []
    vals = meta["values"]
    head = (f"  metadata (traceparse profiler plugin v{meta['version']}, torch {meta.get('torch_version') or '?'}, "
            f"ranks {_ranks(meta['ranks'])}): " + "  ".join(f"{k}={terminal(_val(v))}" for k, v in vals.items()))
    return [head] + [f"  metadata note: {terminal(n)}" for n in meta["notes"]]


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
            [[r["strategy"], r["variant"] or "", r["op"], number(r["count"]), size(r["input_bytes_per_rank_per_step"]),
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
    """How much communication no rule tagged, and why (by reason, the operations each holds)."""
    why = "; ".join(f"{count(w['ops'], 'operation')}: {terminal(w['why'])}" for w in u.get("why") or [])
    return (f"untagged: {u['ops']} of {count(u['all_ops'], 'operation')}, {pct(u['time_fraction'])} of communication "
            f"time" + (f" ({why})" if why else ""))


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
        head += f" ({terminal(c.get('reason') or note)})"
    return [head] + ([f"    - {terminal(f)}" for f in c.get("findings", [])] if findings else [])


def sections_flagged(doc) -> list[str]:
    """``<section>: <status>`` of each section besides the checks with a status at warn or fail (the GPU section), so
    the findings' head never says nothing is at warn above a section that is."""
    gpu = doc.get("gpu") or {}
    return [f"gpu: {gpu['status']}"] if at_least(gpu.get("status") or "ok", "warn") else []


CAUSES_SHOWN = 3  # the costliest causes the report's head names (the document has them all)
CAUSE_FLOOR = 0.01  # a cause that saves less of a step is left to its check's section


def shown_causes(doc) -> list[dict]:
    """The document's ``causes`` a report shows: those that save at least ``CAUSE_FLOOR`` of a step."""
    return [c for c in doc.get("causes") or [] if (c["share"] or 0) >= CAUSE_FLOOR]


def cost_unit(doc) -> str:
    """What a cause's saving is per: ``a step``, or ``over the whole trace`` for a run without ProfilerStep#N (its
    one whole-trace window)."""
    steps = (doc.get("summary") or {}).get("per_step") or []
    return "over the whole trace" if steps and all(s["step"] is None for s in steps) else "a step"


def render_causes(doc) -> str:
    """``why the steps are slow``: the costliest causes the replay priced (the document's ``causes``), one line each;
    nothing when none saves ``CAUSE_FLOOR`` of a step."""
    unit = cost_unit(doc)
    lines = [f"{terminal(c['cause'])} costs {ms(c['saved_per_step_ns'])} {unit} ({c['share']:.0%}): "
             f"{terminal(c['note'])} [{c['check']}]" for c in shown_causes(doc)[:CAUSES_SHOWN]]
    if not lines:
        return ""
    return "\n".join([f"why the steps are slow, by replay (explain: causes): {lines[0]}",
                      *(f"  then {line}" for line in lines[1:])])


def render_findings(doc) -> str:
    """What to look at first: the checks at warn or fail with their findings; then the other sections at warn or
    fail, whose findings follow the checks."""
    flagged = _flagged(doc)
    others = [f"  {s} (its findings in its section, after the checks)" for s in sections_flagged(doc)]
    if not flagged:
        return "\n".join(["findings: no check at warn or fail", *others])
    out = [f"findings: {len(flagged)} of {len(doc['checks'])} checks at warn or fail (explain: <check>)"]
    for cid, c in flagged.items():
        out += check_lines(cid, c)
    return "\n".join(out + others)


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
        out += ["", _stages_table(imb["pp_stages"])]
    return "\n".join(out) + "\n"


def named_ranks(doc) -> list[int]:
    """The ranks a check names: the straggler when named, and every ``rank N`` its findings quote."""
    out = []
    imb = doc["checks"].get("imbalance") or {}
    if imb.get("straggler_rank") is not None:
        out.append(imb["straggler_rank"])
    for c in doc["checks"].values():
        for f in c.get("findings") or []:
            out += [int(n) for n in re.findall(r"\b[Rr]ank (\d+)\b", f)]
    return list(dict.fromkeys(out))


def spread_picks(values: dict) -> tuple[dict, list]:
    """``values``: rank -> number. ({rank: 'min' / 'median' / 'max'}, the ranks beyond the spread: more than
    3 scaled median absolute deviations from the median, slowest first)."""
    ordered = sorted((v, r) for r, v in values.items() if v is not None)
    if not ordered:
        return {}, []
    picks = {}
    for label, (_, rank) in (("min", ordered[0]), ("median", ordered[(len(ordered) - 1) // 2]), ("max", ordered[-1])):
        picks.setdefault(rank, label)
    nums = [v for v, _ in ordered]
    mid = statistics.median(nums)
    mad = 1.4826 * statistics.median(abs(v - mid) for v in nums)
    beyond = [r for v, r in sorted(ordered, key=lambda vr: -abs(vr[0] - mid)) if mad and abs(v - mid) > 3 * mad]
    return picks, beyond


def _busiest(threads) -> str:
    if not threads:
        return "-"
    b = max(threads, key=lambda t: (t["busy_fraction"] or 0, -(t["tid"] or 0)))
    name = b["thread_name"] or ""
    m = re.search(r"\(([^()]*)\)$", name)
    return f"{pct(b['busy_fraction'])} {(m.group(1) if m else name)[:20]}".strip()


def render_rank_summary(doc) -> str:
    """A run of many ranks: one table of the min / median / max rank by step mean and the ranks the checks
    name, with the per-step numbers of imbalance, the rank's comm % and its busiest thread; the ranks beyond the
    spread listed; every rank in ``render(doc, full=True)``."""
    s, imb = doc["summary"], doc["checks"].get("imbalance") or {}
    per = {r["rank"]: dict(r) for r in s["per_rank"]}
    for r in imb.get("per_rank") or []:
        per.setdefault(r["rank"], {}).update(imbalance=r)
    threads = {}
    for t in s["threads"]:
        threads.setdefault(t["rank"], []).append(t)
    step = {rank: (r.get("imbalance") or {}).get("step_mean_ns", r.get("step_mean_ns")) for rank, r in per.items()}
    picks, beyond = spread_picks(step)
    named = [r for r in named_ranks(doc) if r in per and r not in picks][:4]
    shown = sorted(picks, key=lambda r: (step[r] is None, step[r], r)) + named
    rows = []
    for rank in shown:
        r, i = per[rank], per[rank].get("imbalance") or {}
        rows.append([f"{rank} ({picks.get(rank, 'named')})", ms(step[rank]), ms(i.get("compute_ns")),
                     ms(i.get("compute_floor_ns")), ms(i.get("wait_ns")), i.get("last_arrivals", "-"),
                     pct(r.get("comm_fraction")), _busiest(threads.get(rank))])
    out = [f"per rank, per step, summarized (explain: imbalance, comm_time, busy_time): straggler {_verdict(imb)}",
           table(["rank", "step mean", "compute", "compute floor", "wait / collective", "last arrivals", "comm %",
                  "busiest thread"], rows)]
    hint = f"({len(per)} ranks: min / median / max by step mean" + (", and the ranks a check names" if named else "")
    if beyond:
        hint += f"; beyond the spread: rank{'s' if len(beyond) > 1 else ''} {first_of(beyond)}"
    out.append(hint + f"; all of them, per-rank totals and busy time per thread: {FULL_HINT})")
    if imb.get("pp_stages"):
        out += ["", _stages_table(imb["pp_stages"], summarized=True, heavy=imb.get("heavy_stage"))]
    return "\n".join(out)


def _stages_table(stages, summarized=False, heavy=None) -> str:
    """The pipeline stages per micro-batch; ``summarized``: one row per stage, its rank with the most compute
    floor (the heavy stage's rank is the one the findings quote), and of more than ``SMALL_RUN`` stages only those
    with the least, median and most compute floor and the ``heavy`` stage the checks name."""
    rows = stages
    if summarized:
        best = {}
        for r in stages:
            kept = best.get(r["stage"])
            if kept is None or (r["compute_floor_per_microbatch_ns"] or 0) > (kept["compute_floor_per_microbatch_ns"] or 0):
                best[r["stage"]] = r
        rows = [best[k] for k in sorted(best)]
    n_stages = len(rows)
    if summarized and n_stages > SMALL_RUN:  # many stages: the least, median and most compute floor, the heavy one
        picks, _ = spread_picks({r["stage"]: r["compute_floor_per_microbatch_ns"] for r in rows})
        rows = [r for r in rows if r["stage"] in picks or r["stage"] == heavy]
    out = ["pipeline stages, per micro-batch: the heavy stage has the most compute floor"
           + ("; per stage, its rank with the most" if n_stages < len(stages) else "")
           + ("; the stages with the least, median and most, and the heavy one" if len(rows) < n_stages else ""),
           table(["stage", "rank", "compute", "compute floor"],
                 [[r["stage"], r["rank"], ms(r["compute_per_microbatch_ns"]), ms(r["compute_floor_per_microbatch_ns"])]
                  for r in rows])]
    if len(rows) < len(stages):
        out.append(f"({len(stages)} ranks in {n_stages} stages; all of them: {FULL_HINT})")
    return "\n".join(out)


def _verdict(imb) -> str:
    e, verdict = imb.get("straggler") or {}, imb.get("straggler_verdict")
    if verdict == "named":
        return f"rank {e['rank']} (named)"
    if verdict == "unknown":
        return "unknown: " + imb["straggler_reason"]
    if not e:
        return verdict or "none"
    p = "p unknown" if e.get("p") is None else f"p = {e['p']:.2g}"
    late = e["lateness_ns"]
    late = f"lateness {ms(late)}" if late is None or late >= 0 else f"{ms(-late)} early on average"
    return (f"{verdict or 'none'} (most costly: rank {e['rank']}, {late}, {p}, "
            f"others lose {ms(e['lost_per_step_ns'])} a step)")


def render_checks(doc) -> str:
    """Every check's status; the findings of those at warn or fail are in render_findings, at the top."""
    flagged = _flagged(doc)
    out = ["checks (explain: <check>)"]
    for cid, c in doc["checks"].items():
        out += check_lines(cid, c, findings=cid not in flagged, note="findings at the top" if cid in flagged else None)
    return "\n".join(out)
