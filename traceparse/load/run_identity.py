"""Decide which rank each file is, whether the files are one run, and the run's clock."""

from collections import Counter, defaultdict

from traceparse.errors import TraceError


def assign_ranks(summaries: list[dict]) -> list[tuple]:
    """Fill in missing ranks; refuse duplicates. Returns load issues."""
    issues = []
    missing = [s for s in summaries if s["rank"] is None]
    if missing and len(summaries) > 1:
        raise TraceError(
            missing[0]["file"], "cannot tell the rank: no distributedInfo.rank and no rank in the file name"
        )
    for s in missing:
        s["rank"], s["rank_source"] = 0, "assumed"
        issues.append((s["file"], "warning", "no rank in distributedInfo or the file name; assumed rank 0 (single file)", 1))
    by_rank = defaultdict(list)
    for s in summaries:
        by_rank[s["rank"]].append(s["file"])
    for rank, paths in sorted(by_rank.items()):
        if len(paths) > 1:
            raise TraceError(paths[1], f"claims rank {rank}, as does {paths[0]}")
    return issues


def rank_list(ranks, most: int = 16) -> str:
    """Ranks in a message: the first ``most``, then ``...``."""
    return ", ".join(map(str, ranks[:most])) + (", ..." if len(ranks) > most else "")


def missing_ranks(summaries: list[dict]) -> list[tuple]:
    """A load issue when the files hold fewer ranks than the job's world size."""
    sizes = {s["world_size"] for s in summaries if s["world_size"] is not None}
    if len(sizes) != 1:
        return []
    world = sizes.pop()
    absent = sorted(set(range(world)) - {s["rank"] for s in summaries})
    if not absent:
        return []
    shown = rank_list(absent)
    severity = "info" if len(summaries) == 1 else "warning"  # one file: a look at one rank, as intended
    return [(None, severity, f"{world - len(absent)} of {world} ranks loaded; missing ranks: {shown} (checks compare "
             "only the loaded ranks; collectives whose groups include missing ranks are not matched)", len(absent))]


def check_one_run(summaries: list[dict], allow_mixed: bool) -> list[tuple]:
    """Refuse files from different runs unless ``allow_mixed``. Returns load issues."""
    problems = []
    sizes = Counter(s["world_size"] for s in summaries if s["world_size"] is not None)
    if len(sizes) > 1:
        common = sizes.most_common(1)[0][0]
        odd = next(s for s in summaries if s["world_size"] not in (None, common))
        problems.append((odd["file"], f"world size {odd['world_size']} differs from {common} in the other files"))
    ids = Counter(s["trace_id"] for s in summaries if s["trace_id"])
    # Kineto draws a trace id per process; only ids shared by several files mark a run.
    shared = [i for i, n in ids.items() if n > 1]
    if len(shared) > 1:
        odd = next(s for s in summaries if s["trace_id"] == shared[1])
        problems.append((odd["file"], f"trace id {shared[1]} differs from {shared[0]} shared by other files"))
    if not problems:
        return []
    if not allow_mixed:
        path, what = problems[0]
        raise TraceError(path, f"{what}: files from different runs (use --allow-mixed to load them together)")
    return [(path, "warning", f"{what}; loaded anyway (--allow-mixed)", 1) for path, what in problems]


def clock_of(summary: dict) -> tuple[int, str]:
    """(offset, method): what moves the file's timestamps to the run's clock. Kineto writes ``ts`` relative to
    ``baseTimeNanoseconds`` when it gives one, else on the epoch."""
    if summary["base_time_ns"] is not None:
        return summary["base_time_ns"], "baseTimeNanoseconds + ts"
    return 0, "ts as written (epoch-based)"


def align_clocks(summaries: list[dict]) -> list[tuple]:
    """Load issues of the files' clocks (each file's offset is ``clock_of``, applied in the task that parsed it)."""
    with_base = [s for s in summaries if s["base_time_ns"] is not None]
    if with_base and len(with_base) < len(summaries):
        return [(None, "warning", "some files have baseTimeNanoseconds and some do not: their clocks may not line up",
                 len(summaries) - len(with_base))]
    return []
