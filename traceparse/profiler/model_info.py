"""Model, sharding and optimizer facts read from live objects, each with where it was read.

Read, in this order, the first that answers: the caller's value (in ``metadata.collect``); a Hugging Face style
``config`` on any submodule; attributes the common codebases name (``n_heads``, ``num_key_value_heads``,
``head_dim`` with a ``q``/``q_proj``/``wq`` projection, ...); the structure (the largest ``nn.Embedding``, the
longest list of same-type blocks, the first MLP input projection). Nothing here runs a tensor operation.
"""

from __future__ import annotations

from collections import Counter

import torch.nn as nn

CONFIG = {  # fact: Hugging Face style config attributes, first present wins
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model", "dim"),
    "heads": ("num_attention_heads", "n_head", "n_heads"),
    "kv_heads": ("num_key_value_heads", "n_kv_heads", "num_kv_heads"),
    "ffn": ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"),
    "vocab": ("vocab_size", "padded_vocab_size"),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
    "top_k": ("num_experts_per_tok", "moe_topk", "top_k"),
}
ATTRS = {  # fact: attributes of a submodule, first module that has one wins
    "heads": ("n_heads", "num_heads", "n_head", "num_attention_heads"),
    "kv_heads": ("n_kv_heads", "num_kv_heads", "num_key_value_heads", "num_key_value_groups_heads"),
    "experts": ("num_experts", "n_experts"),
    "top_k": ("top_k", "topk", "num_experts_per_tok"),
}
Q_PROJ, K_PROJ = ("q", "q_proj", "wq", "query"), ("k", "k_proj", "wk", "key")
FFN_IN = ("fc1", "w1", "up_proj", "gate_proj", "c_fc", "linear1", "dense_h_to_4h")


def model_facts(model, sources: dict) -> dict:
    """Facts of ``model``, a module or the list of pipeline stages this rank holds (their parameters and
    blocks summed); ``sources`` gets where each was read."""
    if isinstance(model, list | tuple):
        parts = [model_facts(m, sources) for m in roots(model)]
        facts = {}
        for part in parts:
            for k, v in part.items():
                facts[k] = facts.get(k, 0) + v if k in ("params_local", "layers_local") else facts.get(k, v)
        return facts
    facts = {}

    def put(key, value, source):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0 and key not in facts:
            facts[key], sources[key] = value, source

    params = list(model.parameters())
    put("params_local", sum(p.numel() for p in params), "module: parameters() (a DTensor counts whole)")
    by_dtype = Counter()
    for p in params:
        by_dtype[p.dtype] += p.numel()
    if by_dtype:
        dt = by_dtype.most_common(1)[0][0]
        put("dtype_bytes", dt.itemsize, f"module: {dt} (most parameters)")
    modules = list(model.named_modules())
    for _, m in modules:
        cfg = getattr(m, "config", None)
        if cfg is not None and not isinstance(cfg, dict | str):
            for key, names in CONFIG.items():
                for n in names:
                    put(key, getattr(cfg, n, None), f"module: config.{n}")
            break
    for _, m in modules:
        for key, names in ATTRS.items():
            for n in names:
                put(key, getattr(m, n, None), f"module: {type(m).__name__}.{n}")
        if isinstance(m, nn.MultiheadAttention):
            put("heads", m.num_heads, "module: nn.MultiheadAttention.num_heads")
            put("hidden", m.embed_dim, "module: nn.MultiheadAttention.embed_dim")
        head_dim = getattr(m, "head_dim", None)
        if isinstance(head_dim, int) and head_dim > 0:
            for key, names in (("heads", Q_PROJ), ("kv_heads", K_PROJ)):
                proj = next((getattr(m, n) for n in names if isinstance(getattr(m, n, None), nn.Linear)), None)
                if proj is not None:
                    put(key, proj.out_features // head_dim, f"module: {type(m).__name__}.{proj_name(m, proj)}."
                        f"out_features / head_dim")
                    put("hidden", proj.in_features, f"module: {type(m).__name__}.{proj_name(m, proj)}.in_features")
        for n in FFN_IN:
            lin = getattr(m, n, None)
            if isinstance(lin, nn.Linear):
                put("ffn", lin.out_features, f"module: {type(m).__name__}.{n}.out_features")
    embeds = [m for _, m in modules if isinstance(m, nn.Embedding)]
    if embeds:
        e = max(embeds, key=lambda e: e.num_embeddings)
        put("vocab", e.num_embeddings, "module: largest nn.Embedding")
        put("hidden", e.embedding_dim, "module: largest nn.Embedding")
    lists = [(n, m) for n, m in modules if isinstance(m, nn.ModuleList) and len(m)]
    experts = [m for n, m in lists if n.endswith("experts")]
    blocks = [m for n, m in lists if not n.endswith("experts") and len({type(b) for b in m}) == 1]
    if blocks:
        longest = max(blocks, key=len)
        put("layers_local", len(longest), f"module: the longest list of {type(longest[0]).__name__} blocks")
    if experts:
        put("experts_local", len(experts[0]), "module: length of the first 'experts' list")
    return facts


