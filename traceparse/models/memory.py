"""Memory in theory: the ZeRO table of parameters, gradients and optimizer state per device (docs/parallelism.md
3.1). Pure functions: no store, no trace. The memory check (analyzers/memory.py) and the what-if forecasts use it.
"""

# the ZeRO table's total per device, by stage (delta_opt = 4)
ZERO_FORMULAS = {0: "(2 delta + (n_opt+1) delta_opt) Phi", 1: "(2 delta + (n_opt+1) delta_opt / N_DP) Phi",
                 2: "(delta + delta / N_DP + (n_opt+1) delta_opt / N_DP) Phi",
                 3: "(2 delta / N_DP + (n_opt+1) delta_opt / N_DP) Phi"}


def zero_memory(phi, delta, n_opt, n_dp, stage) -> dict:
    """Bytes per device of parameters, gradients and optimizer state (delta_opt = 4) by the ZeRO table
    (docs/parallelism.md 3.1); optimizer_state and total are None when n_opt is."""
    params = delta * phi / (n_dp if stage == 3 else 1)
    grads = delta * phi / (n_dp if stage >= 2 else 1)
    state = None if n_opt is None else (n_opt + 1) * 4 * phi / (n_dp if stage >= 1 else 1)
    return {"parameters": params, "gradients": grads, "optimizer_state": state,
            "total": None if state is None else params + grads + state}
