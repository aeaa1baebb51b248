"""Forecast a target layout of the same model from a measured run (docs/parallelism.md 3, 4).

Bytes come from the notes' formulas (analyzers.comm_volume.expected) with the target's degrees, memory from the
ZeRO table (analyzers.memory.zero_memory), the bubble from the notes' formula for the target schedule; the step
time from the measured times, scaled term by term:

- compute per device per step scales with the work a device does: m, the layers it holds (L / N_PP), and 1 / N_TP,
  1 / (N_CP N_SP) of each layer;
- exposed communication of a strategy scales with its bytes: the measured exposed time per byte of that strategy,
  or, for a strategy the run did not use, the run's exposed time per byte over every strategy;
- without a pipeline, the rest of the step (idle time, Python overhead: step - compute - exposed) stays;
- with one, each rank does 2 m v actions (a forward and a backward per micro-batch and chunk), each costing the
  compute of the slowest stage (it sets the pace; ``balanced``: the stages' mean, as if the heaviest stage's
  layers were spread) plus a fixed overhead (send/recv, launch) measured on the run's pipeline, and the step is
  the actions' time over (1 - the schedule's bubble) plus the exposed non-pipeline communication.

The micro-batch size b per data-parallel replica stays as measured: the global batch is dp x m x b.
"""

from ..analyzers.bubble import expected_bubble, simulate, textbook_orders
from ..analyzers.comm_volume import expected
from ..analyzers.memory import zero_memory
from ..analyzers.model_facts import fact
from ..errors import TraceError
from .measured import LAYOUT

STRATEGIES = ("dp", "tp", "pp", "cp", "sp", "ep")


def target_layout(m: dict, given: dict) -> dict:
    """The target's layout: the given keys over the measured run's (a pipeline's schedule defaults to 1f1b, its v
    to 1); the model's layers when given. Without a given dp, dp keeps the measured world size (dp x tp x pp x cp
    x sp); a given dp may change it."""
    t = {k: given.get(k, m[k]["value"]) for k in LAYOUT}
    for k in STRATEGIES + ("microbatches", "virtual_stages"):
        t[k] = t[k] or 1
    if "dp" not in given:
        world = _world({k: m[k]["value"] or 1 for k in STRATEGIES})
        model = _world({**t, "dp": 1})
        if world % model:
            raise TraceError(None, f"--layout: tp x pp x cp x sp = {model} does not divide the measured world of "
                             f"{world} ranks; give dp as well")
        t["dp"] = world // model
    t["zero_stage"] = t["zero_stage"] or 0
    if t["pp"] > 1 and not t["pp_schedule"]:
        t["pp_schedule"] = "1f1b"
    if t["pp"] == 1:
        t["pp_schedule"], t["virtual_stages"] = None, 1
    t["layers"] = given.get("layers")
    t["balanced"] = bool(given.get("balanced"))
    return t


def _world(degrees: dict) -> int:
    """Ranks of a layout: dp x tp x pp x cp x sp (ep folds into dp)."""
    return degrees["dp"] * degrees["tp"] * degrees["pp"] * degrees["cp"] * degrees["sp"]


