"""The ``traceparse`` command: argument parsing, library calls, exit codes.

Exit codes: 0 success, 1 a --fail-on threshold breached, 2 bad input or usage, 3 an internal error
(a bug: one line on stderr, the traceback with ``traceparse --debug``), 75 a run history stayed locked by
other writers for history.WAIT_S seconds (nothing written: try again).
"""

import errno
import math
import sys
import traceback
from contextlib import closing
from pathlib import Path

import click

from traceparse.version import __version__
from traceparse.errors import TraceError, shown
from traceparse.own_process import claim
from traceparse.output import json_text


def _open(paths, db, no_cache, allow_mixed, progress=None, full_access=False):
    """The store of ``paths`` (loaded) or ``db``, read-only and confined to it (a store is untrusted input:
    traceparse.store.trust); ``full_access``: DuckDB's full access, for ``traceparse sql``'s own query."""
    from traceparse.load.run import connect, open_run

    if paths:
        engine = _engine_options()
        return open_run(paths, db=db, use_cache=not no_cache, allow_mixed=allow_mixed, progress=progress,
                        full_access=full_access, **engine)
    return closing(connect(db, full_access=full_access))


def _engine_options() -> dict:
    """The load's options that store_options sets aside (--engine, --address, --stage, --window), checked."""
    engine = click.get_current_context().meta.get("traceparse.engine", {})
    if engine.get("address") and engine.get("engine") != "ray":
        raise click.UsageError("--address names a Ray cluster: it needs --engine ray")
    return engine


def _kept_analysis(paths, db, no_cache, allow_mixed, top, stated):
    """The analyze document kept for the cached store of ``paths``, read without opening the store (nor importing
    DuckDB); None when the store or its document would be built (traceparse.document.cache)."""
    from traceparse.document import kept_analysis
    from traceparse.load.run import kept_store

    if db or no_cache:
        return None
    hit = kept_store(paths, allow_mixed, _engine_options().get("window"))
    return hit and kept_analysis(*hit, top, stated)


def _engine(ctx, param, value):
    ctx.meta.setdefault("traceparse.engine", {})[param.name] = value


def store_options(f):
    """--db, --no-cache, --allow-mixed; --window, where parsing runs (--engine, --address, --stage): read by _open."""
    f = click.option("--stage", "stage_root", metavar="DIR", expose_value=False, callback=_engine,
                     help="Stage the per-rank Parquet under DIR (with --engine ray on a cluster: a folder every "
                     "node reaches).")(f)
    f = click.option("--address", metavar="ADDR", expose_value=False, callback=_engine,
                     help="With --engine ray: the cluster ('auto', 'ray://host:10001'); default: start one here.")(f)
    f = click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                     expose_value=False, callback=_engine,
                     help="Parse the ranks on a local process pool, or as Ray tasks (the ray extra).")(f)
    f = click.option("--window", metavar="STEP|latest", expose_value=False, callback=_engine,
                     help="Of a job profiled in several windows (several files per rank): load the window holding "
                     "profiler step STEP; default: each rank's latest.")(f)
    f = click.option("--allow-mixed", is_flag=True, help="Load files from different runs together.")(f)
    f = click.option("--no-cache", is_flag=True, help="Parse again and keep no store.")(f)
    f = click.option("--db", help="Store path (default: a per-user cache).")(f)
    return f


def layout_option(f):
    return click.option(
        "--layout",
        help="What you know of the layout, checked against the trace: 'dp=4,tp=2,pp=2' or a TOML file "
        "(also the model: layers, hidden, heads, kv_heads, seq, micro_batch, dtype_bytes, params, experts, "
        "top_k, optimizer, n_opt, ranks_per_node; they feed the lint and the expected volumes and memory).",
    )(f)


def _labels(_ctx, _param, items):
    if not items:
        return {}  # the history's modules are not imported for a run that records nothing
    from traceparse.history.store import parse_labels

    try:
        return parse_labels(items)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _finite(_ctx, param, value):
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number", param=param)
    return value


BUSY = 75  # EX_TEMPFAIL: the history stayed locked by other writers (history.WAIT_S); nothing written, try again


