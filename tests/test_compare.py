"""``traceparse compare``: the regression gate on the fixture runs (fixtures/runs/*/truth.json holds each
run's configuration) and the comparison rules on hand-made metric sets.

Expected values come from the configuration (who straggles, micro-batches per step, the bubble formula) or
are computed here from the analyze document's raw step windows, never copied from compare's output.
"""

import json
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceparse.cli import main
from traceparse.history.compare import compare_metrics, compare_runs, load_thresholds
from traceparse.errors import TraceError
from traceparse.history.run_metrics import Metric, run_metrics
from traceparse.document import analyze

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def truth(name: str) -> dict:
    return json.loads((RUNS / name / "truth.json").read_text())


def invoke(*args):
    return CliRunner().invoke(main, ["compare", *map(str, args)], catch_exceptions=False)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """db(name) -> the store of fixture run ``name``, loaded once for this module."""
    from traceparse.load.run import load_run

    folder, stores = tmp_path_factory.mktemp("stores"), {}

    def get(name):
        if name not in stores:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("TRACEPARSE_CACHE", str(folder / "cache"))
                stores[name], _ = load_run([RUNS / name], db=folder / f"{name}.duckdb")
        return stores[name]

    return get


def compared(db, base, new, *options):
    """(exit code, the JSON document) of compare --format json on two fixture runs' stores."""
    r = invoke("--base-db", db(base), "--new-db", db(new), "--format", "json", *options)
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


def by_id(doc) -> dict:
    return {m["id"]: m for m in doc["metrics"]}


def step_windows(store) -> list[dict]:
    from traceparse.document import document
    from traceparse.load.run import connect

    con = connect(store)
    try:
        return [w for w in document(con, 0)["summary"]["per_step"] if w["step"] is not None]
    finally:
        con.close()


def mean_step_ns(store) -> float:
    """The mean step window of a run, computed here from the analyze document's per-step windows."""
    return statistics.fmean(w["window_ns"] for w in step_windows(store))


def per_step_means(store) -> list[float]:
    """Per profiled step, the mean window over the ranks."""
    by_step = {}
    for w in step_windows(store):
        by_step.setdefault(w["step"], []).append(w["window_ns"])
    return [statistics.fmean(v) for v in by_step.values()]


# --- a run against itself -------------------------------------------------------------------

