"""The package's import graph, every import counted (function-level ones too), checked against its layers.

    python scripts/import_graph.py          # the graph by layer, then any cycle or upward import (exit 1 if any)

Each folder of the package is one stage of the pipeline; a module imports only from its own layer or
the layers before it (``LAYERS``, first to last), and ``render`` reads documents only. tests/test_layers.py
runs ``problems()``.
"""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# where each installed package's files are (pyproject.toml's package-dir)
PACKAGES = {"traceparse": ROOT / "traceparse", "traceparse.analyzers": ROOT / "analyzers"}
# first to last: a module may import its own layer and earlier ones
LAYERS = (
    ("foundation", ("traceparse.version", "traceparse.errors", "traceparse.axes", "traceparse.stats",
                    "traceparse.thresholds", "traceparse.rule_files", "traceparse.progress", "traceparse.output",
                    "traceparse.units", "traceparse.status", "traceparse.escape", "traceparse.bounds",
                    "traceparse.cache_dir", "traceparse.own_process")),
    ("ingest", ("traceparse.ingest",)),
    ("models", ("traceparse.models",)),
    ("store", ("traceparse.store",)),
    ("vocabulary", ("traceparse.vocabulary",)),
    ("tagging", ("traceparse.tagging",)),
    ("layout", ("traceparse.layout",)),
    ("load", ("traceparse.load",)),
    ("checks", ("traceparse.analyzers",)),
    ("document", ("traceparse.document",)),
    ("history", ("traceparse.history",)),
    ("whatif", ("traceparse.whatif",)),
    ("hang", ("traceparse.hang",)),
    ("render", ("traceparse.render",)),
    ("profiler", ("traceparse.profiler",)),
    ("entry", ("traceparse.cli", "traceparse")),
)
# layers a layer may not import although they come before it
FORBIDDEN = {"render": {"ingest", "store", "vocabulary", "tagging", "layout", "load", "checks", "history", "whatif"},
             "models": {"ingest"}, "profiler": {"store", "vocabulary", "tagging", "layout", "load", "checks",
                                                "document", "history", "whatif", "render"}}


def modules() -> dict:
    """{module name: (file, is a package)}."""
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            name = ".".join([pkg, *parts[:-1]] if is_pkg else [pkg, *parts])
            if name not in out or pkg != "traceparse":
                out[name] = (path, is_pkg)
    return out


def imports(name: str, path: Path, is_pkg: bool, known: dict) -> set:
    """The package's modules that ``name`` imports anywhere in its file."""
    here = name if is_pkg else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            # ``from pkg import sub`` imports the submodule; any other name comes from pkg itself
            subs = {f"{base}.{a.name}" for a in node.names} & known.keys()
            found |= subs
            if len(subs) < len(node.names):
                found.add(base)
    return {m for m in found if m in known and m != name}


def layer(name: str) -> int:
    best, at = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > best:
                best, at = len(p), i
    return at


def graph() -> dict:
    known = modules()
    return {n: imports(n, p, pkg, known) for n, (p, pkg) in known.items()}


def cycles(g: dict) -> list:
    """Every strongly connected group of more than one module (Tarjan), as sorted lists."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def problems() -> list[str]:
    g = graph()
    out = [f"module outside every layer: {n}" for n in sorted(g) if layer(n) is None]
    for a in sorted(g):
        for b in sorted(g[a]):
            la, lb = layer(a), layer(b)
            if la is None or lb is None:
                continue
            if lb > la:
                out.append(f"upward import: {a} ({LAYERS[la][0]}) imports {b} ({LAYERS[lb][0]})")
            elif LAYERS[lb][0] in FORBIDDEN.get(LAYERS[la][0], ()):
                out.append(f"forbidden import: {a} ({LAYERS[la][0]}) imports {b} ({LAYERS[lb][0]})")
    out += [f"import cycle: {' <-> '.join(c)}" for c in cycles(g)]
    return out


def main() -> int:
    g = graph()
    for i, (title, _) in enumerate(LAYERS):
        names = sorted(n for n in g if layer(n) == i)
        print(f"{title}:")
        for n in names:
            print(f"  {n} -> {', '.join(sorted(g[n])) or '-'}")
    found = problems()
    print("\n".join(found) if found else "no cycle, no upward or forbidden import")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
