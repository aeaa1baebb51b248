"""The profiler plugin (traceparse.profiler) and the analyzer's use of its metadata.

The committed runs in PLUGIN_RUNS were recorded through the plugin by the fixture generator (real multi-process
gloo runs); analyzed with no flags, their layout, expected communication volume and memory model must equal
what truth.json (the generator's configuration) gives through the formulas of docs/parallelism.md, computed here.
"""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_check_comm_volume import formula

import traceparse
from traceparse.ingest.plugin_metadata import read_metadata

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
PLUGIN_RUNS = ("ddp2", "dp2_pp2_tp2", "fsdp2_zero3_dp4", "ulysses4", "dp4_ep2")
LAYOUT = ("dp", "tp", "pp", "cp", "sp", "ep", "zero_stage", "pp_schedule", "microbatches", "virtual_stages")


def truth(run_dir):
    return json.loads((Path(run_dir) / "truth.json").read_text())


@pytest.fixture(scope="module")
def analyzed():
    docs = {}

    def get(run_dir):
        key = str(run_dir)
        if key not in docs:
            docs[key] = traceparse.analyze([run_dir], use_cache=False)
        return docs[key]

    return get


def memory_model(t):
    """docs/parallelism.md 3.1: parameters + gradients + optimizer state per device, from truth.json."""
    m, lay = t["model"], t["layout"]
    phi, d, n = m["params"] / (lay["tp"] * lay["pp"]), m["dtype_bytes"], lay["dp"]
    z, k = lay["zero_stage"] or 0, t["optimizer"]["n_opt"]
    params = d * phi / (n if z == 3 else 1)
    grads = d * phi / (n if z >= 2 else 1)
    state = (k + 1) * 4 * phi / (n if z >= 1 else 1)
    return params + grads + state


def check_plugin_run(doc, t):
    """The no-flag analysis of a plugin-recorded run against its truth."""
    meta = doc["metadata"]
    assert meta["present"] and meta["ranks"] == list(range(t["world_size"])) and meta["notes"] == []
    rows = doc["layout_check"]["stated"]
    assert rows and all(r["source"] == "metadata" and r["status"] == "agrees" for r in rows), rows
    for r in rows:
        assert r["stated"] == t["layout"][r["key"]]
    for k in ("hidden", "heads", "kv_heads", "seq", "micro_batch", "dtype_bytes", "layers"):
        assert meta["values"][k] == t["model"][k], k
    assert meta["values"]["optimizer"] == t["optimizer"]["name"]
    assert meta["values"]["n_opt"] == t["optimizer"]["n_opt"]
    per_strategy = doc["checks"]["comm_volume"]["per_strategy"]
    assert set(per_strategy) == {r["strategy"] for r in t["comm"]}
    for s, row in per_strategy.items():
        if s == "dp" and t["layout"]["ep"] > 1:  # experts are not in the dp gradient: Phi_dp from the trace
            dense = sum(r["count"] * r["bytes_in"] for r in t["comm"] if r["strategy"] == "dp") / t["world_size"]
            assert row["expected_volume_bytes"] == 2 * dense and row["source"]["Phi_dp"] == "trace"
            continue
        assert row["expected_volume_bytes"] == pytest.approx(formula(t, s), rel=1e-12), s
        assert set(row["source"].values()) == {"metadata"}, (s, row["source"])
    if t["layout"]["ep"] == 1:
        memory = doc["checks"]["memory"]
        assert memory["per_device_bytes"]["total"] == pytest.approx(memory_model(t), rel=1e-12)
        assert memory["inputs"]["Phi_device"]["source"].startswith("metadata params")


@pytest.mark.parametrize("name", PLUGIN_RUNS)
@pytest.mark.slow
def test_plugin_run_analyzed_with_no_flags(name, analyzed):
    check_plugin_run(analyzed(RUNS / name), truth(RUNS / name))


@pytest.mark.parametrize("name", PLUGIN_RUNS)
@pytest.mark.slow
def test_every_rank_carries_the_metadata(name):
    t = truth(RUNS / name)
    for r in range(t["world_size"]):
        meta = json.loads(gzip.open(RUNS / name / f"rank{r}.json.gz").read())["traceparse"]
        assert (meta["version"], meta["rank"], meta["world_size"]) == (1, r, t["world_size"])
        assert meta["torch_version"].startswith("2.13.0") and meta["backend"] == "gloo"


