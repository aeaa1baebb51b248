"""What the plugin writes under the trace's ``traceparse`` key (version 1).

``collect(...)`` returns a JSON-ready dict; every field may be null when it cannot be known:

- ``version``, ``traceparse_version``, ``torch_version``;
- ``rank``, ``world_size``, ``backend``, ``device`` (``cpu`` / ``cuda`` ...);
- ``mesh``: ``{dims, shape, coordinate}`` of the DeviceMesh passed in;
- ``groups``: every process group this rank belongs to, ``{name, desc, dim, ranks}`` (global ranks): the mesh's
  dimensions (``dim`` = the dimension's name), the groups passed in ``groups={"tp": pg, ...}`` (without either,
  the groups the wrappers hold: DDP's, FSDP2's mesh, ZeroRedundancyOptimizer's), then the rest of
  ``torch.distributed``'s groups (``dim`` null);
- ``layout``: ``zero_stage`` read from the module and optimizer, and what the caller passes (``microbatches``,
  ``pp_schedule``, ``virtual_stages``, ``layout={...}`` degrees);
- ``model``: ``params_local`` (this rank's module; a DTensor counts whole), ``dtype_bytes``, ``layers_local``
  (the blocks of this rank's module) and, read from the module where it says so (see ``model_info``) or passed by
  the caller: ``params``, ``layers``, ``hidden``, ``heads``, ``kv_heads``, ``ffn``, ``vocab``, ``experts``,
  ``top_k``, ``seq``, ``micro_batch``;
- ``optimizer``: ``name``, ``n_opt`` (state tensors per parameter, counted in its state) and ``state_bytes``;
- ``sources``: for each model and layout value, where it came from (``user``, ``module: ...``).

Collecting runs no collective and no tensor operation (nothing lands in the trace).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from traceparse.version import __version__
from traceparse.profiler.model_info import model_facts, optimizer_facts, roots, wrapper_groups, zero_stage
from traceparse.axes import LAYOUT_KEYS

METADATA_KEY = "traceparse"
VERSION = 1
USER_LAYOUT = LAYOUT_KEYS
USER_MODEL = ("params", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "experts", "top_k", "seq",
              "micro_batch", "dtype_bytes")


def collect(model=None, mesh=None, groups=None, optimizer=None, layout=None, model_facts_=None) -> dict:
    """The metadata of this rank (see the module docstring). ``layout`` and ``model_facts_`` are what the caller
    states; they win over what is read from the module."""
    layout, given = dict(layout or {}), dict(model_facts_ or {})
    for what, allowed in ((layout, USER_LAYOUT), (given, USER_MODEL)):
        unknown = set(what) - set(allowed)
        if unknown:
            raise ValueError(f"traceparse.profiler: unknown keys {sorted(unknown)} (known: {', '.join(allowed)})")
    sources = {}
    facts = model_facts(model, sources) if model is not None else {}
    for k, v in given.items():
        if v is not None:
            facts[k], sources[k] = v, "user"
    stage = None if "zero_stage" in layout else zero_stage(model, optimizer)
    if stage is not None:
        layout["zero_stage"], sources["zero_stage"] = stage
    for k in layout:
        sources.setdefault(k, "user")
    live = dist.is_available() and dist.is_initialized()
    return {
        "version": VERSION,
        "traceparse_version": __version__,
        "torch_version": torch.__version__,
        "rank": dist.get_rank() if live else 0,
        "world_size": dist.get_world_size() if live else 1,
        "backend": str(dist.get_backend()) if live else None,
        "device": _device(model),
        "mesh": _mesh(mesh),
        "groups": _groups(mesh, groups if groups or mesh is not None else wrapper_groups(model, optimizer)) if live else [],
        "layout": {k: v for k, v in layout.items() if v is not None},
        "model": facts,
        "optimizer": optimizer_facts(optimizer) if optimizer is not None else None,
        "sources": sources,
    }


LAYOUT_ARGS = ("microbatches", "pp_schedule", "virtual_stages")
MODEL_ARGS = ("seq", "micro_batch")


def metadata_function(model, mesh, groups, optimizer, facts: dict):
    """A function returning the metadata, the static part read now (before any window) and the optimizer's state
    read at each call. ``facts``: ``seq``, ``micro_batch``, ``microbatches``, ``pp_schedule``, ``virtual_stages``,
    ``layout`` (a dict of degrees, ``zero_stage``, ...) and ``model_facts`` (a dict: ``params``, ``experts``, ...)."""
    facts = dict(facts)
    layout = dict(facts.pop("layout", None) or {})
    given = dict(facts.pop("model_facts", None) or {})
    for k in LAYOUT_ARGS:
        if facts.get(k) is not None:
            layout[k] = facts[k]
    for k in MODEL_ARGS:
        if facts.get(k) is not None:
            given[k] = facts[k]
    unknown = set(facts) - set(LAYOUT_ARGS) - set(MODEL_ARGS)
    if unknown:
        raise TypeError(f"traceparse.profiler: unexpected arguments {sorted(unknown)}")
    static = collect(model, mesh, groups, optimizer, layout, given)

    def metadata():  # the optimizer's state exists only after its first step
        return static if optimizer is None else {**static, "optimizer": optimizer_facts(optimizer)}

    return metadata


def _device(model):
    for p in (p for m in roots(model) for p in m.parameters()):
        return p.device.type
    return "cuda" if torch.cuda.is_available() else "cpu"


def _mesh(mesh):
    if mesh is None:
        return None
    return {"dims": list(mesh.mesh_dim_names or ()), "shape": list(mesh.shape), "coordinate": mesh.get_coordinate()}


def _group(pg, dim):
    return {"name": getattr(pg, "group_name", None), "desc": getattr(pg, "group_desc", None), "dim": dim,
            "ranks": sorted(dist.get_process_group_ranks(pg))}


def _groups(mesh, named):
    out, seen = [], set()

    def add(pg, dim):
        g = _group(pg, dim)
        if g["name"] not in seen:
            seen.add(g["name"])
            out.append(g)

    for dim in (mesh.mesh_dim_names or ()) if mesh is not None else ():
        add(mesh.get_group(dim), dim)
    for dim, pg in (named or {}).items():
        add(pg, dim)
    world = dist.distributed_c10d._world
    me = dist.get_rank()
    for pg in list(world.pg_names):
        if me in world.pg_group_ranks.get(pg, {}):
            add(pg, None)
    return out
