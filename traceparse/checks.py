"""Run every check (traceparse.analyzers) on a store."""

from .analyzers import analyzers
from .analyzers.context import Context, thresholds


def run_checks(con, layout: dict, stated: dict, sources: dict | None = None) -> dict:
    """{check id: Result}, in report order."""
    limits = thresholds()
    return {m.SPEC.id: m.run(Context(con, layout, stated, limits.get(m.SPEC.id, {}), sources or {}))
            for m in analyzers()}


def specs() -> dict:
    return {m.SPEC.id: m.SPEC for m in analyzers()}
