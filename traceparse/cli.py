"""The ``traceparse`` command: argument parsing, library calls, exit codes.

Exit codes: 0 success, 1 a --fail-on threshold breached, 2 bad input or usage.
"""

import json
import sys
from contextlib import closing

import click

from . import __version__
from .errors import TraceError

JSON_VERSION = 1


def _open(paths, db, no_cache, allow_mixed):
    from .load import connect, open_run

    if paths:
        return open_run(paths, db=db, use_cache=not no_cache, allow_mixed=allow_mixed)
    return closing(connect(db))


def store_options(f):
    f = click.option("--allow-mixed", is_flag=True, help="Load files from different runs together.")(f)
    f = click.option("--no-cache", is_flag=True, help="Parse again and keep no store.")(f)
    f = click.option("--db", type=click.Path(dir_okay=False), help="Store path (default: a per-user cache).")(f)
    return f


class Main(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TraceError as e:
            click.echo(f"traceparse: error: {e}", err=True)
            sys.exit(2)


@click.group(cls=Main)
@click.version_option(__version__, prog_name="traceparse")
def main():
    """Parallelism-aware analysis of PyTorch profiler traces of distributed training jobs."""


@main.command()
@click.argument("paths", nargs=-1, required=True)
@store_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--top", default=10, show_default=True, help="How many of the heaviest kernels/ops to show.")
def analyze(paths, db, no_cache, allow_mixed, fmt, top):
    """Load the per-rank traces PATHS (files, globs, folders) and report on the run."""
    from .report.summary import document

    with _open(paths, db, no_cache, allow_mixed) as con:
        doc = document(con, JSON_VERSION, top)
    for issue in doc["load_issues"]:
        if issue["severity"] != "info":
            click.echo(f"traceparse: {issue['severity']}: {issue['file'] or 'run'}: {issue['what']}", err=True)
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2))
    else:
        from .report.text import render

        click.echo(render(doc))


@main.command()
@click.argument("query", required=False)
@click.argument("paths", nargs=-1)
@store_options
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def sql(query, paths, db, no_cache, allow_mixed, fmt):
    """Run QUERY on the store of PATHS (or of --db); without QUERY, read queries interactively."""
    import duckdb

    if not paths and not db:
        raise click.UsageError("give trace PATHS or --db STORE")
    with _open(paths, db, no_cache, allow_mixed) as con:
        for q in [query] if query else _interactive():
            try:
                rel = con.sql(q)
            except duckdb.Error as e:
                if query:
                    click.echo(f"traceparse: error: {str(e).splitlines()[0]}", err=True)
                    sys.exit(2)
                click.echo(f"error: {e}", err=True)
                continue
            if rel is not None:
                _print_relation(rel, fmt)


def _interactive():
    click.echo("traceparse sql: end each query with ';', an empty line or Ctrl-D quits", err=True)
    buf = ""
    while True:
        try:
            line = input("... " if buf else "sql> ")
        except EOFError:
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
        click.echo(json.dumps([dict(zip(cols, r)) for r in data], default=str, indent=2))
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(cols)
        w.writerows(data)
    else:
        from .report.text import table

        click.echo(table(cols, data))


@main.command()
def schema():
    """Print the store's tables and columns (Markdown)."""
    from .store.schema import markdown

    click.echo(markdown())


@main.command()
@click.argument("ident")
def explain(ident):
    """Print the definition of a metric, check or rule."""
    from .metrics import METRICS

    if ident not in METRICS:
        click.echo(f"traceparse: error: no metric, check or rule named {ident!r}; known: {', '.join(sorted(METRICS))}", err=True)
        sys.exit(2)
    title, definition, denominator = METRICS[ident]
    click.echo(f"{ident}: {title}\n  definition: {definition}\n  reported as: {denominator}")


if __name__ == "__main__":
    main()