def forecast(m: dict, given: dict) -> dict:
    """{target, prediction, inputs} for the layout ``given`` (parse_stated keys) from the measured facts ``m``."""
    t = target_layout(m, given)
    s = {k: (m[k]["value"] if m[k]["value"] is not None else (0 if k == "zero_stage" else 1)) for k in STRATEGIES +
         ("zero_stage", "microbatches", "virtual_stages")}
    s["pp_schedule"] = m["pp_schedule"]["value"]
    inputs = {}
    layers_s = m["L_local"]["value"] * s["pp"] if m["L_local"]["value"] else None
    layers_t = t["layers"] or layers_s
    grow = layers_t / layers_s if t["layers"] and layers_s else 1.0
    inputs["layers"] = fact(layers_t, "given (layers)" if t["layers"] else f"measured: L_local x pp = {layers_s}")
    split = (s["tp"] * s["pp"]) / (t["tp"] * t["pp"])
    for k in ("Phi_dp", "Phi_device"):
        v = m[k]["value"]
        inputs[k] = fact(v * split * grow if v is not None else None,
                         f"measured {k} x (tp x pp measured / target) x layers target / measured = "
                         f"{v} x {split:g} x {grow:g} (every parameter split by TP and PP, every layer alike)"
                         if v is not None else m[k]["source"])
    inputs["L_local"] = fact(layers_t / t["pp"] if layers_t else None, "layers / target pp")
    x = {**{k: fact(t[k], "target") for k in STRATEGIES + ("microbatches", "virtual_stages")},
         **{k: m[k] for k in ("delta", "bSH", "kv_over_q", "K_MoE") + tuple(f"delta_{k}" for k in STRATEGIES[1:])},
         "Phi_dp": inputs["Phi_dp"], "L_local": inputs["L_local"]}
    volume = {}
    for strategy in STRATEGIES:
        if t[strategy] > 1:
            b, formula, _ = expected(strategy, f"zero{t['zero_stage']}" if strategy == "dp" else None, x)
            volume[strategy] = {"bytes": b, "formula": formula}
    memory = _memory(m, t, inputs["Phi_device"]["value"])
    replay, replay_how = _replay(m, s, t)
    exposed = _exposed(m, volume)
    step, bubble, how = _step(m, s, t, exposed, layers_t)
    return {
        "target": {**t, "world_size": _world(t)},
        "prediction": {
            "step_time_ns": step,
            "bubble": bubble,
            "bubble_replay": replay,
            "bytes_per_rank_per_step": {k: v["bytes"] for k, v in volume.items()},
            "memory_per_device_bytes": memory["total"],
            "exposed_comm_ns": {k: v["value"] for k, v in exposed.items()},
        },
        "how": {"step_time": how, "bubble_replay": replay_how, "bytes": {k: v["formula"] for k, v in volume.items()},
                "memory": memory, "exposed_comm": {k: v["source"] for k, v in exposed.items()}},
        "inputs": inputs,
    }


def _replay(m, s, t):
    """(bubble, how): the target's textbook order (GPipe, 1F1B) replayed with B = 2 F and, when the target keeps the
    measured pipeline's stages unbalanced, each stage's measured compute relative to the mean."""
    if t["pp"] == 1:
        return 0.0, "no pipeline"
    orders = textbook_orders(t["pp_schedule"], t["pp"], t["microbatches"])
    if orders is None:
        return None, f"no textbook order of {t['pp_schedule']} to replay (GPipe and 1F1B only): the formula stands"
    per = m["stage_compute_ns"]["value"]
    if per and len(per) == t["pp"] == s["pp"] and not t["balanced"] and sum(per.values()):
        mean = sum(per.values()) / len(per)
        cost, how = {st: c / mean for st, c in per.items()}, "each stage's measured compute / the stages' mean"
    else:
        cost, how = None, "equal stages"
    idle = simulate(orders, 2, cost)
    return (float(sum(idle.values()) / len(idle)),
            f"{t['pp_schedule']} order of {t['pp']} stages and m = {t['microbatches']} replayed with B = 2 F, {how}; "
            "idle / makespan, mean over ranks")


def _memory(m, t, phi):
    n_opt, dl = m["n_opt"]["value"], m["delta"]["value"]
    if phi is None or dl is None:
        return {"total": None, "why": "Phi or delta unknown"}
    parts = zero_memory(phi, dl, n_opt, t["dp"], t["zero_stage"])
    held = {"gpipe": t["microbatches"]}.get(t["pp_schedule"], min(t["microbatches"], t["pp"]) if t["pp"] > 1 else 1)
    return {**parts, "activation_microbatches_held": held,
            "why": "ZeRO table (docs/parallelism.md 3.1) with the target's N_DP and stage; activations not included: "
                   "the notes give the micro-batches a stage holds (3.2: GPipe m, 1F1B at most N_PP), not their size"}


