"""What a check receives: the store, the inferred layout, what the user stated, thresholds."""

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

from traceparse.store.query import rows


@cache
def thresholds() -> dict:
    return tomllib.loads(files("traceparse.rules").joinpath("thresholds.toml").read_text())


@dataclass
class Context:
    con: object  # read-only DuckDB connection to the store
    layout: dict  # traceparse.document.layout.inferred_layout(): values and "evidence"
    stated: dict  # what the user stated with --layout (degrees, model dims, optimizer)
    limits: dict  # this check's table of rules/thresholds.toml

    def rows(self, sql, params=None) -> list[dict]:
        return rows(self.con, sql, params)
