"""The layout and tag sections of a report: inferred layout, user-stated checks, lint, collectives."""

import json
import tomllib
from pathlib import Path

from traceparse.models.pipeline import FORMULAS
from traceparse.errors import TraceError
from traceparse.bounds import int_range
from traceparse.store.query import define, table_rows
from traceparse.axes import INT_LAYOUT_KEYS, LAYOUT_KEYS

MODEL_KEYS = {"kv_heads", "experts", "layers", "ranks_per_node", "hidden", "heads", "seq", "micro_batch",
              "dtype_bytes", "params", "top_k", "n_opt"}
INT_KEYS = INT_LAYOUT_KEYS | MODEL_KEYS
STATED_KEYS = set(LAYOUT_KEYS) | MODEL_KEYS | {"optimizer"}


def inferred_layout(con) -> dict:
    got = {r["key"]: (json.loads(r["value"]), r["evidence"]) for r in table_rows(con, "layout")}
    doc = {k: got.get(k, (None, "not inferred"))[0] for k in LAYOUT_KEYS}
    doc["evidence"] = {k: got.get(k, (None, "not inferred"))[1] for k in LAYOUT_KEYS}
    return doc


def parse_stated(text: str | None, option: str = "--layout") -> dict:
    """``dp=4,tp=2`` or the path of a TOML file (top-level keys, optional [model] table); ``option`` (``--layout``,
    ``--given``) names where the text came from in errors. A key given twice is refused."""
    if not text:
        return {}
    is_file = _is_file(text)
    if text.endswith(".toml") and not is_file:
        raise TraceError(text, f"{option}: no such layout file")
    source = text if is_file else None  # named in errors about its values
    if source:
        try:
            data = tomllib.loads(Path(text).read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise TraceError(text, f"{option}: not a TOML layout file ({e})") from None
        except OSError as e:
            raise TraceError(text, f"{option}: cannot read the layout file: {e.strerror or e}") from None
        model = data.pop("model", {})
        if not isinstance(model, dict):
            raise TraceError(text, f"{option}: not a TOML layout file ([model] must be a table)")
        twice = sorted(set(data) & set(model))
        if twice:
            raise TraceError(text, f"{option}: {', '.join(twice)} given twice (at the top and in [model])")
        data.update(model)
    else:
        data = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            if "=" not in part:
                raise TraceError(None, f"{option}: expected key=value, got {part!r}")
            k, v = (s.strip() for s in part.split("=", 1))
            if k in data:
                raise TraceError(None, f"{option}: {k} given twice ({k}={data[k]}, {k}={v})")
            data[k] = v
    unknown = set(data) - STATED_KEYS
    if unknown:
        raise TraceError(source, f"{option}: unknown keys {', '.join(sorted(unknown))} (known: {', '.join(sorted(STATED_KEYS))})")
    return {k: _int_value(k, v, source, option) if k in INT_KEYS else _text_value(k, v, source, option)
            for k, v in data.items()}


def _is_file(text: str) -> bool:
    """Whether ``text`` names a file; a value no path can be (longer than the system allows a name, a NUL byte)
    names none: it is read as key=value pairs."""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):
        return False


NAMES = {"pp_schedule": tuple(FORMULAS)}  # the names a text key takes (the bubble check's schedules); others: any


def _int_value(key: str, v, source: str | None, option: str) -> int:
    """A whole number in its key's range (``7e9`` params allowed); anything else is refused."""
    if isinstance(v, str):
        try:
            v = int(v)
        except ValueError:
            try:
                v = float(v)
            except ValueError:
                raise TraceError(source, f"{option}: {key} = {v!r} is not a number") from None
    if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, float) and not v.is_integer()):
        raise TraceError(source, f"{option}: {key} = {v!r} is not a whole number")
    lo, hi = int_range(key)  # the same ranges as the traces' metadata (traceparse/bounds.py)
    if not lo <= v <= hi:
        raise TraceError(source, f"{option}: {key} = {v!r} is out of range ({lo} to {hi:,})")
    return int(v)


def _text_value(key: str, v, source: str | None, option: str) -> str:
    if not isinstance(v, str):
        raise TraceError(source, f"{option}: {key} = {v!r} must be a name")
    if key in NAMES and v not in NAMES[key]:
        raise TraceError(source, f"{option}: {key} = {v!r} is not one of {', '.join(NAMES[key])}")
    return v


def compare_stated(layout: dict, stated: dict, sources: dict | None = None) -> list[dict]:
    """Each given layout key (``sources``: 'stated' or 'metadata' per key) against the inferred value; the trace's
    evidence is never overridden."""
    out = []
    for k in LAYOUT_KEYS:
        if k not in stated:
            continue
        got = layout.get(k)
        status = "not inferred" if got is None else "agrees" if got == stated[k] else "contradicts"
        out.append({"key": k, "stated": stated[k], "source": (sources or {}).get(k, "stated"), "inferred": got,
                    "status": status, "evidence": layout["evidence"][k]})
    return out


def lint(con, layout: dict, stated: dict) -> list[str]:
    """Warnings from the bounds of docs/parallelism.md section 4 [II.IV]."""
    warnings = []
    per_node = stated.get("ranks_per_node") or _read(con, "layout_ranks_per_node")[0]["per_node"]
    tp, sp, ep, pp = (layout.get(k) for k in ("tp", "sp", "ep", "pp"))
    if tp and per_node and tp > per_node:
        warnings.append(f"tp = {tp} spans more ranks than a node holds ({per_node}): TP traffic leaves the node (docs/parallelism.md 3.3, 4)")
    kv = stated.get("kv_heads")
    for name, degree in (("tp", tp), ("Ulysses sp", sp)):
        if degree and kv and degree > kv:
            warnings.append(f"{name} = {degree} exceeds the {kv} key/value heads (docs/parallelism.md 3.3, 3.4, 4)")
    if ep and stated.get("experts") and ep > stated["experts"]:
        warnings.append(f"ep = {ep} exceeds the {stated['experts']} experts (docs/parallelism.md 3.5, 4)")
    if pp and stated.get("layers") and pp > stated["layers"]:
        warnings.append(f"pp = {pp} exceeds the {stated['layers']} layers (docs/parallelism.md 3.2, 4)")
    return warnings


def collectives(con) -> list[dict]:
    """One row per (strategy, variant, op): counts, input bytes and time per rank per profiled step.

    Input bytes are what the ranks pass to the calls (comm_ops.bytes_in; ``traceparse explain input_bytes``), not
    the notes' communication volume (comm_volume; ``traceparse explain volume``). They are null when no operation
    of the row has a known size, else the sum of the known sizes; ``ops_without_size`` counts the operations left out.
    """
    return _read(con, "layout_collectives", "strategy, variant, op")


def untagged(con) -> dict:
    r = _read(con, "layout_untagged")[0]
    r["time_fraction"] = round(r["time_ns"] / r["all_time_ns"], 4) if r["all_time_ns"] else None
    from traceparse.tagging.tag import untagged_why  # here: tagging imports DuckDB, which a kept document needs not

    r["why"] = untagged_why(con)
    return r


def tags(con) -> list[dict]:
    """One row per (strategy, variant, op, rule, confidence); bytes_in null when no operation has a known size."""
    return _read(con, "layout_tags", "strategy, variant, op, rule_id")


def _read(con, name: str, order: str = "") -> list[dict]:
    """The rows of a view of stated.sql on the store ``con``."""
    define(con, __package__, "stated.sql")
    return table_rows(con, name, order)
