#!/usr/bin/env python
"""Every bundled run's analyze document kept in a folder, and compared field by field with documents kept from
another tree: how a refactor shows it moved no number a user reads (the documents themselves are checked section by
section against independent expectations by tests/test_document_tables.py).

For each fixture run (``fixtures/runs/*``) and each public trace (``fixtures/public_traces.py``: read from
``../shared/traces``, never committed; left out when absent), the analyze document (``traceparse analyze
--no-cache --format json``), with the repository's folder written as ``<root>`` and the public traces' as
``<traces>`` (so two checkouts compare equal), as canonical JSON.

  git worktree add /tmp/before HEAD~1 && (cd /tmp/before && python scripts/documents.py --write /tmp/docs)
  python scripts/documents.py --compare /tmp/docs     # each value that moved, by its path; exit 1 if any did
  python scripts/documents.py --only ddp2 tp2 ...     # some runs
  python scripts/documents.py --without gpu ...       # a top-level section left out first (one a change adds)
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from fixtures import public_traces  # noqa: E402


def runs() -> dict[str, Path]:
    """{name: path}: every fixture run folder, then every public trace (present or not)."""
    out = {f"runs/{p.name}": p for p in sorted((ROOT / "fixtures" / "runs").iterdir()) if p.is_dir()}
    for rel in sorted(public_traces.names()):
        out[f"public/{rel}"] = public_traces.path(rel)
    return out


def canonical(doc: dict) -> str:
    """The document as canonical JSON text, with the public traces' folder as ``<traces>`` and the repository's as
    ``<root>``."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    traces = public_traces.folder()
    if traces is not None:
        text = text.replace(json.dumps(str(traces))[1:-1], "<traces>")
    return text.replace(json.dumps(str(ROOT))[1:-1], "<root>")


def document(path: Path, without=()) -> str:
    """The run's analyze document as canonical text, ``without`` its top-level sections named."""
    from traceparse.document import analyze

    doc = analyze([path], use_cache=False)
    for key in without:
        doc.pop(key, None)
    return canonical(doc)


def kept(name: str, folder: Path) -> Path:
    """Where the document of ``name`` is kept in ``folder``: ``<name with / as __>.json``."""
    return folder / (name.replace("/", "__") + ".json")


def differences(old, new, path="", limit=12) -> list[str]:
    """Each value that differs between two documents (parsed JSON), by its path: ``/checks/bubble/measured: 0.8 ->
    0.7``; at most ``limit``."""
    out = []

    def walk(a, b, at):
        if len(out) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b), key=str):
                if k not in a or k not in b:
                    out.append(f"{at}/{k}: {'gone' if k in a else 'new'}")
                else:
                    walk(a[k], b[k], f"{at}/{k}")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{at}[{i}]")
        elif a != b:
            out.append(f"{at or '/'}: {str(a)[:80]} -> {str(b)[:80]}")

    walk(old, new, path)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", type=Path, help="keep each document in this folder")
    what.add_argument("--compare", type=Path, help="compare each document with the one kept in this folder")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--without", nargs="*", default=(), help="top-level sections to leave out")
    args = ap.parse_args(argv)
    moved = 0
    for name, path in runs().items():
        if args.only and not any(o in name for o in args.only):
            continue
        if not path.exists():
            print(f"{name}: skipped, {public_traces.missing(name.removeprefix('public/'))}", file=sys.stderr)
            continue
        text = document(path, args.without)
        if args.write:
            args.write.mkdir(parents=True, exist_ok=True)
            kept(name, args.write).write_text(text)
            print(f"{name}: kept", file=sys.stderr)
            continue
        before = kept(name, args.compare)
        if not before.exists():
            print(f"{name}: nothing kept in {args.compare}")
            continue
        found = differences(json.loads(before.read_text()), json.loads(text))
        moved += bool(found)
        print(f"{name}: " + ("unchanged" if not found else "changed" + "".join(f"\n  {m}" for m in found)))
    if args.compare:
        print(f"{moved} document(s) changed")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
