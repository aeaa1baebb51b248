"""Text of ``traceparse hang``: the root cause first, then what it explains, contradictions between dumps, and every
rank's last completed collective per group with what its dump holds after it. What a dump names (a group's
description, an op, a frame) is shown by ``escape.terminal``: its control characters as visible escapes."""

from traceparse.hang.forensics import OUTCOMES
from traceparse.escape import terminal
from traceparse.render.text import table


def _group(d) -> str:
    dim = f", mesh dim {d['mesh_dim']}" if d.get("mesh_dim") else ""
    what = d.get("strategy") or "strategy unknown"
    if d.get("variant"):
        what += f" ({d['variant']})"
    return f"group {d['group_ranks']} ({_name(d)}{dim}; {what})"


def _name(d) -> str:
    """A group's description and name: two groups of the same ranks differ by these (``default_pg`` pg 0)."""
    desc, name = d.get("pg_desc"), d.get("pg_name")
    return terminal(f"{desc}, pg {name}" if desc and name is not None else str(desc or f"pg {name}"))


def _call(c) -> str:
    seq = f" #{c['seq']}" if c.get("seq") is not None else ""
    return f"{terminal(c['op'])}{seq} on group {c['group_ranks']} ({_name(c)})"


def _ranks(ranks, few: int = 8) -> str:
    """Ranks as runs (``0-33, 35-299``), the first ``few`` runs and how many more."""
    runs = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    text = ", ".join(f"{a}-{b}" if b > a + 1 else f"{a}, {b}" if b > a else f"{a}" for a, b in runs[:few])
    return text + (f" and {len(runs) - few} more runs" if len(runs) > few else "")


def _divergence(d) -> list[str]:
    seq = f" #{d['seq']}" if d["seq"] is not None else ""
    out = [f"  {d['kind']}: {terminal(d['op'])}{seq} on {_group(d)}"]
    if d.get("op_named_by"):
        out.append(f"    op: {terminal(d['op'])} (named by {terminal(d['op_named_by'])}; the dump says "
                   f"{terminal(d['op_recorded'])})")
    if d["missing"]:
        out.append(f"    entered: {d['entered']}; never entered: {d['missing']}"
                   + (f"; not known (no evidence): {d['unseen']}" if d.get("unseen") else ""))
    if d.get("why"):
        out.append(f"    {d['why']}")
    for e in d.get("explained_by") or ():
        out.append(f"    explained: rank {e['rank']} is blocked in {_call(e)} ({OUTCOMES[e['outcome']]}), which its "
                   "own earlier steps issue first")
    for e in d.get("never_reached") or ():
        out.append(f"    explained: rank {e['rank']} never reached it: it never issued {_call(e)} either, which its "
                   "own earlier steps issue first")
    for e in d.get("skipped") or ():
        out.append(f"    rank {e['rank']} skipped it: it went on to {_call(e)} ({OUTCOMES[e['outcome']]}), which its "
                   "own earlier steps issue after this one")
    for e in d.get("died_of") or ():
        out.append(f"    explained: rank {e['rank']} died of the {e['kind']} of {_call(e)}, the call it is missing from")
    for r, c in d["calls"].items():
        where = f"; called from {terminal(c['frame'])}" if c.get("frame") else ""
        peer = "" if c.get("peer") is None else f" {'to' if c['op'] == 'send' else 'from'} {c['peer']}"
        outcome = OUTCOMES.get(c.get("outcome"), c["state"])
        out.append(f"    rank {r}: {terminal(c['op'])}{peer} sizes {c['input_sizes']} dtypes {c['input_dtypes']}, {outcome}{where}")
    for r, c in (d.get("instead") or {}).items():
        if c is None:
            out.append(f"    rank {r} instead: nothing recorded (no dump, no trace of it)")
            continue
        where = f"; called from {terminal(c['frame'])}" if c.get("frame") else ""
        out.append(f"    rank {r} instead: last call {_call(c)} ({OUTCOMES.get(c['outcome'], c['state'])}){where}")
        blocked = [b for b in c.get("blocked_in") or () if (b["seq"], b["group_ranks"]) != (c["seq"], c["group_ranks"])
                   or b["op"] != c["op"]]
        if blocked:
            out.append(f"    rank {r} also holds, not completed: "
                       + "; ".join(f"{_call(b)} ({OUTCOMES[b['outcome']]})" for b in blocked))
        if (w := c.get("at_dump")):
            peer = "" if w["peer"] is None else f" {'to' if w['op'] == 'send' else 'from'} {w['peer']}"
            what = f"blocked in {w['op']}{peer} on group {w['group_ranks']}" if w["op"] else "in no collective"
            out.append(f"    rank {r} at its dump ({w['why']}): {what}, in {terminal(w['frame'] or 'torch')}")
    return out


def render_hang(doc) -> str:
    d = doc["divergence"]
    out = [f"hang forensics from {doc['source'].replace('_', ' ')} of ranks {doc['ranks']} (explain: hang)"]
    if d is None and doc.get("incomplete"):
        out.append("incomplete: no divergence in what was recorded, but groups some of whose members left no evidence "
                   "cannot be judged (below)"
                   + (" (and the dumps contradict each other, below)" if doc.get("contradictions") else ""))
    elif d is None:
        out.append("no divergence in what was recorded: every group's members issued the same calls"
                   + (" (but the dumps contradict each other, below)" if doc.get("contradictions") else "")
                   + (" (read the notes)" if doc["notes"] else ""))
    else:
        roots = [x for x in doc["divergences"] if x.get("root", True)]
        out.append("first divergence (root cause):" if d.get("root", True) else "first divergence:")
        out += _divergence(d)
        if len(roots) > 1:
            out.append(f"other divergences no other one explains ({len(roots) - 1}):")
            for x in roots[1:]:
                out += _divergence(x)
        rest = [x for x in doc["divergences"] if not x.get("root", True)]
        if rest:
            out.append(f"divergences they explain ({len(rest)}, the consequence):")
            for x in rest:
                lines = _divergence(x)
                if len(roots) > 1:  # which root cause it follows from
                    lines.insert(1, "    follows from: " + "; ".join(
                        f"{doc['divergences'][i]['kind']}: {_call(doc['divergences'][i])}" for i in x.get("roots") or ()))
                out += lines
    for c in doc.get("contradictions") or ():
        out.append(f"contradiction: {c['what']}: group {_name(c)}: "
                   + "; ".join(f"{who}: {ranks}" for who, ranks in c["declared"].items()))
    if (gone := doc.get("incomplete") or ()):
        out.append(f"cannot be judged ({len(gone)} group{'s' if len(gone) > 1 else ''}: members left no evidence):")
        for g in gone[:5]:
            out.append(f"  group of {g['members']} ranks ({_name(g)}): {g['why']}: ranks {_ranks(g['unseen'])}")
        if len(gone) > 5:
            out.append(f"  and {len(gone) - 5} more groups")
    out += [f"note: {n}" for n in doc["notes"]]
    rows = []
    for r in doc["last_completed"]:
        after = ", ".join(f"#{a['seq']} {OUTCOMES[a['outcome']].split(':')[0]}" for a in r.get("after") or ())
        rows.append([r["rank"], str(r["group_ranks"]), _name(r), r["op"], r["seq"], after])
    if rows:
        out += ["", "last completed collective per rank and group (then: the later calls its dump holds)",
                table(["rank", "group", "desc", "op", "seq", "then"], rows)]
    return terminal("\n".join(out), newlines=True)