def _history(call, *args, **kwargs):
    """A history call; a history that stayed busy exits BUSY with one line."""
    from traceparse.history.store import HistoryBusy

    try:
        return call(*args, **kwargs)
    except HistoryBusy as e:
        click.echo(f"traceparse: error: {e}", err=True)
        sys.exit(BUSY)


INTERNAL_ERROR = 3


def internal_error_line(e: BaseException, debug: bool) -> str:
    """One line for an exception that is not bad input: its type, its first line, what to do."""
    msg = next(iter(str(e).splitlines()), "").strip()
    what = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
    how = "the traceback is above" if debug else "run with --debug for the traceback"
    return (f"traceparse: internal error: {what} — please report it with the command and, if you can, "
            f"the trace ({how})")


class Main(click.Group):
    """The command group: bad input (TraceError) exits 2 with one line; any other exception, a bug, exits 3."""

    def invoke(self, ctx):
        claim()
        try:
            return super().invoke(ctx)
        except TraceError as e:
            click.echo(f"traceparse: error: {e}", err=True)
            sys.exit(2)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx else "traceparse"
            click.echo(f"traceparse: error: {e.format_message()} (see '{where} --help')", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            _interrupted()
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort, EOFError):
            raise  # click's own handling: Ctrl-D aborts with 1
        except Exception as e:
            if isinstance(e, OSError) and e.errno == errno.EPIPE:
                raise  # output piped into a reader that stopped (| head): click exits quietly
            if isinstance(e, OSError) and e.errno == errno.ENAMETOOLONG:  # a path argument no file can be named
                name = str(e.filename)
                click.echo(f"traceparse: error: {TraceError(name[:60] + '...' if len(name) > 60 else name, e.strerror)}",
                           err=True)
                sys.exit(2)
            if _is_interrupt(e):
                _interrupted()
            if _is_damaged_store(e):
                click.echo(f"traceparse: error: the store is damaged ({str(e).splitlines()[0]}); load the traces "
                           "again into a new --db", err=True)
                sys.exit(2)
            debug = bool(ctx.params.get("debug"))
            if debug:
                click.echo(traceback.format_exc(), err=True, nl=False)
            click.echo(internal_error_line(e, debug), err=True)
            sys.exit(INTERNAL_ERROR)


INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def _is_interrupt(e: Exception) -> bool:
    """Ctrl-C during a DuckDB query: DuckDB stops the query and raises instead of KeyboardInterrupt."""
    import duckdb

    return isinstance(e, duckdb.InterruptException) or (isinstance(e, RuntimeError) and str(e) == "Query interrupted")


def _is_damaged_store(e: Exception) -> bool:
    """A store file changed after it was written (a cache entry is stamped and built again instead)."""
    import duckdb

    from traceparse.store.query import damaged

    return isinstance(e, duckdb.Error) and damaged(e)


def _interrupted():
    click.echo("traceparse: interrupted", err=True)
    sys.exit(INTERRUPTED)


@click.group(cls=Main)
@click.version_option(__version__, prog_name="traceparse")
@click.option("--debug", is_flag=True, help="On an internal error (exit 3), print the traceback.")
def main(debug):  # noqa: ARG001 -- read by Main.invoke from ctx.params
    """Parallelism-aware analysis of PyTorch profiler traces of distributed training jobs."""


@main.command()
@click.argument("paths", nargs=-1, required=True)
@store_options
@click.option("--format", "fmt", type=click.Choice(["text", "json", "html"]), default="text", show_default=True,
              help="html: the post-mortem page, findings then charts then the report; one offline file.")
@click.option("-o", "--output", metavar="FILE",
              help="Write the report to FILE (whole: a temporary file moved into place) instead of stdout.")
@click.option("--top", default=10, show_default=True, type=click.IntRange(0, 10_000),
              help="How many of the heaviest kernels/ops to list (the text report of a run of more than 8 ranks "
              "shows 5 of them unless --top or --full is given).")
@click.option("--full", is_flag=True, help="Text: every per-rank table whole (each rank's totals, imbalance numbers, "
              "pipeline stage and busy time per thread) and every listed kernel; by default a run of more than 8 "
              "ranks shows the min / median / max rank and the ranks the checks name. JSON and HTML are always whole.")
