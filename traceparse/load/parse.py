"""The per-rank job: a batch of trace files or Flight Recorder dumps -> their summaries, with the ranks' tables
written as Parquet (each file parsed, then everything that needs no other rank: ``traceparse.vocabulary.per_rank``).
The local pool (``traceparse.load.run``) and Ray tasks (``traceparse.load.ray_engine``) both run it."""

from traceparse.errors import TraceError


def parse_batch(job, tables: bool = True) -> list[dict]:
    """``job``: ``(entries, stage, batch, kernel_rules)``: the files of a batch as ``(slot, path, sniff)`` (slot: the
    file's position among the load's files; sniff: whether it was found in a folder), the folder to write in, the
    batch's number and the custom communication kernel rules (traceparse.tagging.comm_kernels). Each file is parsed
    (``parse_file``), then (``tables``) the tables of the batch's ranks are written together (``tabulate``).
    Returns each file's result, in order."""
    from traceparse.vocabulary.per_rank import raw_folder

    entries, stage, _, _ = job
    results = [parse_file(path, raw_folder(stage, slot), sniff) for slot, path, sniff in entries]
    for (slot, _, _), r in zip(entries, results, strict=True):
        if "kind" not in r:  # a trace, not a dump or a skipped file
            r["slot"] = slot
    if tables:
        tabulate(job, results)
    return results


def tabulate(job, results: list[dict]):
    """The per-rank tables of the traces among ``results`` (``parse_batch``'s, of ``job``), written as the batch's
    Parquet (``per_rank.prepare_ranks``)."""
    from traceparse.vocabulary.per_rank import prepare_ranks

    _, stage, batch, kernel_rules = job
    ranks = [(r["slot"], r) for r in results if "kind" not in r]
    if ranks:
        prepare_ranks(stage, batch, ranks, kernel_rules)


def parse_file(path, out, sniff) -> dict:
    """One file: its summary with its tables staged in ``out`` (``traceparse.ingest.rank.parse_rank_file``) and its
    clock offset set, or ``{"kind": "flight_recorder", ...}`` for a dump, or (``sniff``: found in a folder) for a
    file whose start shows no trace, or a stray pickle, ``{"kind": "skipped", "file", "why"}`` instead of an
    error."""
    from traceparse.ingest.flight_recorder import is_dump, read_dump
    from traceparse.ingest.rank import parse_rank_file
    from traceparse.load.inputs import DUMPS, not_a_trace
    from traceparse.load.run_identity import clock_of

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
        summary = parse_rank_file(path, out)
        summary["clock_offset_ns"], summary["clock_method"] = clock_of(summary)
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
