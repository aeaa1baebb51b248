"""A rank cut short (a crashed job's truncated trace) takes part in the verdicts only through its complete steps.

Truncated copies of bundled runs are written at test time: one rank's events re-serialized one per line (the same
events, in the same order, as Kineto wrote them: each thread's events in time order, one thread after another) and
the text cut in the middle of an event, so the file is not JSON. Three cut points: in the middle of a step, just
after a step boundary (the first events of the next step), and in the last step. For each: the report's first
finding names the rank, the steps it did not finish are left out for every rank (vocabulary ``incomplete_steps``),
no share exceeds 100%, the volume check does not blame frozen parameters for bytes the rank never recorded, and the
per-step numbers and the volume verdict equal the uncut run's over the complete steps.

What differs from the uncut run, by design: the cut rank's collectives arrive at their call, not at its gloo
worker's annotation (Kineto writes the worker threads apart, so a cut file loses them in part or whole:
``store/derive.sql``), so waits and who arrives last in its groups are measured from calls; and fewer steps are
judged, so a cause "seen in 1 of 2 steps" may be "seen once".
"""

import gzip
import json
from pathlib import Path

import pytest

import traceparse
from traceparse.render.html import render_html
from traceparse.render.text import render

RUNS = Path(__file__).resolve().parent.parent / "fixtures" / "runs"


