"""Forecast a target layout of the same model from a measured run (docs/parallelism.md 3, 4).

Bytes come from the notes' formulas (models.comm_volume.expected) with the target's degrees; memory from the
ZeRO table (models.memory.zero_memory) plus the activations the target's order holds (activations.py); the
bubble from the notes' formula for the target schedule, beside the replay (pipeline.py). The step time is
compute + exposed communication + other, each from the measured run's, term by term:

- the optimizer step scales with the parameters a device holds and, from ZeRO-1 on, 1 / N_DP;
- the rest of compute scales with the work a device does: m, the layers it holds, 1 / N_TP, 1 / (N_CP N_SP);
- exposed communication of a strategy scales with its bytes by the notes' formula (target / run), or, for a
  strategy the run did not use, the run's exposed time per byte over every strategy;
- without a measured pipeline, the rest of the step (idle time, Python overhead: step - compute - exposed) stays,
  and a pipelined target adds the bubble's idle time;
- with one, the target's order is replayed with the measured compute per action plus the per-action overhead
  that makes the run's own order last its measured step (pipeline.py); where no order can be replayed, 2 m v
  actions of the slowest stage's compute plus that overhead, over (1 - the target's bubble formula). The rest
  (other) scales with the actions, up to what the pipeline lasts beyond its compute: the waits (exposed pp)
  are never negative.

A pipeline its schedule cannot place (gpipe or 1f1b with v > 1) or too large to replay (MAX_ACTIONS, MAX_STAGES)
is refused (TraceError).

The micro-batch size b per data-parallel replica stays as measured: the global batch is dp x m x b.
"""

from traceparse.models.pipeline import MAX_ACTIONS, MAX_STAGES, expected_bubble, simulate, textbook_orders
from traceparse.models.comm_volume import expected
from traceparse.models.memory import zero_memory
from traceparse.layout.model_facts import fact
from traceparse.errors import TraceError
from traceparse.whatif.activations import activation_bytes, held
from traceparse.whatif.calls import cost_ratio, target_calls
from traceparse.whatif.measured import LAYOUT, layout
from traceparse.whatif.pipeline import orders, replayed_step
from traceparse.axes import AXES
from traceparse.units import duration, number, size

STRATEGIES = AXES
V_OF = {"gpipe": 1, "1f1b": 1, "zbv_zero_bubble": 2, "dualpipe_v": 2}  # chunks per rank; interleaved ones: any v
# The target's order is built and replayed action by action, so a target larger than an order may be
# (models.pipeline MAX_ACTIONS, MAX_STAGES) is refused; the measured run's own order beyond them is not built (its
# terms come from the formulas).
PP_REMAINDER = ("the pipeline's waits and transfers: step - compute - other - exposed non-pipeline communication "
                "(the replay, or the formula model where there is none)")


def target_layout(m: dict, given: dict) -> dict:
    """The target's layout: the given keys over the measured run's (a pipeline's schedule defaults to 1f1b, its v
    to 1); the model's layers when given. Without a given dp, dp keeps the measured world size (dp x tp x pp x cp
    x sp); a given dp may change it."""
    t = {k: given.get(k, m[k]["value"]) for k in LAYOUT}
    for k in STRATEGIES + ("microbatches", "virtual_stages"):
        t[k] = t[k] or 1
    if "dp" not in given:
        world, model = m["world_size"]["value"], _world({**t, "dp": 1})
        if world % model:
            raise TraceError(None, f"--layout: tp x pp x cp x sp = {model} does not divide the measured world of "
                             f"{world} ranks; give dp as well")
        t["dp"] = world // model
    t["zero_stage"] = t["zero_stage"] or 0
    if t["pp"] > 1 and not t["pp_schedule"]:
        t["pp_schedule"] = "1f1b"
    if t["pp"] == 1:
        t["pp_schedule"], t["virtual_stages"] = None, 1
    elif "virtual_stages" not in given:  # a schedule with its own number of chunks per rank sets v
        t["virtual_stages"] = V_OF.get(t["pp_schedule"], t["virtual_stages"])
    _bounded(t)
    t["layers"] = given.get("layers")
    t["balanced"] = bool(given.get("balanced"))
    t["without_straggler"] = bool(given.get("without_straggler"))
    return t


