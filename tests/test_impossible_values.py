"""Numbers from a trace or an option are bounded before they size work; impossible values are set aside, and said.

Each case is a real bundled run or a tiny hand-made trace rewritten to hold the value, run through the CLI: the exit
code, one line on stderr where it is refused, nothing written, and where it loads, the number it used to make
impossible (a negative queue, idle or kernel wait, a share above 100%) within bounds and a ``load_issues`` row
saying what was set aside (docs/loading.md, Impossible values; docs/whatif.md).
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
from itertools import count
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import refused
from traces import rows, step, trace, write, x

from traceparse.cli import main
from traceparse.ingest.plugin_metadata import read_metadata
from traceparse.errors import TraceError
from traceparse.bounds import RANKS
from traceparse.layout.stated import parse_stated
from traceparse.models.pipeline import MAX_ACTIONS, replay, textbook_orders
from traceparse.output import json_text
from traceparse.whatif.pipeline import orders
from traceparse.whatif.sweep import divisors

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
ALL_KEYS = ("dp=2,tp=1,pp=1,cp=1,sp=1,ep=1,zero_stage=0,microbatches=1,virtual_stages=1,dp_replicate=2,dp_shard=1,"
            "layers=2,hidden=64,heads=4,kv_heads=4,seq=64,micro_batch=2,dtype_bytes=4,params=115328,top_k=1,"
            "experts=1,n_opt=2,ranks_per_node=8,optimizer=AdamW,pp_schedule=1f1b")  # every key: 263 characters


def strict(text: str):
    """``text`` parsed as strict JSON (NaN or Infinity fail)."""
    def bad(name):
        raise AssertionError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=bad)


def rewritten(tmp_path, run: str, edit, ranks=None) -> Path:
    """The bundled ``run``'s rank files (those of ``ranks``; all by default), each edited by ``edit(rank, doc)``."""
    out = tmp_path / run
    out.mkdir()
    for f in sorted((RUNS / run).glob("rank*.json.gz")):
        r = int(f.name[4:].split(".")[0])
        if ranks is None or r in ranks:
            doc = json.loads(gzip.decompress(f.read_bytes()))
            edit(r, doc)
            (out / f"rank{r}.json").write_text(json.dumps(doc))
    return out


def issues(doc: dict, words: str) -> list[dict]:
    return [i for i in doc["load_issues"] if words in i["what"]]


# --- bounded numbers: a value sizes no work beyond the replay's cap, whichever way it comes ----------------------

def test_orders_beyond_the_cap_are_not_built():
    assert textbook_orders("1f1b", 4, 10**15) is None  # was: a list of 8 x 10^15 actions, then the OOM killer
    assert textbook_orders("interleaved_1f1b", 2**20, 2**20, 2**20) is None
    order = textbook_orders("1f1b", 4, MAX_ACTIONS // 8)
    assert sum(map(len, order.values())) == MAX_ACTIONS and replay(order, lambda *_: 1) is not None
    huge = {"pp_schedule": "1f1b", "pp": 4, "microbatches": 10**15, "virtual_stages": 1}
    assert orders({"order": {"value": None}}, huge, huge) == (None, None)  # the measured run's own order too


def test_divisors_of_a_huge_world_in_closed_form():
    assert divisors(RANKS) == [1, RANKS]  # 2^31 - 1 is prime: 46,341 trials, not 2^31
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]


@pytest.mark.parametrize("text, ok", [("pp=2147483647", True), ("pp=2147483648", False), ("n_opt=0", True),
                                      ("n_opt=65", False), ("microbatches=1e15", True), ("microbatches=1e16", False)])
def test_options_and_metadata_take_the_same_ranges(text, ok):
    key, value = text.split("=")
    if ok:
        assert parse_stated(text, "--given")[key] == int(float(value))
    else:
        with pytest.raises(TraceError, match="out of range"):
            parse_stated(text, "--given")
    got = []
    section = "optimizer" if key == "n_opt" else "layout"
    meta = read_metadata({"version": 1, section: {key: int(float(value))}}, 4, got)
    assert (key in meta.get(section, {})) == ok and bool(got) != ok


