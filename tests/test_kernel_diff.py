"""``traceparse compare``'s kernel-by-kernel section (traceparse.history.kernel_diff): per name, time and calls per
rank per step, NEW against BASE.

Expected values are computed here from the trace files' JSON (HTA's trace_diff pair, a public trace, and a copy of its
control run with one kernel made 3x slower), never copied from the section itself.
"""

import decimal
import gzip
import html
import json
import re
from collections import Counter, defaultdict
from functools import cache

import pytest
from click.testing import CliRunner
from conftest import public_trace

from traceparse.cli import main
from traceparse.history.kernel_diff import diff, kernel_times
from traceparse.render.compare import diff_name, render_html, render_markdown, render_text, short

CONTROL, TEST = "hta/trace_diff/control/control.json.gz", "hta/trace_diff/test/test.json.gz"
GPU = ("kernel", "gpu_memcpy", "gpu_memset")
US = 1000  # ns per µs: the JSON's unit
TITLE = "What changed, kernel by kernel"


@cache
def raw(path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def steps(path) -> list[dict]:
    """The ProfilerStep#N annotations of the CPU side."""
    return [e for e in raw(path) if e.get("ph") == "X" and e.get("cat") == "user_annotation"
            and e["name"].startswith("ProfilerStep#")]


def expected(path) -> dict[str, tuple[float, float]]:
    """Per GPU kernel, memcpy and memset name: (ns, calls) per step, summed over the file / its ProfilerSteps."""
    total, calls = defaultdict(int), Counter()
    for e in raw(path):
        if e.get("ph") == "X" and e.get("cat") in GPU:
            total[e["name"]] += e["dur"] * US
            calls[e["name"]] += 1
    n = len(steps(path))
    return {name: (t / n, calls[name] / n) for name, t in total.items()}


def launched_in_steps(path) -> bool:
    """Every GPU activity of the file is launched (its runtime call, by correlation id) inside a ProfilerStep: the
    section's windows (by launch) then hold them all, and the sums over the file are its numbers."""
    launch = {e["args"]["correlation"]: e["ts"] for e in raw(path)
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    windows = [(s["ts"], s["ts"] + s["dur"]) for s in steps(path)]
    return all(any(a <= launch.get(e["args"].get("correlation"), e["ts"]) < b for a, b in windows)
               for e in raw(path) if e.get("ph") == "X" and e.get("cat") in GPU)


def slowed_copy(src, dst, kernel: str, factor: int = 3) -> int:
    """``src`` written to ``dst`` with the ``dur`` of every instance of ``kernel`` times ``factor``, the text
    otherwise unchanged (timestamps as written); the number of instances changed."""
    with gzip.open(src, "rt") as f:
        text = f.read()
    pattern = re.compile(r'("cat": "kernel", "name": ' + re.escape(json.dumps(kernel)) + r',[^\n]*\n\s*"ts": [-0-9.eE+]+, '
                         r'"dur": )([-0-9.eE+]+)')
    text, n = pattern.subn(lambda m: m.group(1) + str(decimal.Decimal(m.group(2)) * factor), text)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(dst, "wt") as f:
        f.write(text)
    return n


def heaviest_compute_kernel(path) -> str:
    total = Counter()
    for e in raw(path):
        if e.get("ph") == "X" and e.get("cat") == "kernel" and not e["name"].lower().startswith("nccl"):
            total[e["name"]] += e["dur"]
    return total.most_common(1)[0][0]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """stores(name) -> the store path of 'control', 'test' or 'slowed' (control with one kernel 3x slower),
    each loaded once for this module."""
    from traceparse.load.run import load_run

    folder, made = tmp_path_factory.mktemp("kernel_diff"), {}
    sources = {"control": public_trace(CONTROL), "test": public_trace(TEST)}

    def get(name):
        if name not in made:
            path = sources.get(name)
            if name == "slowed":
                path = folder / "slowed" / "control.json.gz"
                assert slowed_copy(sources["control"], path, heaviest_compute_kernel(sources["control"])) > 0
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("TRACEPARSE_CACHE", str(folder / "cache"))
                made[name], _ = load_run([path], db=folder / f"{name}.duckdb")
        return made[name]

    return get


def times(store) -> dict:
    from traceparse.load.run import connect

    con = connect(store)
    try:
        return kernel_times(con)
    finally:
        con.close()


def invoke(*args):
    return CliRunner().invoke(main, ["compare", *map(str, args)], catch_exceptions=False)


# --- the section's rules, on hand-made times (fast) ----------------------------------------------------------------

def made(windows, step_ns=None, **kernels) -> dict:
    """kernel_times-like input: name=(total_ns, calls[, strategy]) as GPU kernels."""
    return {"windows": windows, "ranks": 1, "step_mean_ns": step_ns, "cpu_op": {},
            "kernel": {k: {"total_ns": v[0], "calls": v[1], "strategy": v[2] if len(v) > 2 else None}
                       for k, v in kernels.items()}}


def test_rows_per_rank_per_step_largest_change_first():
    base = made(4, 100e6, gemm=(40e6, 8), ar=(8e6, 4, "dp"), old=(4e6, 4))
    new = made(2, 130e6, gemm=(20e6, 4), ar=(30e6, 2, "dp"), new_kernel=(2e6, 2))
    d = diff(base, new)
    assert d["status"] == "ok" and d["step_change_ns"] == 30e6 and d["cpu_ops"] == []
    rows = {r["name"]: r for r in d["kernels"]}
    assert [r["name"] for r in d["kernels"]] == ["ar", "new_kernel", "old", "gemm"]  # |delta|: 13, 1, 1 (by name), 0
    assert rows["ar"] == {"name": "ar", "kind": "kernel", "strategy": "dp", "base_ns_per_step": 2e6,
                          "new_ns_per_step": 15e6, "delta_ns_per_step": 13e6, "base_calls_per_step": 1.0,
                          "new_calls_per_step": 1.0, "share_of_change": round(13 / 30, 4), "only_in": None}
    assert rows["gemm"]["delta_ns_per_step"] == 0 and rows["gemm"]["only_in"] is None
    assert rows["old"]["new_ns_per_step"] == 0 and rows["old"]["only_in"] == "base"
    assert rows["new_kernel"]["base_calls_per_step"] == 0 and rows["new_kernel"]["only_in"] == "new"
    assert [r["name"] for r in diff(base, new, top=2)["kernels"]] == ["ar", "new_kernel"]


def test_unknown_or_unchanged_step_time_gives_no_share():
    for b, n in ((None, 100e6), (100e6, 100e6)):
        d = diff(made(1, b, k=(2e6, 1)), made(1, n, k=(3e6, 1)))
        assert d["kernels"][0]["delta_ns_per_step"] == 1e6 and d["kernels"][0]["share_of_change"] is None
    assert diff(made(1, None, k=(1, 1)), made(1, 5.0, k=(1, 1)))["step_change_ns"] is None


def test_not_applicable():
    d = diff(made(0), made(3, 1.0, k=(1, 1)))
    assert d["status"] == "not_applicable" and "base run has no step window" in d["reason"]
    assert diff(made(2), made(3))["status"] == "not_applicable"


def test_names_are_shortened_and_escaped():
    long = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<Add>(at::Tensor&)>(int, float)"
    assert len(short(long)) == 60 and short(long).endswith("(at::Tensor&)>") and short("aten::mm") == "aten::mm"
    evil = "</td><script>alert(1)</script> & <b>"
    row = {"name": evil, "kind": "kernel", "strategy": "tp", "base_ns_per_step": 1e6, "new_ns_per_step": 3e6,
           "delta_ns_per_step": 2e6, "base_calls_per_step": 1, "new_calls_per_step": 1, "share_of_change": 1.0,
           "only_in": None}
    doc = {"verdict": "ok", "layout_changes": [], "notes": [], "metrics": [], "regressions": [], "incomplete": [],
           "base": None, "new": None,
           "diff": {"status": "ok", "step_change_ns": 2e6, "step_ns": {"base": 1e7, "new": 1.2e7},
                    "names": {"kernel": 1, "cpu_op": 0}, "kernels": [row], "cpu_ops": [], "definition": ""}}
    page = render_html(doc)
    assert "<script>" not in page and "&lt;/td&gt;&lt;script&gt;" in page and "&amp; &lt;b&gt;" in page
    text = render_text(doc)
    assert TITLE in text and "[tp]" in text and "+2.000" in text and "+100.0%" in text
    assert text.splitlines()[-1].startswith("verdict:")
    md = render_markdown(doc)
    assert f"#### {TITLE}" in md and "`</td><script>alert(1)</script> & <b>` [tp]" in md


# --- the bundled pair, against the JSON and HTA ---------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("rel", [CONTROL, TEST])
def test_per_step_totals_match_the_json(stores, rel):
    path = public_trace(rel)
    assert launched_in_steps(path)
    got = times(stores("control" if rel == CONTROL else "test"))
    want = expected(path)
    assert got["windows"] == len(steps(path)) == 6 and got["ranks"] == 1
    assert set(got["kernel"]) == set(want)
    for name, (ns, calls) in want.items():
        assert got["kernel"][name]["total_ns"] / got["windows"] == pytest.approx(ns, abs=US), name
        assert got["kernel"][name]["calls"] / got["windows"] == pytest.approx(calls), name
    comm = {n: k["strategy"] for n, k in got["kernel"].items() if k["strategy"]}
    assert comm and all(n.startswith("nccl") for n in comm) and set(comm.values()) <= {"dp", "ep", "untagged"}


@pytest.mark.slow
def test_the_pair_diffed(stores):
    base, new = times(stores("control")), times(stores("test"))
    d = diff(base, new, top=10_000)
    want_b, want_n = expected(public_trace(CONTROL)), expected(public_trace(TEST))
    assert len(d["kernels"]) == d["names"]["kernel"] == len(want_b.keys() | want_n.keys())
    for r in d["kernels"]:
        b, n = want_b.get(r["name"], (0, 0))[0], want_n.get(r["name"], (0, 0))[0]
        assert r["delta_ns_per_step"] == pytest.approx(n - b, abs=US), r["name"]
        assert r["only_in"] == (None if r["name"] in want_b and r["name"] in want_n else
                                "base" if r["name"] in want_b else "new")
    deltas = [abs(r["delta_ns_per_step"]) for r in d["kernels"]]
    assert deltas == sorted(deltas, reverse=True)


def launchless(path) -> set[str]:
    """The names of GPU activity with an instance no runtime or driver call launched (none carries its
    correlation id)."""
    launched = {(e.get("args") or {}).get("correlation") for e in raw(path)
                if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    return {e["name"] for e in raw(path) if e.get("ph") == "X" and e.get("cat") in GPU
            and (e.get("args") or {}).get("correlation") not in launched}


@pytest.mark.slow
def test_agrees_with_hta_trace_diff(stores):
    """HTA's TraceDiff.compare_traces over every iteration of the pair: the same counts and durations per name
    (HTA's per run in µs; ours per step in ns). HTA leaves out GPU activity without a launch (iteration -1), which
    this section places by its start: names with such instances (the test run's CUDA-graph kernels) are left out."""
    hta = pytest.importorskip("hta.trace_diff")
    control, test = (hta.LabeledTrace(label=n, trace_dir=str(public_trace(r).parent))
                     for n, r in (("control", CONTROL), ("test", TEST)))
    df = hta.TraceDiff.compare_traces(control, test, control_iteration=control.iterations(),
                                      test_iteration=test.iterations(), device_type=hta.DeviceType.GPU)
    d = diff(times(stores("control")), times(stores("test")), top=10_000)
    assert {r["name"] for r in d["kernels"]} == set(df.index)
    n, compared = len(control.iterations()), Counter()
    for side, rel in (("base", CONTROL), ("new", TEST)):
        label, skip = ("control", "test")[side == "new"], launchless(public_trace(rel))
        for r in d["kernels"]:
            if r["name"] in skip:
                continue
            h = df.loc[r["name"]]
            assert r[f"{side}_calls_per_step"] == pytest.approx(h[f"{label}_counts"] / n, abs=1e-3), r["name"]
            assert r[f"{side}_ns_per_step"] == pytest.approx(h[f"{label}_total_duration"] * US / n, abs=US), r["name"]
            compared[side] += 1
    assert compared["base"] == len(d["kernels"]) and compared["new"] > len(d["kernels"]) / 2


# --- one kernel made slower -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_one_kernel_made_slower_is_the_one_change(stores):
    path = public_trace(CONTROL)
    kernel = heaviest_compute_kernel(path)
    d = diff(times(stores("control")), times(stores("slowed")), top=10_000)
    first, *others = d["kernels"]
    assert first["name"] == kernel and first["only_in"] is None and first["strategy"] is None
    assert first["delta_ns_per_step"] == pytest.approx(2 * expected(path)[kernel][0], abs=1)
    assert first["base_calls_per_step"] == first["new_calls_per_step"]
    assert others and all(r["delta_ns_per_step"] == 0 for r in others)
    assert d["cpu_ops"] and all(r["delta_ns_per_step"] == 0 for r in d["cpu_ops"])


@pytest.mark.slow
def test_cli_formats_carry_the_section(stores):
    args = ("--base-db", stores("control"), "--new-db", stores("slowed"))
    r = invoke(*args, "--format", "json")
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.stdout)
    assert doc["diff"]["status"] == "ok" and doc["diff"]["kernels"][0]["name"] == heaviest_compute_kernel(
        public_trace(CONTROL))
    assert doc["diff"]["step_change_ns"] == 0  # the CPU side, the steps included, is unchanged
    for fmt, head in (("text", TITLE), ("markdown", f"#### {TITLE}")):
        r = invoke(*args, "--format", fmt)
        assert head in r.stdout and r.stdout.strip().splitlines()[-1].lstrip("_").startswith("verdict:"), fmt
    page = invoke(*args, "--format", "html").stdout
    assert page.startswith("<!doctype html>") and TITLE in page
    shown = [diff_name(r) for r in doc["diff"]["kernels"]]
    assert any("<" in n or ">" in n for n in shown)  # the slowed kernel's template arguments, memcpy's arrows
    for name in shown:
        assert html.escape(name) in page and ("<" not in name and ">" not in name or name not in page), name
