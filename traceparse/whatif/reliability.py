"""How far off each kind of forecast is: the step-time errors validated on the fixture runs, in one place.

A forecast's kind is what it changes against the measured run (``kind``): nothing (the measured layout re-stated),
a pipeline's micro-batches, its schedule, its stages' balance, the ZeRO stage, tensor parallelism, several of these
at once, ... Each kind carries the step-time errors of the validation pairs of that kind (``KINDS``) and is
reliable when the worst of them is within ``RELIABLE`` (the bound tests/test_whatif.py holds the pairs to). A kind
no pair validates is "not validated": its error is unknown, so it is not reliable either.

Where a forecast has no step time, ``remedy`` says what would make it forecastable: the ``--given`` fact to
state, or the run to profile.
"""

from traceparse.axes import MODEL_AXES
from traceparse.thresholds import check_thresholds

RELIABLE = check_thresholds()["whatif"]["reliable_error"]  # |step-time error| of a reliable kind (thresholds.toml)
SOURCE = "python bench/whatif_pairs.py; docs/whatif.md, Validated on the fixture runs"

# kind: (what the forecast changes against the measured run, [(validation pair, step-time error: forecast /
# measured - 1)], the term the validation found most off, and why). The errors were measured by
#     python bench/whatif_pairs.py
# (2-core gloo fixture runs, 2 profiled steps each, the quiet ones 2 ranks with a core each and 4 steps; each
# pair's name is its row in docs/whatif.md's validation table), except "measured": forecasting a run's own layout
# gives back its step by construction (tests/test_whatif.py, test_the_measured_layout_forecasts_the_measured_step). tests/test_whatif.py
# (test_reliability_table_is_the_validation) recomputes every error here from the pairs and classifies each pair
# into its kind: change the forecast, rerun the bench, and update this table and docs/whatif.md together.
KINDS = {
    "measured": ("the measured layout re-stated", [("every fixture run's own layout", 0.0)], None),
    "balanced": ("a pipeline's stages balanced (--balanced)",
                 [("pipeline: the heavy stage split (--balanced; truth: the balanced 4-layer run)", -0.02)], None),
    "pp_microbatches": ("a pipeline's micro-batches m (same schedule and N_PP)",
                        [("pipeline: GPipe m = 8 from m = 4", -0.03), ("pipeline: 1F1B m = 8 from m = 4", -0.31),
                         ("pipeline memory: GPipe m = 8 from m = 4 (memory events)", 0.22),
                         ("pipeline: interleaved m = 8 from m = 4", -0.08),
                         ("quiet, pipeline: GPipe m = 8 from m = 4 (2 ranks)", 0.02),
                         ("quiet, pipeline: 1F1B m = 8 from m = 4 (2 ranks)", -0.13)],
                        "exposed pp and other: the waits of send/recv with more transfers in flight, and the "
                        "Python time per action, do not scale with the actions"),
    "pp_schedule": ("a pipeline's schedule or virtual stages (same N_PP; m and layers may change too)",
                    [("pipeline: interleaved v = 2 from 1F1B (8 layers)", -0.60),
                     ("pipeline memory: 1F1B m = 8 from GPipe m = 4 (memory events)", 0.09),
                     ("quiet, pipeline: 1F1B m = 8 from GPipe m = 4 (2 ranks)", -0.25)],
                    "exposed pp: the waits of a blocking send/recv grow with the transfers in flight"),
    "straggler": ("the named straggler brought to the others' pace (--without-straggler)",
                  [("straggler removed: DDP, rank 2 slow", 0.21), ("straggler removed: dp2 x tp2, rank 3 slow", 1.10),
                   ("straggler removed: dp2 x tp2, rank 1 slow", 0.34),
                   ("quiet, straggler removed: DDP, rank 1 slow (2 ranks)", -0.03)],
                  "compute: on a host with fewer cores than ranks the straggler's extra work slowed the others' "
                  "compute too, and the run without it (generated at another time) ran on a less loaded host"),
    "zero1": ("the ZeRO stage 0 -> 1 (same N_DP)", [("data parallel: ZeRO-1 from DDP", 0.15),
                                                     ("quiet, data parallel: ZeRO-1 from DDP (2 ranks)", -0.22)],
              "compute: the quiet target run computed 24% more for the same arithmetic (its repeats differ by 16%)"),
    "zero2": ("the ZeRO stage 0 -> 2 (same N_DP)", [("data parallel: ZeRO-2 from DDP", -0.50),
                                                     ("quiet, data parallel: ZeRO-2 from DDP (2 ranks)", -0.23)],
              "exposed dp: FSDP2's calls cost more than even the all-latency reading of DDP's all-reduces (their "
              "copies in and out, on the CPU)"),
    "zero3": ("the ZeRO stage 0 -> 3 (same N_DP)", [("data parallel: ZeRO-3 from DDP", -0.89),
                                                     ("quiet, data parallel: ZeRO-3 from DDP (2 ranks)", -0.35)],
              "other and compute: FSDP2's own Python time, copies and optimizer step on sharded tensors, which a "
              "DDP trace does not measure"),
    "tp": ("tensor parallelism introduced or changed (N_TP)", [("tensor parallel: tp4 from tp2", -0.54)],
           "exposed tp: from 2 processes to 4 on 2 cores each call costs more than the ring model's steps say"),
    "zero_other": ("the ZeRO stage, from a sharded run (stage 1 and up)",
                   [("quiet, data parallel: FSDP2 ZeRO-3 from ZeRO-2 (2 ranks)", -0.14),
                    ("quiet, data parallel: FSDP2 ZeRO-2 from ZeRO-3 (2 ranks)", 0.18)],
                   "compute: FSDP2's copies into and out of its buffers per all-gather (ZeRO-3 gathers again in "
                   "backward: 72.3 ms of compute a step against ZeRO-2's 61.7), kept as measured"),
    "pp": ("a pipeline introduced, removed or re-split (N_PP)",
           [("quiet, pipeline introduced: 1F1B m = 2 from DDP (2 ranks, the same global batch)", -0.06)],
           "compute: the pipelined run computed 14% more for the arithmetic DDP did (the pipeline runtime's own "
           "ops per action); a run without a pipeline has no per-action overhead to start its waits from"),
    # several changes at once: its error is the worst of this pair's and each change's own (kind), unknown where a
    # change has no validation pair
    "cross": ("several changes at once", [("cross-strategy: dp2 x tp2 (ZeRO-3) from tp4", 0.48),
                                          ("cross-strategy: dp2 x tp2 (ZeRO-3) from DDP on 4", -0.82)],
              "exposed dp: FSDP2's collectives and Python time, which a DDP or TP trace does not measure"),
    # no validation pair: the error is unknown
    "cp": ("context parallelism introduced or changed (N_CP)", [], None),
    "sp": ("sequence parallelism introduced or changed (N_SP)", [], None),
    "ep": ("expert parallelism introduced or changed (N_EP)", [], None),
    "dp": ("the data-parallel degree alone (another world size)", [], None),
    "layers": ("the model's depth alone (layers=N)", [], None),
    "accumulation": ("the micro-batches of a run without a pipeline (gradient accumulation)", [], None),
}


