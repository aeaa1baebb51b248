"""The critical path of each step (the analyze document's ``critical_path``: traceparse/vocabulary/critical_path.py,
the binding path of the step graph).

A tiny hand-written two-rank GPU job, every number worked out by hand; then every bundled run: the path's pieces tile
the step exactly (its length is the measured step), and on the runs built with a slow rank or a heavy pipeline
stage the path runs mostly through it.
"""

import json
import sys
from pathlib import Path

import pytest

from conftest import FIXTURE_RUNS, committed_runs, needed, public_trace, public_trace_files
from traces import step, trace, write, x

from traceparse import stats
from traceparse.document import analyze
from traceparse.load.run import open_run
from traceparse.vocabulary.step_graph import by_stretch, step_graphs
from traceparse.vocabulary.critical_path import BindingPath, critical_path_section, totals

US = 1000
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def rank_trace(rank, gemm_us, allreduce_start_us, step_us):
    """One step [1000, 1000 + step_us] on the main thread (pid 1, tid 1): launch a gemm [1000, 1010] that runs on
    stream 7 [1020, 1020 + gemm_us]; launch an all-reduce [1015, 1025] that runs on stream 20 from
    ``allreduce_start_us`` (after the gemm, by an event: rank 0 starts it when its own gemm ends, but both ranks
    end it at 1620, when the later one arrived plus 100 of transfer); wait in cudaStreamSynchronize [1030, 1625];
    then host work until the step's end."""
    def launch(c, ts, kernel, start, dur, stream):
        return [x("cudaLaunchKernel", ts, 10, cat="cuda_runtime", correlation=c),
                x(kernel, start, dur, cat="kernel", pid=0, tid=stream, stream=stream, device=0, correlation=c)]
    ev = [step(0, 1000, step_us)]
    ev += launch(1, 1000, "gemm", 1020, gemm_us, 7)
    ev.append(x("record_param_comms", 1014, 12, **{
        "Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
        "Group size": 2, "Process Group Name": "0", "Process Group Ranks": "[0, 1]"}))
    ev += launch(2, 1015, ALLREDUCE, allreduce_start_us, 1620 - allreduce_start_us, 20)
    ev.append(x("cudaStreamSynchronize", 1030, 595, cat="cuda_runtime"))
    ev.append(x("optimizer_tail", 1625, 1000 + step_us - 1625))
    return trace(ev, rank=rank, world_size=2)


def two_ranks(tmp_path, step_us):
    """Rank 0: gemm 200 us, all-reduce from 1220; rank 1 (slow): gemm 500 us, all-reduce from 1520."""
    return [write(tmp_path / "rank0.json", rank_trace(0, 200, 1220, step_us[0])),
            write(tmp_path / "rank1.json", rank_trace(1, 500, 1520, step_us[1]))]


def path_of(files):
    (s,) = analyze(files, use_cache=False)["critical_path"]["steps"]
    return s


def test_the_slow_rank_ending_last(tmp_path):
    s = path_of(two_ranks(tmp_path, (700, 701)))
    # from rank 1's end (1701) back to its window's start (1000): host [1625, 1701] = 76; the synchronization waited
    # for the all-reduce's end (1620): host [1620, 1625] = 5; the all-reduce was released by rank 1 itself (it
    # arrived last, at 1520): communication [1520, 1620] = 100; it started when the gemm of stream 7 ended (1520,
    # later than its launch, 1025): the gemm [1020, 1520] = 500 compute; launched at 1000: launch [1000, 1020] = 20
    assert (s["length_ns"], s["covered_ns"], s["end_rank"]) == (701 * US, 701 * US, 1)
    assert s["by_rank"] == {"1": 701 * US}
    assert s["by_cause"] == {"compute": 500 * US, "communication": 100 * US, "host": 81 * US, "launch": 20 * US}
    assert s["top"][0]["name"] == "gemm" and s["top"][0]["share"] == round(500 / 701, 4)