@pytest.mark.slow
def test_text_report_says_what_came_from_the_metadata(analyzed):
    from traceparse.render.text import render_layout

    text = render_layout(analyzed(RUNS / "dp2_pp2_tp2"))
    assert "metadata (traceparse profiler plugin v1, torch 2.13.0+cpu, ranks 0-7): " in text
    assert "  metadata pp=2: agrees (inferred 2)" in text


@pytest.mark.slow
def test_html_run_line_says_the_plugin_declared_the_configuration(analyzed):
    from traceparse.render.html import run_line

    assert "configuration declared by the profiler plugin on 8 rank(s)</p>" in run_line(analyzed(RUNS / "dp2_pp2_tp2"))
    assert "profiler plugin" not in run_line(analyzed(RUNS / "ddp4"))


def test_runs_without_metadata_work_as_before(analyzed):
    doc = analyzed(RUNS / "ddp4")
    assert doc["metadata"]["present"] is False and doc["layout_check"]["stated"] == []
    assert doc["layout"]["dp"] == truth(RUNS / "ddp4")["layout"]["dp"]


@pytest.mark.slow
def test_stated_layout_wins_over_the_metadata():
    doc = traceparse.analyze([RUNS / "ddp2"], layout="params=1000", use_cache=False)
    assert doc["checks"]["memory"]["inputs"]["Phi_device"]["source"].startswith("stated params")
    assert doc["checks"]["memory"]["inputs"]["n_opt"]["source"] == "metadata (n_opt)"


@pytest.mark.slow
def test_a_contradicting_metadata_is_reported_never_applied_to_the_layout(tmp_path):
    """The metadata says tp=2 on a DDP run: the row contradicts, the inferred layout keeps the trace's 1."""
    for r in (0, 1):
        doc = json.loads(gzip.open(RUNS / "ddp2" / f"rank{r}.json.gz").read())
        doc["traceparse"]["layout"]["tp"] = 2
        (tmp_path / f"rank{r}.json").write_text(json.dumps(doc))
    out = traceparse.analyze([tmp_path], use_cache=False)
    row = next(r for r in out["layout_check"]["stated"] if r["key"] == "tp")
    assert (row["stated"], row["inferred"], row["status"], row["source"]) == (2, 1, "contradicts", "metadata")
    assert out["layout"]["tp"] == 1


@pytest.mark.slow
def test_missing_and_disagreeing_metadata_are_noted(tmp_path):
    docs = [json.loads(gzip.open(RUNS / "fsdp2_zero3_dp4" / f"rank{r}.json.gz").read()) for r in range(4)]
    docs[2]["traceparse"]["layout"]["zero_stage"] = 2
    del docs[3]["traceparse"]
    for r, doc in enumerate(docs):
        (tmp_path / f"rank{r}.json").write_text(json.dumps(doc))
    notes = traceparse.analyze([tmp_path], use_cache=False)["metadata"]["notes"]
    assert notes == ["rank 2 declares zero_stage = 2, rank 0 3: rank 0's used",
                     "1 of 4 ranks carry no traceparse metadata (3)"]


def test_bad_metadata_fields_cost_those_fields():
    issues = []
    got = read_metadata({"version": 1, "rank": -1, "world_size": 4, "mesh": {"dims": ["dp"], "shape": [0]},
                         "groups": [{"name": "0", "ranks": [0, 9]}, {"name": "1", "dim": "dp", "ranks": [0, 1]}],
                         "layout": {"tp": 0, "zero_stage": 5, "microbatches": 4, "future_key": 1},
                         "model": {"params": 2**70, "hidden": 64, "heads": "4"},
                         "optimizer": ["AdamW"]}, 4, issues)
    assert got["layout"] == {"microbatches": 4} and got["model"] == {"hidden": 64}
    assert got["groups"] == [{"name": "1", "desc": None, "dim": "dp", "ranks": [0, 1]}]
    assert "mesh" not in got and "rank" not in got and got["optimizer"] == {}
    bad = sorted(w.split("field ")[1].split(" is")[0] for _, w, _ in issues)
    assert bad == ["groups[]", "layout.tp", "layout.zero_stage", "mesh", "model.heads", "model.params", "optimizer",
                   "rank"]
    issues = []
    assert read_metadata([1, 2], 4, issues) is None and issues == [("warning", "traceparse metadata is not an "
                                                                    "object; ignored", 1)]
    issues = []
    read_metadata({"version": 2}, 4, issues)
    assert issues == [("warning", "traceparse metadata version 2 is newer than this traceparse reads (1); its known "
                                  "fields are read", 1)]


