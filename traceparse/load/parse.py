"""The per-file job: one trace file or Flight Recorder dump -> its summary, with the rank's tables written as its
Parquet (the parse, then everything that needs no other rank: ``traceparse.vocabulary.per_rank``). The local pool
(``traceparse.load.run``) and Ray tasks (``traceparse.load.ray_engine``) both run it."""

from traceparse.errors import TraceError


def parse_one(job) -> dict:
    """``job``: ``(path, out, sniff, kernel_rules)``: the file, the folder to write its tables in, whether it was found
    in a folder (then a file whose start shows no trace, or a stray pickle, is ``{"kind": "skipped", "file", "why"}``
    instead of an error), and the custom communication kernel rules (traceparse.tagging.comm_kernels). Returns the trace's summary (``traceparse.ingest.rank.parse_rank_file``) or
    ``{"kind": "flight_recorder", ...}`` for a dump."""
    from traceparse.ingest.flight_recorder import is_dump, read_dump
    from traceparse.ingest.rank import parse_rank_file
    from traceparse.load.inputs import DUMPS, not_a_trace
    from traceparse.load.run_identity import clock_of
    from traceparse.vocabulary.per_rank import prepare_rank

    path, out, sniff, kernel_rules = job
    try:
        if is_dump(path):  # a dump by its content, named or found in a folder: a refused one is an error
            return {"kind": "flight_recorder", **read_dump(path)}
        if (not sniff or path.suffix in DUMPS) and _pickled(path):  # named a dump, or a pickle in a folder
            try:
                return {"kind": "flight_recorder", **read_dump(path)}
            except TraceError as e:
                if not sniff:
                    raise
                return {"kind": "skipped", "file": path, "why": e.problem}  # a stray pickle in a folder
        if sniff and (why := not_a_trace(path)):
            return {"kind": "skipped", "file": path, "why": why}
        summary = parse_rank_file(path, out / "raw")
        summary["clock_offset_ns"], summary["clock_method"] = clock_of(summary)
        prepare_rank(out / "raw", out, summary, kernel_rules)
        summary["stage"] = str(out)
        return summary
    except TraceError:
        raise
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None


def _pickled(path) -> bool:
    from traceparse.ingest.flight_recorder import PICKLE

    try:
        with open(path, "rb") as f:
            return f.read(1) == PICKLE
    except OSError:
        return False
