"""comm_volume: the communication volume each strategy moves per rank per step, in the notes' count (all-reduce 2x
the size), against the notes' formulas (docs/parallelism.md 3, 4). The volume is not the input bytes of the
collectives table (what the ranks pass to the calls): both are reported, each under its own name."""

from traceparse.axes import ACTIVATION_AXES, AXES
from traceparse.units import count, size

from traceparse.layout import model_facts as mf
from traceparse.analyzers.base import Result, Spec, grade, not_applicable, sql
from traceparse.status import worst
from traceparse.models.comm_volume import expected

VOLUME = "volume (notes' count: all-reduce 2x)"  # the name the findings, the text report and the chart give it

SPEC = Spec(
    id="comm_volume",
    title="Communication volume: measured vs expected per strategy",
    definition=(
        "Per strategy, the communication volume (measured_volume_bytes; 'volume (notes' count: all-reduce 2x)' in "
        "the report, volume.<strategy> in traceparse compare) a device sends per profiled step in the notes' count "
        "(docs/parallelism.md 2: all-reduce 2 x size, reduce-scatter / all-gather / all-to-all / broadcast the full "
        "size, send the size, recv 0; i.e. nccl-tests' bus bytes scaled back by n/(n-1)), averaged over the loaded "
        "ranks, divided by the notes' formula evaluated from the model and layout (expected_volume_bytes). Beside "
        "it input_bytes, the bytes the ranks pass to the calls (the collectives table's 'input bytes': an "
        "all-reduce's counted once, so a DDP run's volume is twice its input bytes). Per (strategy, variant, op) "
        "also the raw message bytes (bytes_in, bytes_out), the volume (volume_bytes), the bus bytes (all-reduce "
        "2(n-1)/n size, reduce-scatter, all-gather, all-to-all (n-1)/n of the full size, send/recv/broadcast the "
        "size) and, on GPU traces, the median algorithm bandwidth (size / execution time) and bus bandwidth (bus "
        "bytes / execution time). Findings quote the volumes as the report's volume table shows them."),
    numerator="measured volume per rank per step (notes' count: all-reduce 2x)",
    denominator="expected volume per rank per step from the formula",
    needs="comm_ops with sizes and steps; the model (stated, or inferred from recorded shapes and gradient collectives)",
    notes=(
        "Formulas, per rank per step with m micro-batches and L_local = L / N_PP layers per device: "
        "dp ZeRO-0/1 2 delta Phi_dp, ZeRO-2 (m+1) delta Phi_dp, ZeRO-3 3 m delta Phi_dp (3.1, 4), with "
        "Phi_dp = Phi / (N_TP N_PP) the parameters one DP replica syncs per device; pp 2 delta b S H per border "
        "per micro-batch, (N_PP v - 1) borders shared by N_PP ranks (3.2); tp 8 delta b S H per layer per "
        "micro-batch (3.3); Ulysses sp 4 (N_kv/N_q + 1) delta b S H / N_SP per layer (3.4); ring cp "
        "6 (N_kv/N_q) delta b S H per layer (3.4), its N-1 ring shifts scaled by N/(N-1) to match the notes' "
        "metric; ep 4 delta K_MoE b S H per MoE layer, every layer assumed MoE (3.5). ep/embedding (recommender "
        "all-to-alls) has no formula. b S H enters only as a product, so [S, b, H] layouts do not matter. Inputs "
        "are stated (--layout keys and model dims) or inferred, each with its source; when Phi_dp is inferred from "
        "the gradient collectives the dp ratio checks the pattern (extra broadcasts, re-gathers), not Phi itself. "
        "Status: |ratio - 1| against [comm_volume] warn_tolerance / fail_tolerance, per strategy and the worst of "
        "them; a strategy without a known size or without a formula is not_applicable with the reason, and so is "
        "the check when no strategy has both. Unknown sizes are never 0: volumes and bytes are null when no "
        "operation has a size, else the known sum with ops_without_size."),
    example=(
        "ddp2 (fixtures/runs: DDP on 2 ranks, 115,328 fp32 parameters): ZeRO-0 moves 2 delta Phi_dp = 2 x 4 x "
        "115,328 = 922,624 bytes per rank per step; the run's one all-reduce passes 461,312 bytes, which the notes "
        "count twice (reduce-scatter plus all-gather): 922,624 bytes, ratio 1.00, ok."
    ),
)

