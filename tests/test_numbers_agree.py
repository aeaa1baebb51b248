"""Wherever the analyze document states one quantity in two sections, the values are equal.

Over every fixture run and every public GPU trace (fixtures/public_traces.py):
- compute per rank: bubble.per_stage vs imbalance.per_rank vs summary.per_rank (per step window);
- communication time per rank: summary.per_rank vs overlap.per_rank;
- per-strategy communication time sums to the per-rank total plus the time strategies communicate at
  once (overlap.concurrent_ns, counted by each), and untagged time is one of the strategies;
- the heavy pipeline stage: bubble.bottleneck_stage vs imbalance.heavy_stage;
- the input bytes of the collectives and the notes' communication volume (all-reduce 2x): each under its own name
  in the JSON, the text report, the page and compare's metrics (volume.<strategy>), every volume finding quoting
  the text report's volume table, the input bytes of a strategy equal in the collectives and the check;
- comm %: the communication inside the step windows over the windows' length, never above 100%.
"""

import re
from pathlib import Path

import pytest
from conftest import public_trace, public_trace_files
from test_repeat_runs import windowed

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
# a run profiled in several windows is read window by window (tests/test_repeat_runs.py), not as one folder
RUNS = sorted(p for p in (ROOT / "fixtures" / "runs").iterdir() if p.is_dir() and not windowed(p))
PUBLIC = public_trace_files()


def test_every_bundled_input_is_covered():
    assert len(RUNS) >= 21
    assert len(PUBLIC) >= 10, "fixtures/public_traces.toml lists the public traces"


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


# --- the bytes of the collectives (input bytes) and the notes' communication volume: two names, one value each ---

VOLUME_FINDING = re.compile(
    r"^(?P<s>\w+) \((?P<variant>[^)]*)\): volume \(notes' count: all-reduce 2x\) (?P<measured>[\d.,]+ (?:B|kB|MB|GB)) "
    r"per rank per step(?: \(measured leaves out \d+ operations without a size\))?, expected "
    r"(?P<expected>[\d.,]+ (?:B|kB|MB|GB)) \(.*\), (?P<ratio>[\d.]+)x: ")


