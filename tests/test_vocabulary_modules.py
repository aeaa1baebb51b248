"""The vocabulary's SQL modules declare what they read (``-- reads:``), and the order they run in is derived from
those declarations (traceparse/vocabulary/modules.py): each declaration is what the module's SQL reads, every read is
a table, macro or object something defines, and the build runs each module after what it reads."""

import re

import pytest
from conftest import package_sources

from traceparse.store.parts import BUILD_ONLY
from traceparse.store.query import sql_file
from traceparse.store.schema import TABLES, VOCABULARY
from traceparse.vocabulary import CROSS_RANK, TAGGED, UNTAGGED
from traceparse.vocabulary.modules import modules, needed, order, use
from traceparse.vocabulary.per_rank import PER_RANK

# what a per-rank task's connection holds before per_rank.sql (traceparse/vocabulary/per_rank.py: prepare_ranks)
TASK = {"clock", "raw_events", "raw_threads", "raw_op_args", "raw_comm_args", "raw_memory"}
STORE_MACROS = set(re.findall(r"(?i)CREATE\s+OR\s+REPLACE\s+MACRO\s+([a-z_]+)\s*\([^)]*\)\s+AS\s+TABLE",
                              sql_file("traceparse.store", "macros.sql")))
DEFINED = {o for defined, _ in modules().values() for o in defined}
# the vocabulary's scalar macros (called as name(...), not read FROM): host_cause.sql's host_cause
SCALAR = {m for name in modules() for m in re.findall(r"(?i)MACRO\s+([a-z_]+)\s*\([^)]*\)\s+AS\s*\(",
                                                       sql_file("traceparse.vocabulary", name))}
KNOWN = set(TABLES) | set(VOCABULARY) | set(BUILD_ONLY) | TASK | STORE_MACROS | DEFINED


def found_reads(text: str, own: frozenset) -> set:
    """The known objects the SQL reads (after FROM or JOIN, in a query or in a query string a macro is given; a
    vocabulary scalar macro, where called), but its own objects and its CTEs."""
    body = re.sub(r"--[^\n]*", " ", text)
    ctes = {c.lower() for c in re.findall(r"(?i)\b([a-z_][a-z0-9_]*)\s*(?:\([^()]*\))?\s+AS\s*(?:NOT\s+)?"
                                          r"(?:MATERIALIZED\s*)?\(", body)}
    names = re.findall(r"(?i)(?<!DISTINCT )\b(?:FROM|JOIN)\s+([a-z_][a-z0-9_]*)", body)
    calls = {m for m in SCALAR if re.search(rf"\b{m}\s*\(", body)}
    return {n for n in names if n in KNOWN and n.lower() not in ctes and n not in own} | (calls - own)


@pytest.mark.parametrize("module", sorted(modules()))
def test_each_module_declares_what_it_reads(module):
    own, declared = modules()[module]
    text = sql_file("traceparse.vocabulary", module)
    assert re.search(r"^-- reads:", text, re.MULTILINE), f"{module}: no '-- reads:' line"
    assert set(declared) == found_reads(text, own), module
    assert set(declared) <= KNOWN, f"{module} reads what nothing defines: {set(declared) - KNOWN}"


def test_the_build_runs_each_module_after_what_it_reads():
    for group in (UNTAGGED, CROSS_RANK, TAGGED):
        assert list(group) == order(group)
    vocab = [n for package, n in PER_RANK if package == "traceparse.vocabulary"]
    seen = set()
    for m in vocab:  # within a task, a module's reads are made before it (or come from the task or the store)
        for r in modules()[m][1]:
            makers = [x for x in vocab if r in modules()[x][0]]
            assert not makers or makers[0] in seen, (m, r)
        seen.add(m)


def test_order_puts_a_reader_after_its_sources_and_refuses_a_cycle(monkeypatch):
    import traceparse.vocabulary.modules as mod

    assert order(["strategy_comm.sql", "arrivals.sql", "intervals.sql"]) == [
        "arrivals.sql", "intervals.sql", "strategy_comm.sql"]
    fake = {"a.sql": (frozenset({"a"}), ("b",)), "b.sql": (frozenset({"b"}), ("a",))}
    monkeypatch.setattr(mod, "modules", lambda: fake)
    with pytest.raises(ValueError, match="cycle"):
        mod.order(["a.sql", "b.sql"])


def test_use_makes_a_temp_object_with_the_temp_modules_it_reads(tmp_path):
    """cp_blocking (step_graph.sql) reads cp_p2p (p2p_pairs.sql): use makes both; the stored tables it reads are the
    store's own, never made again."""
    from traceparse.load.run import connect, load_run
    from pathlib import Path

    assert needed(("cp_blocking",))[-2:] == ("p2p_pairs.sql", "step_graph.sql")
    store, _ = load_run([Path(__file__).resolve().parent.parent / "fixtures" / "runs" / "ddp2"],
                        db=tmp_path / "s.duckdb")
    con = connect(store)
    try:
        use(con, "cp_blocking")
        assert con.execute("SELECT count(*) FROM cp_blocking(0)").fetchone()[0] > 0
        assert con.execute("SELECT count(*) FROM cp_p2p").fetchone()[0] == 0  # ddp2 has no send or receive
    finally:
        con.close()


def test_readers_make_vocabulary_objects_through_use():
    """Only the build runs a vocabulary module by its file (per_rank.py, the vocabulary's __init__, modules.py); every
    other reader names the objects it reads (modules.use), so what a module reads is made first, once per connection."""
    build = {"traceparse/vocabulary/per_rank.py", "traceparse/vocabulary/__init__.py", "traceparse/vocabulary/modules.py"}
    found = []
    for name, path in package_sources(("traceparse", "analyzers", "bench"), (".py",)):
        text = path.read_text()
        own = name.startswith("traceparse/vocabulary/") and "sql_file(__package__" in text
        if name not in build and ('sql_file("traceparse.vocabulary"' in text or own):
            found.append(name)
    assert not found, f"run a vocabulary module by its file: {found}"
