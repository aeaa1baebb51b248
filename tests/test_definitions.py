"""The predicates that decide what an event or an operation is are written once, in traceparse/store/macros.sql, and
every stage selects with them (docs/schema.md, One definition each): their values on small inputs, worked out from
PyTorch's own names, and a scan that no SQL or Python beside them spells one of them again."""

import re
from pathlib import Path

import duckdb
import pytest

from traceparse.store.query import sql_file

ROOT = Path(__file__).resolve().parents[1]
# a starts_with / LIKE / regexp test, or a Python startswith, on a prefix a predicate owns
RESPELLED = re.compile(
    r"""(starts_with\([^)]*|LIKE\s+|regexp_matches\([^)]*)'+\^?(ProfilerStep#|Optimizer\\?\.|autograd::)"""
    r"""|startswith\(\s*["'](ProfilerStep#|Optimizer\.|autograd::)"""
    r"""|coalesce\(\s*\w*\.?exec_ts_ns\s*\+\s*\w*\.?exec_dur_ns""")


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
    for folder in ("traceparse", "analyzers"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".sql", ".py") or path.name == "macros.sql" or "__pycache__" in path.parts:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if RESPELLED.search(line) and not line.lstrip().startswith(("--", "#")):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []


def test_the_scan_finds_a_respelled_predicate():
    assert RESPELLED.search("WHERE starts_with(e.name, 'Optimizer.step')")
    assert RESPELLED.search("AND name LIKE 'ProfilerStep#%'")
    assert RESPELLED.search('kind = "B" if t["name"].startswith("autograd::") else "F"')
    assert RESPELLED.search("SELECT coalesce(o.exec_ts_ns + o.exec_dur_ns, o.host_ts_ns + o.host_dur_ns)")
    assert not RESPELLED.search("WHERE is_optimizer(e.name)")
