"""Turn the user's paths, globs and folders into the list of trace files."""

import glob
import gzip
import zlib
from pathlib import Path

from .errors import TraceError
from .ingest.flight_recorder import INFLIGHT, is_dump

SUFFIXES = (".json", ".json.gz")
DUMPS = (".pkl", ".pickle")  # Flight Recorder dumps (JSON ones end in .json)
PEEK = 4 << 20


def not_a_trace(p: Path) -> str | None:
    """Why a file found in a folder is not taken as a trace (a folder may hold configs, results,
    empty files), or None when its start shows trace events."""
    try:
        with (gzip.open(p, "rb") if p.name.endswith(".gz") else open(p, "rb")) as f:
            head = f.read(PEEK)
    except (OSError, EOFError, zlib.error):
        return None  # unreadable: let loading report it
    if not head.strip():
        return "empty file"
    if b'"traceEvents"' in head or b'"ph"' in head:
        return None
    return "no trace events in its first 4 MB"


def is_trace_name(p: Path) -> bool:
    return p.name.endswith(SUFFIXES)


def expand_inputs(args) -> tuple[list[Path], list[tuple[Path, str]]]:
    """(the trace files named by ``args``, [(file, why skipped)] for files in folders that are not traces)."""
    found, skipped = [], []
    for arg in args:
        if not str(arg).strip():
            raise TraceError('""', "empty path argument")
        p = Path(arg)
        if p.is_dir():
            for q in sorted(q for q in p.rglob("*") if q.is_file() and (is_trace_name(q) or q.suffix in DUMPS)
                            and not q.name.endswith(INFLIGHT)):  # read with its dump
                why = None if is_dump(q) else not_a_trace(q)
                if why:
                    skipped.append((q.resolve(), why))
                else:
                    found.append(q)
        elif p.exists():
            found.append(p)
        elif glob.has_magic(str(arg)):
            matches = sorted(Path(m) for m in glob.glob(str(arg), recursive=True))
            found += [m for m in matches if m.is_file()]
            if not matches:
                raise TraceError(arg, "no file matches this pattern")
        else:
            raise TraceError(arg, "no such file or directory")
    unique = list(dict.fromkeys(p.resolve() for p in found if not p.name.endswith(INFLIGHT)))
    if not unique:
        what = "no trace files (*.json, *.json.gz) or Flight Recorder dumps (*.pkl) found"
        if skipped:
            what += f"; skipped {len(skipped)}: " + ", ".join(f"{q.name} ({why})" for q, why in skipped[:3])
        raise TraceError(" ".join(map(str, args)) or None, what)
    for p in unique:
        if not p.is_file():
            raise TraceError(p, "not a regular file")
    return unique, skipped