@layout_option
@click.option("--fail-on", type=click.Choice(["warn", "fail"]), help="Exit with 1 when a check reaches this status.")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colour the checks' statuses; auto: when stdout is a terminal and NO_COLOR is not set.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar while loading (shown on a terminal only).")
@click.option("--record", "history", metavar="HISTORY", help="Append the run's metrics, labels and report path to "
              "the run history HISTORY (a DuckDB file, created when missing; traceparse dashboard draws it).")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", callback=_labels,
              help="A label of the recorded run (repeatable): commit=abc123, job=llama-8b.")
def analyze(paths, db, no_cache, allow_mixed, fmt, top, full, layout, fail_on, color, quiet, history, labels, output):
    """Load the per-rank traces PATHS (files, globs, folders) and report on the run."""
    if labels and not history:
        raise click.UsageError("--label needs --record HISTORY")
    _check_output(output, paths, db, history)
    if history:
        from traceparse.history.store import check

        _history(check, history)  # before the analysis: a path that is no history fails at once
    from traceparse.document import analyze_document
    from traceparse.layout.stated import parse_stated
    from traceparse.progress import load_bar

    stated = parse_stated(layout)
    doc = _kept_analysis(paths, db, no_cache, allow_mixed, top, stated)
    if doc is None:
        with load_bar(quiet or fmt == "json") as bar, _open(paths, db, no_cache, allow_mixed, bar) as con:
            if bar:
                bar.close()  # loaded: the bar is gone before anything else is printed
            doc = analyze_document(con, top, stated, not no_cache)
    for issue in doc["load_issues"]:
        if issue["severity"] != "info":
            click.echo(f"traceparse: {issue['severity']}: {shown(issue['file'] or 'run')}: {shown(issue['what'])}", err=True)
    colour = None
    if fmt == "json":
        out = json_text(doc)
    elif fmt == "html":
        from traceparse.render.html import render_html

        out = render_html(doc)
    else:
        from traceparse.render.colour import colour_wanted, paint
        from traceparse.render.text import render

        from click.core import ParameterSource

        top_given = click.get_current_context().get_parameter_source("top") != ParameterSource.DEFAULT
        text = _fitted(lambda: render(doc, full=full, kernels=top if full or top_given else None))
        colour = color == "always" if output else colour_wanted(color, sys.stdout)
        out = paint(text) if colour else text
    _emit(out, output, colour)
    if history:
        from traceparse.history.store import record

        run_id = _history(record, history, doc, labels, report=output)
        click.echo(f"traceparse: recorded as run {run_id} in {history}", err=True)
    from traceparse.status import at_least

    breached = [cid for cid, c in doc["checks"].items() if fail_on and at_least(c["status"], fail_on)]
    if breached:
        click.echo(f"traceparse: checks at or above {fail_on}: {', '.join(breached)}", err=True)
        sys.exit(1)


@main.command()
@click.argument("query", required=False)
@click.argument("paths", nargs=-1)
@store_options
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def sql(query, paths, db, no_cache, allow_mixed, fmt):
    """Run QUERY on the store of PATHS (or of --db); without QUERY, read queries interactively."""
    import duckdb

    if query and not paths and not db and _names_a_path(query):
        query, paths = None, (query,)  # `traceparse sql RUN/`: the interactive prompt on that run
    if not paths and not db:
        raise click.UsageError("give trace PATHS or --db STORE")
    with _open(paths, db, no_cache, allow_mixed, full_access=True) as con:  # the user's own query
        for q in [query] if query else _interactive():
            try:
                rel = con.sql(q)
                if rel is not None:
                    _print_relation(rel, fmt)
            except (duckdb.Error, OverflowError) as e:
                if _is_interrupt(e):
                    raise
                if query:
                    click.echo(f"traceparse: error: query failed: {shown(str(e).splitlines()[0])}", err=True)
                    sys.exit(2)
                click.echo(f"error: {e}", err=True)


