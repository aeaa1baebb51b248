"""The generated fixture runs against their truth.json.

truth.json is computed by the generator from the model and the configuration,
never read from the traces. Per rank and profiled step, every (op, group, peer,
bytes) must come out of the loader with the expected count, tagged with the
expected strategy and variant; the inferred layout must equal the configured one.
"""

import json
from collections import Counter

import pytest
from conftest import committed_runs, fast_few
from test_repeat_runs import load_paths

from traceparse.axes import LAYOUT_KEYS as KEYS

RUNS = committed_runs()
NAMES = sorted(p.name for p in RUNS.glob("*") if (p / "truth.json").exists())


@pytest.fixture(scope="module")
def run(store):
    """The run's store (its first window for a run profiled in several: tests/test_repeat_runs.py reads them
    all) and truth.json."""
    return lambda name: (store(*load_paths(name)), json.loads((RUNS / name / "truth.json").read_text()))


def per_step(con, truth, columns):
    """Counter of comm_ops rows (rank, op, group, peer, bytes, *columns) per profiled step."""
    steps = [s for (s,) in con.execute("SELECT DISTINCT step FROM steps ORDER BY step").fetchall()]
    assert len(steps) == truth["profiled_steps"]
    got = Counter()
    extra = "".join(f", {c}" for c in columns)
    for (step,) in [(s,) for s in steps]:
        for rank, op, group, peer, b_in, b_out, *rest in con.execute(
            f"SELECT rank, op, group_ranks, peer, bytes_in, bytes_out{extra} FROM comm_ops WHERE step = ?", [step]
        ).fetchall():
            got[(rank, op, tuple(group or ()), peer if op in ("send", "recv") else None, b_in, b_out, *rest)] += 1
    assert all(v % len(steps) == 0 for v in got.values()), "steps differ in communication"
    return Counter({k: v // len(steps) for k, v in got.items()})


def expected(truth, columns):
    out = Counter()
    for row in truth["comm"]:
        peer = row["peer"] if row["op"] in ("send", "recv") else None
        key = (row["rank"], row["op"], tuple(row["group_ranks"]), peer, row["bytes_in"], row["bytes_out"])
        out[key + tuple(row[c] for c in columns)] += row["count"]
    return out


@pytest.mark.parametrize("name", fast_few(NAMES))
def test_comm_ops_match_truth(name, run):
    con, truth = run(name)
    assert per_step(con, truth, []) == expected(truth, [])


@pytest.mark.parametrize("name", fast_few(NAMES))
def test_every_operation_gets_its_strategy_and_variant(name, run):
    con, truth = run(name)
    cols = ["strategy", "variant"]
    assert per_step(con, truth, cols) == expected(truth, cols)


@pytest.mark.parametrize("name", fast_few(NAMES))
def test_inferred_layout_equals_configuration(name, run):
    con, truth = run(name)
    got = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM layout").fetchall()}
    assert {k: got[k] for k in KEYS} == {k: truth["layout"][k] for k in KEYS}