def text_table(text: str, title_start: str) -> list[dict]:
    """The rows of the text report's table under the line starting with ``title_start``, as {header: cell}; the
    columns are cut where the dash line under the header puts them (a cell may be empty or hold spaces)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(title_start))
    header, dashes = lines[at + 1], lines[at + 2]
    spans = [m.span() for m in re.finditer(r"-+", dashes)]
    names = [header[a:b].strip() for a, b in spans]
    out = []
    for line in lines[at + 3:]:
        if not line.strip():
            break
        line = line.ljust(spans[-1][1])  # a row's empty last cells are not printed
        out.append({n: line[a:b].strip() for n, (a, b) in zip(names, spans, strict=True)})
    return out


@pytest.mark.parametrize("path", RUNS + PUBLIC, ids=lambda p: p.name.split(".")[0] if p.suffix == ".gz" else p.name)
def test_input_bytes_and_volume_keep_their_names_and_values(doc, path):
    """The collectives' input bytes and the notes' volume (all-reduce 2x): each under its own name in the JSON, the
    text report and compare's metrics, every volume finding quoting the volume table, the input bytes of a strategy
    the same in the collectives and the comm_volume check."""
    from traceparse.render.text import render
    from traceparse.units import size
    from traceparse.history.run_metrics import run_metrics

    d = doc(path)
    text = render(d)
    cv = d["checks"]["comm_volume"]
    per = cv.get("per_strategy") or {}

    # JSON: the input bytes of the collectives, the volume of comm_volume; never the old ambiguous keys
    for row in d["collectives"]:
        assert "input_bytes_per_rank_per_step" in row and "bytes_per_rank_per_step" not in row
    for s, v in per.items():
        assert {"input_bytes", "measured_volume_bytes", "expected_volume_bytes"} <= set(v), s
        assert not {"measured_bytes", "expected_bytes"} & set(v), s
        rows = [r["input_bytes_per_rank_per_step"] for r in d["collectives"] if r["strategy"] == s]
        known = [b for b in rows if b is not None]
        if v["input_bytes"] is None:
            assert not known, s
        else:  # the collectives round each row to whole bytes
            assert sum(known) == pytest.approx(v["input_bytes"], abs=len(rows)), s
    assert all("notes_bytes" not in r and "volume_bytes" in r for r in cv.get("per_op") or [])

    # text: the collectives table says input bytes; the volume table says volume, with both columns
    if d["collectives"]:
        assert "input bytes" in text_table(text, "collectives per rank per step")[0]
    if per:
        table = {r["strategy"]: r for r in text_table(text, "communication volume per rank per step")}
        assert "volume (notes' count: all-reduce 2x)" in text
        for s, v in per.items():
            assert (table[s]["input bytes"], table[s]["volume"], table[s]["expected volume"]) == (
                size(v["input_bytes"]), size(v["measured_volume_bytes"]), size(v["expected_volume_bytes"])), s

    # every finding of the check quotes the table's numbers under the same name
    flagged = {s for s, v in per.items() if v["status"] in ("warn", "fail")}
    quoted = set()
    for f in cv["findings"]:
        m = VOLUME_FINDING.match(f)
        assert m, f
        s = m["s"]
        quoted.add(s)
        assert (m["measured"], m["expected"]) == (table[s]["volume"], table[s]["expected volume"]), f
        assert f"{m['ratio']}x" == table[s]["ratio"] == f"{per[s]['ratio']:.2f}x", f
        assert m["variant"] == per[s]["variant"], f
    assert quoted == flagged

    # compare's metric of the volume is volume.<strategy>, the check's measured volume
    metrics = run_metrics(d)
    assert not [i for i in metrics if i.startswith("bytes.")]
    for s, v in per.items():
        if v["measured_volume_bytes"] is not None:
            assert metrics[f"volume.{s}"].value == v["measured_volume_bytes"], s


@pytest.mark.parametrize("path", RUNS + PUBLIC, ids=lambda p: p.name.split(".")[0] if p.suffix == ".gz" else p.name)
def test_comm_share_is_taken_over_one_window(doc, path):
    """comm %: the communication inside the step windows over the windows, never above 100%, while the comm total
    (what the steps launched, also where it runs past them) may exceed the windows."""
    for r in doc(path)["summary"]["per_rank"]:
        if r["window_ns"] is None:
            continue
        assert 0 <= r["comm_in_window_ns"] <= r["window_ns"], r
        assert r["comm_fraction"] == round(r["comm_in_window_ns"] / r["window_ns"], 4) <= 1, r


def test_comm_share_of_a_gpu_running_behind_its_cpu(doc):
    """The MI300 trace: its communication kernels execute up to 38 ms after the step that launched them ended; the
    comm total (72 ms) exceeds the windows (49 ms), the share of the windows spent communicating does not (82%,
    the busy share of the communication stream)."""
    from traceparse.render.text import render

    d = doc(public_trace("tracelens/mi300_resnet_ddp_rank0.json.gz"))
    (r,) = d["summary"]["per_rank"]
    assert r["comm_ns"] > r["window_ns"]  # comm total: launched in the steps, executing past them
    assert r["comm_fraction"] == 0.8242
    (row,) = text_table(render(d), "per rank: totals over its step windows")
    assert row["comm %"] == "82.4%" and row["comm total"] == "71.52 ms" and row["comm in windows"] == "40.09 ms"


HTML_RUNS = ["zero1_dp4", "dp2_tp2_sp", "ddp4"]


@pytest.mark.parametrize("name", HTML_RUNS)
def test_html_names_the_volume_and_agrees_with_the_text_and_compare(doc, name):
    """The page: the volume chart titled and labelled as the volume, its bars the check's numbers; the overlap chart
    per rank per step, as compare's exposed_comm.<strategy>; the findings and the text report with both names."""
    import html as markup

    from traceparse.render.charts import charts
    from traceparse.render.charts.comm import VOLUME_AXIS, VOLUME_TITLE
    from traceparse.render.html import render_html
    from traceparse.history.run_metrics import run_metrics

    d = doc(ROOT / "fixtures" / "runs" / name)
    page = markup.unescape(render_html(d))
    assert "input bytes" in page and "volume (notes' count: all-reduce 2x)" in page
    for f in d["checks"]["comm_volume"]["findings"]:
        assert f in page
    made = charts(d)
    volume = made["volume"][0].to_dict()
    assert volume["title"] == VOLUME_TITLE and volume["encoding"]["y"]["title"] == VOLUME_AXIS
    bars = {(r["strategy"], r["kind"]): r["MB"] for r in volume["data"]["values"]}
    per = d["checks"]["comm_volume"]["per_strategy"]
    for s, v in per.items():
        assert bars[(s, "measured")] * 1e6 == pytest.approx(v["measured_volume_bytes"]), s
    metrics = run_metrics(d)
    overlap = made["overlap"][0].to_dict()
    assert "per rank per step" in overlap["encoding"]["x"]["title"]
    for r in overlap["data"]["values"]:
        if r["part"] == "exposed":
            assert r["ms"] * 1e6 == pytest.approx(metrics[f"exposed_comm.{r['strategy']}"].value), r


