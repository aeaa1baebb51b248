"""comm_ops built from the generated fixture runs equals their truth.json.

truth.json is computed by the generator from the model and the configuration,
never read from the traces; here every (rank, op, peer, bytes) per profiled
step must come out of the loader with the expected count.
"""

import json
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from traceparse.load import load_run

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
NAMES = sorted(p.name for p in RUNS.glob("*") if (p / "truth.json").exists()) if RUNS.exists() else []


@pytest.mark.skipif(not NAMES, reason="no generated fixture runs")
@pytest.mark.parametrize("name", NAMES)
def test_comm_ops_match_truth(name, tmp_path):
    truth = json.loads((RUNS / name / "truth.json").read_text())
    store, _ = load_run([RUNS / name], db=tmp_path / "s.duckdb")
    con = duckdb.connect(str(store), read_only=True)
    steps = [s for (s,) in con.execute("SELECT DISTINCT step FROM steps ORDER BY step").fetchall()]
    assert len(steps) == truth["profiled_steps"]
    expected = Counter()
    for row in truth["comm"]:
        peer = row["peer"] if row["op"] in ("send", "recv") else None
        key = (row["rank"], row["op"], tuple(row["group_ranks"]), peer, row["bytes_in"], row["bytes_out"])
        expected[key] += row["count"]
    got = Counter()
    for step in steps:
        for rank, op, group, peer, b_in, b_out in con.execute(
            "SELECT rank, op, group_ranks, peer, bytes_in, bytes_out FROM comm_ops WHERE step = ?", [step]
        ).fetchall():
            got[(rank, op, tuple(group or ()), peer if op in ("send", "recv") else None, b_in, b_out)] += 1
    per_step = Counter({k: v // len(steps) for k, v in got.items()})
    assert all(v % len(steps) == 0 for v in got.values()), "steps differ in communication"
    assert per_step == expected
