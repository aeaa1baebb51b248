#!/usr/bin/env python
"""Fetch the public GPU traces the tests and benches read, for a clone without ``../shared/traces`` beside it.

Each file of ``fixtures/public_traces.toml`` is downloaded from its public repository at the pinned commit, its
SHA-256 checked against the manifest (a mismatch keeps nothing), gzipped where the repository serves plain JSON,
and written under DIR with the manifest's name. Files already there with the right content are kept. Then:

  TRACEPARSE_PUBLIC_TRACES=DIR python -m pytest -q

  python scripts/fetch_public_traces.py DIR              # every trace
  python scripts/fetch_public_traces.py DIR --only hta/  # those whose name contains hta/

Needs the network; neither the tests nor CI run it.
"""

import argparse
import gzip
import hashlib
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fixtures import public_traces  # noqa: E402


def url(t: dict) -> str:
    """The file ``t`` of the manifest, raw, from its repository at its commit."""
    return f"https://github.com/{t['repo']}/raw/{t['commit']}/{t['path']}"


def content_digest(data: bytes, gzipped_here: bool) -> str:
    """The SHA-256 the manifest holds: of the served file, or of the JSON inside a file gzipped here."""
    return hashlib.sha256(gzip.decompress(data) if gzipped_here else data).hexdigest()


def have(target: Path, t: dict) -> bool:
    """``target`` is already the manifest's file."""
    return target.is_file() and content_digest(target.read_bytes(), t.get("gzip", False)) == t["sha256"]


def fetch(t: dict, dest: Path, timeout: float = 120) -> str:
    """Download the manifest's file ``t`` under ``dest``; the line that says what happened."""
    target = dest / t["file"]
    if have(target, t):
        return f"kept     {t['file']}"
    with urllib.request.urlopen(url(t), timeout=timeout) as r:
        data = r.read()
    got = hashlib.sha256(data).hexdigest()
    if got != t["sha256"]:
        raise ValueError(f"{t['file']}: {url(t)} has SHA-256 {got}, the manifest says {t['sha256']}")
    if t.get("gzip"):
        data = gzip.compress(data, mtime=0)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as f:
        f.write(data)
    Path(f.name).replace(target)
    return f"fetched  {t['file']} ({len(data):,} bytes)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="where to put them (the layout of ../shared/traces)")
    ap.add_argument("--only", default="", help="fetch the traces whose name contains this")
    args = ap.parse_args(argv)
    failed = 0
    for t in public_traces.manifest()["trace"]:
        if args.only not in t["file"]:
            continue
        try:
            print(fetch(t, args.dir))
        except (OSError, ValueError) as e:
            failed += 1
            print(f"failed   {t['file']}: {e}", file=sys.stderr)
    if not failed:
        print(f"done: TRACEPARSE_PUBLIC_TRACES={args.dir.resolve()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