def _events(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def _text(trace: dict) -> tuple[bytes, list[int]]:
    """The trace as JSON text with one event per line, and each event's byte offset."""
    head = {k: v for k, v in trace.items() if k != "traceEvents"}
    out, offsets = bytearray(b'{"traceEvents": [\n'), []
    for i, e in enumerate(trace["traceEvents"]):
        offsets.append(len(out))
        out += json.dumps(e).encode() + (b",\n" if i < len(trace["traceEvents"]) - 1 else b"\n")
    out += b"], " + json.dumps(head).encode()[1:]
    return bytes(out), offsets


def _main_step_events(trace: dict) -> dict[int, list[int]]:
    """Per ProfilerStep#N, the indices of the main thread's events that start inside it."""
    ev = trace["traceEvents"]
    steps = {int(e["name"].split("#")[1]): (float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["tid"])
             for e in ev if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")}
    out = {n: [] for n in steps}
    for i, e in enumerate(ev):
        if e.get("ph") != "X":
            continue
        for n, (a, b, tid) in steps.items():
            if e["tid"] == tid and a <= float(e["ts"]) < b:
                out[n].append(i)
    return out


def _cut_copy(run: str, rank: int, where: str, dest: Path) -> tuple[Path, int]:
    """A copy of ``run`` with rank ``rank``'s file cut inside an event chosen by ``where``; returns (folder, the
    step the cut falls in)."""
    dest.mkdir()
    src = RUNS / run
    for f in src.iterdir():
        if f.name.startswith(f"rank{rank}."):
            continue
        (dest / f.name).write_bytes(f.read_bytes())
    trace = _events(next(src.glob(f"rank{rank}.json*")))
    text, offsets = _text(trace)
    per_step = _main_step_events(trace)
    steps = sorted(per_step)
    if where == "mid_step":  # the middle of the second step
        n = steps[1]
        i = per_step[n][len(per_step[n]) // 2]
    elif where == "after_boundary":  # the third event of the third step (just after its start)
        n = steps[2]
        i = per_step[n][2]
    else:  # "last_step": the middle of the last step
        n = steps[-1]
        i = per_step[n][len(per_step[n]) // 2]
    end = offsets[i] + (offsets[i + 1] - offsets[i]) // 2  # inside event i: not JSON
    (dest / f"rank{rank}.json").write_bytes(text[:end])
    return dest, n


@pytest.fixture(scope="module")
def uncut():
    return {run: traceparse.analyze([RUNS / run], use_cache=False) for run in ("quiet_ddp2", "ddp4")}


CASES = [("quiet_ddp2", 1, "mid_step"), ("quiet_ddp2", 0, "after_boundary"), ("quiet_ddp2", 1, "last_step"),
         ("ddp4", 2, "mid_step")]
FAST = CASES[:1]  # the fast tier's case; the others are slow


def _shares(node, path="doc"):
    """(path, value) of every number under a key naming a share or fraction of something."""
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and ("share" in k or "fraction" in k):
                yield f"{path}.{k}", v
            else:
                yield from _shares(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _shares(v, f"{path}[{i}]")


@pytest.mark.parametrize("run,rank,where", [c if c in FAST else pytest.param(*c, marks=pytest.mark.slow) for c in CASES],
                         ids=[f"{r}-rank{k}-{w}" for r, k, w in CASES])
def test_a_rank_cut_short_counts_only_through_its_complete_steps(tmp_path, uncut, run, rank, where):
    folder, cut_step = _cut_copy(run, rank, where, tmp_path / "run")
    doc = traceparse.analyze([folder], use_cache=False)
    base = uncut[run]
    steps = base["run"]["steps"]
    cut = doc["cut_short"]
    # the first finding names the rank, where it stops and what was left out
    assert [c["rank"] for c in cut] == [rank]
    c = cut[0]
    assert c["in_step"] == cut_step
    assert c["left_out_steps"] == [s for s in steps if s >= cut_step]
    assert c["complete_steps"] == [s for s in steps if s < cut_step]
    report = render(doc).splitlines()
    first = next(i for i, line in enumerate(report) if line.strip() and not line.startswith(("run:", "steps:")))
    assert report[first].startswith(f"cut short: Rank {rank}'s trace is cut short"), report[:6]
    assert f"in step {cut_step}" in " ".join(report[first:first + 4])
    page = render_html(doc)  # the page too, first of its findings
    at = page.index('<section id="findings">')
    assert at < page.index("cut short</b>: Rank") < page.index("at warn or fail", at)
    # no share of anything above 100%
    over = [(p, v) for p, v in _shares(doc) if v > 1 + 1e-9]
    assert not over, over
    # the volume check does not blame the cut: its verdict and ratio are the uncut run's
    vol, vol0 = doc["checks"]["comm_volume"], base["checks"]["comm_volume"]
    assert vol["status"] == vol0["status"] == "ok"
    assert not any("frozen" in f for f in vol.get("findings") or [])
    for s, d in vol0["per_strategy"].items():
        assert vol["per_strategy"][s]["ratio"] == pytest.approx(d["ratio"], rel=1e-9), s
    # per-step numbers of the complete steps: the uncut run's (the cut rank's communication aside: from its calls)
    kept = set(c["complete_steps"])
    got = {(r["rank"], r["step"]): r for r in doc["summary"]["per_step"]}
    want = {(r["rank"], r["step"]): r for r in base["summary"]["per_step"] if r["step"] in kept}
    assert set(got) == set(want)
    for key, w in want.items():
        assert got[key]["window_ns"] == w["window_ns"] and got[key]["compute_ns"] == w["compute_ns"], key
        if key[0] != rank:
            assert got[key]["comm_ns"] == w["comm_ns"], key
    # the step graphs and the critical path: the complete steps only
    assert [s["step"] for s in doc["critical_path"].get("steps") or []] == sorted(kept)


def test_a_file_cut_after_its_events_leaves_out_no_step(tmp_path):
    """Cut after traceEvents (the header's tail lost): every event is kept, no step is left out, no finding."""
    dest = tmp_path / "run"
    dest.mkdir()
    for f in (RUNS / "ddp2").iterdir():
        if not f.name.startswith("rank1."):
            (dest / f.name).write_bytes(f.read_bytes())
    text, _ = _text(_events(next((RUNS / "ddp2").glob("rank1.json*"))))
    (dest / "rank1.json").write_bytes(text[:-5])
    doc = traceparse.analyze([dest], use_cache=False)
    assert doc["cut_short"] == []
    assert sorted({r["step"] for r in doc["summary"]["per_step"]}) == doc["run"]["steps"]
