"""The ``traceparse`` header key the profiler plugin writes (``traceparse.profiler.metadata``), checked field
by field: a field of the wrong type or out of range is dropped and counted as a load issue, the rest is kept.
Layout and model numbers take the ranges ``--layout`` and ``--given`` take (traceparse/bounds.py)."""

from traceparse.axes import INT_LAYOUT_KEYS
from traceparse.bounds import COUNT, RANKS, in_range

READ_VERSION = 1
BIG = COUNT  # counts (parameters, bytes) of the largest models fit
MODEL_INT = {"params", "params_local", "layers", "layers_local", "hidden", "heads", "kv_heads", "ffn", "vocab",
             "experts", "experts_local", "top_k", "seq", "micro_batch", "dtype_bytes"}
TEXT = {"traceparse_version", "torch_version", "backend", "device"}


def _int(v, low=1, high=BIG):
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _text(v):
    return isinstance(v, str) and len(v) <= 200


def read_metadata(value, world_size, issues: list) -> dict | None:
    """The checked metadata, or None when ``value`` is absent or not an object (one issue)."""
    if value is None:
        return None
    bad = []
    if not isinstance(value, dict):
        issues.append(("warning", "traceparse metadata is not an object; ignored", 1))
        return None
    version = value.get("version")
    if not _int(version):
        bad.append("version")
        version = READ_VERSION
    elif version > READ_VERSION:
        issues.append(("warning", f"traceparse metadata version {version} is newer than this traceparse reads "
                                  f"({READ_VERSION}); its known fields are read", 1))

    def ranks_ok(r):
        return _int(r, 0, (world_size or 1 << 31) - 1)

    out = {"version": version}
    checks = {**{k: _text for k in TEXT}, "rank": lambda v: _int(v, 0, (1 << 31) - 1),
              "world_size": lambda v: _int(v, 1, (1 << 31) - 1)}
    for k, ok in checks.items():
        if value.get(k) is None:
            continue
        if ok(value[k]):
            out[k] = value[k]
        else:
            bad.append(k)
    out["mesh"] = _mesh(value.get("mesh"), bad)
    out["groups"] = _groups(value.get("groups"), ranks_ok, bad)
    out["layout"] = _fields(value.get("layout"), "layout", bad, lambda k, v: (
        _text(v) if k == "pp_schedule" else in_range(k, v) if k in INT_LAYOUT_KEYS else None))
    out["model"] = _fields(value.get("model"), "model", bad, lambda k, v: in_range(k, v) if k in MODEL_INT else None)
    opt = _fields(value.get("optimizer"), "optimizer", bad, lambda k, v: (
        _text(v) if k == "name" else in_range(k, v) if k == "n_opt" else _int(v, 0) if k == "state_bytes" else None))
    out["optimizer"] = opt
    src = value.get("sources")
    out["sources"] = {k: v for k, v in src.items() if _text(v)} if isinstance(src, dict) else {}
    for k in bad:
        issues.append(("warning", f"traceparse metadata field {k} is not valid; ignored", 1))
    return {k: v for k, v in out.items() if v is not None}


def _fields(obj, name, bad, ok) -> dict:
    """Known keys of ``obj`` whose value passes ``ok(key, value)`` (True); False marks it bad; None (an unknown
    key) skips it silently: a newer plugin may write more."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        bad.append(name)
        return {}
    out = {}
    for k, v in obj.items():
        if v is None:
            continue
        verdict = ok(k, v)
        if verdict:
            out[k] = v
        elif verdict is not None:
            bad.append(f"{name}.{k}")
    return out


def _mesh(mesh, bad):
    if mesh is None:
        return None
    dims, shape = (mesh.get("dims"), mesh.get("shape")) if isinstance(mesh, dict) else (None, None)
    if (isinstance(dims, list) and isinstance(shape, list) and len(dims) == len(shape)
            and all(_text(d) for d in dims) and all(_int(s, 1, RANKS) for s in shape)):
        return {"dims": dims, "shape": shape}
    bad.append("mesh")
    return None


def _groups(groups, rank_ok, bad) -> list:
    if groups is None:
        return []
    if not isinstance(groups, list):
        bad.append("groups")
        return []
    out = []
    for g in groups:
        ranks = g.get("ranks") if isinstance(g, dict) else None
        if (isinstance(ranks, list) and ranks and all(rank_ok(r) for r in ranks)
                and all(g.get(k) is None or _text(g[k]) for k in ("name", "desc", "dim"))):
            out.append({"name": g.get("name"), "desc": g.get("desc"), "dim": g.get("dim"), "ranks": sorted(ranks)})
        else:
            bad.append("groups[]")
    return out