def test_a_fast_rank_ending_last_waits_for_the_slow_one(tmp_path):
    s = path_of(two_ranks(tmp_path, (702, 700)))
    # from rank 0's end (1702): host [1625, 1702] = 77 and [1620, 1625] = 5; rank 0's all-reduce (from 1220) was
    # released by rank 1 at 1520: communication [1520, 1620] = 100 on rank 0, and the time before is waiting for
    # rank 1, not on the path; rank 1 at 1520: its all-reduce started after its gemm: compute 500, launch 20
    assert (s["length_ns"], s["covered_ns"], s["end_rank"]) == (702 * US, 702 * US, 0)
    assert s["by_rank"] == {"1": 520 * US, "0": 182 * US}
    assert s["by_cause"] == {"compute": 500 * US, "communication": 100 * US, "host": 82 * US, "launch": 20 * US}
    assert s["by_strategy"] == {next(iter(s["by_strategy"])): 100 * US}


def test_a_kernel_waits_for_the_event_it_started_after(tmp_path):
    """Each all-reduce starts when its rank's gemm ends (an event between streams), long after its launch: the step
    graph holds that edge, so rank 1's gemm 200 us shorter starts its all-reduce, releases both ranks' and ends the
    step 200 us sooner; and the path runs through that gemm, not through a stretch of the stream queued on
    nothing."""
    with open_run([str(p) for p in two_ranks(tmp_path, (700, 701))]) as con:
        (g,) = step_graphs(con)
        faster = g.replay(by_stretch(lambda r, _lane, name, *_: 0.6 if (r, name) == (1, "gemm") else 1.0))
        assert g.end_ns() - faster["end_ns"] == 200 * US
        s = critical_path_section([g])["steps"][0]
        assert s["top"][0]["name"] == "gemm" and s["top"][0]["dur_ns"] == 500 * US


@pytest.mark.slow
def test_text_page_and_explain(tmp_path):
    from click.testing import CliRunner

    from traceparse.cli import main
    from traceparse.render.charts import charts
    from traceparse.render.text import render

    doc = analyze(two_ranks(tmp_path, (702, 700)), use_cache=False)
    assert "critical path:" in render(doc) and "through rank 1" in doc["critical_path"]["findings"][0]
    assert "critical-path" in charts(doc)
    got = CliRunner().invoke(main, ["explain", "critical_path"])
    assert got.exit_code == 0 and got.output.startswith("critical_path:")


def tiles(graph, s) -> bool:
    """The pieces of step ``s``'s path, found again on its graph, cover [start, end] with no gap and no overlap."""
    pieces = sorted(BindingPath(graph, s["start_ns"]).run(s["end_rank"], s["end_ns"]), key=lambda p: p["start_ns"])
    return (pieces[0]["start_ns"] == s["start_ns"] and pieces[-1]["end_ns"] == s["end_ns"]
            and all(a["end_ns"] == b["start_ns"] for a, b in zip(pieces, pieces[1:], strict=False)))


RUNS = sorted(p.name for p in committed_runs().iterdir() if (p / "truth.json").is_file())


@pytest.mark.parametrize("path", [r if r == "ddp2" else pytest.param(r, marks=pytest.mark.slow) for r in RUNS]
                         + [pytest.param(p, marks=pytest.mark.slow) for p in public_trace_files()],
                         ids=lambda p: getattr(p, "name", p))
def test_the_path_is_the_measured_step(path):
    """Every bundled run and public GPU trace: each step's path is its measured length, its pieces tile it; and the
    step graph replayed with the measured durations gives back every recorded moment (tests/test_step_graph.py)."""
    from test_step_graph import replays_exactly

    path = FIXTURE_RUNS / path if isinstance(path, str) else needed(path)
    with open_run([str(path)]) as con:
        graphs = step_graphs(con)
        cp = critical_path_section(graphs)
        windows = {r[0]: r[1] for r in con.execute(
            "SELECT step, max(end_ns) - arg_max(start_ns, end_ns) FROM step_windows GROUP BY step").fetchall()}
        assert [s["step"] for s in cp["steps"]] == [g.step for g in graphs]
        for s, g in zip(cp["steps"], graphs, strict=True):
            assert s["length_ns"] == s["covered_ns"] == windows[s["step"]]
            assert tiles(g, s), s["step"]
            assert "other" not in s["by_cause"], s["step"]
            assert replays_exactly(g) == [], g.step
            assert g.replay()["end_ns"] == g.end_ns()


def balanced(name: str) -> bool:
    """Built with every rank alike: no slow, delayed or hot rank, no heavy stage (truth.json's imbalance), no pipeline
    (whose stages do different things in a step) and no context parallelism (causal attention gives the ranks unequal
    work)."""
    t = json.loads((FIXTURE_RUNS / name / "truth.json").read_text())
    return (not any(t["imbalance"].get(k) is not None for k in ("straggler_rank", "hot_rank", "heavy_stage"))
            and t["layout"]["pp"] == 1 and t["layout"]["cp"] == 1)


