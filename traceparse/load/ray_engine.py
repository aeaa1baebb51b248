"""Per-rank parsing as Ray tasks (``--engine ray``; the ``ray`` extra).

Each batch of files (``traceparse.load.run.batches``) is parsed by one task, ``traceparse.load.parse.parse_batch``,
where a Ray worker runs it: it writes the ranks' Parquet into the staging folder and returns their small summaries;
the driver then builds the store from the summaries and the Parquet, as with the local pool. The staging folder
must be readable and writable by every worker and the driver: on one machine, beside the store; on a cluster, a
shared path given with ``--stage``. A task whose worker dies (killed, out of memory, a lost node) is run again by Ray
(``MAX_RETRIES``); a file that is bad input fails the load with its one-line error, as with the local pool.

Where Ray runs: the cluster at the address given (``host:port``, ``ray://host:port``, ``auto``; else
``RAY_ADDRESS``), which must answer as Ray within ``CONNECT_S``; or, with none, a fresh Ray instance of this
machine, in a temporary folder of its own that is removed after the load (after a killed load, by the next one:
``load.remove_stale_leftovers``), with a token made for it rather than written to ``~/.ray``. Every wait is
bounded: the tasks by ``TRACEPARSE_RAY_TIMEOUT`` seconds in all (``TASKS_S`` by default).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

MAX_RETRIES = 3
CONNECT_S = 10  # for an address to answer as Ray does (gRPC, over HTTP/2)
TASKS_S = 24 * 3600  # for all the tasks, unless TRACEPARSE_RAY_TIMEOUT says otherwise
LOCAL = "--engine ray"  # names the local instance in errors
# an HTTP/2 client's preface and an empty SETTINGS frame: a gRPC server answers with its own SETTINGS frame
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
RAY_LOG_LINE = re.compile(rb"^\[[^\]]*\b[WEF] \d+ \d+\] (?:\(\w+\) )?\S+:\d+: (.+)$", re.M)


def parse_on_ray(jobs: list, address: str | None, report) -> list:
    """The results of ``jobs`` (``traceparse.load.parse.parse_batch``'s) in their order; ``report(i)`` as each
    finishes."""
    from traceparse.errors import TraceError

    if importlib.util.find_spec("ray") is None:
        raise TraceError(LOCAL, "Ray is not installed (pip install 'traceparse[ray]')")
    address = address or os.environ.get("RAY_ADDRESS") or None
    limit = _tasks_limit()
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():  # the caller's own Ray
        with contextlib.redirect_stdout(sys.stderr):
            return _run(ray, jobs, address or LOCAL, report, limit)
    # an address is checked before Ray is imported, which alone takes seconds
    target = address if address in (None, "local", "auto") else _answering(address, address)
    import ray

    if address == "auto":
        target = _answering(address, _found())
    with contextlib.redirect_stdout(sys.stderr), _ray_for_the_load(ray, address, target) as where:
        return _run(ray, jobs, where, report, limit)  # Ray's notices (a worker died...) stay off the document


@contextlib.contextmanager
def _ray_for_the_load(ray, address, target):
    """Ray initialized, and shut down after the load: connected to ``target``, or a local instance started."""
    folder = None
    if address in (None, "local"):
        folder = _ray_temp_dir()
        env = {} if _token_available() else {"RAY_AUTH_TOKEN": secrets.token_hex(32)}
        # tried twice: on a busy machine Ray's agents can miss the 15 s its raylet gives them to start (a Ray
        # issue, ray-project/ray#65983), which fails the start after a minute
        init = {"address": "local", "_temp_dir": folder, "include_dashboard": False}
        where, problem = LOCAL, "could not start Ray here"
    else:
        host = _host_port(target)[0]
        # A cluster of this machine gets this machine's token, as Ray gives it to one it finds itself (auto):
        # ray start turns token authentication on whenever one exists (~/.ray/auth_token, ...).
        own = "RAY_AUTH_MODE" not in os.environ and _token_available() and _this_host(host)
        env = {"RAY_AUTH_MODE": "token"} if own else {}
        init = {"address": target}
        where, problem = address, "no Ray cluster to connect to"
    try:
        with _environ(**env):
            try:
                _init(ray, where, problem, attempts=2 if folder else 1, **init)
                yield where
            finally:
                ray.shutdown()
    finally:
        if folder:
            _remove(folder)


def _run(ray, jobs, where, report, limit):
    from traceparse.errors import TraceError
    from traceparse.load.parse import parse_batch

    deadline = time.monotonic() + limit
    refs = []
    try:
        task = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(parse_batch)
        refs += [task.remote(job) for job in jobs]
        index = {ref: i for i, ref in enumerate(refs)}
        pending = list(refs)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TraceError(where, f"{len(pending)} of {len(refs)} Ray tasks not done after {limit:g} s "
                                 "(TRACEPARSE_RAY_TIMEOUT): are the cluster's nodes up, with CPUs free?")
            done, pending = ray.wait(pending, num_returns=1, timeout=left)
            for ref in done:
                try:
                    ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    cause = getattr(e, "cause", None)
                    raise (cause if isinstance(cause, TraceError) else e) from None
                report(index[ref])
        return ray.get(refs)
    except BaseException:
        for ref in refs:
            with contextlib.suppress(Exception):  # a task already ended: the load's own error is the one to tell
                ray.cancel(ref, force=True)
        raise


def _tasks_limit() -> float:
    """Seconds all the tasks may take: TRACEPARSE_RAY_TIMEOUT, else ``TASKS_S``."""
    from traceparse.errors import TraceError

    text = os.environ.get("TRACEPARSE_RAY_TIMEOUT") or str(TASKS_S)
    try:
        limit = float(text)
    except ValueError:
        limit = math.nan
    if not 0 <= limit < math.inf:
        raise TraceError("TRACEPARSE_RAY_TIMEOUT", f"not a number of seconds: {text!r}")
    return limit


def _init(ray, where, problem, attempts=1, **kwargs):
    """``ray.init(**kwargs)``, tried up to ``attempts`` times; its failure is one line naming ``where``. What Ray
    prints on stderr meanwhile (C++ warnings, repeated while it retries) is held back; its last warning explains
    a failure."""
    from traceparse.errors import TraceError

    with tempfile.TemporaryFile() as held:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        try:
            for _ in range(attempts):
                try:
                    ray.init(log_to_driver=False, logging_level="ERROR", configure_logging=False, **kwargs)
                    return
                except Exception as e:  # ConnectionError, RuntimeError, or a plain Exception when a start times out
                    failure = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    ray.shutdown()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        held.seek(0)
        warnings = RAY_LOG_LINE.findall(held.read())
    why = f" ({warnings[-1].decode(errors='replace').strip()})" if warnings else ""
    raise TraceError(where, f"{problem}: {failure}{why}")


def _found() -> str:
    """The address ``auto`` stands for, found as Ray finds it (RAY_ADDRESS, the cluster last started here with
    ``ray start``, a running one)."""
    from ray._private.services import canonicalize_bootstrap_address_or_die

    from traceparse.errors import TraceError

    try:
        return canonicalize_bootstrap_address_or_die("auto")
    except (ConnectionError, ValueError) as e:
        raise TraceError("auto", f"no Ray cluster to connect to: {e}") from None


def _answering(address: str, target: str) -> str:
    """``target`` (what ``address`` stands for), once it answers as Ray does, within seconds: where nothing
    listens, or something else does (a web server...), Ray itself would retry for as long as it runs."""
    from traceparse.errors import TraceError

    host, port = _host_port(target)
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=CONNECT_S) as s:
            s.sendall(H2_PREFACE)
            head = b""
            while len(head) < 4 and (more := s.recv(64)):
                head += more
    except ValueError:
        raise TraceError(address, "not a Ray address (host:port, ray://host:port or auto)") from None
    except OSError as e:
        raise TraceError(address, f"no Ray cluster to connect to: {e.strerror or e}") from None
    tls = os.environ.get("RAY_USE_TLS", "0").lower() not in ("0", "false")
    if not tls and head[3:4] != b"\x04":  # a server's first frame is its SETTINGS (type 4)
        raise TraceError(address, f"no Ray cluster to connect to: {target} answers, but not as Ray (gRPC) does")
    return target


def _host_port(target: str) -> tuple[str, str]:
    """``host:port``, ``ray://host:port`` or ``[v6]:port`` -> (host without brackets, port as written)."""
    host, _, port = target.removeprefix("ray://").rpartition(":")
    return host.strip("[]"), port


def _this_host(host: str) -> bool:
    """Whether ``host`` is this machine: loopback, or an address of its own (one a socket can bind to)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, _, _, _, sockaddr in infos:
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((sockaddr[0], 0))
            return True
    return False


def _token_available() -> bool:
    """Whether Ray would find an authentication token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token)."""
    return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")) or (
        Path.home() / ".ray" / "auth_token"
    ).is_file()


@contextlib.contextmanager
def _environ(**values):
    """``values`` in os.environ for the load (and Ray's cached configuration reading them), restored after."""
    from ray._raylet import Config

    if not values:
        yield
        return
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    Config.initialize("")
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        Config.initialize("")


def _ray_temp_dir() -> str:
    """A new folder for the local instance's files, named like the load's other temporary folders
    (traceparse-<pid>-*). Ray makes AF_UNIX sockets in it, <it>/session_<time>_<pid>/sockets/plasma_store, whose
    path must fit in 107 bytes: when the temporary folder's path is too long for that, the folder is made in /tmp
    (where remove_stale_leftovers looks too)."""
    pid = os.getpid()
    root = tempfile.gettempdir()
    probe = f"{root}/traceparse-{pid}-abcdefgh/session_2000-01-01_00-00-00_000000_{pid}/sockets/plasma_store"
    if len(os.fsencode(probe)) > 107:
        root = "/tmp"
    return tempfile.mkdtemp(prefix=f"traceparse-{pid}-", dir=root)


def _remove(folder: str) -> None:
    """Remove ``folder``, waiting a little for Ray's processes, which may still write logs as they end."""
    for _ in range(50):
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.exists(folder):
            return
        time.sleep(0.1)