def _exposed(m, volume):
    """{strategy: fact(ns)} per rank per step."""
    got_bytes = {k: f["value"] for k, f in m["bytes"].items() if f["value"]}
    got_ns = {k: f["value"] for k, f in m["exposed_comm_ns"].items() if f["value"] is not None}
    all_bytes = sum(got_bytes.get(k, 0) for k in got_ns)
    per_byte = sum(got_ns[k] for k in got_ns if k in got_bytes) / all_bytes if all_bytes else None
    out = {}
    for k, v in volume.items():
        b = v["bytes"]
        if b is None:
            out[k] = fact(None, "target bytes unknown")
        elif k in got_bytes and k in got_ns:
            out[k] = fact(got_ns[k] * b / got_bytes[k], f"measured {k} exposed time per byte ({got_ns[k] / got_bytes[k]:.4g} "
                          "ns/B) x target bytes")
        elif per_byte is not None:
            out[k] = fact(per_byte * b, f"the run's exposed time per byte over every strategy ({per_byte:.4g} ns/B) x "
                          f"target bytes: the run did not use {k}")
        else:
            out[k] = fact(None, "no measured communication time per byte")
    return out


def _step(m, s, t, exposed, layers):
    """(step ns, bubble, how) of the target."""
    T, C = m["step_time_ns"]["value"], m["compute_ns"]["value"]
    if T is None or C is None:
        return None, None, "no profiled step windows"
    e_s = {k: f["value"] or 0 for k, f in m["exposed_comm_ns"].items()}
    e_t = {k: f["value"] for k, f in exposed.items()}
    if any(v is None for v in e_t.values()):
        return None, None, "a strategy's exposed communication is unknown"
    work = (s["tp"] * s["cp"] * s["sp"]) / (t["tp"] * t["cp"] * t["sp"])
    bubble_t = expected_bubble(t["pp_schedule"], t["pp"], t["microbatches"], t["virtual_stages"]) if t["pp"] > 1 else 0.0
    if s["pp"] == 1:
        rest = T - C - sum(e_s.values())
        held = layers / t["pp"] / (m["L_local"]["value"] or layers) if layers else 1 / t["pp"]
        c_t = C * work * t["microbatches"] / s["microbatches"] * held
        if bubble_t is None:
            return None, None, f"no bubble formula for {t['pp_schedule']}"
        how = ("compute x work per device + exposed communication per strategy + the measured rest (step - compute "
               "- exposed, kept)")
        if t["pp"] > 1:
            how = ("compute x work per device / (1 - bubble) + exposed communication per strategy + the measured "
                   "rest: the run has no pipeline, so no per-action overhead is known (taken as 0)")
        return c_t / (1 - bubble_t) + sum(e_t.values()) + rest, bubble_t, how
    bubble_s = expected_bubble(s["pp_schedule"], s["pp"], s["microbatches"], s["virtual_stages"])
    if bubble_s is None or bubble_t is None:
        return None, bubble_t, "no bubble formula for the measured or the target schedule"
    acts_s, acts_t = 2 * s["microbatches"] * s["virtual_stages"], 2 * t["microbatches"] * t["virtual_stages"]
    busy = (T - sum(v for k, v in e_s.items() if k != "pp")) * (1 - bubble_s) / acts_s
    per_stage = list((m["stage_compute_ns"]["value"] or {0: C}).values())
    stages = {"max": max(per_stage), "mean": sum(per_stage) / len(per_stage)}
    c_s = stages["max"] / acts_s  # the slowest stage sets the pace
    overhead = max(busy - c_s, 0.0)
    chunk_s = (m["L_local"]["value"] or 1) / s["virtual_stages"]
    chunk_t = (layers / t["pp"] / t["virtual_stages"]) if layers else chunk_s
    c_t = (stages["mean"] if t["balanced"] else stages["max"]) / acts_s * work * chunk_t / chunk_s
    step = acts_t * (c_t + overhead) / (1 - bubble_t) + sum(v for k, v in e_t.items() if k != "pp")
    pace = "the stages' mean compute (balanced)" if t["balanced"] else "the slowest stage's compute"
    return (step, bubble_t,
            f"2 m v actions x ({pace} per action {c_t / 1e6:.3g} ms + overhead per action {overhead / 1e6:.3g} ms, "
            f"measured) / (1 - bubble {bubble_t:.3f}) + exposed non-pipeline communication")
