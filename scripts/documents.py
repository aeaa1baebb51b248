#!/usr/bin/env python
"""The analyze document of every bundled run, as a digest: proof that a change to how runs are loaded leaves
every number the user reads unchanged.

For each fixture run (``fixtures/runs/*``) and each public trace (``fixtures/public_traces.py``: read from
``../shared/traces``, never committed; left out when absent), the analyze document (``traceparse analyze
--no-cache --format json``) with the repository's folder written as ``<root>`` and the public traces' as
``<traces>`` is reduced to a SHA-256 of its canonical JSON. ``tests/documents.json`` holds the recorded digests;
``tests/test_documents.py`` computes them again and compares. ``--without KEY`` leaves a top-level section out of
each document first: a change that adds a section checks that everything else is unchanged before writing again.

  python scripts/documents.py                    # print {name: digest} for every run
  python scripts/documents.py --write FILE       # write them (the documents themselves beside, FILE.d/; those of
                                                 # public traces are derived from them: .gitignore keeps them out)
  python scripts/documents.py --only ddp2 tp2    # some runs
"""

import argparse
import hashlib
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


def digest(path: Path, without=()) -> tuple[str, str]:
    from traceparse.document import analyze

    doc = analyze([path], use_cache=False)
    for key in without:
        doc.pop(key, None)
    text = canonical(doc)
    return hashlib.sha256(text.encode()).hexdigest(), text


def kept(name: str, file: Path) -> Path:
    """Where ``--write FILE`` keeps the document of ``name``: ``FILE.d/<name with / as __>.json``."""
    return file.with_name(file.name + ".d") / (name.replace("/", "__") + ".json")


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
    ap.add_argument("--write", type=Path)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--without", nargs="*", default=(), help="top-level sections to leave out")
    args = ap.parse_args(argv)
    found = {}
    for name, path in runs().items():
        if args.only and not any(o in name for o in args.only):
            continue
        if not path.exists():
            print(f"{name}: skipped, {public_traces.missing(name.removeprefix('public/'))}", file=sys.stderr)
            continue
        found[name], text = digest(path, args.without)
        if args.write:
            keep = kept(name, args.write)
            keep.parent.mkdir(parents=True, exist_ok=True)
            keep.write_text(text)
        print(name, found[name], file=sys.stderr)
    if args.write:
        args.write.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    else:
        print(json.dumps(found, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
