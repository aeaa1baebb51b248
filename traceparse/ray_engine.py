"""Per-rank parsing as Ray tasks (``--engine ray``; the ``ray`` extra).

Each file is parsed by one task, ``traceparse.load._parse_one``, where a Ray worker runs it: it writes the rank's
Parquet into the staging folder and returns the rank's small summary; the driver then builds the store from the
summaries and the staged Parquet, as with the local pool. The staging folder must be readable and writable by
every worker and the driver: on one machine, the default temporary folder; on a cluster, a shared path given
with ``--stage``. A task whose worker dies (killed, out of memory, a lost node) is run again by Ray
(``MAX_RETRIES``); a file that is bad input fails the load with its one-line error, as with the local pool.
"""

from __future__ import annotations

import contextlib
import sys

MAX_RETRIES = 3


def parse_on_ray(jobs: list, address: str | None, report) -> list:
    """The summaries of ``jobs`` (``(path, out)`` pairs) in their order; ``report(i)`` as each finishes."""
    try:
        import ray
    except ImportError:
        from .errors import TraceError

        raise TraceError("--engine ray", "Ray is not installed (pip install 'traceparse[ray]')") from None
    with contextlib.redirect_stdout(sys.stderr):  # Ray's notices (a worker died...) stay off the document
        return _run(ray, jobs, address, report)


def _run(ray, jobs, address, report):
    from .errors import TraceError
    from .load import _parse_one

    started_here = not ray.is_initialized()
    if started_here:
        _reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR", configure_logging=False)
        except ConnectionError as e:
            raise TraceError(address or "auto", f"no Ray cluster to connect to: {str(e).splitlines()[0]}") from None
    refs = []
    try:
        task = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(_parse_one)
        refs += [task.remote(job) for job in jobs]
        index = {ref: i for i, ref in enumerate(refs)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except ray.exceptions.RayTaskError as e:
                cause = getattr(e, "cause", None)
                raise (cause if isinstance(cause, TraceError) else e) from None
            report(index[done[0]])
        return ray.get(refs)
    except BaseException:
        for ref in refs:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started_here:
            ray.shutdown()


def _reachable(address: str | None) -> None:
    """A host:port (or ray://host:port) that accepts no connection is refused at once (Ray itself would retry
    for minutes); ``auto`` and None are left to Ray."""
    import socket

    from .errors import TraceError

    if not address or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except (OSError, ValueError) as e:
        raise TraceError(address, f"no Ray cluster to connect to: {e}") from None
