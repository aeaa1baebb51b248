"""Communication volume in theory (docs/parallelism.md 3, 4): the notes' formulas for the bytes each strategy
moves per rank per step, in the notes' count (all-reduce 2x the size).

Pure functions of the formulas' inputs ({name: {value, source}}): no store, no trace. The comm_volume check
(analyzers/comm_volume.py) evaluates them with the inputs it infers; the what-if forecasts with the target's.
"""


def expected(strategy, variant, x):
    """(bytes, formula text, names of the inputs used) per rank per step, or (None, why, used)."""
    v = {k: f["value"] for k, f in x.items()}
    m, dlt = v["microbatches"] or 1, v[f"delta_{strategy}"] if strategy != "dp" else v["delta"]
    dlt = dlt or v["delta"]
    L, bsh, r = v["L_local"], v["bSH"], v["kv_over_q"]
    if strategy == "dp":
        used = ["delta", "Phi_dp", "microbatches"]
        if None in (dlt, v["Phi_dp"]):
            return None, "delta or Phi_dp unknown", used
        rounds = v.get("sync_rounds") or m  # a forecast (whatif) follows the notes: a round per micro-batch
        if variant in ("zero2", "zero3") and rounds < m:
            return None, (f"gradients buffered across micro-batches ({rounds} reduce-scatter round(s) for "
                          f"m = {m}, e.g. FSDP2's set_requires_gradient_sync(False)): the notes' ZeRO-2/3 formulas "
                          "reduce-scatter after every micro-batch"), used + ["sync_rounds"]
        coef, text = {"zero2": (m + 1, "(m + 1) delta Phi_dp [ZeRO-2: RS per micro-batch + AG]"),
                      "zero3": (3 * m, "3 m delta Phi_dp [ZeRO-3: AG forward + AG backward + RS]")}.get(
            variant, (2, f"2 delta Phi_dp [{variant or 'ZeRO-0'}: AR = RS + AG of the gradients]"))
        return coef * dlt * v["Phi_dp"], text + " (docs/parallelism.md 3.1)", used
    if strategy not in ("pp", "tp", "sp", "cp", "ep") or (strategy, variant) == ("ep", "embedding"):
        return None, f"the notes give no formula for {strategy}/{variant}", []
    act = [f"delta_{strategy}", "bSH", "L_local", "microbatches"]
    if None in (dlt, bsh):
        return None, "delta or b S H unknown", act
    if strategy == "pp":
        pp, vs = v["pp"] or 1, v["virtual_stages"] or 1
        used = [f"delta_{strategy}", "bSH", "microbatches", "pp", "virtual_stages"]
        if pp < 2:
            return None, "pp degree unknown", used
        return (2 * dlt * bsh * m * (pp * vs - 1) / pp,
                "2 delta b S H per border per micro-batch x m x (N_PP v - 1) borders / N_PP ranks (docs/parallelism.md 3.2)", used)
    if L is None:
        return None, "layers per device unknown", act
    if strategy == "tp":
        return 8 * dlt * bsh * L * m, "8 delta b S H per layer per micro-batch x L_local x m (docs/parallelism.md 3.3)", act
    if strategy == "sp":
        n = v["sp"] or 1
        return (4 * (r + 1) * dlt * bsh / n * L * m,
                "4 (N_kv/N_q + 1) delta b S H / N_SP per layer x L_local x m (docs/parallelism.md 3.4)", act + ["kv_over_q", "sp"])
    if strategy == "cp":
        return (6 * r * dlt * bsh * L * m,
                "6 (N_kv/N_q) delta b S H per layer x L_local x m (docs/parallelism.md 3.4); measured sends x N/(N-1)",
                act + ["kv_over_q", "cp"])
    if strategy == "ep" and variant != "embedding":
        if v["K_MoE"] is None:
            return None, "top_k (K_MoE) unknown: state top_k", act + ["K_MoE"]
        return (4 * dlt * v["K_MoE"] * bsh * L * m,
                "4 delta K_MoE b S H per MoE layer x L_local x m, every layer MoE (docs/parallelism.md 3.5)", act + ["K_MoE"])
    return None, f"the notes give no formula for {strategy}/{variant}", []
