"""The vocabulary's SQL modules as a library: what each defines and what it reads, and the order to run them in,
derived from those declarations.

Each ``traceparse/vocabulary/*.sql`` declares what it reads on a line of its own, ``-- reads: events, main_threads``
(store tables, the parser's tables, store macros, or objects another module defines); what it defines is read from
its statements (``CREATE [OR REPLACE] [TEMP] TABLE|VIEW|MACRO name``, ``INSERT INTO name``). ``order`` puts modules
after the modules defining what they read; ``use`` makes the TEMP objects a reader names on a connection, with the
modules they read first, each module once per connection (``store.query.define``). tests/test_vocabulary_modules.py
holds each declaration to the module's SQL.
"""

import re
from functools import cache
from importlib.resources import files

from traceparse.store.query import define, sql_file

PACKAGE = "traceparse.vocabulary"
READS = re.compile(r"^-- reads:(.*)$", re.MULTILINE)
DEFINES = re.compile(r"(?i)\b(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?(?:TABLE|VIEW|MACRO)\s+"
                     r"(?:IF\s+NOT\s+EXISTS\s+)?|INSERT\s+INTO\s+)([a-z_][a-z0-9_]*)")


@cache
def modules() -> dict[str, tuple[frozenset, tuple]]:
    """{module file: (the objects it defines, what it declares it reads)} of every vocabulary SQL module."""
    out = {}
    for path in sorted(p.name for p in files(PACKAGE).iterdir() if p.name.endswith(".sql")):
        text = sql_file(PACKAGE, path)
        declared = READS.search(text)
        reads = tuple(r.strip() for r in declared[1].split(",") if r.strip()) if declared else ()
        body = re.sub(r"--[^\n]*", " ", text)
        out[path] = (frozenset(DEFINES.findall(body)), reads)
    return out


def module_of(obj: str) -> str:
    """The module that defines ``obj``."""
    found = [m for m, (defined, _) in modules().items() if obj in defined]
    if len(found) != 1:
        raise KeyError(f"{obj}: defined by {found or 'no vocabulary module'}")
    return found[0]


def order(names) -> list[str]:
    """The modules ``names``, each after those of them that define what it reads (otherwise as given)."""
    names = list(names)
    defined = {o: m for m in names for o in modules()[m][0]}
    out, seen = [], set()

    def visit(m, path=()):
        if m in seen:
            return
        if m in path:
            raise ValueError(f"vocabulary modules read each other in a cycle: {' -> '.join(path + (m,))}")
        for r in modules()[m][1]:
            if defined.get(r) not in (None, m):
                visit(defined[r], path + (m,))
        seen.add(m)
        out.append(m)

    for m in names:
        visit(m)
    return out


@cache
def needed(objs: tuple) -> tuple[str, ...]:
    """The modules that make ``objs``, with every vocabulary module they read from (transitively), in order (each
    tuple of objects resolved once: a reader asks on every read)."""
    todo, found = [module_of(o) for o in objs], []
    while todo:
        m = todo.pop()
        if m in found:
            continue
        found.append(m)
        for r in modules()[m][1]:
            try:
                todo.append(module_of(r))
            except KeyError:
                pass  # a store table or macro: there already
    return tuple(order(sorted(found)))


def use(con, *objs):
    """Make the TEMP vocabulary objects ``objs`` on ``con`` (a reader's, or the build's for layout inference and
    tagging): their modules and the modules they read, in order, each once per connection, but those the build runs
    into the store (``built``)."""
    for m in needed(objs):
        if not built(m):
            define(con, PACKAGE, m)


@cache
def built(module: str) -> bool:
    """Whether the build runs ``module``: it fills a table of the store (``schema``: the parser's tables, the
    vocabulary's) or one of the build's intermediate tables, so a reader finds its objects there already."""
    from traceparse.store.parts import BUILD_ONLY
    from traceparse.store.schema import TABLES, VOCABULARY

    return bool(modules()[module][0] & {*TABLES, *VOCABULARY, *BUILD_ONLY})
