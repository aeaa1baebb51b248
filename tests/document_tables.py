"""The analyze document of a bundled run as tables per section, each beside the table expected of it, derived
independently: from the run's configuration (``truth.json`` of a fixture run: its layout, the collectives every
rank issued, the rank made slow) or computed here from the trace files read the plain way (``raw_trace``: the
standard library's JSON, exact nanoseconds).

A table is ``{key: value}``; ``differences(expected, got)`` names every cell that differs, by section and key, so a
change that moves a number fails saying which.

Sections and where their expectations come from:

- ``run``: the world size (truth, else the header's ``distributedInfo.world_size``), the ranks (the headers'
  ranks), the profiled steps (the ``ProfilerStep#N`` every rank marked; a rank that marked none has one window,
  step None, from its first event's start to its last event's end);
- ``layout``: truth's layout (dp, tp, pp, cp, sp, ep, ZeRO stage, schedule, m, v);
- ``collectives``: per strategy, operation and variant, the operations and input bytes per rank per step (truth's
  collectives: each rank's calls per step, summed over ranks, over the world size);
- ``untagged``: no operation left without a strategy, of all the operations truth counts over the profiled steps;
- ``step windows`` (``summary.per_step``): each rank's window per step, the length of its ``ProfilerStep#N``;
- ``per rank`` (``summary.per_rank``): its steps, their total, longest, its operations and input bytes (truth per
  step x the steps);
- ``critical path``: per step, the rank whose window ended last (the lowest of those that tie) and the path's length,
  that rank's window (the path runs from its window's start to the step's end);
- ``comm_volume``: per strategy, the volume measured in the notes' count (``truth_volume``);
- ``overlap``: per rank, its communication time and the part of it compute covered (the gloo ranks' definition
  computed the plain way, ``raw_trace.gloo_rank``);
- ``bubble``: a pipeline's schedule, N_PP, m and v (truth), and its ideal bubble by the notes' formula where they
  give one (GPipe, 1F1B: (N_PP - 1) / (m + N_PP - 1); interleaved 1F1B: (N_PP - 1) / (v m + N_PP - 1)); no pipeline,
  not applicable;
- ``timeline``: the windows of the step drawn (the step whose window, averaged over the ranks, is the median), each
  rank's start from the earliest and its length.

A rank profiled in several windows (a file each) is read from its latest, as ``analyze`` does by default.
"""

from collections import defaultdict
from pathlib import Path

import raw_trace

# the schedules whose ideal bubble the notes give (docs/parallelism.md 3.2): (N_PP - 1) / (m v + N_PP - 1), v the
# chunks each stage runs a micro-batch in (1 but for interleaved 1F1B)
FORMULA = ("gpipe", "1f1b", "interleaved_1f1b")
LAYOUT_KEYS = ("dp", "tp", "pp", "cp", "sp", "ep", "zero_stage", "pp_schedule", "microbatches", "virtual_stages")