SQL = sql("comm_volume")


def _kind(f):
    s = f["source"] or ""
    return next((k for k in ("stated", "metadata", "trace", "assumed") if s.startswith(k)), "unknown")


def _size(b) -> str:
    """Bytes as the report writes them (traceparse.units.size: the volume table's numbers), '?' when unknown."""
    return "?" if b is None else size(b)


def inputs(ctx, shape, deg):
    """Every input of the formulas, {name: {value, source}}."""
    act = mf.activation(ctx, shape, deg)
    d = mf.delta(ctx)
    out = {**deg, "delta": d, "Phi": mf.stated(ctx, "params") or mf.fact(None, "not stated (params)"),
           "Phi_dp": mf.phi_dp(ctx, shape, deg, d), "sync_rounds": mf.sync_rounds(ctx, deg), "b": act["micro_batch"], "S": act["seq"], "H": act["hidden"],
           "bSH": act["bSH"], "L_local": mf.layers_local(ctx, shape, deg), "kv_over_q": mf.kv_ratio(ctx, shape),
           "K_MoE": mf.top_k(ctx)}
    for s in AXES:
        if s != "dp":
            out[f"delta_{s}"] = mf.delta(ctx, s)
    return out


def cause(strategy, variant, x, rows, phases, measured, exp, per_rs, limits):
    """One clause: the likely reason measured and expected differ, from the per-op and per-phase volumes (``limits``:
    the check's thresholds, which name the causes' cut-offs)."""
    v = {k: f["value"] for k, f in x.items()}
    # operations whose sizes are all unknown are left out (never counted as 0 bytes)
    vol = {r["op"]: r["volume_bytes"] / per_rs for r in rows if r["volume_bytes"] is not None}
    ph = {(r["op"], r["phase"]): r["volume_bytes"] / per_rs for r in phases if r["volume_bytes"] is not None}
    cnt = {r["op"]: r["count"] / per_rs for r in rows}
    if strategy == "dp" and v["delta"] and v["Phi_dp"]:
        u = v["delta"] * v["Phi_dp"]
        by_op = "(" + ", ".join(f"{op} {b / u:.2f}" for op, b in vol.items()) + " delta Phi_dp)"
        if variant == "zero1" and "broadcast" in vol and "all_reduce" in vol:
            return (f"{by_op}: ZeRO-1 as torch's ZeroRedundancyOptimizer does it, all-reduce of the gradients (2 delta Phi) "
                    "then a broadcast of each rank's updated shard (delta Phi) = 3 delta Phi, not RS + AG = 2 delta Phi")
        if variant == "zero3" and "all_gather" in vol:
            fw = ph.get(("all_gather", "forward"), 0) / u
            bw = (vol["all_gather"] / u) - fw
            fewer, twice = limits["zero3_fewer_in_backward"], limits["zero3_more_than_twice"]
            why = ("some units are not re-gathered in backward (reshard_after_forward=False, e.g. FSDP2's root module)"
                   if bw < fw * fewer else "parameters are gathered more than twice per step (e.g. the root module "
                   "re-gathered in backward, or no reuse of prefetched units)" if bw + fw > twice * (v["microbatches"] or 1)
                   else "the gradient reduce-scatters differ from delta Phi per micro-batch")
            return f"{by_op} (all-gather forward {fw:.2f}, later {bw:.2f}; the notes: 1 + 1): {why}"
        more = "more collectives than one sync per step (gradient accumulation without no_sync, repeated syncs)"
        less = "parameters without gradient sync (frozen, or outside the DP replica group)"
        return f"{by_op}: {more if measured > exp else less}"
    if strategy in ACTIVATION_AXES and v["bSH"] and v["L_local"]:
        d = v[f"delta_{strategy}"] or v["delta"]
        per = v["L_local"] * (v["microbatches"] or 1)
        full = d * v["bSH"]
        want = {"tp": full, "sp": full / (v["sp"] or 1), "ep": None, "cp": None}[strategy]
        sizes = {}
        for r in rows:
            for s, n in (r["sizes"] or {}).items():
                sizes[s] = sizes.get(s, 0) + n / per_rs
        hist = ", ".join(f"{n / per:.2f} x {_size(s)}" for s, n in sorted(sizes.items(), key=lambda t: -t[1] * (t[0] or 0)))
        ops = f"per layer per micro-batch: {hist}"
        if strategy == "tp":
            k = 8 if variant == "megatron_sp" else 4
            at = sizes.get(want, 0) / per
            odd = sum(n for s, n in sizes.items() if s != want) / per
            return (f"{ops}; {at:.2f} collectives of the activation size delta b S H = {_size(want)} against {k} "
                    f"(per layer: attention and MLP blocks, each {'an RS and an AG' if k == 8 else 'an all-reduce'} in forward and in "
                    f"backward), {odd:.2f} of "
                    "other sizes: embedding, LM-head/logits and replicated parameters' gradients, which the per-block "
                    "formula leaves out" if odd else f"{ops}; collectives of the activation size: {at:.2f} against {k}")
        if strategy == "cp" and measured is not None:
            nf = sum(b for (op, p), b in ph.items() if p == "forward") / (full * per)
            nb = sum(b for (op, p), b in ph.items() if p != "forward") / (full * per)
            why = (": backward sends only dK, dV (K, V kept from forward, not re-circulated); the notes count K, V again "
                   "in backward (2 + 4)" if nb < limits["cp_backward_over_forward"] * nf else "")
            return f"{ops}; sent per layer per micro-batch in delta b S H, forward {nf:.2f}, backward {nb:.2f}{why}"
        return f"{ops}; {sum(cnt.values()) / per:.2f} operations per layer per micro-batch"
    if strategy == "pp" and v["bSH"]:
        d = v["delta_pp"] or v["delta"]
        borders = ((v["pp"] or 1) * (v["virtual_stages"] or 1) - 1) / (v["pp"] or 1)
        sends = cnt.get("send", 0) / ((v["microbatches"] or 1) * borders) if borders else 0
        each = vol["send"] / cnt["send"] if "send" in vol and cnt.get("send") else None
        return (f"{sends:.2f} sends per border per micro-batch (expected 2: activation forward, gradient backward), "
                f"{_size(each)} each against delta b S H = {_size(d * v['bSH'])}")
    return "inputs incomplete: " + ", ".join(f"{k} {_size(b)}" for k, b in vol.items())