def _bounded(t: dict) -> None:
    """Refuse (TraceError) a pipeline the schedule cannot place (its v) or the replay cannot hold (MAX_ACTIONS,
    MAX_STAGES)."""
    schedule, n, m, v = t["pp_schedule"], t["pp"], t["microbatches"], t["virtual_stages"]
    if n == 1:
        return
    if V_OF.get(schedule, v) != v:
        raise TraceError(None, f"--layout: {schedule} runs {V_OF[schedule]} stage(s) per rank (virtual_stages = "
                         f"{V_OF[schedule]}), not {v}; interleaved_1f1b and interleaved_zero_bubble take any")
    if n * v > MAX_STAGES:
        raise TraceError(None, f"--layout: pp x virtual_stages = {n * v:,} stages; the forecast replays at most "
                         f"{MAX_STAGES:,}")
    if 2 * m * v * n > MAX_ACTIONS:
        raise TraceError(None, f"--layout: 2 x microbatches x virtual_stages x pp = {2 * m * v * n:,} actions per "
                         f"step; the forecast replays at most {MAX_ACTIONS:,}")


def _world(degrees: dict) -> int:
    """Ranks of a layout: dp x tp x pp x cp x sp (ep folds into dp)."""
    return degrees["dp"] * degrees["tp"] * degrees["pp"] * degrees["cp"] * degrees["sp"]


def forecast(m: dict, given: dict) -> dict:
    """{target, prediction, inputs} for the layout ``given`` (parse_stated keys) from the measured facts ``m``."""
    t = target_layout(m, given)
    s = layout(m)
    inputs = {}
    layers_s = m["L_local"]["value"] * s["pp"] if m["L_local"]["value"] else None
    layers_t = t["layers"] or layers_s
    grow = layers_t / layers_s if t["layers"] and layers_s else 1.0
    inputs["layers"] = fact(layers_t, "given (layers)" if t["layers"] else f"measured: L_local x pp = {number(layers_s)}")
    split = (s["tp"] * s["pp"]) / (t["tp"] * t["pp"])
    for k in ("Phi_dp", "Phi_device"):
        v = m[k]["value"]
        inputs[k] = fact(v * split * grow if v is not None else None,
                         f"measured {k} x (tp x pp measured / target) x layers target / measured = "
                         f"{number(v)} x {split:g} x {grow:g} (every parameter split by TP and PP, every layer alike)"
                         if v is not None else m[k]["source"])
    if t["ep"] != s["ep"]:  # the experts a device holds change with N_EP, the dense parameters do not
        inputs["Phi_device"] = fact(None, f"unknown: N_EP {s['ep']} -> {t['ep']} changes the experts a device "
                                          "holds, and the run does not separate expert from dense parameters")
    inputs["L_local"] = fact(layers_t / t["pp"] if layers_t else None, "layers / target pp")
    x = {**{k: fact(t[k], "target") for k in STRATEGIES + ("microbatches", "virtual_stages")},
         **{k: m[k] for k in ("delta", "bSH", "kv_over_q", "K_MoE") + tuple(f"delta_{k}" for k in STRATEGIES[1:])},
         "Phi_dp": inputs["Phi_dp"], "L_local": inputs["L_local"]}
    volume = {}
    for strategy in STRATEGIES:
        if t[strategy] > 1:
            b, formula, _ = expected(strategy, f"zero{t['zero_stage']}" if strategy == "dp" else None, x)
            volume[strategy] = {"bytes": b, "formula": formula}
    memory = _memory(m, s, t, inputs["Phi_device"], layers_t)
    exposed = _exposed(m, volume, s, t, inputs)
    inputs["optimizer_ns"] = _optimizer(m, s, t, split * grow)
    got = _step(m, s, t, exposed, layers_t, (m["optimizer_ns"]["value"] or 0, inputs["optimizer_ns"]["value"]))
    terms = got["terms"] or {"compute_ns": None, "other_ns": None, "exposed_comm_ns": {}}
    return {
        "target": {**t, "world_size": _world(t)},
        "prediction": {
            "step_time_ns": got["step"],
            "bubble": got["bubble"],
            "bubble_replay": got["bubble_replay"],
            "compute_ns": terms["compute_ns"],
            "other_ns": terms["other_ns"],
            "bytes_per_rank_per_step": {k: v["bytes"] for k, v in volume.items()},
            "memory_per_device_bytes": memory["total"],
            "activation_bytes": memory["activations"],
            "exposed_comm_ns": {k: terms["exposed_comm_ns"].get(k, v["value"]) for k, v in exposed.items()},
        },
        "how": {"step_time": got["how"], "bubble_replay": got["replay_how"], "bytes": {k: v["formula"] for k, v in volume.items()},
                "memory": memory, "exposed_comm": {k: (terms.get("pp_how") if k == "pp" else None) or v["source"]
                                                   for k, v in exposed.items()},
                "calls": {k: v["calls"] for k, v in exposed.items() if "calls" in v}},
        "inputs": inputs,
        "unmeasured": sorted(k for k, v in exposed.items() if v.get("unmeasured")),
    }


