"""Checks: one analyzer per module (installed as traceparse.analyzers).

Each module has ``SPEC`` (analyzers.base.Spec) and ``run(ctx) -> Result``; it
returns data and never prints or plots. ``ANALYZERS`` is the explicit list, in
report order.
"""

from importlib import import_module

NAMES = ("bubble", "overlap", "imbalance", "comm_volume", "memory")


def analyzers():
    return [import_module(f"{__name__}.{n}") for n in NAMES]