def files(path: Path) -> list[Path]:
    """The trace files of a run: a file, or a folder's ``*.json`` / ``*.json.gz``."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")) and p.name != "truth.json")


def raw_ranks(path: Path) -> dict[int, dict]:
    """{rank: {world, steps: {N: (start, end) on the common clock}}} of the run's files; a rank profiled in several
    windows (a file each), its latest: the one with the highest step."""
    out = {}
    for i, f in enumerate(files(path)):
        doc = raw_trace.read(f)
        info = doc.get("distributedInfo") or {}
        rank = int(info.get("rank", i))
        base = raw_trace.base_ns(doc)
        events = raw_trace.complete_events(doc)
        steps = raw_trace.profiler_steps(events)
        if not steps and events:  # no ProfilerStep#N: one window, the whole trace (step None)
            steps = {None: (min(e["s"] for e in events), max(e["e"] for e in events))}
        if rank in out and _last(out[rank]["steps"]) > _last(steps):
            continue
        out[rank] = {"world": info.get("world_size"), "steps": {n: (base + s, base + e) for n, (s, e) in steps.items()},
                     "events": events}
    return out


def _last(steps: dict) -> int:
    return max((n for n in steps if n is not None), default=-1)


def expected(path: Path, truth: dict | None) -> dict[str, dict]:
    """The tables expected of the run at ``path`` (``truth``: its truth.json, None for a public trace)."""
    ranks = raw_ranks(path)
    steps = sorted(set.intersection(*(set(r["steps"]) for r in ranks.values())), key=lambda n: (n is not None, n)) \
        if ranks else []
    world = truth["world_size"] if truth else next(iter(ranks.values()))["world"]
    out = {"run": {"world_size": world, "ranks": sorted(ranks), "steps": [n for n in steps if n is not None]}}
    windows = {(r, n): ranks[r]["steps"][n] for r in ranks for n in steps}
    out["step windows"] = {(r, n): e - s for (r, n), (s, e) in windows.items()}
    out["critical path"] = {}
    for n in steps:
        end_rank = max(ranks, key=lambda r: (windows[(r, n)][1], -r))
        s, e = windows[(end_rank, n)]
        out["critical path"][n] = {"end_rank": end_rank, "length_ns": e - s}
    if steps:  # the step of median mean length (the lower of an even count; ties, the lower step)
        by_length = sorted(steps, key=lambda n: (sum(out["step windows"][(r, n)] for r in ranks) / len(ranks),
                                                 n is not None, n or 0))
        drawn = by_length[(len(by_length) - 1) // 2]
        origin = min(windows[(r, drawn)][0] for r in ranks)
        out["timeline"] = {r: {"start_ns": windows[(r, drawn)][0] - origin, "dur_ns": windows[(r, drawn)][1]
                               - windows[(r, drawn)][0]} for r in ranks}
    if truth:
        out.update(_from_truth(truth, ranks, steps, out["step windows"]))
        out["overlap"] = {}
        for r in ranks:
            comm, covered = raw_trace.per_step_total(raw_trace.gloo_rank(ranks[r]["events"]))
            out["overlap"][r] = {"comm_ns": comm, "hidden_ns": covered}
    return out


def _from_truth(truth: dict, ranks: dict, steps: list, lengths: dict) -> dict[str, dict]:
    world, n_steps = truth["world_size"], len(steps)
    out = {"layout": {k: truth["layout"][k] for k in LAYOUT_KEYS}}
    per_op = defaultdict(lambda: [0, 0])
    per_rank = defaultdict(lambda: [0, 0])
    for c in truth["comm"]:
        per_op[(c["strategy"], c["op"], c["variant"])][0] += c["count"]
        per_op[(c["strategy"], c["op"], c["variant"])][1] += c["count"] * c["bytes_in"]
        per_rank[c["rank"]][0] += c["count"]
        per_rank[c["rank"]][1] += c["count"] * c["bytes_in"]
    out["collectives"] = {k: {"count": n / world, "input_bytes_per_rank_per_step": b / world}
                          for k, (n, b) in per_op.items()}
    out["untagged"] = {"ops": 0, "all_ops": sum(n for n, _ in per_rank.values()) * n_steps}
    out["per rank"] = {}
    for r in ranks:
        mine = [lengths[(r, n)] for n in steps]
        n_ops, n_bytes = per_rank.get(r, (0, 0))
        out["per rank"][r] = {"steps": n_steps, "window_ns": sum(mine), "step_max_ns": max(mine, default=None),
                              "comm_ops": n_ops * n_steps, "comm_bytes_in": n_bytes * n_steps}
    out["comm_volume"] = {s: truth_volume(truth, s) for s in sorted({c["strategy"] for c in truth["comm"]})}
    layout = truth["layout"]
    if layout["pp"] > 1:
        p, m, v, schedule = layout["pp"], layout["microbatches"], layout["virtual_stages"], layout["pp_schedule"]
        out["bubble"] = {"schedule": schedule, "n_pp": p, "microbatches": m, "virtual_stages": v}
        if schedule in FORMULA:
            out["bubble"]["expected"] = (p - 1) / (m * (v if schedule == "interleaved_1f1b" else 1) + p - 1)
    else:
        out["bubble"] = {"status": "not_applicable"}
    return out


def truth_volume(t: dict, strategy: str) -> float:
    """The notes' volume (docs/parallelism.md 2) per rank per step from truth's collectives: all-reduce 2 x size,
    all-gather the gathered size, other collectives and sends the size, receives 0; the ring's N-1 shifts scaled by
    N/(N-1)."""
    total = 0
    for r in t["comm"]:
        if r["strategy"] != strategy:
            continue
        size = {"all_reduce": 2 * r["bytes_in"], "all_gather": r["bytes_out"], "recv": 0}.get(r["op"], r["bytes_in"])
        total += r["count"] * size
    n = t["layout"]["cp"]
    return total / t["world_size"] * (n / (n - 1) if strategy == "cp" else 1)


def got(doc: dict, truth: dict | None) -> dict[str, dict]:
    """The same tables read from the analyze document ``doc``."""
    run = doc["run"]
    out = {"run": {"world_size": run["world_size"], "ranks": run["ranks"], "steps": run["steps"]}}
    summary = doc.get("summary") or {}
    out["step windows"] = {(p["rank"], p["step"]): p["window_ns"] for p in summary.get("per_step") or []}
    out["critical path"] = {s["step"]: {"end_rank": s["end_rank"], "length_ns": s["length_ns"]}
                            for s in (doc.get("critical_path") or {}).get("steps") or []}
    timeline = doc.get("timeline") or {}
    if timeline.get("windows"):
        out["timeline"] = {w["rank"]: {"start_ns": w["start_ns"], "dur_ns": w["dur_ns"]} for w in timeline["windows"]}
    if truth:
        out["layout"] = {k: doc["layout"].get(k) for k in LAYOUT_KEYS}
        out["collectives"] = {(c["strategy"], c["op"], c["variant"]): {
            "count": c["count"], "input_bytes_per_rank_per_step": c["input_bytes_per_rank_per_step"]}
            for c in doc["collectives"]}
        out["untagged"] = {k: doc["untagged"][k] for k in ("ops", "all_ops")}
        checks = doc["checks"]
        out["comm_volume"] = {s: v["measured_volume_bytes"]
                              for s, v in (checks["comm_volume"].get("per_strategy") or {}).items()}
        out["overlap"] = {r["rank"]: {k: r[k] for k in ("comm_ns", "hidden_ns")}
                          for r in checks["overlap"].get("per_rank") or []}
        bubble = checks["bubble"]
        keys = ("schedule", "n_pp", "microbatches", "virtual_stages") + (("expected",) * (bubble.get("schedule") in FORMULA))
        out["bubble"] = ({"status": bubble["status"]} if bubble["status"] == "not_applicable" else
                         {k: bubble.get(k) for k in keys})
        out["per rank"] = {p["rank"]: {k: p[k] for k in ("steps", "window_ns", "step_max_ns", "comm_ops",
                                                            "comm_bytes_in")} for p in summary.get("per_rank") or []}
    return out


def differences(exp: dict[str, dict], have: dict[str, dict], limit: int = 20) -> list[str]:
    """Every cell of ``exp`` that ``have`` lacks or holds another value in: ``section key: expected X, got Y``."""
    out = []
    for section, table in exp.items():
        mine = have.get(section, {})
        for key in sorted(set(table) | set(mine), key=str):
            want, value = table.get(key, "(no row)"), mine.get(key, "(no row)")
            if want != value:
                out.append(f"{section} {key}: expected {want}, got {value}")
    return out[:limit]