def _names_a_path(text: str) -> bool:
    """Whether ``text`` names something on disk; a text no path can be (a query longer than a name) names none."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


def _interactive():
    click.echo("traceparse sql: end each query with ';', an empty line or Ctrl-D quits", err=True)
    buf = ""
    while True:
        try:
            line = input("... " if buf else "sql> ")
        except EOFError:
            if buf.strip():
                yield buf  # the last query needs no ';'
            return
        if not line.strip() and not buf:
            return
        buf += line + "\n"
        if buf.rstrip().endswith(";"):
            yield buf
            buf = ""


def _print_relation(rel, fmt):
    cols = rel.columns
    data = rel.fetchall()
    if fmt == "json":
        click.echo(json_text([dict(zip(cols, r, strict=True)) for r in data]))
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(cols)
        w.writerows(data)
    else:
        from traceparse.render.text import table

        click.echo(table(cols, data))


@main.command()
@click.argument("paths", nargs=-1, required=True)
@store_options
@layout_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def layout(paths, db, no_cache, allow_mixed, layout, fmt):
    """Print the layout inferred from PATHS, with its evidence, checked against --layout."""
    from traceparse.document.cache import cached
    from traceparse.document import layout_document
    from traceparse.layout.stated import parse_stated
    from traceparse.render.text import render_layout

    stated = parse_stated(layout)
    with _open(paths, db, no_cache, allow_mixed) as con:
        doc = cached(con, "layout", {"stated": stated}, lambda: layout_document(con, stated), not no_cache)
    click.echo(json_text(doc) if fmt == "json" else _fitted(lambda: render_layout(doc)))
    wrong = [c for c in doc["layout_check"]["stated"] if c["status"] == "contradicts" and c["source"] == "stated"]
    if wrong:
        click.echo("traceparse: --layout contradicts the trace: " + ", ".join(
            f"{c['key']} = {shown(str(c['stated']))} (inferred {shown(str(c['inferred']))})" for c in wrong), err=True)
        sys.exit(1)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@store_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def tags(paths, db, no_cache, allow_mixed, fmt):
    """Print how the communication of PATHS was tagged: strategy, variant, op, rule; and what stayed untagged."""
    from traceparse.document.cache import cached
    from traceparse.document import tags_document
    from traceparse.render.text import render_tags

    with _open(paths, db, no_cache, allow_mixed) as con:
        doc = cached(con, "tags", {}, lambda: tags_document(con), not no_cache)
    click.echo(json_text(doc) if fmt == "json" else _fitted(lambda: render_tags(doc)))


def _numbers(_ctx, param, value):
    """'0-3,8' -> {0, 1, 2, 3, 8} (None when not given)."""
    if value is None:
        return None
    got = set()
    try:
        for part in value.split(","):
            lo, _, hi = part.strip().partition("-")
            got.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise click.BadParameter(f"{value!r}: numbers and ranges, as '0-3,8'", param=param) from None
    return got


@main.command()
@click.argument("paths", nargs=-1, required=True)
@store_options
@click.option("-o", "--output", required=True, metavar="FILE", help="The Chrome / Perfetto JSON to write.")
@click.option("--ranks", callback=_numbers, metavar="R", help="Only these ranks: '0-3,8' (default: all).")
@click.option("--steps", callback=_numbers, metavar="S", help="Only these profiled steps: '2-3' (default: the "
              "whole traces).")
def export(paths, db, no_cache, allow_mixed, output, ranks, steps):
    """One Chrome / Perfetto JSON of the whole job on its aligned clock (traceparse explain clocks): each rank a
    process, its CPU threads and GPU streams its threads, each collective's release as flow events, the critical
    path and the causes as a process of their own. Opens in Perfetto's UI and chrome://tracing; traceparse reads
    it back as the ranks' traces."""
    from traceparse.document import analyze_document
    from traceparse.job_export import export_job

    _check_output(output, paths, db)
    with _open(paths, db, no_cache, allow_mixed) as con:
        got = export_job(con, analyze_document(con), Path(output), ranks, steps)
    click.echo(f"wrote {output}: {len(got['ranks'])} rank(s), {got['events']:,} events"
               + (f", steps {', '.join(map(str, got['steps']))}" if got["steps"] else ""))


