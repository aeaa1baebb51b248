"""Two quantities, two names: the input bytes of the collectives (what the ranks pass to the calls) and the
communication volume in the notes' count (all-reduce 2x). The volume's compare metric is ``volume.<strategy>``,
``bytes.<strategy>`` before: a history recorded then keeps its series, and ``--threshold bytes=...`` is taken as
``volume``. ``traceparse explain`` defines each name, and comm % over one window."""

from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import traceparse
from traceparse.history import store as history
from traceparse.cli import main
from traceparse.history.run_metrics import current_id

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def test_old_names_map_to_the_current_ones():
    assert current_id("bytes") == "volume"
    assert current_id("bytes.dp") == "volume.dp"
    assert current_id("bytes.pp_per_microbatch") == "volume.pp_per_microbatch"
    for key in ("volume.dp", "step_time.mean", "overlap", "layout.dp"):
        assert current_id(key) == key


@pytest.fixture(scope="module")
def old_history(tmp_path_factory) -> Path:
    """A history of two ddp2 runs whose volume metrics were recorded under their former ids (bytes.<strategy>,
    group bytes), as traceparse wrote them before the rename."""
    path = tmp_path_factory.mktemp("old") / "h.duckdb"
    doc = traceparse.analyze([RUNS / "ddp2"])
    for commit in ("a", "b"):
        history.record(path, doc, {"commit": commit, "job": "ddp2"})
    with duckdb.connect(str(path)) as con:
        con.execute("""UPDATE metrics SET id = 'bytes' || substr(id, length('volume') + 1), "group" = 'bytes'
                       WHERE "group" = 'volume'""")
        assert con.execute("""SELECT count(*) FROM metrics WHERE id LIKE 'bytes.%'""").fetchone()[0] >= 2
    return path


def test_a_history_recorded_under_the_old_ids_reads_under_the_new(old_history):
    hist = history.read(old_history)
    ids = {m["id"] for m in hist.metrics}
    assert "volume.dp" in ids and not [i for i in ids if i.startswith("bytes")]
    assert {m["group"] for m in hist.metrics if m["id"].startswith("volume.")} == {"volume"}
    ((_, (_, cmp)),) = history.compare_previous(hist).items()
    row = next(m for m in cmp["metrics"] if m["id"] == "volume.dp")
    assert row["delta"] == 0 and row["threshold"] == "1%" and not row["regressed"]


def test_the_dashboard_of_an_old_history_charts_the_volume(old_history, tmp_path):
    from traceparse.history.dashboard import dashboard_data
    from traceparse.render.dashboard import TITLES, render_dashboard

    data, regressions = dashboard_data(history.read(old_history), tmp_path / "d.html")
    page = render_dashboard(data)
    assert regressions == 0
    assert "chart-volume" in page and TITLES["volume"] in page


def test_a_threshold_under_the_old_name_is_taken_as_volume():
    """Needs traceparse/compare.py to pass --threshold keys through run_metrics.current_id."""
    from traceparse.history.compare import load_thresholds

    t = load_thresholds(["bytes=5%", "bytes.dp_per_microbatch=2%"])
    assert t.limits["volume"].text == "5%" and t.limits["volume.dp_per_microbatch"].text == "2%"
    assert "bytes" not in t.limits


@pytest.mark.slow
def test_compare_names_the_volume_and_the_text_both_quantities():
    r = CliRunner().invoke(main, ["compare", str(RUNS / "ddp2"), str(RUNS / "ddp2")])
    assert r.exit_code == 0, r.output
    assert "volume.dp" in r.output and "bytes.dp" not in r.output
    r = CliRunner().invoke(main, ["analyze", str(RUNS / "ddp2")])
    assert r.exit_code == 0, r.output
    assert "input bytes" in r.output and "volume (notes' count: all-reduce 2x)" in r.output


@pytest.mark.parametrize("ident, says", [
    ("volume", ["volume.<strategy>", "notes' count", "all-reduce 2 x", "input bytes", "bytes.<strategy>"]),
    ("input_bytes", ["bytes_in", "each call counted once", "explain volume"]),
    ("bytes", ["input bytes", "volume (notes' count: all-reduce 2x)"]),
    ("comm_time", ["comm in windows", "comm % (comm_fraction) = comm in windows / profiled window", "never above 100%"]),
    ("comm_volume", ["measured_volume_bytes", "input_bytes", "volume.<strategy>"]),
])
def test_explain_defines_each_name(ident, says):
    r = CliRunner().invoke(main, ["explain", ident])
    assert r.exit_code == 0, r.output
    for s in says:
        assert s in r.output, (ident, s)
