"""What the traces declare about their run through the profiler plugin's metadata (``plugin_metadata``).

``declared(con)`` turns the ranks' metadata into the keys a user could state with ``--layout`` (degrees,
ZeRO stage, schedule, model dims, optimizer), each with where it came from:

- **degrees** from the mesh dimensions (and the groups passed by name): a dimension's axis is read from its name
  the way a process group's description is (the store's ``group_axis``); an axis is the product of its
  dimensions' sizes. When the mesh covers the world, the model axes (tp, pp, cp, sp) it does not name are 1 and
  dp is the world over them. ``dp_replicate`` / ``dp_shard`` come from dimensions of exactly those names;
- **layout** values the plugin read or the caller passed (``zero_stage``, ``microbatches``, ``pp_schedule``,
  ``virtual_stages``, degrees) win over the mesh;
- **params** and **layers**: given ones, else this rank's module summed over one pipeline group (each rank holds
  one stage; DTensors count whole, so tensor-parallel shards are not added twice); with expert parallelism the
  module's parameter count is not the model's (experts sharded by hand) and params stay undeclared;
- the other model facts and the optimizer from the lowest rank that has them.

Values the ranks disagree on are reported in ``notes`` (the lowest rank's is used). A number out of its key's range
(traceparse/bounds.py: the ranges ``--layout`` takes), e.g. a degree the product of several large mesh dimensions, is
not used and said in ``notes``.
"""

import json
import math

from traceparse.axes import MODEL_AXES
from traceparse.bounds import in_range, int_range
from traceparse.store.query import define, table_rows

MODEL_KEYS = ("hidden", "heads", "kv_heads", "seq", "micro_batch", "dtype_bytes", "experts", "top_k", "ffn", "vocab")
TEXT_KEYS = ("pp_schedule", "optimizer")  # every other key is a whole number


def declared(con) -> dict:
    metas = {r["rank"]: json.loads(r["metadata"]) for r in table_rows(con, "plugin_metadata", "rank", "rank, metadata")}
    loaded = [r["rank"] for r in table_rows(con, "ranks", "rank", "rank")]
    if not metas:
        return {"present": False, "ranks": [], "values": {}, "sources": {}, "notes": []}
    ref_rank = min(metas)
    ref = metas[ref_rank]
    values, sources, notes = {}, {}, []

    def put(key, value, source):
        if value is None or key in values:
            return
        if key not in TEXT_KEYS and not in_range(key, value):
            lo, hi = int_range(key)
            notes.append(f"{key} = {value} ({source}) is out of range ({lo} to {hi:,}): not used")
            return
        values[key], sources[key] = value, source

    for k, v in ref.get("layout", {}).items():
        put(k, v, ref.get("sources", {}).get(k, "plugin"))
    world = ref.get("world_size") or len(loaded)
    for k, v in _degrees(con, ref, world).items():
        put(k, v[0], v[1])
    model = ref.get("model", {})
    for k in ("params", "layers"):
        if k in model:
            put(k, model[k], ref.get("sources", {}).get(k, "plugin"))
    pp_group = (_axis_group(con, ref, "pp") if (values.get("pp") or 1) > 1 else None) or [ref_rank]
    stages = [metas.get(r, {}).get("model", {}) for r in pp_group]
    sharded_experts = (values.get("ep") or 1) > 1 or any("experts_local" in s for s in stages)
    if all("params_local" in s for s in stages) and not sharded_experts:
        put("params", sum(s["params_local"] for s in stages),
            f"module parameters summed over the pipeline group {pp_group}" if len(pp_group) > 1 else "module parameters")
    if all("layers_local" in s for s in stages):
        put("layers", sum(s["layers_local"] for s in stages),
            f"module blocks summed over the pipeline group {pp_group}" if len(pp_group) > 1 else "module blocks")
    for r in sorted(metas):
        m, src = metas[r].get("model", {}), metas[r].get("sources", {})
        for k in MODEL_KEYS:
            put(k, m.get(k), f"rank {r}: {src.get(k, 'plugin')}")
        opt = metas[r].get("optimizer") or {}
        put("optimizer", opt.get("name"), f"rank {r}: the optimizer's class")
        put("n_opt", opt.get("n_opt"), f"rank {r}: state tensors per parameter in the optimizer's state")
    for r, m in metas.items():
        for key, v in m.get("layout", {}).items():
            if v != ref.get("layout", {}).get(key, v):
                notes.append(f"rank {r} declares {key} = {v}, rank {ref_rank} {ref['layout'][key]}: rank {ref_rank}'s used")
    missing = [r for r in loaded if r not in metas]
    if missing:
        notes.append(f"{len(missing)} of {len(loaded)} ranks carry no traceparse metadata ({_ranks(missing)})")
    return {"present": True, "ranks": sorted(metas), "version": ref.get("version"),
            "torch_version": ref.get("torch_version"), "traceparse_version": ref.get("traceparse_version"),
            "mesh": ref.get("mesh"), "values": values, "sources": sources, "notes": notes}


def _named_dims(ref) -> list[tuple[str, int]]:
    """(dimension name, size): the mesh's dimensions, else the groups passed by name."""
    mesh = ref.get("mesh")
    if mesh:
        return list(zip(mesh["dims"], mesh["shape"], strict=True))
    return [(g["dim"], len(g["ranks"])) for g in ref.get("groups", []) if g.get("dim")]


def _axis(con, name):
    define(con, __package__, "declared.sql")
    return table_rows(con, "layout_axis(?)", params=[name])[0]["axis"]


def _degrees(con, ref, world) -> dict:
    """{key: (degree, source)} from the named dimensions."""
    dims = _named_dims(ref)
    if not dims:
        return {}
    what = "mesh" if ref.get("mesh") else "named group"
    per_axis, out = {}, {}
    for name, size in dims:
        axis = _axis(con, name)
        if axis:
            per_axis.setdefault(axis, []).append((name, size))
        if name in ("dp_replicate", "dp_shard"):
            out[name] = (size, f"{what} dimension {name!r}")
    for axis, named in per_axis.items():
        out[axis] = (math.prod(s for _, s in named), f"{what} dimension{'s' if len(named) > 1 else ''} "
                     + " x ".join(f"{n!r} ({s})" for n, s in named))
    covers = ref.get("mesh") and math.prod(s for _, s in dims) == world
    if covers:
        for axis in MODEL_AXES:
            out.setdefault(axis, (1, f"the mesh {[n for n, _ in dims]} covers the world and has no {axis} dimension"))
        if "dp" not in out:
            split = math.prod(out[a][0] for a in MODEL_AXES)
            out["dp"] = (world // split, f"world {world} / (tp pp cp sp = {split}): the mesh names no dp dimension")
    return out


def _axis_group(con, ref, axis) -> list[int] | None:
    """The ranks of ``ref``'s group along ``axis`` (its mesh dimension or named group)."""
    for g in ref.get("groups", []):
        if g.get("dim") and _axis(con, g["dim"]) == axis:
            return g["ranks"]
    return None


def _ranks(ranks) -> str:
    return ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