def test_the_cli_and_the_library_never_import_torch():
    code = ("import sys, traceparse, traceparse.cli, traceparse.document; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- the plugin itself (needs torch)

@pytest.fixture
def tiny():
    torch = pytest.importorskip("torch")
    from fixtures.model import Dims, TinyTransformer, lm_loss

    d = Dims(kv_heads=2)
    torch.manual_seed(0)
    model = TinyTransformer(d)
    for block in model.layers:  # grouped-query attention: k and v project to kv_heads heads
        block.attn.k, block.attn.v = (torch.nn.Linear(d.hidden, d.kv_heads * d.head_dim, bias=False) for _ in "kv")
        block.attn.attn_fn = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randint(0, d.vocab, (d.micro_batch, d.seq))

    def step():
        opt.zero_grad()
        lm_loss(model(x[:, :-1]), x[:, 1:]).backward()
        opt.step()

    return d, model, opt, step


@pytest.mark.slow
def test_profile_writes_each_window_atomically_with_its_metadata(tmp_path, tiny):
    import torch

    from traceparse import profiler

    d, model, opt, step = tiny
    sched = torch.profiler.schedule(wait=1, warmup=1, active=1, repeat=2)
    with profiler.profile(tmp_path, model=model, optimizer=opt, seq=d.seq, schedule=sched,
                          model_facts={"top_k": 2}) as prof:
        for _ in range(7):
            step()
            prof.step()
    # two windows: each ended at steps 3 and 6 (wait 1, warmup 1, active 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.step3.json.gz", "rank0.step6.json.gz"]
    for p in tmp_path.iterdir():
        doc = json.loads(gzip.open(p).read())
        meta = doc["traceparse"]
        params = list(model.parameters())
        phi = sum(t.numel() for t in params)
        assert meta["model"] == {"params_local": phi, "dtype_bytes": 4, "heads": d.heads, "kv_heads": d.kv_heads,
                                 "hidden": d.hidden, "ffn": d.ffn, "vocab": d.vocab, "layers_local": d.layers,
                                 "seq": d.seq, "top_k": 2}
        assert meta["sources"]["seq"] == meta["sources"]["top_k"] == "user"
        # fp32 exp_avg and exp_avg_sq per parameter element, and one fp32 step counter per parameter tensor
        assert meta["optimizer"] == {"name": "AdamW", "n_opt": 2, "state_bytes": 2 * 4 * phi + 4 * len(params)}
        assert any(e.get("name", "").startswith("ProfilerStep#") for e in doc["traceEvents"])


def test_trace_handler_of_your_own_profiler_gets_the_metadata(tmp_path, tiny):
    import torch

    from traceparse import profiler

    d, model, opt, step = tiny
    with torch.profiler.profile(on_trace_ready=profiler.trace_handler(tmp_path, model=model, optimizer=opt,
                                                                      micro_batch=d.micro_batch)):
        step()
    (path,) = tmp_path.iterdir()
    assert path.name == "rank0.json.gz"
    doc = json.loads(gzip.open(path).read())
    assert next(iter(doc)) == "traceparse" and doc["traceparse"]["model"]["micro_batch"] == d.micro_batch
    assert doc["traceEvents"]


def test_a_failed_export_leaves_nothing_behind(tmp_path, tiny):
    import torch

    from traceparse import profiler

    _, model, _, step = tiny
    handler = profiler.trace_handler(tmp_path, model=model)
    with torch.profiler.profile() as prof:
        step()

    def broken(path):
        Path(path).write_text('{"traceEvents": [')  # half written, then the export dies
        raise OSError("disk full")

    prof.export_chrome_trace = broken
    with pytest.raises(OSError, match="disk full"):
        handler(prof)
    assert list(tmp_path.iterdir()) == []


def test_wrong_arguments_are_refused(tmp_path, tiny):
    from traceparse import profiler

    _, model, _, _ = tiny
    with pytest.raises(TypeError, match="writes the traces itself"):
        profiler.profile(tmp_path, on_trace_ready=print)
    with pytest.raises(ValueError, match="unknown keys \\['hiden'\\]"):
        profiler.profile(tmp_path, model=model, model_facts={"hiden": 64})


@pytest.mark.slow
def test_plugin_groups_stand_in_for_a_missing_pg_config(tmp_path):
    """A trace without distributedInfo.pg_config: the plugin's groups fill process_groups, named by their dim."""
    from traceparse.load.run import open_run

    for r in (0, 1):
        doc = json.loads(gzip.open(RUNS / "ddp2" / f"rank{r}.json.gz").read())
        del doc["distributedInfo"]["pg_config"]
        (tmp_path / f"rank{r}.json").write_text(json.dumps(doc))
    with open_run([tmp_path], use_cache=False) as con:
        got = con.execute("SELECT DISTINCT pg_name, pg_desc, ranks, group_axis(pg_desc, pg_name) FROM process_groups "
                          "ORDER BY 1").fetchall()
    # DDP's group is the default one: the plugin names it after its DDP role
    assert got == [("0", "default_pg (dp)", [0, 1], "dp")]


def test_flight_recorder_dumps_on_a_stalled_step_and_on_an_exception(tmp_path):
    torch = pytest.importorskip("torch")
    import time

    import torch.distributed as dist

    from traceparse import profiler
    from traceparse.ingest.flight_recorder import read_dump

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        with profiler.flight_recorder(tmp_path / "stall", stall_s=0.3, poll_s=0.02) as fr:
            time.sleep(0.5)  # before the first step: start-up is not watched
            assert fr.dumped is None
            dist.all_reduce(torch.ones(3))
            fr.step()
            deadline = time.monotonic() + 30  # a step that never ends: the watchdog fires after 0.3 s
            while fr.dumped is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert fr.dumped == "watchdog: no step for 0.3 s" and fr.written.wait(60)
        dump = read_dump(tmp_path / "stall" / "fr_rank0.pkl")
        assert [(e["op"], e["seq"], e["group_ranks"]) for e in dump["entries"]] == [("all_reduce", 1, [0])]
        with pytest.raises(ValueError), profiler.flight_recorder(tmp_path / "exc") as fr:
            raise ValueError("boom")
        assert fr.dumped == "exception: ValueError: boom"
        assert sorted(p.name for p in (tmp_path / "exc").iterdir()) == ["fr_rank0.inflight.json", "fr_rank0.json",
                                                                         "fr_rank0.pkl"]
        # the in-flight record: the call the exception left (a send to itself, refused), its
        # group's op counter (the all_reduce above was op 1 of the world group) and the code that made it
        with pytest.raises(ValueError), profiler.flight_recorder(tmp_path / "call"):
            dist.send(torch.ones(2, 3, dtype=torch.bfloat16), dst=0)
        where = json.loads((tmp_path / "call" / "fr_rank0.inflight.json").read_text())
        assert where["call"] == {"op": "send", "peer": 0, "pg_name": "0", "pg_desc": "default_pg", "group_ranks": [0],
                                 "op_id": 1, "input_sizes": [[2, 3]], "input_dtypes": ["BFloat16"]}
        assert where["frames"][-1]["name"] == "test_flight_recorder_dumps_on_a_stalled_step_and_on_an_exception"
        # profile(dump_on_hang_s=...) carries the same dumper for the length of its with block
        with pytest.raises(KeyError), profiler.profile(tmp_path / "prof", dump_on_hang_s=60):
            raise KeyError("lost")
        assert json.loads((tmp_path / "prof" / "fr_rank0.inflight.json").read_text())["why"] == "exception: KeyError: 'lost'"
    finally:
        dist.destroy_process_group()
