"""A trace file read the plain way, for expectations computed independently of traceparse: the JSON parsed by the
standard library with every number kept as written (decimals), each complete event's start and end in exact integer
nanoseconds, and the header's rank, world size and clock base."""

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

# a communication call on the calling thread (its time is not compute)
COMM_CALL = re.compile(r"^(c10d::|nccl:|_c10d_functional::|symm_mem::|record_param_comms$)")


def open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.name.endswith(".gz") else open(path, encoding="utf-8")


def read(path: Path) -> dict:
    """The whole trace document, numbers as decimals."""
    with open_text(path) as f:
        return json.load(f, parse_float=Decimal)


def ns(v) -> int:
    """Microseconds (a JSON number) -> integer nanoseconds, exactly."""
    return int(Decimal(str(v)) * 1000)


def complete_events(doc: dict) -> list[dict]:
    """Every complete event ('X' with a duration), with ``s`` and ``e`` its start and end in ns on the file's own
    clock (``ts`` as written, no base added)."""
    out = []
    for e in doc.get("traceEvents", []):
        if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e and "ts" in e:
            s = ns(e["ts"])
            out.append({**e, "s": s, "e": s + ns(e["dur"])})
    return out


def base_ns(doc: dict) -> int:
    """What the file's timestamps count from (Kineto's ``baseTimeNanoseconds``, 0 where absent)."""
    return int(doc.get("baseTimeNanoseconds") or 0)


def profiler_steps(events: list[dict]) -> dict[int, tuple[int, int]]:
    """{N: (start, end)} of the ``ProfilerStep#N`` annotations on the CPU (the step windows the profiler marked);
    where one N appears on several threads, the outermost span."""
    out = {}
    for e in events:
        name = e.get("name")
        if isinstance(name, str) and name.startswith("ProfilerStep#") and e.get("cat") in ("user_annotation", None):
            n = int(name.split("#", 1)[1])
            s, t = out.get(n, (e["s"], e["e"]))
            out[n] = (min(s, e["s"]), max(t, e["e"]))
    return out


def union(intervals) -> list:
    out = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(pieces) -> int:
    return sum(e - s for s, e in pieces)


def intersect(a, b) -> list:
    """Pieces of the intersection of two sorted disjoint piece lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append([s, e])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def gloo_rank(events: list[dict]) -> dict:
    """A gloo (CPU) rank's communication and compute, the overlap check's definition computed the plain way:
    ``{'steps': {step: (start, end)}, 'comm': [(start, end, step)], 'compute': pieces}``; communication, the
    ``gloo:*`` annotations starting in a step; compute, the main thread's (the one marking ``ProfilerStep#N``)
    cpu_ops that overlap no communication call."""
    steps = {int(e["name"].split("#")[1]): (e["s"], e["e"]) for e in events if e["name"].startswith("ProfilerStep#")}
    main = {e["tid"] for e in events if e["name"].startswith("ProfilerStep#")}
    assert len(main) == 1
    main_ev = [e for e in events if e["tid"] in main]
    calls = [e for e in main_ev if COMM_CALL.match(e["name"])]
    ops = [e for e in main_ev if e["cat"] == "cpu_op" and not any(c["s"] < e["e"] and e["s"] < c["e"] for c in calls)]
    compute = union((e["s"], e["e"]) for e in ops)

    def step_of(t):
        return next((n for n, (s, e) in steps.items() if s <= t < e), None)

    comm = [(e["s"], e["e"], step_of(e["s"])) for e in events
            if e["name"].startswith("gloo:") and step_of(e["s"]) is not None]
    return {"steps": steps, "comm": comm, "compute": compute}


def hidden(comm, compute) -> tuple[int, int]:
    """(the union of ``comm``'s length, how much of it ``compute`` covers)."""
    pieces = union(comm)
    return length(pieces), length(intersect(pieces, compute))


def per_step_total(raw: dict) -> tuple[int, int]:
    """(comm, hidden) of a rank (``gloo_rank``): each step's communication union against compute, summed over
    steps."""
    sums = [hidden([(s, e) for s, e, st in raw["comm"] if st == step], raw["compute"]) for step in raw["steps"]]
    return sum(c for c, _ in sums), sum(h for _, h in sums)
