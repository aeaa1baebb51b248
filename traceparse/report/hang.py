"""Text of ``traceparse hang``: the divergence first, then every rank's last completed collective per group."""

from .text import table


def _group(d) -> str:
    dim = f", mesh dim {d['mesh_dim']}" if d.get("mesh_dim") else ""
    what = d.get("strategy") or "strategy unknown"
    if d.get("variant"):
        what += f" ({d['variant']})"
    return f"group {d['group_ranks']} ({d['pg_desc'] or d['pg_name']}{dim}; {what})"


def _divergence(d) -> list[str]:
    seq = f" #{d['seq']}" if d["seq"] is not None else ""
    out = [f"  {d['kind']}: {d['op']}{seq} on {_group(d)}"]
    if d["missing"]:
        out.append(f"    entered: {d['entered']}; never entered: {d['missing']}")
    for r, c in d["calls"].items():
        where = f"; called from {c['frame']}" if c.get("frame") else ""
        peer = "" if c.get("peer") is None else f" {'to' if c['op'] == 'send' else 'from'} {c['peer']}"
        out.append(f"    rank {r}: {c['op']}{peer} sizes {c['input_sizes']} dtypes {c['input_dtypes']}, {c['state']}{where}")
    for r, c in (d.get("instead") or {}).items():
        if c is None:
            out.append(f"    rank {r} instead: nothing recorded (no dump, no trace of it)")
        else:
            seq = f" #{c['seq']}" if c["seq"] is not None else ""
            state = "completed" if c["done"] else f"{c['state']}, not completed"
            where = f"; called from {c['frame']}" if c.get("frame") else ""
            out.append(f"    rank {r} instead: last call {c['op']}{seq} on group {c['group_ranks']} ({state}){where}")
            if (w := c.get("at_dump")):
                peer = "" if w["peer"] is None else f" {'to' if w['op'] == 'send' else 'from'} {w['peer']}"
                what = f"blocked in {w['op']}{peer} on group {w['group_ranks']}" if w["op"] else "in no collective"
                out.append(f"    rank {r} at its dump ({w['why']}): {what}, in {w['frame'] or 'torch'}")
    return out


def render_hang(doc) -> str:
    d = doc["divergence"]
    out = [f"hang forensics from {doc['source'].replace('_', ' ')} of ranks {doc['ranks']} (explain: hang)"]
    if d is None:
        out.append("no divergence: every group's members issued the same calls")
    else:
        out.append("first divergence:")
        out += _divergence(d)
        if len(doc["divergences"]) > 1:
            out.append(f"later divergences ({len(doc['divergences']) - 1}, usually its consequence):")
            for later in doc["divergences"][1:]:
                out += _divergence(later)
    out += [f"note: {n}" for n in doc["notes"]]
    rows = [[r["rank"], str(r["group_ranks"]), r["pg_desc"] or "", r["op"], r["seq"]] for r in doc["last_completed"]]
    if rows:
        out += ["", "last completed collective per rank and group",
                table(["rank", "group", "desc", "op", "seq"], rows)]
    return "\n".join(out)