def _memory(m, s, t, phi_fact, layers):
    """The ZeRO table (docs/parallelism.md 3.1) with the target's N_DP and stage, plus the activations of the
    micro-batches the target's order holds (activations.py), on the rank that holds the most."""
    n_opt, dl, phi = m["n_opt"]["value"], m["delta"]["value"], phi_fact["value"]
    if phi is None or dl is None:
        why = m["delta"]["source"] if dl is None else phi_fact["source"]
        return {"total": None, "activations": None, "activations_source": "not forecast: the memory is unknown",
                "why": f"Phi or delta unknown ({why})"}
    parts = zero_memory(phi, dl, n_opt, t["dp"], t["zero_stage"])
    phi_s = m["Phi_device"]["value"]
    grads_s = zero_memory(phi_s, dl, n_opt, s["dp"], s["zero_stage"])["gradients"] if phi_s else 0.0
    order_s, order_t = orders(m, s, t) if s["pp"] > 1 or t["pp"] > 1 else (None, None)
    held_s, held_t = held(order_s if s["pp"] > 1 else None), held(order_t if t["pp"] > 1 else None)
    chunk_s = (m["L_local"]["value"] or 1) / s["virtual_stages"]
    chunk_t = layers / t["pp"] / t["virtual_stages"] if layers else chunk_s
    work = (s["tp"] * s["cp"] * s["sp"]) / (t["tp"] * t["cp"] * t["sp"])
    act = activation_bytes(m, held_s, held_t, chunk_t / chunk_s * work, grads_s)
    most = max(act["value"].values()) if act["value"] else None
    why = "ZeRO table (docs/parallelism.md 3.1) with the target's N_DP and stage"
    return {**parts, "activations": most, "activations_source": act["source"],
            "microbatches_held": {r: h for r, (h, _) in held_t.items()},
            "total": None if parts["total"] is None else parts["total"] + (most or 0),
            "why": why + (" + the activations of the rank holding the most" if most is not None else
                          f"; activations not included: {act['source']}")}


def _exposed(m, volume, s, t, inputs):
    """{strategy: fact(ns)} per rank per step: the measured exposed time x what the target's calls cost over what the
    run's did (``_per_call``); where the run's calls or the facts their sizes need are unknown, x target bytes / the
    run's bytes by the same formula (so what the framework moves beyond the formula, e.g. an unsharded root, scales
    along), else / the run's measured bytes; a strategy the run did not use: the run's exposed time per measured
    byte of its other strategies but the pipeline's (whose exposed time is mostly the bubble's waits)."""
    got_ns = {k: f["value"] for k, f in m["exposed_comm_ns"].items() if f["value"] is not None}
    basis = {k: (f["value"], "measured bytes") for k, f in m["bytes"].items() if f["value"]}
    basis.update({k: (f["value"], "bytes by the notes' formula with the run's layout") for k, f in
                  m["formula_bytes"].items()})
    # per byte over the collectives' strategies: a pipeline's exposed time is mostly its bubble's waits, not transfer
    measured = {k: f["value"] for k, f in m["bytes"].items() if f["value"] and k in got_ns and k != "pp"}
    per_byte = sum(got_ns[k] for k in measured) / sum(measured.values()) if measured else None
    out = {}
    for k, v in volume.items():
        b = v["bytes"]
        if b is None:
            out[k] = fact(None, "target bytes unknown")
        elif k in basis and k in got_ns:
            n, what = basis[k]
            out[k] = _per_call(m, k, s, t, inputs, b / n, got_ns[k]) or fact(
                got_ns[k] * b / n, f"measured {k} exposed time x target bytes / the run's {what} "
                                   f"({duration(got_ns[k])} x {b:,.0f} / {n:,.0f})")
        elif per_byte is not None:
            out[k] = {**fact(per_byte * b, f"the run's exposed time per byte over every strategy ({per_byte:.4g} ns/B) x "
                                           f"target bytes: the run did not use {k}"), "unmeasured": True}
        else:
            out[k] = fact(None, "no collective measured: the run's only communication is the pipeline's sends"
                          if got_ns and not set(got_ns) - {"pp"} else "no measured communication time per byte")
    return out


