"""Predict fixture runs from other fixture runs with ``traceparse whatif`` and compare with what they measured.

    python bench/whatif_pairs.py            # the table (Markdown); --json for the rows

Truth per target run: bytes per rank per step per strategy from its truth.json (the collectives the job issued,
in the notes' metric: all-reduce 2 x size, other collectives their full size, sends their size, receives 0),
memory per device by the ZeRO table from its truth.json configuration (params per rank, dtype_bytes, n_opt, dp,
zero stage) plus, where the run has memory events, its measured activations (truth_activations), and its
measured step time (mean window of its trace) with its terms (compute, exposed communication per strategy,
other), of which the table names the one the forecast missed by the most time.
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "runs"

# (name, measured run, target layout, given facts of the measured run, the run that has the target layout)
PAIRS = [
    ("pipeline: GPipe m = 8 from m = 4", "pp4_gpipe_m4", "microbatches=8", "", "pp4_gpipe_m8"),
    ("pipeline: 1F1B m = 8 from m = 4", "pp4_1f1b_m4", "microbatches=8", "", "pp4_1f1b_m8"),
    ("pipeline: interleaved v = 2 from 1F1B (8 layers)", "pp4_1f1b_m4",
     "pp_schedule=interleaved_1f1b,virtual_stages=2,layers=8", "", "pp4_interleaved_m4"),
    ("pipeline: the heavy stage split (--balanced; truth: the balanced 4-layer run)", "pp4_1f1b_heavy_m4",
     "--balanced", "", "pp4_1f1b_m4"),
    ("pipeline memory: GPipe m = 8 from m = 4 (memory events)", "pp4_gpipe_m4_memory", "microbatches=8", "",
     "pp4_gpipe_m8_memory"),
    ("pipeline memory: 1F1B m = 8 from GPipe m = 4 (memory events)", "pp4_gpipe_m4_memory",
     "pp_schedule=1f1b,microbatches=8", "", "pp4_1f1b_m8_memory"),
    ("data parallel: ZeRO-1 from DDP", "ddp4", "zero_stage=1", "", "zero1_dp4"),
    ("data parallel: ZeRO-2 from DDP", "ddp4", "zero_stage=2", "", "fsdp2_zero2_dp4"),
    ("data parallel: ZeRO-3 from DDP", "ddp4", "zero_stage=3", "", "fsdp2_zero3_dp4"),
    ("tensor parallel: tp4 from tp2", "tp2", "dp=1,tp=4", "", "tp4"),
    ("cross-strategy: dp2 x tp2 (ZeRO-3) from tp4", "tp4", "dp=2,tp=2,zero_stage=3", "params=115328", "dp2_tp2"),
    ("pipeline: interleaved m = 8 from m = 4", "pp4_interleaved_m4", "microbatches=8", "", "pp4_interleaved_m8"),
    ("cross-strategy: dp2 x tp2 (ZeRO-3) from DDP on 4", "ddp4", "dp=2,tp=2,zero_stage=3", "", "dp2_tp2"),
    ("straggler removed: DDP, rank 2 slow", "straggler_ddp4", "--without-straggler", "", "ddp4"),
    ("straggler removed: dp2 x tp2, rank 3 slow", "straggler_dp2_tp2", "--without-straggler", "", "dp2_tp2"),
    ("straggler removed: dp2 x tp2, rank 1 slow", "straggler_dp2_tp2_r1", "--without-straggler", "", "dp2_tp2"),
    # quiet runs: 2 ranks, a core each, 4 profiled steps (fixtures/configs.py, QUIET)
    ("quiet, pipeline: GPipe m = 8 from m = 4 (2 ranks)", "quiet_pp2_gpipe_m4", "microbatches=8", "",
     "quiet_pp2_gpipe_m8"),
    ("quiet, pipeline: 1F1B m = 8 from m = 4 (2 ranks)", "quiet_pp2_1f1b_m4", "microbatches=8", "", "quiet_pp2_1f1b_m8"),
    ("quiet, pipeline: 1F1B m = 8 from GPipe m = 4 (2 ranks)", "quiet_pp2_gpipe_m4", "pp_schedule=1f1b,microbatches=8",
     "", "quiet_pp2_1f1b_m8"),
    ("quiet, data parallel: ZeRO-1 from DDP (2 ranks)", "quiet_ddp2", "zero_stage=1", "", "quiet_zero1_dp2"),
    ("quiet, data parallel: ZeRO-2 from DDP (2 ranks)", "quiet_ddp2", "zero_stage=2", "", "quiet_fsdp2_zero2_dp2"),
    ("quiet, data parallel: ZeRO-3 from DDP (2 ranks)", "quiet_ddp2", "zero_stage=3", "", "quiet_fsdp2_zero3_dp2"),
    ("quiet, pipeline introduced: 1F1B m = 2 from DDP (2 ranks, the same global batch)", "quiet_ddp2",
     "dp=1,pp=2,pp_schedule=1f1b,microbatches=2", "", "quiet_pp2_1f1b_m2"),
    ("quiet, data parallel: FSDP2 ZeRO-3 from ZeRO-2 (2 ranks)", "quiet_fsdp2_zero2_dp2", "zero_stage=3", "",
     "quiet_fsdp2_zero3_dp2"),
    ("quiet, data parallel: FSDP2 ZeRO-2 from ZeRO-3 (2 ranks)", "quiet_fsdp2_zero3_dp2", "zero_stage=2", "",
     "quiet_fsdp2_zero2_dp2"),
    ("quiet, straggler removed: DDP, rank 1 slow (2 ranks)", "quiet_straggler_ddp2", "--without-straggler", "",
     "quiet_ddp2"),
]
NOTES = {"all_reduce": 2, "send": 1, "recv": 0}


def truth_bytes(run: str) -> dict:
    """{strategy: bytes per rank per step} in the notes' metric, mean over ranks, from truth.json."""
    t = json.loads((RUNS / run / "truth.json").read_text())
    per = {}
    for c in t["comm"]:
        size = max(c["bytes_in"] or 0, c["bytes_out"] or 0)
        per.setdefault(c["strategy"], 0)
        per[c["strategy"]] += c["count"] * size * NOTES.get(c["op"], 1)
    return {k: v / t["world_size"] for k, v in per.items()}