@main.command()
@click.argument("paths", nargs=-1, required=True)
@store_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE instead of standard output.")
def hang(paths, db, no_cache, allow_mixed, fmt, output):
    """Where the ranks of a hung or crashed job diverge, from Flight Recorder dumps and/or traces in PATHS (a
    folder's dumps are recognized by content, whatever their names: torch's nccl_trace_rank_0, rank_0, ...).
    Exit 0: no divergence found, 1: a divergence found, dumps that contradict each other, or an incomplete
    comparison (groups some of whose members left no dump or trace cannot be judged)."""
    from traceparse.hang.forensics import hang_document
    from traceparse.render.hang import render_hang

    _check_output(output, paths, db)
    with _open(paths, db, no_cache, allow_mixed) as con:
        doc = hang_document(con)
    out = json_text(doc) if fmt == "json" else _fitted(lambda: render_hang(doc))
    _emit(out, output)
    sys.exit(0 if doc["verdict"] == "no_divergence" else 1)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@store_options
@click.option("--layout", "target", metavar="LAYOUT",
              help="The layout to forecast, as analyze --layout takes it: 'pp=4,microbatches=8', "
              "'dp=2,tp=2,zero_stage=3'; keys left out stay as measured (layers: a model of that many layers).")
@click.option("--given", metavar="LAYOUT", help="What you know of the measured run (as analyze --layout).")
@click.option("--sweep", "do_sweep", is_flag=True, help="Instead of --layout: every layout of the same world size, "
              "ranked by predicted step time, with the reason each excluded one was.")
@click.option("--balanced", is_flag=True, help="With a pipeline: the stages compute equally (the heaviest stage's "
              "layers spread over the others) instead of at the pace of the slowest.")
@click.option("--without-straggler", is_flag=True, help="The run without its named straggler's cost (what the others "
              "lose waiting for it), alone or with --layout.")
@click.option("--device-memory", type=click.FloatRange(min=0, min_open=True), callback=_finite, metavar="GIB",
              help="With --sweep: exclude layouts whose memory per device exceeds GIB.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "html"]), default="text", show_default=True,
              help="html: one offline page, the forecast (or the sweep's ranking) charted above the text.")
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE instead of standard output.")
def whatif(paths, db, no_cache, allow_mixed, target, given, do_sweep, balanced, without_straggler, device_memory,
           fmt, output):
    """Forecast the step time, bubble, bytes and memory of another layout of the run in PATHS (--layout), or rank
    every layout of its world size (--sweep)."""
    from traceparse.document import TOP, analyze_document
    from traceparse.document import given as given_values
    from traceparse.layout.stated import parse_stated
    from traceparse.render.whatif import render_sweep, render_whatif, render_whatif_html
    from traceparse.whatif import sweep_document, whatif_document

    if bool(target or balanced or without_straggler) == do_sweep:
        raise click.UsageError("give either --layout TARGET (or --balanced, --without-straggler) or --sweep")
    if device_memory is not None and not do_sweep:
        raise click.UsageError("--device-memory is read by --sweep only")
    _check_output(output, paths, db)
    stated = parse_stated(given, "--given")
    wanted = {**parse_stated(target), "balanced": balanced, "without_straggler": without_straggler}
    with _open(paths, db, no_cache, allow_mixed) as con:
        doc = analyze_document(con, TOP, stated, not no_cache)  # analyze's default: the same kept document
        known = given_values(con, stated)[0]
        if do_sweep:
            out = sweep_document(con, doc, known, device_memory * 2**30 if device_memory else None)
        else:
            out = whatif_document(con, doc, wanted, known)
    if fmt == "json":
        text = json_text(out)
    elif fmt == "html":
        text = render_whatif_html(out)
    else:
        text = _fitted(lambda: render_sweep(out) if do_sweep else render_whatif(out))
    _emit(text, output)


@main.group()
def rules():
    """Rule files."""


@rules.command("validate")
def rules_validate():
    """Check every rule file, tag rules (rules/tags) and communication kernel rules (rules/comm_kernels):
    schema, ids unique across both, a valid predicate or pattern, its examples."""
    from traceparse.tagging import comm_kernels
    from traceparse.tagging import rules as tag_rules

    problems = tag_rules.validate() + comm_kernels.validate()
    for p in problems:
        click.echo(f"traceparse: rule error: {p}", err=True)
    if problems:
        sys.exit(2)
    for n, folder, what in ((len(tag_rules.rule_files()), "rules/tags", "tag rules"),
                            (len(comm_kernels.rule_files()), "rules/comm_kernels", "communication kernel rules")):
        click.echo(f"{n} rule {'file' if n == 1 else 'files'} valid in {folder} ({what})")


