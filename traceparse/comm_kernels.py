"""Rules naming custom communication kernels (rules/comm_kernels/*.toml)."""

import tomllib
from functools import cache
from importlib.resources import files


@cache
def comm_kernel_rules() -> tuple[dict, ...]:
    folder = files("traceparse.rules").joinpath("comm_kernels")
    rules = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            rule = tomllib.loads(entry.read_text())
            rule["file"] = entry.name
            rules.append(rule)
    return tuple(rules)