def _capped_env():
    """A child process limited to 4 GiB of address space: a list of 10^15 actions fails there (exit 3), instead
    of taking the machine's memory."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    return limit


@pytest.mark.slow  # a child process (4 s): the fast tier has test_orders_beyond_the_cap_are_not_built
@pytest.mark.parametrize("how", ["given", "metadata"])
def test_a_huge_measured_microbatch_count_builds_no_order(tmp_path, how):
    """``--given microbatches=1e15`` or the plugin's metadata saying 10^15: the measured order is not built (was a
    24 GB list); the forecast takes the formula model and exits 0."""
    if how == "given":
        run, given = RUNS / "quiet_pp2_1f1b_m4", ["--given", "microbatches=1e15"]
    else:
        run = rewritten(tmp_path, "quiet_pp2_1f1b_m4",
                        lambda _, d: d["traceparse"]["layout"].update(microbatches=10**15))
        given = []
    env = {**os.environ, "TRACEPARSE_CACHE": str(tmp_path / "cache")}
    got = subprocess.run([sys.executable, "-m", "traceparse.cli", "whatif", str(run), *given, "--layout",
                          "microbatches=8", "--format", "json"], capture_output=True, text=True, env=env,
                         preexec_fn=_capped_env(), timeout=120)
    assert got.returncode == 0, got.stderr
    doc = strict(got.stdout)
    assert doc["measured"]["microbatches"]["value"] == 10**15 and doc["target"]["microbatches"] == 8
    assert doc["prediction"]["step_time_ns"] > 0


@pytest.mark.slow
def test_the_sweep_excludes_pipelines_beyond_the_cap(cli):
    code, out, err = cli("whatif", RUNS / "quiet_pp2_1f1b_m4", "--given", "microbatches=1e15", "--sweep",
                         "--format", "json")
    assert code == 0, err
    rows_ = strict(out)["candidates"]
    piped = [r for r in rows_ if r["layout"]["pp"] > 1]
    assert piped and all("the forecast replays at most 32,768" in r["excluded"] for r in piped)


# --- exit 3 on plain input: long option values, a negative step -------------------------------------------------

def test_a_long_layout_is_read_as_keys_not_as_a_file_name(cli):
    assert len(ALL_KEYS) > 255  # was: OSError ENAMETOOLONG from Path(text).is_file(), exit 3
    code, out, err = cli("layout", RUNS / "ddp2", "--layout", ALL_KEYS, "--format", "json")
    assert code == 0, err
    assert {r["key"]: r["status"] for r in strict(out)["layout_check"]["stated"]}["dp"] == "agrees"


def test_a_long_given_and_a_long_bad_layout(cli, tmp_path):
    code, _, err = cli("whatif", RUNS / "ddp2", "--given", ALL_KEYS, "--layout", "zero_stage=1")
    assert code == 0, err
    out = tmp_path / "out.txt"
    refused(cli("whatif", RUNS / "ddp2", "--given", ALL_KEYS + ",bogus=1", "--layout", "zero_stage=1", "-o", out),
            "--given: unknown keys bogus")
    assert not out.exists()


@pytest.mark.parametrize("where", ["trace", "--db", "-o"])
def test_a_path_longer_than_a_name_is_one_line(cli, tmp_path, where):
    long = "a" * 300
    args = {"trace": [tmp_path / long], "--db": [RUNS / "ddp2", "--db", tmp_path / long],
            "-o": [RUNS / "ddp2", "-o", tmp_path / long]}[where]
    refused(cli("analyze", *args), "File name too long" if where != "-o" else "cannot write there")
    assert list(tmp_path.iterdir()) == []


def test_a_long_sql_query_without_paths_is_a_usage_error(cli):
    code, out, err = cli("sql", "select 1" + " " * 300)
    assert code == 2 and out == "" and "give trace PATHS or --db STORE" in err and "internal" not in err


def _negative_steps(_, d, world=None):
    for e in d["traceEvents"]:
        if e.get("name", "").startswith("ProfilerStep#"):
            e["dur"] = -e["dur"]
    if world:
        d["distributedInfo"]["world_size"] = world


def test_a_negative_step_on_one_rank_is_no_step(cli, tmp_path):
    """Was StopIteration in the critical path (exit 3)."""
    run = rewritten(tmp_path, "ddp2", lambda r, d: _negative_steps(r, d, world=1), ranks={0})
    code, out, err = cli("analyze", run, "--format", "json")
    assert code == 0, err
    doc = strict(out)
    assert issues(doc, "2 complete event(s) with a negative duration (dur < 0): duration unknown (null)")
    assert issues(doc, "2 ProfilerStep#N annotation(s) without a duration: not used as steps")


def test_a_negative_step_among_ranks_makes_no_negative_mean(cli, tmp_path):
    """Was a quiet negative mean step on several ranks."""
    run = rewritten(tmp_path, "ddp2", lambda r, d: _negative_steps(r, d) if r == 0 else None)
    code, out, err = cli("analyze", run, "--format", "json")
    assert code == 0, err
    doc = strict(out)
    assert issues(doc, "negative duration")[0]["file"].endswith("rank0.json")
    assert all((p["step_mean_ns"] or 0) >= 0 for p in doc["checks"]["imbalance"]["per_rank"])


# --- impossible numbers on the GPU: clipped or excluded, and said -----------------------------------------------

_corr = count(1)


def launched(call_ts, start, dur, stream=7):
    """A launch call on the main thread and the kernel it launched (a fresh correlation id)."""
    c = next(_corr)
    return [x("cudaLaunchKernel", call_ts, 10, cat="cuda_runtime", correlation=c),
            x("gemm", start, dur, cat="kernel", pid=0, tid=stream, stream=stream, device=0, correlation=c)]


def gpu_run(tmp_path, events):
    """Three 1000 us steps on the main thread and ``events``: (analyze document, store connection)."""
    from traceparse.load.run import connect

    steps = [step(k, 1000 + 1000 * k, 1000) for k in range(3)]
    f = write(tmp_path / "rank0.json", trace(steps + events, rank=0, world_size=1))
    r = CliRunner().invoke(main, ["analyze", str(f), "--format", "json", "--db", str(tmp_path / "s.duckdb")])
    assert r.exit_code == 0, r.output
    return strict(r.stdout), connect(tmp_path / "s.duckdb")


def test_a_kernel_starting_before_its_launch_makes_no_negative_queue(tmp_path):
    """Was a queue of -1 (launched after it started)."""
    doc, con = gpu_run(tmp_path, launched(1100, 1200, 100) + launched(1500, 1300, 100) + launched(2100, 2200, 100)
                       + launched(3100, 3200, 100))
    (row,) = issues(doc, "GPU activity starts before the call that launched it")
    assert row["count"] == 1 and row["severity"] == "warning"
    late = rows(con, "SELECT launch_ev_id, launch_ns FROM gpu_activity WHERE start_ns = 1300000")[0]
    assert late["launch_ev_id"] is not None and late["launch_ns"] is None  # the call kept, its time not used
    queue = con.execute("""
        SELECT min(q) FROM (SELECT sum(d) OVER (ORDER BY ts, o ROWS UNBOUNDED PRECEDING) AS q FROM (
            SELECT launch_ns AS ts, 1 AS d, 0 AS o FROM gpu_activity WHERE launch_ns IS NOT NULL
            UNION ALL SELECT start_ns, -1, 1 FROM gpu_activity WHERE launch_ns IS NOT NULL))""").fetchone()[0]
    con.close()
    assert queue >= 0 and all(q["mean_length"] >= 0 for q in doc["gpu"]["queue"])


def test_kernels_overlapping_on_one_stream_make_no_negative_idle(tmp_path):
    """A kernel inside another on one stream: HTA's signed gaps gave kernel wait -300 us; the stream's gaps are
    measured without the overlap instead (idle 600 us: 100 us after the long kernel, 500 us before step 2)."""
    doc, _ = gpu_run(tmp_path, launched(1010, 1100, 400) + launched(1020, 1200, 100) + launched(1030, 1600, 100)
                     + launched(2100, 2200, 100) + launched(3100, 3200, 100))
    (idle,) = doc["gpu"]["idle"]
    assert min(idle["host_wait_ns"], idle["kernel_wait_ns"], idle["other_ns"]) >= 0
    assert (idle["kernel_wait_ns"], idle["other_ns"], idle["host_wait_ns"], idle["idle_ns"]) == \
        (0, 100_000, 500_000, 600_000)
    (row,) = issues(doc, "GPU stream 7: 1 activity overlaps the one before it on the stream")
    assert "kernel wait -300000 ns" in row["what"]


def test_a_kernel_with_a_negative_duration_is_no_activity(tmp_path):
    """Was negative compute and an idle share above 100%."""
    doc, _ = gpu_run(tmp_path, launched(1100, 1200, 100) + launched(1150, 1400, -300) + launched(2100, 2200, 100)
                     + launched(3100, 3200, 100))
    assert issues(doc, "1 complete event(s) with a negative duration")
    for t in doc["gpu"]["temporal"]:
        assert t["compute_ns"] >= 0 and t["idle_ns"] >= 0 and 0 <= t["idle"] <= 1, t


# --- a share over 100%: a straggler made by one rank's clock ------------------------------------------------------

@pytest.mark.slow  # four ranks: about 3 s
def test_a_rank_one_second_off_is_no_straggler(cli, tmp_path):
    """Rank 2's clock 1 s off made a 'conclusive straggler' whose peers lost 997 ms per step (4204.5% of a 24 ms
    step); now the loss is clipped to the step, nobody is named, and load_issues says why."""
    def skew(r, d):
        if r == 2:
            for e in d["traceEvents"]:
                if "ts" in e:
                    e["ts"] += 1e6
    code, out, err = cli("analyze", rewritten(tmp_path, "ddp4", skew), "--format", "json")
    assert code == 0, err
    doc = strict(out)
    imb = doc["checks"]["imbalance"]
    assert imb["straggler_verdict"] == "not conclusive" and imb["straggler_rank"] is None
    assert imb["straggler"]["lost_share"] <= 1 and imb["straggler"]["lost_unclipped_ns"] > 10**8
    assert "impossible (the ranks' clocks disagree" in imb["straggler_reason"]
    (row,) = issues(doc, "rank 2: the other ranks would lose")
    assert row["file"].endswith("rank2.json")


# --- strict JSON ---------------------------------------------------------------------------------------------------

def test_json_text_is_strict():
    assert json_text({"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5], "c": (2, None)}, indent=None) == \
        '{"a": null, "b": [null, null, 1.5], "c": [2, null]}'


def test_ops_of_no_length_share_null_not_nan(cli, tmp_path):
    def zero(_, d):
        for e in d["traceEvents"]:
            if e.get("ph") == "X" and not e.get("name", "").startswith("ProfilerStep"):
                e["dur"] = 0
    code, out, err = cli("analyze", rewritten(tmp_path, "ddp2", zero), "--format", "json")
    assert code == 0, err
    top = strict(out)["summary"]["top_kernels"]
    assert top and all(k["share"] is None for k in top)


def test_sql_json_writes_null_for_nan(cli):
    code, out, err = cli("sql", "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b, 1 AS c", RUNS / "ddp2",
                         "--format", "json")
    assert code == 0, err
    assert strict(out) == [{"a": None, "b": None, "c": 1}]


def test_a_device_memory_beyond_an_exbibyte_is_refused(cli, tmp_path):
    out = tmp_path / "sweep.json"
    refused(cli("whatif", RUNS / "ddp2", "--sweep", "--device-memory", "1e308", "--format", "json", "-o", out),
            "--device-memory is out of range")  # was: "device_memory_bytes": Infinity
    assert not out.exists()
