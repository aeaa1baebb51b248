"""Turn the user's paths, globs and folders into the list of trace files."""

import glob
from pathlib import Path

from .errors import TraceError

SUFFIXES = (".json", ".json.gz")


def is_trace_name(p: Path) -> bool:
    return p.name.endswith(SUFFIXES)


def expand_inputs(args) -> list[Path]:
    found = []
    for arg in args:
        p = Path(arg)
        if p.is_dir():
            found += sorted(q for q in p.rglob("*") if q.is_file() and is_trace_name(q))
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