@main.command()
def schema():
    """Print the store's tables and columns (Markdown)."""
    from traceparse.store.schema import markdown

    click.echo(markdown())


@main.command()
@click.argument("ident", required=False)
@click.option("--list", "list_ids", is_flag=True, help="Print every id, by kind (also without ID).")
def explain(ident, list_ids):
    """Print the definition of a metric, check, rule, or vocabulary table (compute_intervals, ...); --list: every id."""
    from dataclasses import asdict

    from traceparse.analyzers import specs
    from traceparse.document.glossary import METRICS
    from traceparse.document.meaning import MEANING
    from traceparse.render import explain as fmt
    from traceparse.store.schema import VOCABULARY
    from traceparse.tagging.comm_kernels import load_rules as load_kernel_rules
    from traceparse.tagging.rules import load_rules

    if list_ids and ident is not None:
        raise click.UsageError("--list prints every id: give it without ID")
    checks, rules = specs(), {r.id: r for r in load_rules()}
    kernels = {r.id: r for r in load_kernel_rules()}
    ids = {"metrics": sorted(METRICS), "checks": sorted(checks), "tag rules": list(rules),
           "communication kernel rules": list(kernels), "vocabulary tables": list(VOCABULARY)}
    if ident is not None and not any(ident in known for known in (checks, rules, kernels, VOCABULARY, METRICS)):
        click.echo(f"traceparse: error: {fmt.unknown_id(ident, [i for group in ids.values() for i in group])}", err=True)
        sys.exit(2)

    def text() -> str:  # rendered inside _fitted: its long fields wrap to the terminal's width
        if ident is None:
            return fmt.render_ids(ids)
        if ident in checks:
            return fmt.render_check(asdict(checks[ident]), MEANING[ident])
        if ident in rules:
            return fmt.render_rule(asdict(rules[ident]))
        if ident in kernels:
            return fmt.render_kernel_rule(asdict(kernels[ident]))
        if ident in VOCABULARY:
            return fmt.render_vocabulary(ident, *VOCABULARY[ident])
        return fmt.render_metric(ident, *METRICS[ident], MEANING[ident])

    click.echo(_fitted(text))


@main.command()
@click.argument("section", required=False)
def docs(section):
    """Print SECTION of the parallelism reference (docs/parallelism.md, which findings and explain cite as
    'docs/parallelism.md 3.2': traceparse docs 3.2), or its table of contents."""
    from traceparse.document.reference import parallelism_text, section as find_section, sections, table_of_contents

    text = parallelism_text()
    if not section:
        click.echo(table_of_contents(text))
        return
    found = find_section(text, section)
    if found is None:
        known = ", ".join(n for n, *_ in sections(text))
        raise click.UsageError(f"no section {section!r} in docs/parallelism.md; the sections: {known}")
    click.echo(found)


