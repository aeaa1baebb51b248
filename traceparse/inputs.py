"""Turn the user's paths, globs and folders into the list of trace files."""

import glob
import gzip
import zlib
from pathlib import Path

from .errors import TraceError

SUFFIXES = (".json", ".json.gz")
PEEK = 4 << 20


def looks_like_trace(p: Path) -> bool:
    """A folder may hold other JSON (configs, results): keep files whose start shows trace events."""
    try:
        with (gzip.open(p, "rb") if p.name.endswith(".gz") else open(p, "rb")) as f:
            head = f.read(PEEK)
    except (OSError, EOFError, zlib.error):
        return True  # unreadable: let loading report it
    return b'"traceEvents"' in head or b'"ph"' in head or not head.strip()


def is_trace_name(p: Path) -> bool:
    return p.name.endswith(SUFFIXES)


def expand_inputs(args) -> list[Path]:
    found = []
    for arg in args:
        p = Path(arg)
        if p.is_dir():
            found += sorted(q for q in p.rglob("*") if q.is_file() and is_trace_name(q) and looks_like_trace(q))
        elif p.exists():
            found.append(p)
        elif glob.has_magic(str(arg)):
            matches = sorted(Path(m) for m in glob.glob(str(arg), recursive=True))
            found += [m for m in matches if m.is_file()]
            if not matches:
                raise TraceError(arg, "no file matches this pattern")
        else:
            raise TraceError(arg, "no such file or directory")
    unique = list(dict.fromkeys(p.resolve() for p in found))
    if not unique:
        raise TraceError(" ".join(map(str, args)) or None, "no trace files (*.json, *.json.gz) found")
    for p in unique:
        if not p.is_file():
            raise TraceError(p, "not a regular file")
    return unique