def worst(kind: str):
    """The validated error of ``kind`` of largest magnitude (signed), or None where no pair validates it."""
    errors = [e for _, e in KINDS[kind][1]]
    return max(errors, key=abs) if errors else None


def changes(s: dict, t: dict, layers_s=None) -> list[str]:
    """The kinds of change from the measured layout ``s`` (``forecast.target_layout(measured, {})``: the measured
    layout re-stated, defaults filled as a target's) to the target ``t`` (``forecast.target_layout``; its
    ``layers``, ``balanced``, ``without_straggler``); ``layers_s``: the measured model's layers."""
    out = [k for k in MODEL_AXES + ("ep",) if t[k] != s[k]]
    if t["zero_stage"] != s["zero_stage"]:
        out.append(f"zero{t['zero_stage']}" if s["zero_stage"] == 0 else "zero_other")
    if not out and t["dp"] != s["dp"]:  # dp follows the other degrees at one world size: only its own change counts
        out.append("dp")
    relayered = bool(t.get("layers")) and t["layers"] != layers_s
    if "pp" not in out and t["pp"] > 1:
        if t["pp_schedule"] != s["pp_schedule"] or t["virtual_stages"] != s["virtual_stages"]:
            out.append("pp_schedule")
            relayered = False  # validated with the layers changed (interleaved v = 2, 8 layers from 4)
        elif t["microbatches"] != s["microbatches"]:
            out.append("pp_microbatches")
    elif t["pp"] == 1 and s["pp"] == 1 and t["microbatches"] != s["microbatches"]:
        out.append("accumulation")
    if relayered:
        out.append("layers")
    if t.get("balanced"):
        out.append("balanced")
    if t.get("without_straggler"):
        out.append("straggler")
    return out