FLOOR_FINDING = re.compile(r"Compute differs across ranks: rank (?P<rank>\d+)'s compute floor is (?P<ms>[\d,.]+ ms) "
                           r"per step, (?P<ratio>[\d.]+)x the mean rank")
STAGE_FINDING = re.compile(r"Pipeline stage (?P<stage>\d+) has the most work: .* is (?P<ms>[\d,.]+ ms) per "
                           r"micro-batch, (?P<ratio>[\d.]+)x the mean stage")
STRAGGLER_FINDING = re.compile(r"(?:Rank (?P<named>\d+) is a straggler: |No straggler named: rank (?P<seen>\d+) )"
                               r"arrives (?P<late>[\d,.]+ ms) after .* last at (?P<last>\d+)% of its (?P<n>\d+) matched "
                               r"collectives, chance (?P<chance>\d+)%\) and the other ranks lose (?P<lost>[\d,.]+ ms)")
EXPOSED = re.compile(r"(?P<s>\w+) (?P<exposed>[\d,.]+ ms)(?: \((?P<wait>[\d,.]+ ms) waiting for the last peer, "
                     r"(?P<transfer>[\d,.]+ ms) transfer\))?, (?P<hidden>\d+)% hidden")


@pytest.mark.parametrize("path", RUNS + PUBLIC, ids=lambda p: p.name.split(".")[0] if p.suffix == ".gz" else p.name)
def test_imbalance_and_overlap_findings_quote_the_report(doc, path):
    """Every number an imbalance or overlap finding states is the one the report shows for it: the text report's
    imbalance and pipeline stages tables (per rank per step, per micro-batch), the straggler's evidence in the
    JSON, and for overlap the per rank per step times, which for a strategy every rank runs are compare's
    exposed_comm.<strategy>."""
    from traceparse.render.text import render
    from traceparse.units import ms
    from traceparse.history.run_metrics import run_metrics

    d = doc(path)
    text = render(d)
    imb, ov = d["checks"]["imbalance"], d["checks"]["overlap"]
    ranks = {int(r["rank"]): r for r in text_table(text, "imbalance per rank, per step")} if len(imb["per_rank"]) > 1 \
        else {}
    for f in imb["findings"]:
        if m := FLOOR_FINDING.match(f):
            assert m["ms"] == ranks[int(m["rank"])]["compute floor"], f
            assert float(m["ratio"]) == round(imb["compute_floor"]["max_over_mean"], 2), f
        elif m := STAGE_FINDING.match(f):
            stages = [r for r in text_table(text, "pipeline stages, per micro-batch") if r["stage"] == m["stage"]]
            assert len(stages) == 1 and m["ms"] == stages[0]["compute floor"], f
            assert float(m["ratio"]) == round(imb["heavy_stage_over_mean"], 2), f
        elif m := STRAGGLER_FINDING.match(f):
            e = imb["straggler"]
            assert int(m["named"] or m["seen"]) == e["rank"] and (m["named"] is not None) == (imb["straggler_rank"]
                                                                                              is not None), f
            assert (m["late"], m["lost"]) == (ms(e["lateness_ns"]), ms(e["lost_per_step_ns"])), f
            assert (int(m["last"]), int(m["n"])) == (round(100 * e["last_fraction"]), e["collectives"]), f
            assert ms(e["lost_per_step_ns"]) in text.split("imbalance per rank, per step", 1)[1].split("\n", 1)[0] \
                or imb["straggler_verdict"] == "named", f
    per, metrics = ov.get("per_strategy") or {}, run_metrics(d)
    n_windows = len(d["summary"]["per_step"])
    for f in ov.get("findings") or []:
        if not f.startswith("Exposed communication per rank per step"):
            continue
        for m in EXPOSED.finditer(f.split(": ", 1)[1]):
            v = per[m["s"]]
            assert m["exposed"] == ms(v["exposed_per_step_ns"]) and int(m["hidden"]) == round(100 * v["overlap"]), f
            if m["wait"]:
                assert (m["wait"], m["transfer"]) == (ms(v["waiting_per_step_ns"]), ms(v["exposed_transfer_per_step_ns"]))
            assert v["exposed_per_step_ns"] == round(v["exposed_ns"] / v["windows"])
            if v["windows"] == n_windows:  # every rank and step: compare's per rank per step metric
                assert ms(metrics[f"exposed_comm.{m['s']}"].value) == m["exposed"], f
