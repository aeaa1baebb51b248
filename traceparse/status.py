"""A check's status: ok, warn, fail (graded) or not_applicable, and how statuses rank."""

SEVERITY = {"ok": 0, "warn": 1, "fail": 2}


def worst(statuses) -> str:
    graded = [s for s in statuses if s in SEVERITY]
    return max(graded, key=SEVERITY.get) if graded else "ok"


def at_least(status: str, level: str) -> bool:
    """Is ``status`` (ok/warn/fail/not_applicable) as bad as ``level`` (warn/fail)?"""
    return SEVERITY.get(status, -1) >= SEVERITY[level]