def proj_name(parent, child):
    return next(n for n, c in parent.named_children() if c is child)


def roots(model) -> list:
    """The modules passed: one, or the pipeline stages of this rank."""
    return list(model) if isinstance(model, list | tuple) else [] if model is None else [model]


def zero_stage(model, optimizer):
    """(stage, source) from the wrappers: FSDP2 / FSDP / DeepSpeed / ZeroRedundancyOptimizer / DDP; else None."""
    mods = [m for r in roots(model) for m in r.modules()]
    if mods:
        engine_stage = getattr(roots(model)[0], "zero_optimization_stage", None)
        if callable(engine_stage):
            return int(engine_stage()), "module: DeepSpeed zero_optimization_stage()"
        fsdp2 = [m for m in mods if hasattr(m, "_get_fsdp_state")]
        if fsdp2:
            groups = [m._get_fsdp_state()._fsdp_param_group for m in fsdp2]
            reshard = any(g is not None and g.post_forward_mesh_info is not None for g in groups)
            return (3, "module: FSDP2 fully_shard, resharding after forward") if reshard else \
                (2, "module: FSDP2 fully_shard, no resharding after forward")
        fsdp1 = [m for m in mods if type(m).__name__ == "FullyShardedDataParallel"]
        if fsdp1:
            strategy = getattr(fsdp1[0], "sharding_strategy", None)
            name = getattr(strategy, "name", str(strategy))
            stage = {"FULL_SHARD": 3, "HYBRID_SHARD": 3, "SHARD_GRAD_OP": 2, "_HYBRID_SHARD_ZERO2": 2, "NO_SHARD": 0}
            if name in stage:
                return stage[name], f"module: FSDP sharding_strategy {name}"
    if optimizer is not None and type(optimizer).__name__ == "ZeroRedundancyOptimizer":
        return 1, "optimizer: ZeroRedundancyOptimizer"
    if any(type(m).__name__ == "DistributedDataParallel" for m in roots(model)):
        return 0, "module: DistributedDataParallel"
    return None


def wrapper_groups(model, optimizer) -> dict:
    """{dimension name: process group} the wrappers hold: DDP's and ZeroRedundancyOptimizer's group ('dp'),
    the mesh FSDP2 shards over (its dimension names, else 'dp')."""
    for m in roots(model):
        if type(m).__name__ == "DistributedDataParallel" and getattr(m, "process_group", None) is not None:
            return {"dp": m.process_group}
        for sub in m.modules():
            if hasattr(sub, "_get_fsdp_state"):
                group = sub._get_fsdp_state()._fsdp_param_group
                mesh = getattr(getattr(group, "mesh_info", None), "mesh", None)
                if mesh is not None:
                    names = mesh.mesh_dim_names or ("dp",) * mesh.ndim
                    return {name: mesh.get_group(i) for i, name in enumerate(names)} if mesh.ndim == len(set(names)) else {}
    pg = getattr(optimizer, "process_group", None)
    return {"dp": pg} if pg is not None and type(optimizer).__name__ == "ZeroRedundancyOptimizer" else {}


def optimizer_facts(opt) -> dict:
    """``{name, n_opt, state_bytes}``: the class (``Zero(AdamW)`` style for wrappers), state tensors per parameter
    (the most common count of per-parameter-sized tensors in its state; null before the first step) and bytes."""
    inner = getattr(opt, "optim", None)  # ZeroRedundancyOptimizer and other wrappers hold the real one
    inner = inner if hasattr(inner, "state") else None
    name = type(opt).__name__ + (f"({type(inner).__name__})" if inner is not None else "")
    state = getattr(inner or opt, "state", {})
    counts, nbytes = Counter(), 0
    for p, s in list(state.items()):
        n = 0
        for t in s.values() if isinstance(s, dict) else ():
            if hasattr(t, "numel") and hasattr(t, "element_size"):
                nbytes += t.numel() * t.element_size()
                n += t.numel() == p.numel() and t.numel() > 1
        counts[n] += 1
    return {"name": name, "n_opt": counts.most_common(1)[0][0] if counts else None,
            "state_bytes": nbytes if counts else None}
