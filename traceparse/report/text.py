"""Render the analyze document for a terminal."""


def ms(ns):
    return "-" if ns is None else f"{ns / 1e6:,.3f} ms"


def mb(b):
    return "-" if b is None else f"{b / 1e6:,.2f} MB"


def pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def table(headers, rows) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def render(doc: dict) -> str:
    run, s = doc["run"], doc["summary"]
    out = [
        f"run: {len(run['files'])} file(s), ranks {_ranks(run['ranks'])}, world size {run['world_size'] or 'unknown'}, "
        f"backend {', '.join(run['backend']) or 'unknown'}, devices {', '.join(run['devices']) or 'not recorded'}",
        f"steps: {', '.join(map(str, run['steps'])) or 'none (no ProfilerStep annotations)'}; "
        f"{run['events']:,} events; clock: {'; '.join(run['clock'])}",
        "",
        "per rank (explain: step_time, comm_time)",
        table(
            ["rank", "steps", "step mean", "step max", "window", "comm ops", "comm time", "comm %"],
            [[r["rank"], r["steps"], ms(r["step_mean_ns"]), ms(r["step_max_ns"]), ms(r["window_ns"]),
              r["comm_ops"], ms(r["comm_ns"]), pct(r["comm_fraction"])] for r in s["per_rank"]],
        ),
        "",
        "communication by op (explain: comm_ops)",
        table(
            ["op", "source", "ops", "ranks", "bytes in", "time", "no size"],
            [[c["op"], c["source"], c["ops"], c["ranks"], mb(c["bytes_in"]), ms(c["time_ns"]), c["ops_without_size"]]
             for c in s["comm"]],
        ) if s["comm"] else "no communication operations found",
        "",
        "busy time per thread / stream (explain: busy_time)",
        table(
            ["rank", "kind", "pid", "tid", "name", "events", "busy", "busy %"],
            [[b["rank"], b["kind"], b["pid"], b["tid"], (b["thread_name"] or "")[:32], b["events"], ms(b["busy_ns"]),
              pct(b["busy_fraction"])] for b in s["threads"]],
        ),
        "",
        "heaviest kernels / ops (explain: top_kernels)",
        table(
            ["name", "kind", "calls", "total", "share", "ranks"],
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
