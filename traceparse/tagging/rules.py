"""Tagging rules: one TOML file per rule under rules/tags/, ``id`` equal to the file name.

A rule assigns a strategy (and provisional variant) to the operations whose
``comm_features`` row satisfies its ``when``, a SQL predicate over those
columns. Rules run in ``priority`` order; the first that matches an operation
tags it. ``validate`` checks every file; its examples are checked by running
``when`` on one-row tables made from them.
"""

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

import duckdb

from traceparse.rule_files import read_rule
from traceparse.store.schema import FEATURES as COLUMNS
from traceparse.axes import AXES

STRATEGIES = set(AXES)
REQUIRED = ("id", "title", "strategy", "variant", "priority", "confidence", "when", "why", "must_match", "must_not_match")


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    strategy: str
    variant: str
    priority: int
    confidence: float
    when: str
    why: str
    must_match: tuple
    must_not_match: tuple
    file: str


def rule_files():
    folder = files("traceparse.rules").joinpath("tags")
    return sorted((e for e in folder.iterdir() if e.name.endswith(".toml")), key=lambda e: e.name)


@cache
def load_rules() -> tuple[Rule, ...]:
    rules = []
    for entry in rule_files():
        data = tomllib.loads(entry.read_text())
        rules.append(
            Rule(**{k: data.get(k) for k in REQUIRED if k not in ("must_match", "must_not_match")},
                 must_match=tuple(data.get("must_match", ())), must_not_match=tuple(data.get("must_not_match", ())),
                 file=entry.name)
        )
    return tuple(sorted(rules, key=lambda r: (r.priority, r.id)))


def matches(con, rule: Rule, example: dict) -> bool:
    """Does ``rule.when`` hold for a comm_features row made of ``example``? Columns it leaves out
    are NULL, booleans false and ctx empty, as in a real row that lacks them."""
    cols = ", ".join(f"CAST(? AS {t}) AS {c}" for c, (t, _) in COLUMNS.items())
    defaults = {c: (False if t == "BOOLEAN" else "" if c == "ctx" else None) for c, (t, _) in COLUMNS.items()}
    values = [example.get(c, defaults[c]) for c in COLUMNS]
    return bool(con.execute(f"SELECT coalesce(({rule.when}), false) FROM (SELECT {cols})", values).fetchone()[0])


def validate() -> list[str]:
    """Every problem with the rule files, as 'file: problem' lines (empty when all is well)."""
    problems = []
    seen = {}
    from traceparse.store.build import macro_connection

    con = macro_connection()
    for entry in rule_files():
        name = entry.name
        data, found = read_rule(entry, name, REQUIRED, seen)
        problems += found
        if data is None:
            continue
        if ";" in data["when"]:
            problems.append(f"{name}: when must be one SQL predicate (no ';')")
            continue
        if data["strategy"] not in STRATEGIES:
            problems.append(f"{name}: strategy {data['strategy']!r} is not one of {sorted(STRATEGIES)}")
        if not data["must_match"] or not data["must_not_match"]:
            problems.append(f"{name}: needs at least one must_match and one must_not_match example")
        rule = Rule(**{k: data[k] for k in REQUIRED if k not in ("must_match", "must_not_match")},
                    must_match=tuple(data["must_match"]), must_not_match=tuple(data["must_not_match"]), file=name)
        for kind, expected in (("must_match", True), ("must_not_match", False)):
            for i, ex in enumerate(getattr(rule, kind)):
                bad = set(ex) - set(COLUMNS)
                if bad:
                    problems.append(f"{name}: {kind}[{i}] names unknown columns {', '.join(sorted(bad))}")
                    continue
                try:
                    got = matches(con, rule, ex)
                except duckdb.Error as e:
                    problems.append(f"{name}: when is not a valid predicate over comm_features ({str(e).splitlines()[0]})")
                    break
                if got != expected:
                    problems.append(f"{name}: {kind}[{i}] {'does not match' if expected else 'matches'}: {ex}")
    return problems