@pytest.mark.parametrize("run", [r for r in RUNS if balanced(r)])
@pytest.mark.slow
def test_on_balanced_runs_no_rank_holds_more_of_the_path_than_chance_gives(run):
    """The path goes to whichever rank arrived last at each collective: with a few long stretches one rank can hold
    most of it by chance (ddp4: 75% in 3 stretches). On a run whose ranks are alike, the largest share is one that
    putting the stretches on ranks at random gives more often than 1 in 100."""
    path = analyze([FIXTURE_RUNS / run], use_cache=False)["checks"]["imbalance"]["critical_path"]
    assert path["by_chance_p"] > 0.01, path


def test_how_likely_a_share_of_the_path_is_by_chance():
    # one stretch: some rank holds all of it, always
    assert stats.top_share_tail([(0, 5.0)], 4) == 1
    # two equal stretches on one of 2 ranks: both land on one rank half the time; on different ranks (a share of
    # 1/2, the least there is): always
    assert stats.top_share_tail([(0, 1.0), (0, 1.0)], 2) == pytest.approx(0.5, abs=0.03)
    assert stats.top_share_tail([(0, 1.0), (1, 1.0)], 2) == 1
    # 20 equal stretches all on one of 4 ranks: 4 x (1/4)^20 by chance, never drawn; the p counts the path itself
    assert stats.top_share_tail([(3, 1.0)] * 20, 4, draws=4000) == 1 / 4001
    assert stats.top_share_tail([(0, 1.0)], 1) is None


# runs built with one slow rank, a heavy pipeline stage or a hot expert-parallel rank (on 2 ranks with a core each: on
# the 4-rank runs ep4 and dp4_ep2 the hot rank's extra work is a few ms a step, less than the stalls of 4 processes on
# 2 cores, and the path does not single it out; docs/critical-path.md) (their truth.json note says which)
SLOW = {"straggler_ddp4": 2, "straggler_dp2_tp2": 3, "straggler_dp2_tp2_r1": 1, "quiet_straggler_ddp2": 1,
        "pp4_1f1b_heavy_m4": 2, "quiet_ep2": 1}


@pytest.mark.parametrize("run,slow", SLOW.items())
@pytest.mark.slow
def test_the_path_runs_mostly_through_the_slow_rank(run, slow):
    doc = analyze([FIXTURE_RUNS / run], use_cache=False)
    path = totals(doc["critical_path"])
    assert next(iter(path["by_rank"])) == slow
    assert path["by_rank"][slow] / path["length_ns"] > 0.5
    # the checks read it: the straggler named (on the path), or the heavy stage the path runs through
    imbalance = doc["checks"]["imbalance"]
    assert imbalance["critical_path"]["rank"] == slow
    if imbalance["pp_stages"]:
        assert imbalance["critical_path"]["stage"] == imbalance["heavy_stage"]
    else:
        assert imbalance["straggler_rank"] == slow and imbalance["straggler"]["on_path"]


def test_against_htas_critical_path_on_alexnet():
    """HTA 0.6.1's critical path (critical_path_analysis over the trace's annotation, recorded by
    bench/hta_critical_path.py in bench/hta_critical_path.json) beside traceparse's over the same windows: traceparse's
    path is the window; on the GPU side the causes agree to HTA's whole microseconds (kernels, launch delays, gaps
    between kernels), and HTA's path is shorter, by at most 1.5%, all of it in the CPU's part."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import hta_critical_path as bench

    hta = json.loads(bench.HTA_RECORD.read_text())["paths"]
    ours = bench.traceparse_paths(public_trace(bench.TRACE))
    assert len(ours) == len(hta) == 2
    for o, h in zip(ours, hta, strict=True):
        assert o["length_ns"] == o["covered_ns"] == o["window_ns"]
        for bound, cause in bench.CAUSES.items():
            if cause != "host":
                assert o["by_cause"].get(cause, 0) / US == pytest.approx(h["by_bound"][bound], abs=5), cause
        shorter_us = o["length_ns"] / US - h["length_us"]
        assert 0 <= shorter_us <= 0.015 * h["length_us"]
        assert o["by_cause"]["host"] / US - h["by_bound"]["cpu_bound"] == pytest.approx(shorter_us, abs=5)
