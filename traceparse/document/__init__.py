"""The documents the commands report, as plain data.

``analyze(paths)`` loads (or reuses) the store of the traces and returns the analyze document;
``document(con)`` builds it from an open store. ``layout_document(con, stated)`` and
``tags_document(con)`` are what ``traceparse layout`` and ``traceparse tags`` report. Rendering
(text, JSON, HTML) is in ``traceparse.render``; the CLI only parses arguments, calls these and renders.
"""

import json

from traceparse.layout.declared import declared
from traceparse.layout.stated import STATED_KEYS, collectives, compare_stated, inferred_layout, lint, parse_stated, tags, untagged
from traceparse.vocabulary.critical_path import critical_path_section
from traceparse.document.causes import causes
from traceparse.document.cut import cut_short
from traceparse.document.gpu import clipped_streams, gpu_section
from traceparse.vocabulary.step_graph import graphs_once
from traceparse.document.summary import load_issues, run_info, summary
from traceparse.document.timeline import timeline
from traceparse.store.query import table_rows

VERSION = 1
TOP = 10  # analyze --top's default: how many of the heaviest kernels/ops the document lists


def _plain(doc: dict) -> dict:
    """``doc`` as JSON would give it back (dates and decimals as strings)."""
    return json.loads(json.dumps(doc, default=str))


def given(con, stated: dict) -> tuple[dict, dict, dict]:
    """(values, sources, metadata section): what the user stated, over what the traces' metadata declares;
    sources say ``stated`` or ``metadata`` per key."""
    meta = declared(con)
    known = {k: v for k, v in meta["values"].items() if k in STATED_KEYS}
    values = {**known, **stated}
    sources = {k: "stated" if k in stated else "metadata" for k in values}
    return values, sources, meta


def _layout_sections(con, stated: dict) -> tuple[dict, dict, dict]:
    """(the layout, metadata and layout_check sections; the given values; their sources)."""
    layout = inferred_layout(con)
    values, sources, meta = given(con, stated)
    check = {"stated": compare_stated(layout, values, sources), "lint": lint(con, layout, values)}
    return {"layout": layout, "metadata": meta, "layout_check": check}, values, sources


def layout_document(con, stated=None) -> dict:
    """``{layout, metadata, layout_check: {stated, lint}}``: the inferred layout with its evidence, checked against
    what ``stated`` and the traces' metadata declare."""
    return _plain(_layout_sections(con, stated or {})[0])


def tags_document(con) -> dict:
    """``{tags, untagged}``: how the communication was tagged (strategy, variant, op, rule) and what stayed untagged."""
    return _plain({"tags": tags(con), "untagged": untagged(con)})


def document(con, top=10, stated=None) -> dict:
    """The document of the run in the store ``con`` (version ``VERSION``)."""
    from traceparse.analyzers import run_checks

    lay, values, sources = _layout_sections(con, stated or {})
    shared = {}
    graphs = graphs_once(con, shared)
    path = critical_path_section(graphs)
    checks = {cid: r.document() for cid, r in run_checks(con, lay["layout"], values, sources, path, shared).items()}
    gpu = gpu_section(con, graphs)
    return _plain({
        "version": VERSION,
        "run": run_info(con),
        "load_issues": load_issues(con) + _set_aside(con, checks, gpu),
        "cut_short": cut_short(con),
        **lay,
        "collectives": collectives(con),
        "untagged": untagged(con),
        "checks": checks,
        "causes": causes(checks, gpu),
        "summary": summary(con, top),
        "gpu": gpu,
        "critical_path": path,
        "timeline": timeline(con),
    })


def _set_aside(con, checks: dict, gpu: dict) -> list[dict]:
    """load_issues rows for impossible values the analysis clipped (none on a sound run): GPU streams whose HTA idle
    breakdown came out negative (gpu.clipped_streams), a straggler whose cost exceeded the step (imbalance)."""
    out = clipped_streams(con) if gpu["status"] != "not_applicable" else []
    e = (checks.get("imbalance") or {}).get("straggler") or {}
    if e.get("lost_unclipped_ns") is not None:
        file = table_rows(con, "ranks", columns="file", where=f"rank = {int(e['rank'])}")
        out.append({"file": file[0]["file"] if file else None, "severity": "warning", "count": 1,
                    "what": f"rank {e['rank']}: the other ranks would lose {e['lost_unclipped_ns']:,} ns per rank per "
                            f"step waiting for it, more than the step ({e['lost_per_step_ns']:,} ns): impossible (the "
                            "ranks' clocks disagree); the loss is clipped to the step and no straggler is named"})
    return out


def analyze_document(con, top=TOP, stated=None, use_cache=True) -> dict:
    """The analyze document of the store ``con``: kept beside the store and read back while the store, traceparse
    and the options (``top``, ``stated``) are unchanged (``traceparse.document.cache``); ``use_cache`` False builds
    it and keeps nothing. ``traceparse analyze`` and ``traceparse whatif`` (which reads the document with ``TOP``)
    share one kept document."""
    from traceparse.document.cache import cached

    return cached(con, "analyze", _options(top, stated), lambda: document(con, top, stated or {}), use_cache)


def kept_analysis(store, load_key, top=TOP, stated=None) -> dict | None:
    """The analyze document kept for the cache entry ``store`` made for ``load_key`` (``load.run.kept_store``),
    read without opening the store; None when none is kept."""
    from traceparse.document.cache import kept

    return kept(store, load_key, "analyze", _options(top, stated))


def _options(top, stated) -> dict:
    """What the analyze document depends on besides the store."""
    return {"top": top, "stated": stated or {}}


def analyze(paths, layout=None, top=TOP, db=None, use_cache=True, allow_mixed=False) -> dict:
    """Load the traces ``paths`` (files, globs, folders) and return the analyze document.

    ``layout``: what is known of the layout, as ``traceparse analyze --layout`` takes it (a string
    'dp=4,tp=2', a TOML file name) or a dict. Raises ``traceparse.errors.TraceError`` on bad input.
    """
    from traceparse.load.run import open_run

    stated = layout if isinstance(layout, dict) else parse_stated(layout)
    with open_run(list(paths), db=db, use_cache=use_cache, allow_mixed=allow_mixed) as con:
        return document(con, top, stated)
