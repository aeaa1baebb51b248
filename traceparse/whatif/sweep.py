"""``whatif --sweep``: every layout of the same world size within the notes' bounds, ranked by how reliable its
forecast is, then by predicted step time.

Candidates keep the measured cp, sp and ep and the micro-batch size; for each split of the rest of the world into
dp x tp x pp they take every ZeRO stage (dp > 1) and, with a pipeline, 1F1B with m = max(measured m, N_PP) and, when
the layers divide into 2 N_PP chunks, interleaved 1F1B with v = 2. A candidate is excluded, with the reason, when
TP spans more ranks than a node holds (``ranks_per_node``) or more heads than the model has kv heads
(``kv_heads``), when PP has more stages than the model has layers or the layers do not divide evenly (into N_PP
stages of v chunks each), or when its memory exceeds the device's (``device_memory_bytes``). ``whatif --layout``
refuses a target by the same ``excluded``. A bound whose fact is unknown is not applied and said so.

Each candidate carries its forecast's kind and that kind's validated step-time error (reliability.kind): the
forecasts of a reliable kind (validated within reliability.RELIABLE) come first, then those validated off by
more, then those of a kind no validation pair covers, then those without a step time (each with what would make
it forecastable: reliability.remedy), then the excluded; within each group, fastest predicted first.
"""

import math

from traceparse.errors import TraceError
from traceparse.bounds import MEMORY_BYTES
from traceparse.whatif.forecast import forecast, target_layout
from traceparse.whatif.measured import layout, model_layers
from traceparse.whatif.reliability import RELIABLE, SOURCE, kind, remedy