@pytest.mark.slow
def test_run_against_itself_by_paths():
    """Folder against glob of the same files: every delta 0, no regression, exit 0."""
    run = RUNS / "ddp4"
    r = invoke(run, f"{run}/*.json.gz", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["version"] == 1 and doc["verdict"] == "ok" and doc["regressions"] == []
    assert doc["layout_changes"] == [] and doc["base"]["files"] == doc["new"]["files"]
    numeric = [m for m in doc["metrics"] if m["delta"] is not None]
    assert {m["id"] for m in numeric} >= {"step_time.mean", "step_time.p95", "exposed_comm.dp", "volume.dp"}
    assert all(m["delta"] == 0 for m in numeric)
    assert all(m["base"] == m["new"] and not m["regressed"] for m in doc["metrics"])


@pytest.mark.slow
def test_run_against_itself_from_stores(db):
    code, doc = compared(db, "dp2_tp2", "dp2_tp2")
    assert code == 0 and doc["verdict"] == "ok" and doc["regressions"] == []
    ids = by_id(doc)
    # dp2_tp2 communicates for both of its strategies (truth.json comm), each compared
    for s in {c["strategy"] for c in truth("dp2_tp2")["comm"]}:
        assert ids[f"exposed_comm.{s}"]["delta"] == 0 and ids[f"volume.{s}"]["delta"] == 0
    assert all(m["base"] == m["new"] and m["delta"] in (0, None) and not m["regressed"] for m in doc["metrics"])


# --- a run against its straggler variant ----------------------------------------------------

@pytest.mark.parametrize("base, new", [("ddp4", "straggler_ddp4"), ("dp2_tp2", "straggler_dp2_tp2")])
@pytest.mark.slow
def test_straggler_variant_regresses_with_the_straggler_named(db, base, new):
    rank = truth(new)["imbalance"]["straggler_rank"]
    assert rank is not None and truth(base)["imbalance"]["straggler_rank"] is None
    code, doc = compared(db, base, new)
    assert code == 1 and doc["verdict"] == "regressed"
    named = next(r for r in doc["regressions"] if r["id"] == "imbalance.straggler")
    assert named["note"] == f"rank {rank} became a straggler"
    assert by_id(doc)["imbalance.straggler"]["new"] == rank
    # the straggler's extra work every step lengthens the step: regressed when the growth of the mean
    # step window (computed here) is over the default step_time threshold and beyond the step-to-step
    # variation of the two runs (Welch's t on the per-step means, one-sided, p <= 0.01)
    assert mean_step_ns(db(new)) > mean_step_ns(db(base))
    assert by_id(doc)["step_time.mean"]["regressed"] == step_time_regressed(db, base, new)


def step_time_regressed(db, base, new) -> bool:
    """step_time.mean regresses when the growth of the mean step window (computed here) is over the default
    step_time threshold and beyond the step-to-step variation of the two runs: Welch's t on the per-step means,
    one-sided, p <= 0.01 (scipy), and the host was not busier: the same ops not longer against their fastest in
    NEW than in BASE by more than the threshold (imbalance.stretch, its own test in tests/test_check_imbalance.py)."""
    from scipy.stats import ttest_ind

    limit = load_thresholds().limits["step_time"].value
    grown = mean_step_ns(db(new)) / mean_step_ns(db(base)) - 1
    old, now = per_step_means(db(base)), per_step_means(db(new))
    p = ttest_ind(now, old, equal_var=False, alternative="greater").pvalue
    stretch = [run_metrics(analyze([RUNS / name]))["imbalance.stretch"].value for name in (base, new)]
    return bool(grown > limit and p <= 0.01 and stretch[1] / stretch[0] - 1 <= limit)


@pytest.mark.slow
def test_delay_variant(db):
    """dp2_tp2_delay2: rank 2 sleeps 0-2 ms before every block forward, timing noise below gloo's jitter
    (tests/test_check_imbalance.py NOT_STRAGGLER_RUNS), so the analyzer need not name it; when it does,
    it is rank 2. The exit code follows the regressions."""
    code, doc = compared(db, "dp2_tp2", "dp2_tp2_delay2")
    assert code == (1 if doc["regressions"] else 0)
    straggler = by_id(doc).get("imbalance.straggler")
    if straggler:
        assert straggler["new"] == truth("dp2_tp2_delay2")["imbalance"]["straggler_rank"]
    assert by_id(doc)["step_time.mean"]["regressed"] == step_time_regressed(db, "dp2_tp2", "dp2_tp2_delay2")


@pytest.mark.slow
def test_threshold_override_by_group_and_id(db):
    base, new = "ddp4", "straggler_ddp4"
    code, doc = compared(db, base, new, "--threshold", "step_time=1000%")
    ids = by_id(doc)
    assert not ids["step_time.mean"]["regressed"] and not ids["step_time.p95"]["regressed"]
    assert ids["step_time.mean"]["threshold"] == "1000%" and ids["step_time.mean"]["threshold_key"] == "step_time"
    assert code == 1 and "imbalance.straggler" in {r["id"] for r in doc["regressions"]}  # other groups still gate
    # an id overrides its group: p95 only
    _, doc = compared(db, base, new, "--threshold", "step_time.p95=1000%")
    ids = by_id(doc)
    assert not ids["step_time.p95"]["regressed"] and ids["step_time.p95"]["threshold_key"] == "step_time.p95"
    assert ids["step_time.mean"]["threshold_key"] == "step_time"


# --- more micro-batches per step ------------------------------------------------------------

@pytest.mark.slow
def test_more_microbatches_improve_the_bubble(db):
    base, new = "pp4_gpipe_m4", "pp4_gpipe_m8"
    lb, ln = truth(base)["layout"], truth(new)["layout"]
    changed = [k for k in lb if lb[k] != ln[k]]
    assert changed == ["microbatches"]
    code, doc = compared(db, base, new)
    assert code == 0 and doc["verdict"] == "ok"
    assert doc["layout_changes"] == [{"key": "microbatches", "base": lb["microbatches"], "new": ln["microbatches"]}]
    # the bubble's formula (pp-1)/(m+pp-1) falls with m; the measured bubble falls with it
    pp = lb["pp"]
    formula = [(pp - 1) / (m + pp - 1) for m in (lb["microbatches"], ln["microbatches"])]
    assert formula[1] < formula[0]
    assert by_id(doc)["bubble"]["delta"] < 0
    # step time, exposed communication and bytes per micro-batch, and said so
    ids = by_id(doc)
    assert "step_time.mean" not in ids and "volume.pp" not in ids
    assert any("per micro-batch" in n for n in doc["notes"])
    assert ids["step_time.mean_per_microbatch"]["base"] == pytest.approx(mean_step_ns(db(base)) / lb["microbatches"])
    assert ids["step_time.mean_per_microbatch"]["new"] == pytest.approx(mean_step_ns(db(new)) / ln["microbatches"])
    # bytes follow the configuration: the same sends per micro-batch
    assert ids["volume.pp_per_microbatch"]["delta"] == pytest.approx(0)
    r = invoke("--base-db", db(base), "--new-db", db(new))
    assert r.exit_code == 0
    assert r.stdout.splitlines()[0] == f"layout changed: microbatches {lb['microbatches']} -> {ln['microbatches']}"


# --- formats, output file, bad input --------------------------------------------------------

@pytest.mark.slow  # over 2 s: the fast tier keeps its area's other tests
def test_markdown_puts_regressions_first(db):
    r = invoke("--base-db", db("ddp4"), "--new-db", db("straggler_ddp4"), "--format", "markdown")
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    header = lines.index("| | metric | base | new | delta | relative | threshold | note |")
    assert lines[header + 1].startswith("|---")
    rows = [ln for ln in lines[header + 2:] if ln.startswith("|")]
    marked = [ln.startswith("| ❌ |") for ln in rows]
    assert marked[0] and marked == sorted(marked, reverse=True)
    assert "`imbalance.straggler`" in next(ln for ln in rows if "straggler" in ln)


def test_output_file(db, tmp_path):
    out = tmp_path / "compare.json"
    r = invoke("--base-db", db("ddp4"), "--new-db", db("ddp4"), "--format", "json", "-o", out)
    assert r.exit_code == 0 and r.stdout == ""
    assert json.loads(out.read_text())["version"] == 1
    assert str(out) in r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["compare.json"]  # no temporary file left beside it


@pytest.mark.parametrize("args, where", [
    (["--threshold", "step_time=fast"], "--threshold"),
    (["--threshold", "step_time"], "--threshold"),
    (["--threshold", "bubble=-0.1"], "--threshold"),
    (["--threshold", "layout=5%"], "--threshold"),
    (["--threshold", "nope=5%"], "--threshold"),
])
def test_bad_threshold_exits_2_with_one_line(args, where):
    r = invoke(RUNS / "ddp4", RUNS / "ddp4", *args)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith(f"traceparse: error: {where}: ") and r.stderr.count("\n") == 1


@pytest.mark.slow
def test_bad_input_exits_2(tmp_path):
    r = invoke(RUNS / "ddp4", tmp_path / "missing")
    assert r.exit_code == 2 and r.stderr == f"traceparse: error: {tmp_path / 'missing'}: no such file or directory\n"
    r = invoke("--base-db", tmp_path / "missing.duckdb", RUNS / "ddp4")
    assert r.exit_code == 2 and r.stderr.startswith(f"traceparse: error: {tmp_path / 'missing.duckdb'}: ")
    r = invoke(RUNS / "ddp4")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1


# --- the rules, on hand-made metric sets ----------------------------------------------------

KINDS = {"step_time.mean": ("step_time", "ns", "lower"), "exposed_comm.dp": ("exposed_comm", "ns", "lower"),
         "overlap.dp": ("overlap", "fraction", "higher"), "imbalance.straggler": ("imbalance", "rank", None),
         "layout.dp": ("layout", "", None), "cost.cause": ("cost", "fraction", "lower")}


def metrics(**values) -> dict:
    """A metric set from keyword values, ``step_time__mean=...`` for step_time.mean (ids of KINDS)."""
    out = {}
    for key, value in values.items():
        mid = key.replace("__", ".")
        group, unit, better = KINDS[mid]
        out[mid] = Metric(mid, group, value, unit, better)
    return out


def test_defaults_cover_every_gated_group():
    t = load_thresholds()
    assert {"step_time", "exposed_comm", "bubble", "overlap", "imbalance", "volume"} <= set(t.limits)
    assert t.floors["exposed_comm"] > 0


def test_zero_threshold_and_zero_delta_never_regress():
    t = load_thresholds(["step_time=0%", "overlap=0"])
    m = metrics(step_time__mean=100.0, overlap__dp=0.5)
    doc = compare_metrics(m, m, t)
    assert doc["verdict"] == "ok" and all(r["delta"] == 0 for r in doc["metrics"])


def test_direction_and_size():
    t = load_thresholds(["step_time=10%", "overlap=0.1"])
    base = metrics(step_time__mean=100.0, overlap__dp=0.5)
    rows = by_id(compare_metrics(base, metrics(step_time__mean=111.0, overlap__dp=0.45), t))
    assert rows["step_time.mean"]["regressed"] and rows["step_time.mean"]["relative"] == pytest.approx(0.11)
    assert not rows["overlap.dp"]["regressed"]  # 0.05 lower, within 0.1
    rows = by_id(compare_metrics(base, metrics(step_time__mean=80.0, overlap__dp=0.35), t))
    assert not rows["step_time.mean"]["regressed"] and rows["overlap.dp"]["regressed"]  # higher is better


def test_exposed_communication_under_the_floor_is_not_gated():
    t = load_thresholds(["exposed_comm=10%"])
    floor = t.floors["exposed_comm"]
    step = 1000.0
    tiny = metrics(step_time__mean=step, exposed_comm__dp=floor * step / 4)
    grown = metrics(step_time__mean=step, exposed_comm__dp=floor * step / 2)  # doubled, still under the floor
    assert not by_id(compare_metrics(tiny, grown, t))["exposed_comm.dp"]["regressed"]
    big = metrics(step_time__mean=step, exposed_comm__dp=floor * step * 2)
    assert by_id(compare_metrics(tiny, big, t))["exposed_comm.dp"]["regressed"]


def test_per_microbatch_metric_takes_its_per_step_threshold():
    t = load_thresholds(["step_time.mean=50%"])
    m = Metric("step_time.mean_per_microbatch", "step_time", 1.0, "ns", "lower")
    assert t.limit(m).key == "step_time.mean"


def test_group_override_replaces_the_defaults_of_its_ids():
    p95 = Metric("step_time.p95", "step_time", 1.0, "ns", "lower")
    assert "step_time.p95" in load_thresholds().limits  # a default of its own
    assert load_thresholds(["step_time=50%"]).limit(p95).key == "step_time"
    assert load_thresholds(["step_time.p95=60%", "step_time=50%"]).limit(p95).text == "60%"


def test_straggler_rules():
    t = load_thresholds()
    none, two, three = metrics(layout__dp=4), metrics(imbalance__straggler=2), metrics(imbalance__straggler=3)
    doc = compare_metrics(two, three, t)
    assert doc["regressions"] == [{"id": "imbalance.straggler", "note": "rank 3 became the straggler (was rank 2)"}]
    doc = compare_metrics(two, none, t)
    assert doc["verdict"] == "ok" and "no longer a straggler" in by_id(doc)["imbalance.straggler"]["note"]
    assert compare_metrics(two, two, t)["verdict"] == "ok"


def test_a_straggler_is_gated_by_what_its_cause_costs():
    """The others wait for a rank whose own work, stall or input costs nothing graded (a balanced job on a busy host:
    the same ops slower on one rank): reported with the cost it has, not gated. Costing the cost threshold, it gates."""
    t = load_thresholds()
    share = t.limits["cost"].value
    base = metrics(cost__cause=0.0)
    doc = compare_metrics(base, metrics(imbalance__straggler=1, cost__cause=share / 2), t)
    assert doc["verdict"] == "ok"
    assert by_id(doc)["imbalance.straggler"]["note"].startswith("rank 1 became a straggler; reported, not gated")
    doc = compare_metrics(base, metrics(imbalance__straggler=1, cost__cause=2 * share), t)
    assert {r["id"] for r in doc["regressions"]} == {"imbalance.straggler", "cost.cause"}


def test_metric_of_one_run_only_and_layout_change_are_not_regressions():
    t = load_thresholds()
    doc = compare_metrics(metrics(layout__dp=4, overlap__dp=0.9), metrics(layout__dp=2), t)
    assert doc["verdict"] == "ok"
    assert doc["layout_changes"] == [{"key": "dp", "base": 4, "new": 2}]
    assert any("different parallel layouts" in n for n in doc["notes"])
    assert by_id(doc)["overlap.dp"]["note"] == "only in the base run"


def test_compare_runs_names_the_runs():
    doc = {"run": {"files": ["a/rank0.json"], "world_size": 1, "steps": [1]}, "layout": {},
           "summary": {"per_step": []}, "checks": {"overlap": {}, "bubble": {}, "imbalance": {}, "comm_volume": {}}}
    out = compare_runs(doc, doc, load_thresholds())
    assert list(out)[:3] == ["version", "base", "new"] and out["base"]["files"] == ["a/rank0.json"]


def test_threshold_value_errors_name_the_option():
    with pytest.raises(TraceError) as e:
        load_thresholds(["bubble=lots"])
    assert e.value.path == "--threshold"


@pytest.mark.slow
def test_the_bubble_is_judged_against_its_step_to_step_variation(db):
    """dp2_pp2_tp2 captured again (rep2), one configuration: the bubble moves past its 0.05 threshold, but its two
    steps in each run move as much. Per step, the bubble is computed here from the per-step windows (1 - compute /
    window, mean over the ranks, every rank a pipeline rank) and judged with scipy's Welch's t."""
    from scipy.stats import ttest_ind

    def per_step(name):
        out = {}
        for w in step_windows(db(name)):
            out.setdefault(w["step"], []).append(1 - w["compute_ns"] / w["window_ns"])
        return [statistics.fmean(v) for _, v in sorted(out.items())]

    base, new = per_step("dp2_pp2_tp2"), per_step("dp2_pp2_tp2_rep2")
    code, doc = compared(db, "dp2_pp2_tp2", "dp2_pp2_tp2_rep2")
    row = by_id(doc)["bubble"]
    assert row["delta"] == pytest.approx(statistics.fmean(new) - statistics.fmean(base), abs=1e-9)
    p = ttest_ind(new, base, equal_var=False, alternative="greater").pvalue
    assert row["p"] == pytest.approx(p, abs=1e-6)
    assert row["regressed"] == (row["delta"] > 0.05 and p <= 0.01)
    assert code == (1 if doc["regressions"] else 0)


def bubble_metrics(steps: tuple, unpriced: tuple) -> dict:
    """The bubble per step and its part the replay does not price per step (each run's value: their mean)."""
    return {"bubble": Metric("bubble", "bubble", statistics.fmean(steps), "fraction", "lower", steps),
            "bubble.unpriced": Metric("bubble.unpriced", "bubble", statistics.fmean(unpriced), "fraction", None,
                                      unpriced)}


def test_a_bubble_grown_by_what_the_replay_prices_is_not_gated():
    """Two windows of one balanced pipeline job on a busy host: the bubble rose 0.79 -> 0.855, each window's two
    steps close together (Welch's p well under 0.01), while the bubble less what its pp transfers cost (its unpriced
    part) fell: the transfers took longer, not the schedule. Grown by as much in the unpriced part too (fewer
    micro-batches: a longer ramp), it is gated."""
    t = load_thresholds()
    base = bubble_metrics((0.786, 0.795), (0.492, 0.481))
    row = by_id(compare_metrics(base, bubble_metrics((0.859, 0.850), (0.434, 0.297)), t))["bubble"]
    assert row["p"] < 0.01 and not row["regressed"] and "bubble.unpriced" in row["note"]
    row = by_id(compare_metrics(base, bubble_metrics((0.859, 0.850), (0.566, 0.555)), t))["bubble"]
    assert row["regressed"]
    assert "bubble.unpriced" not in {r["id"] for r in compare_metrics(base, base, t)["regressions"]}
    with pytest.raises(TraceError):  # reported, never gated: no threshold for it
        load_thresholds(["bubble.unpriced=0.01"])


@pytest.mark.slow  # over 1.5 s: the fast tier keeps its area's other tests
def test_fewer_microbatches_grow_the_schedules_bubble(db):
    """quiet_pp2_gpipe m8 -> m4 (one change of configuration): GPipe's bubble (pp-1)/(m+pp-1) grows from 1/9 to
    1/5; it is the schedule's (the unpriced part grows past the threshold too), so compare gates it."""
    base, new = "quiet_pp2_gpipe_m8", "quiet_pp2_gpipe_m4"
    lb, ln = truth(base)["layout"], truth(new)["layout"]
    assert [k for k in lb if lb[k] != ln[k]] == ["microbatches"]
    pp = lb["pp"]
    grown = (pp - 1) / (ln["microbatches"] + pp - 1) - (pp - 1) / (lb["microbatches"] + pp - 1)
    assert grown > load_thresholds().limits["bubble"].value
    code, doc = compared(db, base, new)
    rows = by_id(doc)
    assert rows["bubble"]["regressed"] and code == 1
    assert rows["bubble.unpriced"]["new"] - rows["bubble.unpriced"]["base"] > load_thresholds().limits["bubble"].value


def test_defaults_derived_from_the_checks_thresholds_follow_them():
    """rules/compare_thresholds.toml names the checks' thresholds it derives from: they cannot drift apart."""
    from traceparse.history.compare import _derived
    from traceparse.thresholds import check_thresholds

    checks, t = check_thresholds(), load_thresholds()
    assert t.limits["cost"].value == checks["imbalance"]["warn_straggler_share"] == checks["overlap"]["warn_saving_share"]
    assert t.limits["imbalance"].value == pytest.approx(checks["imbalance"]["warn_max_over_mean"] - 1)
    assert t.limits["bubble"].value == pytest.approx(checks["bubble"]["warn_excess"] / 2)
    assert not t.limits["cost"].relative
    for bad in ({"from": "imbalance.nothing"}, {"from": "imbalance.warn_straggler_share", "plus": 1}):
        with pytest.raises(TraceError, match="a derived threshold is"):
            _derived("cost", bad, "rules/compare_thresholds.toml")