def truth_activations(run: str):
    """Where the run has memory events: the most any rank's step allocates above its start (memory.step_growth)
    less that rank's gradients (its params_per_rank x dtype_bytes in truth.json; zero_grad frees them each step)
    where they exist at the peak: 1F1B's steady state (m > N_PP - s), not GPipe's peak before its backwards."""
    from traceparse.document import document
    from traceparse.load.run import open_run

    t = json.loads((RUNS / run / "truth.json").read_text())
    with open_run([RUNS / run]) as con:
        growth = document(con, 10, {})["checks"]["memory"].get("step_growth") or []
    per = t["model"].get("params_per_rank") or [t["model"]["params"]] * t["world_size"]
    p, m, steady = t["layout"]["pp"], t["layout"]["microbatches"], t["layout"]["pp_schedule"] == "1f1b"
    return max((g["growth_bytes"] - t["model"]["dtype_bytes"] * per[g["rank"]] * (steady and m > p - g["rank"])
                for g in growth), default=None)


def truth_memory(run: str) -> float:
    """The ZeRO table's bytes per device from truth.json: Phi = the largest rank's parameters before sharding (its
    params_per_rank, times the shard count where FSDP shards the parameters, ZeRO-2/3), plus the activations
    measured on the run where it has memory events (truth_activations)."""
    t = json.loads((RUNS / run / "truth.json").read_text())
    d, k, n, z = t["model"]["dtype_bytes"], t["optimizer"]["n_opt"], t["layout"]["dp"], t["layout"]["zero_stage"] or 0
    phi = max(t["model"].get("params_per_rank") or [t["model"]["params"]]) * (t["layout"]["dp_shard"] if z >= 2 else 1)
    params = d * phi / (n if z == 3 else 1)
    grads = d * phi / (n if z >= 2 else 1)
    return params + grads + (k + 1) * 4 * phi / (n if z >= 1 else 1) + (truth_activations(run) or 0)


def _folder(run) -> Path:
    """A fixture run's folder (its name), or the folder given."""
    return run if isinstance(run, Path) else RUNS / run