def _per_call(m, k, s, t, inputs, volume, got_ns) -> dict | None:
    """fact(ns) with ``calls`` (the target's calls per rank per step, and the exposed time read as all latency and as
    all bandwidth where the run's calls cannot tell them apart: ``low_ns``, ``high_ns``): the run's exposed time of
    strategy ``k`` x the target's calls' cost over the run's (calls.py: the ring model per call, fitted on the run's
    collectives), or None where the run has no fitted calls of ``k`` or the facts the target's calls need (Phi,
    layers per device) are unknown."""
    run, f = m.get("calls", {}).get(k), m.get("call_fit", {}).get(k)
    if not run or not f or f["value"] is None:
        return None
    run = run["value"]
    L_s, L_t = m["L_local"]["value"], inputs["L_local"]["value"]
    phi_s, phi_t, dl = m["Phi_dp"]["value"], inputs["Phi_dp"]["value"], m["delta"]["value"]
    if k != "dp":  # the run's calls, as many per layer and micro-batch
        if None in (L_s, L_t):
            return None
        facts = {"per_call": (L_t * t["microbatches"]) / (L_s * s["microbatches"])}
    else:  # sized by the parameters; FSDP2's calls are per unit (the layers a device holds, and the root)
        if None in (phi_s, phi_t, dl) or (L_t is None and t["zero_stage"] >= 2 and t["zero_stage"] != s["zero_stage"]):
            return None
        facts = {"per_call": 1, "Phi_bytes": phi_t * dl, "phi": phi_t / phi_s, "units": round(L_t or 0) + 1}
    facts.update(volume=volume, layout=s, run_zero=s["zero_stage"], m=t["microbatches"])
    target, what = target_calls(run, k, t, facts)
    r = cost_ratio(f["value"], run, target)
    if r is None:
        return None
    calls = ", ".join(f"{per:.3g} {op} of {size(n)} over {g}" for op, g, n, per in target)
    got = fact(got_ns * r["value"], f"measured {k} exposed time {duration(got_ns)} x the target's calls' cost / the "
                                    f"run's = x {r['value']:.3g} (a call: latency x steps + bytes moved / bandwidth, the "
                                    f"ring model; {_fit_text(k, f['value'], r)}); the target's calls: {what}: {calls} "
                                    "a step")
    return {**got, "calls": {"per_step": [{"op": op, "group_size": g, "bytes": n, "per_step": per}
                                          for op, g, n, per in target],
                             "low_ns": got_ns * r["low"], "high_ns": got_ns * r["high"]}}


def _fit_text(k: str, fitted: dict, r: dict) -> str:
    """What the run's calls of ``k`` told of a call's cost (calls.fit) and how the ratio ``r`` was read."""
    if fitted["alpha"] is None:
        sizes = "one size of one op" if fitted["sizes"] == 1 else f"{fitted['sizes']} sizes"
        return (f"the run's {fitted['calls']} {k} calls ({sizes}) cannot tell latency from bandwidth: the geometric "
                f"mean of the ratio read as all latency (x {r['latency']:.3g}) and as all bandwidth (x "
                f"{r['bandwidth']:.3g})")
    shown = " and ".join({"alpha": "latency", "beta": "bandwidth"}[c] for c in fitted["shown"])
    shown += " alone" if len(fitted["shown"]) == 1 else ""
    return (f"fitted over the run's {fitted['calls']} {k} calls, which show {shown}: {duration(fitted['alpha'])} per "
            f"step, {fitted['beta']:.4g} ns per byte moved, error {fitted['rms_error']:.0%}")


