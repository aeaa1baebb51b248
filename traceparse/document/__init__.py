"""The analyze document: what ``traceparse analyze`` reports about a run, as plain data.

``analyze(paths)`` loads (or reuses) the store of the traces and returns the document;
``document(con)`` builds it from an open store. Rendering (text, JSON, HTML) is in
``traceparse.report``; the CLI only parses arguments, calls these and renders.
"""

import json

from .layout import collectives, compare_stated, inferred_layout, lint, parse_stated, untagged
from .summary import load_issues, run_info, summary

VERSION = 1


def document(con, top=10, stated=None) -> dict:
    """The document of the run in the store ``con`` (version ``VERSION``)."""
    from ..checks import run_checks

    layout = inferred_layout(con)
    stated = stated or {}
    checks = run_checks(con, layout, stated)
    return json.loads(json.dumps({
        "version": VERSION,
        "run": run_info(con),
        "load_issues": load_issues(con),
        "layout": layout,
        "layout_check": {"stated": compare_stated(layout, stated), "lint": lint(con, layout, stated)},
        "collectives": collectives(con),
        "untagged": untagged(con),
        "checks": {cid: r.document() for cid, r in checks.items()},
        "summary": summary(con, top),
    }, default=str))


def analyze(paths, layout=None, top=10, db=None, use_cache=True, allow_mixed=False) -> dict:
    """Load the traces ``paths`` (files, globs, folders) and return the analyze document.

    ``layout``: what is known of the layout, as ``traceparse analyze --layout`` takes it (a string
    'dp=4,tp=2', a TOML file name) or a dict. Raises ``traceparse.errors.TraceError`` on bad input.
    """
    from ..load import open_run

    stated = layout if isinstance(layout, dict) else parse_stated(layout)
    with open_run(list(paths), db=db, use_cache=use_cache, allow_mixed=allow_mixed) as con:
        return document(con, top, stated)
