"""Tags and layout claim only what the evidence holds, and say the same thing (docs/tagging-and-layout.md).

On every fixture run, every public trace, and one-rank traces built here from the bundled runs (one without
distributedInfo: world size unknown; one whose world is that one rank):
- each tagged strategy has a layout degree that is not 1 and that its tags do not contradict, or is unknown in
  both (the layout's degree null with its reason, the tags' groups unknown and, for TP, the variant too);
  a data-parallel replica group may span the sequence split with dp = 1 (docs/parallelism.md 5);
- the ZeRO stage is stated once: dp_replicate and dp_shard carry the sentence of that stage, never another's,
  and an unknown stage leaves the split unknown;
- a collective of one rank is tagged with no strategy, and says so among the untagged.
"""

import gzip
import json
import re

import pytest
from conftest import committed_runs, fast_few, public_trace
from test_repeat_runs import load_paths

from fixtures import public_traces
from traceparse.axes import MODEL_AXES
from traceparse.layout.stated import untagged
from traceparse.load.run import open_run
from traceparse.tagging.tag import UNTAGGED_WHY

RUNS = committed_runs()
NAMES = sorted(p.name for p in RUNS.glob("*") if (p / "truth.json").exists())
ONE_RANK = ("tp2", "dp2_tp2", "ddp2", "ep4", "ulysses4", "ring_cp4", "pp4_1f1b_m4", "fsdp2_zero3_dp4")
LONE_WHY, UNKNOWN_GROUP_WHY = UNTAGGED_WHY[0][1], UNTAGGED_WHY[1][1]


def facts(paths):
    """(tags, layout, evidence, untagged): tags as {strategy: [(variant, group size or None)]} per operation."""
    with open_run(paths, use_cache=False) as con:
        tags = {}
        for strategy, variant, size in con.execute(
                "SELECT strategy, variant, coalesce(len(group_ranks), group_size) FROM comm_ops "
                "WHERE strategy IS NOT NULL").fetchall():
            tags.setdefault(strategy, []).append((variant, size))
        got = {k: (json.loads(v), why) for k, v, why in con.execute("SELECT key, value, evidence FROM layout").fetchall()}
        return tags, {k: v for k, (v, _) in got.items()}, {k: w for k, (_, w) in got.items()}, untagged(con)


def assert_agree(tags, layout, evidence):
    for strategy, ops in tags.items():
        degree, why = layout[strategy], evidence[strategy]
        sizes = {size for _, size in ops if size}
        if degree is None:
            assert why, strategy
            if strategy in MODEL_AXES or strategy == "ep":
                assert not sizes, (strategy, why, sizes)  # unknown in both: the tags' groups too
            if strategy == "tp":
                assert {v for v, _ in ops} == {None}, "a TP variant is its group's pattern: unknown without it"
            continue
        if strategy == "dp" and degree == 1:  # a replica group over the sequence split (ring_cp4, ulysses4)
            seq = (layout["cp"] or 1) * (layout["sp"] or 1)
            assert seq > 1 and sizes and max(sizes) <= seq, (sizes, why)
            assert "replica groups still sync" in evidence["zero_stage"]
            continue
        assert degree != 1, (strategy, why)
        if strategy in MODEL_AXES:
            assert degree in sizes, (strategy, degree, sizes)
        if strategy == "ep":
            assert degree in sizes or (not sizes and "assumed to span the world" in why), (degree, sizes, why)


STAGE = re.compile(r"ZeRO-(\d)")


def assert_one_zero_stage(tags, layout, evidence):
    dp, zero = layout["dp"], layout["zero_stage"]
    split = (evidence["dp_replicate"], evidence["dp_shard"])
    assert split[0] == split[1]
    stages = {int(s) for s in STAGE.findall(split[0])}
    if dp is None or dp == 1:
        assert zero is None and not stages
        return
    if zero is None:
        assert not stages and layout["dp_replicate"] is None and layout["dp_shard"] is None
        assert "unknown" in split[0]
        return
    assert stages == {zero}, (zero, split[0])
    assert zero == max(int(v[-1]) for v, _ in tags["dp"])
    if zero == 0:
        assert (layout["dp_replicate"], layout["dp_shard"]) == (dp, 1)
    elif layout["dp_shard"] is None:
        assert layout["dp_replicate"] is None and "unknown" in split[0]
    else:
        assert layout["dp_replicate"] * layout["dp_shard"] == dp