def _optimizer(m, s, t, params):
    """fact(ns): the measured optimizer step x the parameters a device holds (``params``: target / measured) x
    the share of the optimizer states it updates (1 / N_DP from ZeRO-1 on, docs/parallelism.md 3.1)."""
    shard_s = s["dp"] if s["zero_stage"] >= 1 else 1
    shard_t = t["dp"] if t["zero_stage"] >= 1 else 1
    o = m["optimizer_ns"]["value"] or 0
    return fact(o * params * shard_s / shard_t,
                f"measured optimizer step {duration(o)} x parameters per device {params:g} x states updated "
                f"1/{shard_t} target / 1/{shard_s} measured (ZeRO-1 and up shard them)")


def _step(m, s, t, exposed, layers, optimizer) -> dict:
    """{step, bubble (the notes' formula), bubble_replay, how, replay_how, terms: {compute_ns, exposed_comm_ns,
    other_ns}} of the target; the terms add up to the step (exposed pp holds the pipeline's waits). The optimizer
    (``optimizer``: (measured ns, target ns)) is taken out of the measured step and compute, the models run on the
    rest, and the target's optimizer time is added to its step and compute."""
    out = _step_without_optimizer(m, s, t, exposed, layers, optimizer[0])
    if out["step"] is not None:
        out["step"] += optimizer[1]
        out["terms"]["compute_ns"] += optimizer[1]
        out["how"] += f"; + the optimizer step {duration(optimizer[1])} (measured {duration(optimizer[0])})"
    return out


def _step_without_optimizer(m, s, t, exposed, layers, optimizer_s) -> dict:
    T, C = m["step_time_ns"]["value"], m["compute_ns"]["value"]
    out = {"step": None, "bubble": None, "bubble_replay": None, "replay_how": "no pipeline", "terms": None}
    if t["pp"] == 1:
        out["bubble"] = out["bubble_replay"] = 0.0
    else:
        out["bubble"] = expected_bubble(t["pp_schedule"], t["pp"], t["microbatches"], t["virtual_stages"])
    if T is None or C is None:
        return out | {"how": "no profiled step windows"}
    e_s = {k: f["value"] or 0 for k, f in m["exposed_comm_ns"].items()}
    e_t = {k: f["value"] for k, f in exposed.items()}
    if any(v is None for v in e_t.values()):
        return out | {"how": "a strategy's exposed communication is unknown"}
    T, C = T - optimizer_s, C - optimizer_s
    work = (s["tp"] * s["cp"] * s["sp"]) / (t["tp"] * t["cp"] * t["sp"])
    other_s = T - C - sum(e_s.values())  # idle, Python and launch overhead: the step less compute and exposed comm
    if s["pp"] == 1 or t["pp"] == 1:  # no pipeline on one side: compute by the layers a device holds, no replay
        return out | _flat(C, other_s, t, work, e_t, layers / t["pp"] / (m["L_local"]["value"] or layers)
                           if layers else 1 / t["pp"], t["microbatches"] / s["microbatches"])
    non_pp_s = sum(v for k, v in e_s.items() if k != "pp")
    non_pp_t = {k: v for k, v in e_t.items() if k != "pp"}
    acts_s = 2 * s["microbatches"] * s["virtual_stages"]
    acts_t = 2 * t["microbatches"] * t["virtual_stages"]
    other_t = other_s * acts_t / acts_s
    r = replayed_step(m, s, t, work, layers)
    if r is not None:
        step = r["pipeline_ns"] + sum(non_pp_t.values())
        other_t = min(other_t, r["pipeline_ns"] - r["compute_ns"])
        terms = {"compute_ns": r["compute_ns"], "other_ns": other_t, "pp_how": PP_REMAINDER,
                 "exposed_comm_ns": {**non_pp_t, "pp": step - r["compute_ns"] - other_t - sum(non_pp_t.values())}}
        return out | {"step": step, "bubble_replay": r["bubble"], "terms": terms,
                      "how": r["how"] + "; + exposed non-pipeline communication",
                      "replay_how": "the same replay without the overhead: 1 - compute / makespan, mean over ranks"}
    return out | _formula(m, s, t, T, C, work, layers, non_pp_s, non_pp_t, other_t, acts_s, acts_t)


