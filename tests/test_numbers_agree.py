"""Wherever the analyze document states one quantity in two sections, the values are equal.

Over every fixture run and every bundled public GPU trace:
- compute per rank: bubble.per_stage vs imbalance.per_rank vs summary.per_rank (per step window);
- communication time per rank: summary.per_rank vs overlap.per_rank;
- per-strategy communication time sums to the per-rank total plus the time strategies communicate at
  once (overlap.concurrent_ns, counted by each), and untagged time is one of the strategies;
- the heavy pipeline stage: bubble.bottleneck_stage vs imbalance.heavy_stage.
"""

from pathlib import Path

import pytest

from traceparse.document import document

ROOT = Path(__file__).resolve().parents[1]
RUNS = sorted(p for p in (ROOT / "fixtures" / "runs").iterdir() if p.is_dir())
PUBLIC = sorted((ROOT / "fixtures" / "public").rglob("*.json.gz"))


def test_every_bundled_input_is_covered():
    assert len(RUNS) >= 21
    assert len(PUBLIC) >= 10, "the bundled public traces (fixtures/public) are missing"


@pytest.fixture(scope="module")
def doc(store):
    done = {}

    def get(path):
        if path not in done:
            done[path] = document(store(path))
        return done[path]

    return get


@pytest.mark.parametrize("path", RUNS + PUBLIC, ids=lambda p: p.name.split(".")[0] if p.suffix == ".gz" else p.name)
def test_one_number_per_quantity(doc, path):
    d = doc(path)
    summary = {r["rank"]: r for r in d["summary"]["per_rank"]}
    checks = d["checks"]

    # communication time per rank
    overlap = checks["overlap"]
    if overlap["status"] != "not_applicable":
        per_rank = {r["rank"]: r["comm_ns"] for r in overlap["per_rank"]}
        for rank, row in summary.items():
            assert per_rank.get(rank, 0) == (row["comm_ns"] or 0), f"rank {rank}"
        strategies = sum(v["comm_ns"] for v in overlap["per_strategy"].values())
        assert overlap["concurrent_ns"] >= 0
        assert strategies - overlap["concurrent_ns"] == sum(per_rank.values())
        untagged = overlap["per_strategy"].get("untagged", {}).get("comm_ns", 0)
        tagged = sum(v["comm_ns"] for s, v in overlap["per_strategy"].items() if s != "untagged")
        assert tagged == sum(per_rank.values()) - untagged + overlap["concurrent_ns"]

    # compute per rank, per step window
    n_windows = {rank: max(row["steps"], 1) for rank, row in summary.items()}  # no steps: one whole-trace window
    imbalance = {r["rank"]: r for r in checks["imbalance"]["per_rank"]}
    for rank, row in summary.items():
        if row["compute_ns"] is None:
            continue
        mean = row["compute_ns"] / n_windows[rank]
        assert imbalance[rank]["compute_ns"] == pytest.approx(mean, abs=1), f"rank {rank}"
    bubble = checks["bubble"]
    if bubble["status"] != "not_applicable":
        for stage in bubble["per_stage"]:
            assert stage["compute_ns"] == imbalance[stage["rank"]]["compute_ns"], f"rank {stage['rank']}"
        assert bubble["bottleneck_stage"] == checks["imbalance"]["heavy_stage"]
        assert bubble["bottleneck_over_mean"] == checks["imbalance"]["heavy_stage_over_mean"]