def check(paths):
    tags, layout, evidence, left = facts(paths)
    assert_agree(tags, layout, evidence)
    assert_one_zero_stage(tags, layout, evidence)
    assert sum(w["ops"] for w in left["why"]) == left["ops"]
    return tags, layout, evidence, left


@pytest.mark.parametrize("name", fast_few(NAMES))
def test_fixture_run(name):
    check(load_paths(name))


@pytest.mark.slow
@pytest.mark.parametrize("rel", public_traces.names())
def test_public_trace(rel):
    check([public_trace(rel)])


def one_rank(tmp_path, run, world_size):
    """Rank 0 of the bundled run ``run`` alone: without distributedInfo (``world_size`` None: the world unknown),
    or with a world of that one rank, each process group reduced to it."""
    doc = json.loads(gzip.decompress((RUNS / run / "rank0.json.gz").read_bytes()))
    if world_size is None:
        del doc["distributedInfo"]
    else:
        info = doc["distributedInfo"]
        info["world_size"] = world_size
        for pg in info.get("pg_config", []):
            pg.update(pg_size=1, ranks=[0])
    path = tmp_path / run / "rank0.json.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return [path]


@pytest.mark.parametrize("run", fast_few(ONE_RANK))
def test_one_rank_of_a_world_of_unknown_size(tmp_path, run):
    tags, layout, evidence, left = check(one_rank(tmp_path, run, None))
    if "tp" in tags:
        assert layout["tp"] is None
    assert layout["dp"] is None and "world size unknown" in evidence["dp"]


def test_a_forward_all_reduce_of_an_unknown_group_is_tp_of_unknown_degree_and_variant(tmp_path):
    """tp2's rank 0 alone, world size unknown: its forward all-reduces are TP by their phase (docs/parallelism.md
    3.3), but neither their group's size (the degree) nor its pattern (megatron or megatron_sp) is in the trace;
    its backward all-reduces might be that TP group's or a DP group's: untagged, saying why (before: tp megatron
    beside tp=?, and the backward ones dp beside dp=1)."""
    tags, layout, evidence, left = check(one_rank(tmp_path, "tp2", None))
    assert set(tags) == {"tp"} and {v for v, _ in tags["tp"]} == {None}
    assert (layout["tp"], layout["dp"]) == (None, None)
    assert "none with a known group" in evidence["tp"]
    assert left["ops"] == len(tags["tp"]) and [w["why"] for w in left["why"]] == [UNKNOWN_GROUP_WHY]


@pytest.mark.parametrize("run", fast_few(ONE_RANK))
def test_a_world_of_one_rank_has_no_strategy(tmp_path, run):
    tags, layout, _, left = check(one_rank(tmp_path, run, 1))
    assert tags == {}
    assert all(layout[a] == 1 for a in ("dp", *MODEL_AXES, "ep"))
    assert left["ops"] == left["all_ops"] > 0 and [w["why"] for w in left["why"]] == [LONE_WHY]


@pytest.mark.slow
def test_a_public_trace_of_a_world_of_one_rank_has_no_dp():
    """A real trace whose distributedInfo says world_size 1 (before: 35 all-reduces and broadcasts tagged dp)."""
    tags, layout, _, left = check([public_trace("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")])
    assert tags == {} and layout["dp"] == 1
    assert [w["why"] for w in left["why"]] == [LONE_WHY]


@pytest.mark.slow
def test_a_zero_1_rank_of_unknown_groups_says_zero_1_once():
    """One rank of a 128-rank job whose optimizer all-gathers parameters, its groups unknown (before: zero_stage=1
    beside 'plain replication (ZeRO-0) over the 128 data-parallel ranks')."""
    _, layout, evidence, _ = check([public_trace("hta/trace_filter/sampled_rank-0.json.gz")])
    assert layout["zero_stage"] == 1 and (layout["dp_replicate"], layout["dp_shard"]) == (None, None)
    assert "state sharded (ZeRO-1)" in evidence["dp_shard"]