def _flat(C, rest, t, work, e_t, held, more):
    """From a run without a pipeline, or to a target without one: compute x work per device x layers held x m
    target / measured, over (1 - bubble) for a pipelined target, + the target's exposed communication + the
    measured rest."""
    bubble_t = expected_bubble(t["pp_schedule"], t["pp"], t["microbatches"], t["virtual_stages"]) if t["pp"] > 1 else 0.0
    if bubble_t is None:
        return {"how": f"no bubble formula for {t['pp_schedule']}"}
    c_t = C * work * more * held
    idle = c_t * bubble_t / (1 - bubble_t)
    exposed, pp_how = dict(e_t), None
    if t["pp"] > 1:
        exposed["pp"] = exposed.get("pp", 0) + idle
        pp_how = "exposed time per byte x the target's pp bytes + the bubble's idle time: compute x bubble / (1 - bubble)"
    order = textbook_orders(t["pp_schedule"], t["pp"], t["microbatches"], t["virtual_stages"])
    replayed = simulate(order, 2) if order else None
    how = ("compute x work per device + exposed communication per strategy + the measured rest (step - compute "
           "- exposed, kept)")
    if t["pp"] > 1:
        how = ("compute x work per device / (1 - bubble) + exposed communication per strategy + the measured "
               "rest: the run has no pipeline, so no per-action overhead is known (taken as 0)")
    return {"step": c_t + idle + sum(e_t.values()) + rest, "how": how,
            "terms": {"compute_ns": c_t, "exposed_comm_ns": exposed, "other_ns": rest, "pp_how": pp_how},
            **({"bubble_replay": float(sum(replayed.values()) / len(replayed)),
                "replay_how": f"the {t['pp_schedule']} order replayed with equal stages, B = 2 F"}
               if replayed else {"replay_how": "no pipeline" if t["pp"] == 1 else
                                 f"no textbook order of {t['pp_schedule']} to replay: the formula stands"})}


def _formula(m, s, t, T, C, work, layers, non_pp_s, non_pp_t, other_t, acts_s, acts_t):
    """From a pipelined run whose schedule has no textbook order to replay (zero-bubble, DualPipeV) or no measured
    action costs: 2 m v actions, each the slowest stage's compute plus the measured overhead per action, over
    (1 - the target's bubble formula)."""
    bubble_s = expected_bubble(s["pp_schedule"], s["pp"], s["microbatches"], s["virtual_stages"])
    bubble_t = expected_bubble(t["pp_schedule"], t["pp"], t["microbatches"], t["virtual_stages"])
    if bubble_s is None or bubble_t is None:
        return {"how": "no bubble formula for the measured or the target schedule",
                "replay_how": "no textbook order to replay"}
    busy = (T - non_pp_s) * (1 - bubble_s) / acts_s
    per_stage = list((m["stage_compute_ns"]["value"] or {0: C}).values())
    c_s = max(per_stage) / acts_s  # the slowest stage sets the pace
    overhead = max(busy - c_s, 0.0)
    chunk_s = (m["L_local"]["value"] or 1) / s["virtual_stages"]
    chunk_t = (layers / t["pp"] / t["virtual_stages"]) if layers else chunk_s
    pace = sum(per_stage) / len(per_stage) if t["balanced"] else max(per_stage)
    c_t = pace / acts_s * work * chunk_t / chunk_s
    step = acts_t * (c_t + overhead) / (1 - bubble_t) + sum(non_pp_t.values())
    compute = acts_t * c_t
    other_t = min(other_t, step - compute - sum(non_pp_t.values()))
    pace_how = "the stages' mean compute (balanced)" if t["balanced"] else "the slowest stage's compute"
    return {"step": step,
            "terms": {"compute_ns": compute, "other_ns": other_t, "pp_how": PP_REMAINDER,
                      "exposed_comm_ns": {**non_pp_t, "pp": step - compute - other_t - sum(non_pp_t.values())}},
            "replay_how": "no textbook order of the measured or target schedule, or no measured action costs",
            "how": f"2 m v actions x ({pace_how} per action {duration(c_t)} + overhead per action "
                   f"{duration(overhead)}, measured) / (1 - bubble {bubble_t:.3f}) + exposed non-pipeline "
                   "communication"}