@main.command()
@click.argument("runs", nargs=-1, metavar="BASE NEW")
@click.option("--base-db", metavar="STORE", help="Read BASE from this store (analyze --db); with a BASE path, load it into it.")
@click.option("--new-db", metavar="STORE", help="Read NEW from this store (analyze --db); with a NEW path, load it into it.")
@click.option("--no-cache", is_flag=True, help="Parse again and keep no store.")
@click.option("--allow-mixed", is_flag=True, help="Load files from different runs together.")
@layout_option
@click.option("--threshold", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a threshold of rules/compare_thresholds.toml for a group or metric id: '5%' relative, "
              "'0.02' absolute in the metric's unit (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text",
              show_default=True, help="markdown: a table to post on a pull request; html: one offline page.")
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE (replaced whole) instead of stdout.")
def compare(runs, base_db, new_db, no_cache, allow_mixed, layout, overrides, fmt, output):
    """Compare run NEW with run BASE metric by metric; exit 1 when a metric regressed beyond its threshold.
    Then what changed, kernel by kernel: GPU kernels and CPU ops per rank per step, the largest changes first.

    BASE and NEW are one argument each: trace files, a folder or a glob; or give --base-db / --new-db."""
    from traceparse.history.compare import compare_runs, load_thresholds
    from traceparse.history.kernel_diff import kernel_times
    from traceparse.document import document
    from traceparse.layout.stated import parse_stated
    from traceparse.render.compare import render_html, render_markdown, render_text

    thresholds, stated = load_thresholds(overrides), parse_stated(layout)
    if len(runs) not in (2, (base_db is None) + (new_db is None)):
        raise click.UsageError("give BASE and NEW: trace paths (a file, folder or glob each) or --base-db/--new-db")
    _check_output(output, runs, base_db, new_db)  # a bad -o fails before the runs are loaded
    rest = list(runs)
    sides = [(name, [rest.pop(0)] if len(runs) == 2 or db is None else [], db)
             for name, db in (("base", base_db), ("new", new_db))]
    docs, times = [], []
    for name, paths, db in sides:
        with _open(paths, db, no_cache, allow_mixed) as con:
            docs.append(document(con, 0, stated))
            times.append(kernel_times(con))
        for issue in docs[-1]["load_issues"]:
            if issue["severity"] != "info":
                click.echo(f"traceparse: {issue['severity']}: {name}: {shown(issue['file'] or 'run')}: "
                           f"{shown(issue['what'])}", err=True)
    doc = compare_runs(*docs, thresholds, kernels=tuple(times))
    text = {"json": lambda: json_text(doc), "markdown": lambda: render_markdown(doc),
            "text": lambda: _fitted(lambda: render_text(doc)), "html": lambda: render_html(doc)}[fmt]()
    _emit(text, output)
    if output:
        click.echo(f"traceparse: compare: {doc['verdict']}", err=True)
    if doc["verdict"] != "ok":  # regressed, or incomplete (a run lacks ranks)
        sys.exit(1)


def _check_output(output, paths=(), *stores):
    """A ``-o`` checked before any work (``traceparse.output.check_output``): not a folder, in a folder that
    exists, and none of the command's inputs: the traces of ``paths`` (a file found in a folder whose start
    shows no trace is no input), the stores and the history in ``stores``."""
    if not output:
        return
    from traceparse.ingest.flight_recorder import is_dump
    from traceparse.load.inputs import expand_inputs, not_a_trace
    from traceparse.output import check_output, same_file

    files, in_folders = expand_inputs(paths) if paths else ([], set())
    named = [f for f in files if same_file(output, f)]  # only the file -o names is opened to tell if it is a trace
    check_output(output, [f for f in named if f not in in_folders or is_dump(f) or not not_a_trace(f)] + list(stores))


def _fitted(make) -> str:
    """The text report ``make()`` renders, fitted to the terminal's width (``render.fit``)."""
    from traceparse.render.fit import fitted_text, terminal_width

    return fitted_text(make, terminal_width())


def _emit(text: str, output, color=None):
    """The report ``text`` to the file ``output`` (said on stderr), else to stdout."""
    if output:
        from traceparse.output import write_output

        write_output(output, text + "\n")
        click.echo(f"traceparse: report written to {output}", err=True)
    else:
        click.echo(text, color=color)


@main.command()
@click.argument("history")
@click.option("-o", "--output", required=True, metavar="PAGE", help="The HTML page to write (offline, one file).")
@click.option("--series-by", "by", multiple=True, metavar="KEY",
              help="Label keys that make a series, each run compared with the previous run of its series "
              "(repeatable; default: every label but commit).")
@click.option("--threshold", "thresholds", multiple=True, metavar="KEY=VALUE",
              help="Override a regression threshold, as traceparse compare takes it (step_time=5%, bubble=0.02).")
def dashboard(history, output, by, thresholds):
    """Write one offline page of the run history HISTORY (analyze --record): each metric group over the runs,
    filterable by series, regressions against the previous run of the same series, links to the reports."""
    from traceparse.history.compare import load_thresholds
    from traceparse.history.dashboard import dashboard_data
    from traceparse.history.store import read
    from traceparse.output import write_output
    from traceparse.render.dashboard import render_dashboard

    limits = load_thresholds(list(thresholds))
    _check_output(output, (), history)
    hist = _history(read, history)
    data, regressions = dashboard_data(hist, Path(output), by, limits)
    write_output(output, render_dashboard(data))
    click.echo(f"{output}: {len(hist.runs)} runs, {regressions} regressed metric(s)")


if __name__ == "__main__":
    main()
