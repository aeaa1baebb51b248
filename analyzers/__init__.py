"""The checks, one per module (installed as traceparse.analyzers), in report order.

Each check module has ``SPEC`` (``base.Spec``) and ``run(ctx) -> Result``; it returns data and never
prints or plots. ``base`` and ``context`` are what a check is made of and what it receives.
"""

from importlib import import_module

NAMES = ("bubble", "overlap", "imbalance", "comm_volume", "memory")


def analyzers():
    return [import_module(f"{__name__}.{n}") for n in NAMES]


def run_checks(con, layout: dict, stated: dict, sources: dict | None = None, path: dict | None = None,
               shared: dict | None = None) -> dict:
    """{check id: Result}, in report order; ``path``: the run's critical path section, when already found;
    ``shared``: what the checks build once (the step graphs, ``Context.step_graphs``), kept for the caller."""
    from traceparse.analyzers.context import Context
    from traceparse.thresholds import check_thresholds

    limits, shared = check_thresholds(), {} if shared is None else shared
    return {m.SPEC.id: m.run(Context(con, layout, stated, limits[m.SPEC.id], sources or {}, path, shared))
            for m in analyzers()}


def specs() -> dict:
    return {m.SPEC.id: m.SPEC for m in analyzers()}