def forecast(run, target: str, given: str) -> dict:
    from traceparse.document import document
    from traceparse.layout.stated import parse_stated
    from traceparse.load.run import open_run
    from traceparse.whatif import whatif_document

    stated = parse_stated(given)
    wanted = {target[2:].replace("-", "_"): True} if target.startswith("--") else parse_stated(target)
    with open_run([_folder(run)]) as con:
        return whatif_document(con, document(con, 10, stated), wanted)


def measured_terms(run) -> dict:
    """The target run's measured step and its terms, as whatif reports them for the measured run (measured.py):
    compute, exposed communication per strategy, and the rest (other = step - compute - exposed)."""
    from traceparse.load.run import open_run
    from traceparse.whatif.measured import times

    with open_run([_folder(run)]) as con:
        got = times(con)
    step, compute = got["step_time_ns"]["value"], got["compute_ns"]["value"]
    exposed = {k: f["value"] for k, f in got["exposed_comm_ns"].items()}
    return {"step_time_ns": step, "compute_ns": compute, "exposed_comm_ns": exposed,
            "other_ns": step - compute - sum(exposed.values())}


def worst_term(got: dict, truth: dict):
    """(term, forecast, measured) of the step-time term the forecast missed by the most time."""
    terms = {"compute": (got["compute_ns"], truth["compute_ns"]), "other": (got["other_ns"], truth["other_ns"])}
    for k in set(got["exposed_comm_ns"]) | set(truth["exposed_comm_ns"]):
        terms[f"exposed {k}"] = (got["exposed_comm_ns"].get(k) or 0, truth["exposed_comm_ns"].get(k) or 0)
    known = {k: v for k, v in terms.items() if v[0] is not None}
    if not known:
        return None
    name = max(known, key=lambda k: abs(known[k][0] - known[k][1]))
    return name, *known[name]


def rows(pairs=PAIRS) -> list[dict]:
    out = []
    for name, run, target, given, truth in pairs:
        got = forecast(run, target, given)["prediction"]
        terms = measured_terms(truth)
        step = terms["step_time_ns"]
        out.append({"pair": name, "from": run, "layout": target, "given": given, "truth_run": truth,
                    "bytes": got["bytes_per_rank_per_step"], "truth_bytes": truth_bytes(truth),
                    "memory": got["memory_per_device_bytes"], "truth_memory": truth_memory(truth),
                    "step_ns": got["step_time_ns"], "truth_step_ns": step,
                    "step_error": None if got["step_time_ns"] is None else got["step_time_ns"] / step - 1,
                    "truth_terms": terms, "worst_term": worst_term(got, terms)})
    return out


def _n(v):
    return "?" if v is None else f"{v:,.0f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    got = rows()
    if a.json:
        json.dump(got, sys.stdout, indent=2)
        return
    print("| pair | command | bytes per rank per step: forecast / truth | memory per device: forecast / truth "
          "| step time: forecast / measured | error | the term most off: forecast / measured |")
    print("|---|---|---|---|---|---:|---|")
    for r in got:
        b = ", ".join(f"{k} {_n(r['bytes'][k])} / {r['truth_bytes'].get(k, 0):,.0f}" for k in r["bytes"])
        mem = "?" if r["memory"] is None else f"{r['memory']:,.0f}"
        step = "?" if r["step_ns"] is None else f"{r['step_ns'] / 1e6:.1f}"
        err = "?" if r["step_error"] is None else f"{r['step_error']:+.0%}"
        layout = r["layout"] if r["layout"].startswith("--") else f"--layout {r['layout']}"
        cmd = f"`whatif {r['from']} {layout}" + (f" --given {r['given']}`" if r["given"] else "`")
        w = r["worst_term"]
        worst = "?" if w is None else f"{w[0]}: {w[1] / 1e6:.1f} / {w[2] / 1e6:.1f} ms"
        print(f"| {r['pair']} | {cmd} | {b} | {mem} / {r['truth_memory']:,.0f} | {step} / "
              f"{r['truth_step_ns'] / 1e6:.1f} ms | {err} | {worst} |")


if __name__ == "__main__":
    main()
