"""bench/replicate.py: an N-rank run made from a real fixture run reads back as the wider job.

Expected values come from the source run's truth.json and the replication factor, never from the tool."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
from conftest import public_trace

from traceparse.document import layout_document
from traceparse.load.run import open_run

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "runs"
sys.path.insert(0, str(ROOT / "bench"))
import replicate  # noqa: E402 -- bench/ is no package

pytestmark = pytest.mark.slow


def truth(run):
    return json.loads((RUNS / run / "truth.json").read_text())


def read(path):
    with gzip.open(path, "rb") as f:
        return json.load(f)


def inferred(folder):
    """(layout, world size, comm ops without a group) as the analyzer reads the folder."""
    with open_run([folder], use_cache=False) as con:
        lay = layout_document(con)["layout"]
        (world,) = con.execute("SELECT DISTINCT world_size FROM ranks").fetchone()
        (open_ops,) = con.execute("SELECT count(*) FROM comm_ops WHERE group_ranks IS NULL").fetchone()
    return lay, world, open_ops


def test_ddp2_to_8_ranks(tmp_path):
    t, n = truth("ddp2"), 8
    k = n // t["world_size"]
    written = replicate.replicate(RUNS / "ddp2", tmp_path, n)
    assert [p.name for p in written] == [f"rank{i}.json.gz" for i in range(n)]
    lay, world, open_ops = inferred(tmp_path)
    assert (lay["dp"], world, open_ops) == (t["layout"]["dp"] * k, n, 0)


@pytest.fixture(scope="module")
def dp_pp_tp_x2(tmp_path_factory):
    """dp2_pp2_tp2 replicated x2 (16 ranks, jitter 20 us): (source, replica folder, k, jitter)."""
    out, src = tmp_path_factory.mktemp("x2"), RUNS / "dp2_pp2_tp2"
    n = 2 * truth("dp2_pp2_tp2")["world_size"]
    replicate.replicate(src, out, n, seed=7, jitter_us=20.0)
    return src, out, 2, 20.0


def test_dp2_pp2_tp2_x2_layout(dp_pp_tp_x2):
    _, out, k, _ = dp_pp_tp_x2
    t = truth("dp2_pp2_tp2")["layout"]
    lay, world, open_ops = inferred(out)
    assert (lay["dp"], lay["pp"], lay["tp"]) == (t["dp"] * k, t["pp"], t["tp"])
    assert world == k * truth("dp2_pp2_tp2")["world_size"] and open_ops == 0


def _check_groups(docs):
    """Each rank's groups contain it; every member lists the same ranks under the same name."""
    n = len(docs)
    listed = {}  # rank -> {(where, name): ranks}
    for rank, doc in docs.items():
        info, meta = doc["distributedInfo"], doc["traceparse"]
        assert (info["rank"], info["world_size"], meta["rank"], meta["world_size"]) == (rank, n, rank, n)
        assert all(g["pg_size"] == len(g["ranks"]) for g in info["pg_config"])
        listed[rank] = {("pg_config", g["pg_name"]): g["ranks"] for g in info["pg_config"]}
        listed[rank].update({("metadata", g["name"]): g["ranks"] for g in meta["groups"]})
    for rank, groups in listed.items():
        for key, ranks in groups.items():
            assert rank in ranks and len(set(ranks)) == len(ranks) and all(0 <= r < n for r in ranks)
            assert all(listed[m].get(key) == ranks for m in ranks), (rank, key)


def test_groups_and_mesh_consistent(dp_pp_tp_x2):
    src, out, k, _ = dp_pp_tp_x2
    docs = {i: read(out / f"rank{i}.json.gz") for i in range(k * truth("dp2_pp2_tp2")["world_size"])}
    _check_groups(docs)
    t = truth("dp2_pp2_tp2")["layout"]
    sizes = {"dp": t["dp"] * k, "pp": t["pp"], "tp": t["tp"]}
    for rank, doc in docs.items():
        mesh = doc["traceparse"]["mesh"]
        assert dict(zip(mesh["dims"], mesh["shape"], strict=True)) == sizes
        # row-major coordinate of the rank in the (dp, pp, tp) mesh
        c = dict(zip(mesh["dims"], mesh["coordinate"], strict=True))
        assert (c["dp"] * sizes["pp"] + c["pp"]) * sizes["tp"] + c["tp"] == rank
        for g in doc["traceparse"]["groups"]:
            if g["dim"] in sizes:
                assert len(g["ranks"]) == sizes[g["dim"]]


def test_timestamps_shift_by_one_offset_per_rank(dp_pp_tp_x2):
    src, out, k, jitter = dp_pp_tp_x2
    world = truth("dp2_pp2_tp2")["world_size"]
    offsets = set()
    for r in (0, world - 1):
        before = [e["ts"] for e in read(src / f"rank{r}.json.gz")["traceEvents"]]
        for j in range(k):
            after = [e["ts"] for e in read(out / f"rank{j * world + r}.json.gz")["traceEvents"]]
            assert len(after) == len(before)
            deltas = [a - b for a, b in zip(after, before, strict=True)]
            off = deltas[0]
            assert -1e-3 <= off <= jitter + 1e-3
            assert max(abs(d - off) for d in deltas) < 2e-3  # float rounding at ~5e12 us: below a nanosecond
            offsets.add(round(off, 3))
    assert len(offsets) > 1  # one offset per rank, not one for all


def test_nccl_group_args():
    """A real NCCL trace (rank 0 of 8, Process Group Ranks / Rank / Global rank start+stride on its
    record_param_comms and kernels), copied as replica 1 of 2: every event's args name a group of the new
    distributedInfo, with its ranks, size, start/stride and this rank's index in it."""
    src = replicate.SourceRank(public_trace("tracelens/b200_vllm_tp8_rank0.json.gz"), 0, 8)
    doc = src.copy(1, 2, 0.0)
    n = 8
    groups = {g["pg_name"]: g["ranks"] for g in doc["distributedInfo"]["pg_config"]}
    assert doc["distributedInfo"]["rank"] == n and all(n in r for r in groups.values())
    checked = 0
    for e in doc["traceEvents"]:
        a = e.get("args") or {}
        if "Process Group Ranks" not in a:
            continue
        ranks = json.loads(a["Process Group Ranks"])
        assert groups[a["Process Group Name"]] == ranks and a["Group size"] == len(ranks)
        if "Global rank start" in a:
            assert list(range(a["Global rank start"], ranks[-1] + 1, a["Global rank stride"])) == ranks
        if "Rank" in a:
            assert ranks[a["Rank"]] == n
        checked += 1
    assert checked > 0