def kind(s: dict, t: dict, layers_s=None) -> dict:
    """{kind, what, changes, error (signed, the worst validated; None: not validated), reliable, pairs, off, source}
    of the forecast of ``t`` from the measured layout ``s`` (``changes``)."""
    got = changes(s, t, layers_s)
    name = "measured" if not got else got[0] if len(got) == 1 else "cross"
    weighed = got + ["cross"] if name == "cross" else [name]  # a combination: each change's pairs and the cross ones
    errors = [worst(k) for k in weighed]
    error = None if None in errors else max(errors, key=abs)
    off = KINDS[max(weighed, key=lambda k: abs(worst(k) or 0))][2]  # the note of the kind most off
    what = KINDS[name][0] if name != "cross" else f"{KINDS['cross'][0]}: {'; '.join(KINDS[k][0] for k in got)}"
    unvalidated = [k for k in got if worst(k) is None]
    return {"kind": name, "what": what, "changes": got, "error": error, "unvalidated": unvalidated,
            "reliable": error is not None and abs(error) <= RELIABLE,
            "pairs": [{"pair": p, "error": e} for k in weighed for p, e in KINDS[k][1]],
            "off": off, "source": SOURCE}


def remedy(prediction: dict, how: dict) -> str | None:
    """What would make a forecast without a step time forecastable (``prediction``, ``how``: of forecast), or
    None where it has one."""
    if prediction["step_time_ns"] is not None:
        return None
    why = how["step_time"]
    if why == "no profiled step windows":
        return ("the run has no profiled step: profile whole steps (torch.profiler with a schedule, so each step "
                "is a ProfilerStep#N window)")
    if why.startswith("no bubble formula"):
        return f"{why}: no schedule model to forecast it with"
    out = []
    for k, ns in prediction["exposed_comm_ns"].items():
        if ns is not None:
            continue
        source, formula = how["exposed_comm"].get(k) or "", how["bytes"].get(k) or ""
        if "no collective measured" in source:
            out.append(f"{k}: the run has no collective (its pipeline's sends are mostly the bubble's waits), so nothing "
                       f"in it costs {k}'s calls: forecast from a run that uses {k}")
        elif "no measured communication time per byte" in source:
            out.append(f"{k}: the run measured no communication time per byte (no collective with a known size): "
                       "profile with record_shapes=True so its collectives carry their sizes")
        elif "Phi_dp" in formula:
            out.append(f"{k}: its bytes need the parameter count, which the run does not show (no data-parallel "
                       "gradient collective with a known size): state it with --given params=N")
        elif "b S H" in formula:
            out.append(f"{k}: its bytes need the activation size b S H: state it with --given "
                       "micro_batch=B,seq=S,hidden=H")
        elif "layers per device" in formula:
            out.append(f"{k}: its bytes need the layers: state them with --given layers=N")
        elif "top_k" in formula:
            out.append(f"{k}: its bytes need the experts per token: state them with --given top_k=K")
        else:
            out.append(f"{k}: no forecast of its bytes ({formula or source})")
    return "; ".join(out) or why
