"""The layout's counting convention (Megatron-Core / torchtitan) and the keys it adds, on the fixture runs.

world = dp x tp x pp x cp x sp; expert parallelism is carved out of the data-parallel ranks; dp_replicate x
dp_shard = dp; without a pipeline, microbatches is the gradient accumulation. Expected values are the
generator's configuration (truth.json); tests/test_fixture_runs.py checks every key on every run, these
tests check the evidence and the paths that run does not take.
"""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import committed_runs

RUNS = committed_runs("ddp2_accum_m4")


def layout(con):
    return {k: (json.loads(v), why) for k, v, why in con.execute("SELECT key, value, evidence FROM layout").fetchall()}


def test_moe_job_syncing_dense_gradients_over_all_ranks_is_data_parallel_over_all(store):
    for name, ep in (("ep4", 4), ("dp4_ep2", 2)):
        lay = layout(store(RUNS / name))
        assert (lay["dp"][0], lay["ep"][0], lay["zero_stage"][0]) == (4, ep, 0)
        assert "carved out of the 4 data-parallel" in lay["dp"][1]


def test_hsdp_reports_its_replicate_and_shard_split(store):
    lay = layout(store(RUNS / "hsdp_r2_s2"))
    assert (lay["dp"][0], lay["dp_replicate"][0], lay["dp_shard"][0], lay["zero_stage"][0]) == (4, 2, 2, 3)
    assert "HSDP" in lay["dp_shard"][1]
    # FSDP over all dp ranks shards over all of them; DDP replicates
    assert (layout(store(RUNS / "fsdp2_zero3_dp4"))["dp_shard"][0], layout(store(RUNS / "ddp4"))["dp_replicate"][0]) == (4, 4)


@pytest.mark.slow
def test_gradient_accumulation_without_pipeline_annotations(tmp_path, store):
    """ddp2_accum_m4 with DDP's forward annotation renamed: the 4 backward passes per step, each after forward
    compute, still give m = 4."""
    out = tmp_path / "accum"
    out.mkdir()
    for f in (RUNS / "ddp2_accum_m4").glob("rank*.json.gz"):
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        for e in doc["traceEvents"]:
            if e.get("name") == "DistributedDataParallel.forward":
                e["name"] = "model.forward"
        with gzip.open(out / f.name, "wt") as fh:
            json.dump(doc, fh)
    lay = layout(store(out))
    assert lay["microbatches"][0] == 4 and "backward passes" in lay["microbatches"][1]
    assert layout(store(RUNS / "ddp2_accum_m4"))["microbatches"][0] == 4
    assert layout(store(RUNS / "ddp4"))["microbatches"][0] == 1


def test_explain_layout_states_the_convention():
    from traceparse.document.glossary import METRICS

    definition = METRICS["layout"][1]
    for phrase in ("Megatron-Core", "torchtitan", "world = dp x tp x pp x cp x sp", "carved out", "dp_replicate",
                   "gradient accumulation"):
        assert phrase in definition
