"""The predicates that decide what an event or an operation is are written once, in traceparse/store/macros.sql (the
job's size in traceparse/vocabulary/world.sql), and every stage selects with them (docs/schema.md, One definition each): their values on small inputs, worked out from
PyTorch's own names, and a scan that no SQL or Python beside them spells one of them again."""

import re
from pathlib import Path

import duckdb
import pytest
from conftest import package_sources

from traceparse.store.query import sql_file

ROOT = Path(__file__).resolve().parents[1]
# a starts_with / LIKE / regexp test, or a Python startswith, on a prefix a predicate owns
RESPELLED = re.compile(
    r"""(starts_with\([^)]*|LIKE\s+|regexp_matches\([^)]*)'+\^?(ProfilerStep#|Optimizer\\?\.|autograd::)"""
    r"""|startswith\(\s*["'](ProfilerStep#|Optimizer\.|autograd::)"""
    r"""|coalesce\(\s*\w*\.?exec_ts_ns\s*\+\s*\w*\.?exec_dur_ns"""
    r"""|(max|min|any_value|first)\(\s*\w*\.?world_size\s*\)""")  # the job's size: vocabulary/world.sql
OWNERS = ("macros.sql", "world.sql")


@pytest.fixture(scope="module")
def con():
    c = duckdb.connect()
    c.execute(sql_file("traceparse.store", "macros.sql"))
    yield c
    c.close()


@pytest.mark.parametrize("sql, want", [
    ("is_profiler_step('ProfilerStep#12')", True),
    ("is_profiler_step('ProfilerStep')", False),  # no step number: not torch.profiler's marker
    ("is_optimizer('Optimizer.step#AdamW.step')", True),
    ("is_optimizer('Optimizer.zero_grad#SGD.zero_grad')", True),
    ("is_optimizer('## optimizer ##')", False),  # a user's annotation: torch.optim records its own inside it
    ("optimizer_class('Optimizer.step#ZeroRedundancyOptimizer.step')", "ZeroRedundancyOptimizer"),
    ("optimizer_class('Optimizer.zero_grad#AdamW.zero_grad')", None),  # the class of a step, not of zero_grad
    ("is_autograd_frame('autograd::engine::evaluate_function: MmBackward0')", True),
    ("is_autograd_frame('torch::autograd::AccumulateGrad')", False),
    # a send is ready at its call (a transfer starts once both sides posted theirs), a collective at its execution
    ("comm_arrival_ns('send', 500, 300)", 300),
    ("comm_arrival_ns('all_reduce', 500, 300)", 500),
    ("comm_arrival_ns('all_reduce', NULL, 300)", 300),
    # a completion is the execution's end, else the call's
    ("comm_done_ns(500, 40, 300, 400)", 540),
    ("comm_done_ns(NULL, NULL, 300, 400)", 700),
])
def test_a_predicate_on_small_inputs(con, sql, want):
    assert con.execute(f"SELECT {sql}").fetchone()[0] == want


def test_no_stage_spells_a_predicate_again():
    """A prefix or a completion rule that macros.sql owns appears nowhere else in the package's SQL or Python."""
    found = []
    for rel, path in package_sources():
        if path.name in OWNERS:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if RESPELLED.search(line) and not line.lstrip().startswith(("--", "#")):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []


def test_the_scan_finds_a_respelled_predicate():
    assert RESPELLED.search("WHERE starts_with(e.name, 'Optimizer.step')")
    assert RESPELLED.search("AND name LIKE 'ProfilerStep#%'")
    assert RESPELLED.search('kind = "B" if t["name"].startswith("autograd::") else "F"')
    assert RESPELLED.search("SELECT coalesce(o.exec_ts_ns + o.exec_dur_ns, o.host_ts_ns + o.host_dur_ns)")
    assert RESPELLED.search("(SELECT max(world_size) FROM ranks)")
    assert not RESPELLED.search("WHERE is_optimizer(e.name)")


@pytest.mark.parametrize("stated, comm, want", [
    ([4, 4], True, (4, 2, 4)),  # two ranks of a job of 4 that says so
    ([2, 4], True, (None, 2, None)),  # files that disagree (--allow-mixed) state no size
    ([None], True, (None, 1, None)),  # one rank's trace of a larger job that names no size: unknown
    ([None, None], False, (None, 2, 2)),  # no communication: nothing says another rank exists
])
def test_the_jobs_size(stated, comm, want):
    """vocabulary/world.sql: (stated, loaded, world_size) from each rank's distributedInfo world size."""
    c = duckdb.connect()
    c.execute("CREATE TABLE ranks (rank INTEGER, world_size INTEGER); CREATE TABLE comm_ops (rank INTEGER)")
    c.executemany("INSERT INTO ranks VALUES (?, ?)", list(enumerate(stated)))
    if comm:
        c.execute("INSERT INTO comm_ops VALUES (0)")
    c.execute(sql_file("traceparse.vocabulary", "world.sql"))
    assert c.execute("SELECT stated, loaded, world_size FROM world").fetchone() == want