def _most_common(counts: dict | None):
    """The group size most operations state (the larger on a tie: an expert group beside the world's, say)."""
    return max(counts.items(), key=lambda t: (t[1], t[0]))[0] if counts else None


def _phase_row(p: dict) -> dict:
    row = {k: v for k, v in p.items() if k != "group_sizes"}
    return {**row, "group_size": _most_common(p["group_sizes"]), "sizes": None}


def run(ctx):
    shape = mf.run_shape(ctx)
    deg = mf.degrees(ctx)
    known = {k: deg[k]["value"] for k in mf.DEGREES if isinstance(deg[k]["value"], int)}
    rows = ctx.rows(SQL, [shape["stepped"], list(known), list(known.values()), shape["unmeasured"]])
    if not rows:
        return not_applicable("no communication operations" + (" inside the profiled steps" if shape["stepped"] else ""))
    per_rs = shape["measured_ranks"] * shape["steps"]
    ops = [r for r in rows if r["phase"] is None]
    phases = [r for r in rows if r["phase"] is not None]
    gpu = any(r["algbw_gbps"] is not None for r in ops)
    per_op = []
    for r in ops:
        row = {"strategy": r["strategy"], "variant": r["variant"], "op": r["op"], "count": r["count"] / per_rs,
               "bytes_in": _div(r["bytes_in"], per_rs), "bytes_out": _div(r["bytes_out"], per_rs),
               "bus_bytes": _div(r["bus_bytes"], per_rs), "volume_bytes": _div(r["volume_bytes"], per_rs),
               "group_size": _most_common(r["group_sizes"]), "ops_without_size": r["ops_without_size"]}
        if gpu:
            row.update(algbw_gbps=r["algbw_gbps"], busbw_gbps=r["busbw_gbps"])
        per_op.append(row)
    x = inputs(ctx, shape, deg)
    per_strategy, statuses, findings = {}, [], []
    for strategy in dict.fromkeys(r["strategy"] for r in ops if r["strategy"] != "untagged"):
        mine = [r for r in ops if r["strategy"] == strategy]
        variant = max(mine, key=lambda r: r["volume_bytes"] or 0)["variant"]
        sized = [r["volume_bytes"] for r in mine if r["volume_bytes"] is not None]
        measured = sum(sized) / per_rs if sized else None
        given = [r["bytes_in"] for r in mine if r["bytes_in"] is not None]
        if strategy == "cp" and measured is not None:
            n = x["cp"]["value"] or max(_most_common(r["group_sizes"]) or 0 for r in mine)
            measured *= n / (n - 1) if n and n > 1 else 1
        exp, formula, used = expected(strategy, variant, x)
        ratio = measured / exp if exp and measured is not None else None
        doc = {"variant": variant, "input_bytes": sum(given) / per_rs if given else None,
               "measured_volume_bytes": measured, "expected_volume_bytes": exp, "ratio": ratio, "formula": formula,
               "metric": "volume in the notes' count: all-reduce 2 x size, other collectives the full size, sends "
                         "(recv counted at the sender); input_bytes: the bytes passed to the calls, each counted once",
               "source": {k: _kind(x[k]) for k in used}}
        unsized = sum(r["ops_without_size"] for r in mine)
        if unsized:
            doc["ops_without_size"] = unsized
        if ratio is not None:
            doc["status"] = grade(abs(ratio - 1), ctx.limits["warn_tolerance"], ctx.limits["fail_tolerance"])
            statuses.append(doc["status"])
            if doc["status"] != "ok":
                why = cause(strategy, variant, x, mine, [p for p in phases if p["strategy"] == strategy], measured,
                            exp, per_rs, ctx.limits)
                partial = f" (measured leaves out {unsized} operations without a size)" if unsized else ""
                findings.append(f"{strategy} ({variant}): {VOLUME} {_size(measured)} per rank per step{partial}, "
                                f"expected {_size(exp)} ({formula.split(' (docs/parallelism.md')[0]}), {ratio:.2f}x: "
                                f"{why}.")
        else:
            doc["status"] = "not_applicable"
            doc["reason"] = _not_compared(measured, exp, formula, unsized)
        per_strategy[strategy] = doc
    numbers = {"per_strategy": per_strategy, "per_op": per_op, "inputs": x,
               "per": f"rank per profiled step ({count(shape['measured_ranks'], 'rank')} x {count(shape['steps'], 'step')}"
                      + (f"; rank {', '.join(map(str, shape['unmeasured']))} cut short, not measured"
                         if shape["unmeasured"] else "") + ")"
               if shape["stepped"] else f"rank over the whole trace ({shape['ranks']} ranks, no ProfilerStep)"}
    tables = {"per_op": per_op, "per_phase": [_phase_row(p) for p in phases]}
    if not statuses:  # compared nothing: not applicable, never ok
        why = ("; ".join(f"{s}: {d['reason']}" for s, d in per_strategy.items()) if per_strategy
               else f"no communication is tagged with a strategy ({sum(r['count'] for r in ops)} operations untagged)")
        return Result(status="not_applicable", numbers=numbers, findings=findings, tables=tables,
                      reason=f"no strategy has both a measured and an expected volume: {why}")
    return Result(status=worst(statuses), numbers=numbers, findings=findings, tables=tables)


def _not_compared(measured, exp, formula, unsized) -> str:
    """Why a strategy has no ratio: its operations' sizes, the formula's inputs, or both are unknown."""
    why = []
    if measured is None:
        why.append(f"no operation has a known size ({unsized} without)" if unsized
                   else "the notes' metric gives its operations no volume")
    if exp is None:
        why.append(f"no expected volume: {formula}")
    elif not exp:
        why.append("the formula gives 0 bytes")
    return ", and ".join(why)


def _div(a, b):
    return None if a is None else a / b
