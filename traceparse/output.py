"""Where a command's ``-o FILE`` goes: checked before any work, written whole, never over what it was given.

- ``check_output(path, inputs)`` refuses, before anything is loaded, a FILE that is a folder, whose folder
  does not exist, or that is one of the command's own inputs (a trace, the ``--db`` store, the history).
- ``json_text(value)`` is every command's ``--format json``: strict JSON, a number that is not finite (NaN, an
  infinity) written as ``null``, never as ``NaN`` or ``Infinity``, which JSON does not have.
- ``write_output(path, text)`` writes a regular file (or a new one) whole: into a temporary file beside the
  file a symbolic link points to, then renamed over it, keeping the old file's permissions (a link stays a
  link). Anything that is not a regular file (``/dev/null``, a FIFO, a terminal, ``/dev/stdout``) is written
  through, as a shell's ``>`` would: it is never replaced.
"""

import json
import math
import os
import stat
import tempfile
from pathlib import Path

from traceparse.errors import TraceError


def _regular_or_missing(path: Path) -> bool:
    """Whether ``path`` (symbolic links followed) is a regular file or names nothing yet."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True
    except OSError as e:
        raise TraceError(path, f"cannot write there ({e.strerror})") from None


def _descriptor(path: Path) -> bool:
    """A path that names an open descriptor (``/dev/stdout``, ``/dev/fd/1``, ``/proc/self/fd/1``): written
    through even when it leads to a regular file, whose open descriptor the caller holds."""
    real = os.path.realpath(path)
    return real.startswith(("/proc/", "/dev/")) or os.path.abspath(path).startswith(("/proc/", "/dev/fd/"))


def same_file(a, b) -> bool:
    """Whether paths ``a`` and ``b`` name one file (links followed; by path when either does not exist)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output(path, inputs=()) -> Path:
    """``path`` as a Path, or TraceError when ``-o`` cannot or must not be written: a folder, a folder that does
    not exist, or the same file as one of ``inputs`` (trace files, a store, a history: written over, they would
    be lost)."""
    target = Path(path)
    try:
        if target.is_dir():
            raise TraceError(target, "is a directory; -o names the file to write")
        if not Path(os.path.realpath(target)).parent.is_dir():
            raise TraceError(target, "its folder does not exist")
    except (OSError, ValueError) as e:  # a name longer than the system allows, a NUL byte
        raise TraceError(target, f"cannot write there ({getattr(e, 'strerror', None) or e})") from None
    for given in inputs:
        if given is not None and same_file(target, given):
            raise TraceError(target, "is one of this command's inputs (a trace, the store or the history); -o names "
                             "the report's own file; nothing was written")
    return target


def write_output(path, text: str):
    """Write ``text`` to ``path``: a regular file whole or not at all, anything else through (see above)."""
    target = check_output(path)
    if not _regular_or_missing(target) or _descriptor(target):
        try:
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise TraceError(target, f"cannot write there ({e.strerror or e})") from None
        return
    real = Path(os.path.realpath(target))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", dir=real.parent)
    except OSError as e:
        raise TraceError(target, f"cannot write there ({e.strerror})") from None
    try:
        try:
            mode = stat.S_IMODE(os.stat(real).st_mode)  # the file it replaces keeps its permissions
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask  # as an ordinary new file, not mkstemp's 0600
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, real)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise TraceError(target, f"cannot write there ({e.strerror or e})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def finite(value):
    """``value`` with every float that is not finite (NaN, +-inf) as None, through dicts, lists and tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def json_text(value, indent=2) -> str:
    """``value`` as strict JSON (``finite``: null for what is not a finite number); other values JSON does not know
    (dates, decimals) as their text. The text is ``json.dumps``'s with ``indent``, written by its C encoder, which
    takes no indent, then indented by msgspec's (the same text, a fifth of the time for a large document)."""
    try:
        text = json.dumps(value, default=str, allow_nan=False)
    except ValueError:  # a float that is not finite
        text = json.dumps(finite(value), default=str, allow_nan=False)
    if indent is None:
        return text
    import msgspec

    return msgspec.json.format(text, indent=indent)
