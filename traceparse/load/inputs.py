"""Turn the user's paths, globs and folders into the list of trace files."""

import glob
import gzip
import json
import zlib
from pathlib import Path

from traceparse.errors import TraceError
from traceparse.ingest.flight_recorder import INFLIGHT, is_dump

SUFFIXES = (".json", ".json.gz")
DUMPS = (".pkl", ".pickle")  # Flight Recorder dumps by name; any other file of a folder is one when its content says so
PEEK = 4 << 20
OTHER_JSON = "a JSON document without trace events"  # a config or results beside the traces: skipped unsaid


def not_a_trace(p: Path) -> str | None:
    """Why a file found in a folder is not taken as a trace (a folder may hold configs, results,
    empty files), or None when its start shows trace events. ``OTHER_JSON`` when the whole file was read and is
    a JSON document without trace events (a ``truth.json``, a config): evidently no trace, so skipped without a
    load issue; an empty file, one that is not JSON (a trace cut short) or one longer than was read is said."""
    try:
        with (gzip.open(p, "rb") if p.name.endswith(".gz") else open(p, "rb")) as f:
            head = f.read(PEEK)
            whole = not f.read(1)
    except (OSError, EOFError, zlib.error):
        return None  # unreadable: let loading report it
    if not head.strip():
        return "empty file"
    if b'"traceEvents"' in head or b'"ph"' in head:
        return None
    if whole and _is_json(head):
        return OTHER_JSON
    return "no trace events in its first 4 MB"


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, RecursionError):
        return False
    return True


def is_trace_name(p: Path) -> bool:
    return p.name.endswith(SUFFIXES)


def in_folder(q: Path) -> bool:
    """Whether a file found in a folder is a candidate: a trace's name (its start is checked where it is parsed,
    ``not_a_trace``), a dump's suffix, or, whatever its name, a Flight Recorder dump's content (torch names its
    dumps ``TORCH_FR_DUMP_TEMP_FILE`` + rank, ``nccl_trace_rank_0``, with no suffix); not an in-flight record
    (read with its dump)."""
    if not q.is_file() or q.name.endswith(INFLIGHT):
        return False
    return is_trace_name(q) or q.suffix in DUMPS or is_dump(q)


def expand_inputs(args) -> tuple[list[Path], set[Path]]:
    """(the candidate files named by ``args``, those of them found in folders). A file found in a folder is
    taken when it is a Flight Recorder dump or its start shows trace events (``not_a_trace``, checked where
    it is parsed, so that each file is opened by one worker); a file named by the user always is."""
    found, in_folders = [], set()
    for arg in args:
        if not str(arg).strip():
            raise TraceError('""', "empty path argument")
        p = Path(arg)
        if p.is_dir():
            listed = sorted(q for q in p.rglob("*") if in_folder(q))
            found += listed
            in_folders.update(q.resolve() for q in listed)
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
        raise no_trace_files(args, [])
    for p in unique:
        if not p.is_file():
            raise TraceError(p, "not a regular file")
    named = {p.resolve() for p in found if p.resolve() not in in_folders}
    return unique, in_folders - named


def folders_read(args, read: list[Path], skipped: list[tuple[Path, str]]) -> list[tuple]:
    """A load issue (file, severity, what, count) for each folder of ``args`` from which nothing was read (its
    files were all skipped, or it holds none that could be a trace or a dump): a path the user gave that yields
    nothing is said, never passed over in silence."""
    read = [Path(f).resolve() for f in read]
    out = []
    for arg in dict.fromkeys(str(a) for a in args):
        d = Path(arg)
        if not d.is_dir():
            continue
        d = d.resolve()
        if any(d in f.parents for f in read):
            continue
        mine = [(q, why) for q, why in skipped if d in Path(q).resolve().parents]
        what = ("nothing read from this folder: no trace (*.json, *.json.gz) or Flight Recorder dump (a pickle or "
                "JSON of torch's dump, whatever its name) in it")
        if mine:
            what += f"; skipped {len(mine)}: " + ", ".join(f"{Path(q).name} ({why})" for q, why in mine[:3])
        out.append((str(d), "warning", what, 1))
    return out


def no_trace_files(args, skipped: list[tuple[Path, str]]) -> TraceError:
    """The error of inputs that hold no trace: ``skipped`` are the files of folders that were not traces."""
    what = ("no trace files (*.json, *.json.gz) or Flight Recorder dumps (a pickle or JSON of torch's dump, "
            "whatever its name: nccl_trace_rank_0, rank_0, fr_rank0.pkl) found")
    if skipped:
        what += f"; skipped {len(skipped)}: " + ", ".join(f"{q.name} ({why})" for q, why in skipped[:3])
    return TraceError(" ".join(map(str, args)) or None, what)