def divisors(n):
    """The divisors of ``n``, ascending, by trial up to its square root (a world of 2^31 - 1 ranks: 46,341 trials)."""
    low = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return low + [n // d for d in reversed(low) if d * d != n]


def candidates(t0: dict, world: int, layers) -> list[dict]:
    """Target layouts (parse_stated keys) for ``world`` ranks, from the measured layout ``t0``."""
    fixed = (t0["cp"] or 1) * (t0["sp"] or 1)
    if world % fixed:
        return []
    out = []
    for tp in divisors(world // fixed):
        for pp in divisors(world // fixed // tp):
            dp = world // fixed // tp // pp
            base = {"dp": dp, "tp": tp, "pp": pp, "cp": t0["cp"] or 1, "sp": t0["sp"] or 1, "ep": t0["ep"] or 1}
            m = max(t0["microbatches"] or 1, pp) if pp > 1 else (t0["microbatches"] or 1)
            pipes = [{}] if pp == 1 else [{"pp_schedule": "1f1b", "microbatches": m, "virtual_stages": 1}]
            if pp > 1 and layers and layers % (2 * pp) == 0:
                pipes.append({"pp_schedule": "interleaved_1f1b", "microbatches": m, "virtual_stages": 2})
            for z in (0, 1, 2, 3) if dp > 1 else (0,):
                for p in pipes:
                    out.append({**base, "zero_stage": z, **({"microbatches": m} if pp == 1 else p)})
    return out


def bounds(given: dict, device_memory_bytes=None) -> dict:
    """The facts that bound a layout: ranks_per_node, kv_heads (of ``given``) and the device's memory (refused,
    TraceError, beyond bounds.MEMORY_BYTES or not a finite number)."""
    if device_memory_bytes is not None and not 0 < device_memory_bytes <= MEMORY_BYTES:
        raise TraceError(None, f"--device-memory is out of range: more than 0 and at most {MEMORY_BYTES // 2**30:,} "
                         "GiB (an exbibyte)")
    return {"ranks_per_node": given.get("ranks_per_node"), "kv_heads": given.get("kv_heads"),
            "device_memory_bytes": device_memory_bytes}


def excluded(c: dict, facts: dict, layers, memory) -> str | None:
    """Why the layout ``c`` (tp, pp, virtual_stages) is out of bounds (``facts``: ``bounds``), or None."""
    node, kv, dev = facts.get("ranks_per_node"), facts.get("kv_heads"), facts.get("device_memory_bytes")
    if node and c["tp"] > node:
        return f"TP {c['tp']} spans more than a node's {node} ranks (docs/parallelism.md 3.3: TP stays within a node)"
    if kv and c["tp"] > kv:
        return f"TP {c['tp']} exceeds the {kv} kv heads"
    if layers and c["pp"] > layers:
        return f"PP {c['pp']} exceeds the {layers:g} layers"
    if layers and layers % c["pp"]:
        return f"{layers:g} layers do not divide into {c['pp']} equal stages"
    v = c.get("virtual_stages") or 1
    if layers and layers / c["pp"] % v:
        return f"{layers / c['pp']:g} layer(s) per stage do not divide into {v} virtual stages"
    if dev and memory and memory > dev:
        return f"memory {memory:,.0f} B exceeds the device's {dev:,.0f} B"
    return None


def _refused(m: dict, c: dict, why: str) -> dict:
    """What a forecast gives for a candidate it refuses: its layout, no prediction, and ``why``."""
    t = {**layout(m), **c, "layers": None, "balanced": False, "without_straggler": False}
    t["world_size"] = t["dp"] * t["tp"] * t["pp"] * t["cp"] * t["sp"]
    none = ("step_time_ns", "bubble", "bubble_replay", "compute_ns", "other_ns", "memory_per_device_bytes",
            "activation_bytes")
    return {"target": t, "prediction": {**dict.fromkeys(none), "bytes_per_rank_per_step": {}, "exposed_comm_ns": {}},
            "how": {"step_time": why, "bytes": {}, "exposed_comm": {}}, "refused": why}


def restated(m: dict) -> dict:
    """The measured layout as a target re-states it (forecast.target_layout with nothing given: the defaults a
    target gets filled in), the baseline of a forecast's kind (reliability.kind)."""
    try:
        return target_layout(m, {})
    except TraceError:  # a measured layout no target could state (e.g. its degrees do not divide its world)
        return {**layout(m), "layers": None, "balanced": False}


def tier(row: dict) -> int:
    """A candidate's place in the ranking: 0 reliable, 1 validated but off by more than RELIABLE, 2 not validated,
    3 no step time, 4 excluded."""
    if row["excluded"]:
        return 4
    if row["prediction"]["step_time_ns"] is None:
        return 3
    k = row["forecast_kind"]
    return 0 if k["reliable"] else 1 if k["error"] is not None else 2


TIERS = ("reliable", "not_reliable", "not_validated", "step_unknown", "excluded")


def sweep(m: dict, facts: dict, world: int) -> dict:
    """{candidates (ranked: reliable forecasts first, then by predicted step time; excluded last), bounds (what was
    applied), reliability (the bound, where the errors come from, how many candidates fall in each tier)}."""
    layers = model_layers(m)
    s = restated(m)
    t0 = {k: m[k]["value"] for k in ("cp", "sp", "ep", "microbatches")}
    rows = []
    for c in candidates(t0, world, layers):
        try:
            got = forecast(m, c)
        except TraceError as e:  # a pipeline too large to replay (forecast.MAX_ACTIONS): excluded, saying why
            got = _refused(m, c, e.problem.removeprefix("--layout: "))
        why = got.get("refused") or excluded(c, facts, layers, got["prediction"]["memory_per_device_bytes"])
        rows.append({"layout": got["target"], "prediction": got["prediction"], "excluded": why,
                     "step_time_how": got["how"]["step_time"], "forecast_kind": kind(s, got["target"], layers),
                     "remedy": remedy(got["prediction"], got["how"])})
    for r in rows:
        r["tier"] = TIERS[tier(r)]
    rows.sort(key=lambda r: (TIERS.index(r["tier"]), r["prediction"]["step_time_ns"] or 0))
    how = {"ranks_per_node": "--given ranks_per_node=N", "kv_heads": "--given kv_heads=N",
           "device_memory_bytes": "--device-memory GIB"}
    bounds = {k: facts.get(k) or f"unknown: not applied (state it with {how[k]})" for k in how}
    bounds["layers"] = layers or "unknown: not applied"
    reliability = {"bound": RELIABLE, "source": SOURCE, "tiers": {t: sum(r["tier"] == t for r in rows) for t in TIERS}}
    return {"world_size": world, "bounds": bounds, "reliability": reliability, "candidates": rows}
