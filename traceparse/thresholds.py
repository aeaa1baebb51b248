"""The checks' thresholds: ``rules/thresholds.toml``, one table per check and a `[stages]` table the bubble and
imbalance checks share; the only place they are set."""

import tomllib
from functools import cache
from importlib.resources import files


@cache
def check_thresholds() -> dict:
    """{check id: {threshold name: value}}."""
    return tomllib.loads(files("traceparse.rules").joinpath("thresholds.toml").read_text())
