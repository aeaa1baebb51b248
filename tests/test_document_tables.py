"""Every bundled run's analyze document, section by section, against the tables expected of it: derived from the
run's configuration (truth.json) or computed here from its trace files read the plain way (tests/document_tables.py
says what each section holds and where its expectation comes from). A change that moves a number fails naming the
section, the row and both values."""

import json

import pytest
from conftest import FIXTURE_RUNS, public_trace
from document_tables import differences, expected, got

from fixtures import public_traces
from traceparse.document import analyze

RUNS = {f"runs/{p.name}": p for p in sorted(FIXTURE_RUNS.iterdir()) if (p / "truth.json").exists()}
PUBLIC = {f"public/{rel}": rel for rel in sorted(public_traces.names())}
QUICK = ("runs/ddp2", "runs/pp4_1f1b_m4", "public/hta/nccl_parser_config/nccl_data.json.gz")


def _param(name):
    return pytest.param(name, marks=[] if name in QUICK else [pytest.mark.slow])


@pytest.mark.parametrize("name", [_param(n) for n in [*RUNS, *PUBLIC]])
def test_document_tables(name):
    if name in RUNS:
        path, truth = RUNS[name], json.loads((RUNS[name] / "truth.json").read_text())
    else:
        path, truth = public_trace(PUBLIC[name]), None  # skips, saying so, without the public traces
    doc = analyze([path], use_cache=False)
    moved = differences(expected(path, truth), got(doc, truth))
    assert not moved, f"{name}:\n  " + "\n  ".join(moved)


def test_every_fixture_run_has_its_truth():
    assert sorted(p.name for p in FIXTURE_RUNS.iterdir() if p.is_dir()) == sorted(n.removeprefix("runs/")
                                                                                  for n in RUNS)


def test_a_moved_number_is_named():
    """A planted change: one rank's step window a nanosecond longer, the path's end rank another; each named with
    both values."""
    exp = {"step windows": {(0, 2): 100, (1, 2): 90}, "critical path": {2: {"end_rank": 0, "length_ns": 100}}}
    have = {"step windows": {(0, 2): 101, (1, 2): 90}, "critical path": {2: {"end_rank": 1, "length_ns": 100}}}
    assert differences(exp, have) == [
        "step windows (0, 2): expected 100, got 101",
        "critical path 2: expected {'end_rank': 0, 'length_ns': 100}, got {'end_rank': 1, 'length_ns': 100}"]
