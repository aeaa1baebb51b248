"""Every command's text fits the terminal and reads as prose, on every bundled run and public trace.

Rendered as the CLI renders it (``render.fit``: tables narrowed, prose wrapped) at 80 columns, and at 60 for the
analyze report of a fixture run: no line wider than the width (but a single word longer than it, a path), no
``None``, ``nan`` or Python float repr, no negative duration, no share of a whole over 100%, ``1 step`` and not
``1 steps``. Compare's text and Markdown, whatif's forecast and sweep, hang's report and every ``explain`` id are
held too. The number formats themselves (``traceparse.units``) and the table narrowing are checked on values
worked out by hand.
"""

import re
import pytest
from conftest import FIXTURE_RUNS, needed, public_trace_files
from test_repeat_runs import windowed

from traceparse.render.fit import fitted, fitted_text, wrap
from traceparse.render.plain_table import shorten, table
from traceparse.units import count, duration, in_unit, number, pct, significant, size

WIDTH = 80
FAST = ("ddp2", "pp4_1f1b_m4")  # the runs, and the hangs below, in the fast tier
HANGS = sorted(p.name for p in (FIXTURE_RUNS.parent / "hangs").iterdir() if p.is_dir())
RUNS = sorted(p.name for p in FIXTURE_RUNS.iterdir() if p.is_dir() and not windowed(p))
PUBLIC = public_trace_files()

RULES = {
    "None": re.compile(r"\bNone\b"),
    "nan": re.compile(r"\bnan\b|\binf\b"),
    "float repr": re.compile(r"\d\.\d{8,}"),
    "negative duration": re.compile(r"(?<![\w+.-])-\d[\d,.]* (?:s|ms|us|ns)\b"),
    "one, plural": re.compile(r"(?<![\d.,])1 (?:steps|ranks|ops|operations|calls|collectives|files|windows)\b"),
}
OVER_WHOLE = re.compile(r"(\d[\d,]*(?:\.\d+)?)% of (?:the|its|a|each) ")


def broken(text: str, width: int | None = WIDTH, signed: bool = False) -> list[str]:
    """The lines of ``text`` that break a rule, each with the rule's name. ``signed``: changes are signed (compare:
    a negative delta is no negative duration). ``width`` None: not held (Markdown)."""
    out = []
    for line in text.splitlines():
        if width is not None and len(line) > width and " " in line[:width].strip() and " " in line[width:].strip():
            out.append(f"wider than {width}: {line}")
        for name, rx in RULES.items():
            if rx.search(line) and not (signed and name == "negative duration"):
                out.append(f"{name}: {line}")
        if any(float(m.group(1).replace(",", "")) > 100.05 for m in OVER_WHOLE.finditer(line)):
            out.append(f"a share over 100%: {line}")
    return out


# --- the formats, by hand ---------------------------------------------------------------------------------------

def test_durations_take_the_unit_of_their_magnitude():
    assert [duration(v) for v in (9_471_000, 30_901_000, 365_200, 512, 1_234_500_000_000, 0)] == \
        ["9.471 ms", "30.90 ms", "365.2 us", "512 ns", "1,234 s", "0 ms"]
    assert duration(999_960) == "1.000 ms"  # rounds into the next unit, not "1000 us"
    assert duration(9_999_600) == "10.00 ms"  # a carry keeps 4 significant digits
    assert (duration(-2_500_000), duration(2_500_000, sign=True), duration(None), duration(float("nan"))) == \
        ("-2.500 ms", "+2.500 ms", "-", "-")


def test_sizes_shares_numbers_and_counts():
    assert [size(b) for b in (0, 999, 461_310, 3_690_000, 5e12, None)] == \
        ["0 B", "999 B", "461.3 kB", "3.690 MB", "5.000 TB", "-"]
    assert (pct(0.2345), pct(None), pct(float("inf"))) == ("23.4%", "-", "-")
    assert (number(1.0), number(3), number(0.0071), number(1234567.0), significant(12345.678)) == \
        ("1", "3", "0.007100", "1,234,567", "12,346")
    assert (count(1, "step"), count(0, "step"), count(2, "rank"), count(3, "pass", "passes")) == \
        ("1 step", "0 steps", "2 ranks", "3 passes")
    assert (in_unit(2_000_000, "ns"), in_unit(2048, "bytes"), in_unit(3, "rank"), in_unit(None, "ns")) == \
        ("2.000 ms", "2.048 kB", "rank 3", "-")


def test_a_table_narrows_to_the_width():
    headers = ["name", "calls total", "time total", "share"]
    rows = [["a" * 50, 3, "1.000 ms", "10.0%"], ["short", 12, "365.0 us", "3.7%"]]
    assert table(headers, rows).splitlines()[0].startswith("name" + " " * 48)  # outside fitted(): as wide as it is
    with fitted(60):
        lines = table(headers, rows).splitlines()
    assert max(map(len, lines)) <= 60
    assert lines[0].split() == ["calls", "time"] and lines[1].split() == ["name", "total", "total", "share"]
    assert lines[3].startswith("a" * 22 + "..." + "a" * 11 + "  ") and lines[3].endswith("10.0%")  # cut by 74 - 60
    lines = fitted_text(lambda: table(headers, rows), 40).splitlines()
    assert max(map(len, lines)) <= 40 and lines[-2].startswith("(not shown at 40 columns: share")


def test_a_cut_cell_keeps_what_tells_rows_apart():
    assert shorten("rank 3 83.2%, rank 2 13.7%, rank 1 3.1%", 31) == "rank 3 83.2%, rank 2 13.7%, ..."
    assert shorten("rank 3 83.2%, rank 2 13.7%, rank 1 3.1%", 30) == "rank 3 83.2%, ..."
    # a name: two thirds of the room from its start, the rest from its end: (24 - 3) * 2 // 3 = 14, then 7
    assert shorten("thread 20212 (pt_gloo_runloop)", 24) == "thread 20212 (" + "..." + "unloop)"
    assert shorten("ncclKernel_AllReduce_RING_LL_Sum_float [dp]", 20) == "ncclKernel_" + "..." + "t [dp]"


def test_prose_wraps_under_its_first_word():
    text = "  - " + " ".join(["word"] * 30) + "\nshort\n" + "x" * 90
    out = wrap(text, 40).splitlines()
    assert out[0].startswith("  - word") and all(line.startswith("    word") for line in out[1:-2])
    assert max(len(line) for line in out[:-2]) <= 40 and out[-2:] == ["short", "x" * 90]  # a long word stays whole
    assert wrap("a finding of no straggler, chance gives this with p = 0.26", 52).splitlines()[1] == "  p = 0.26"


# --- every command on every bundled input -----------------------------------------------------------------------

def _inputs():
    """Every fixture run (two in the fast tier) and every public trace (slow)."""
    return [pytest.param(FIXTURE_RUNS / n, id=n, marks=() if n in FAST else pytest.mark.slow) for n in RUNS] + \
        [pytest.param(p, id=p.name.split(".")[0], marks=pytest.mark.slow) for p in PUBLIC]


@pytest.mark.parametrize("path", _inputs())
def test_analyze_layout_and_tags_fit(doc, store, path):
    from traceparse.document import tags_document
    from traceparse.render.text import render, render_layout, render_tags

    d = doc(path)
    texts = {"analyze": fitted_text(lambda: render(d), WIDTH),
             "analyze --full": fitted_text(lambda: render(d, full=True), WIDTH),
             "layout": fitted_text(lambda: render_layout(d), WIDTH),
             "tags": fitted_text(lambda: render_tags(tags_document(store(needed(path)))), WIDTH)}
    if path.name in ("ddp2", "pp4_1f1b_m4"):
        texts["analyze at 60"] = fitted_text(lambda: render(d), 60)
    bad = {k: broken(t, 60 if k.endswith("60") else WIDTH) for k, t in texts.items()}
    assert not any(bad.values()), {k: v[:5] for k, v in bad.items() if v}


def test_every_explain_id_fits():
    from click.testing import CliRunner

    from traceparse.analyzers import specs
    from traceparse.cli import main
    from traceparse.document.glossary import METRICS
    from traceparse.store.schema import VOCABULARY
    from traceparse.tagging.rules import load_rules

    runner = CliRunner()
    for ident in [*METRICS, *specs(), *(r.id for r in load_rules()), *VOCABULARY]:
        res = runner.invoke(main, ["explain", ident], env={"COLUMNS": str(WIDTH)})
        assert res.exit_code == 0 and not broken(res.stdout), (ident, broken(res.stdout)[:3])


@pytest.mark.parametrize("base, new", [("ddp2", "quiet_ddp2"),
                                       pytest.param("dp2_tp2", "dp2_tp2_rep2", marks=pytest.mark.slow),
                                       pytest.param("pp4_1f1b_m4", "pp4_gpipe_m4", marks=pytest.mark.slow)])
def test_compare_fits(doc, store, base, new):
    from traceparse.history.compare import compare_runs, load_thresholds
    from traceparse.history.kernel_diff import kernel_times
    from traceparse.render.compare import render_markdown, render_text

    runs = [FIXTURE_RUNS / base, FIXTURE_RUNS / new]
    out = compare_runs(doc(runs[0]), doc(runs[1]), load_thresholds([]),
                       kernels=tuple(kernel_times(store(r)) for r in runs))
    assert not broken(fitted_text(lambda: render_text(out), WIDTH), signed=True)
    assert not broken(render_markdown(out), width=None, signed=True)


@pytest.mark.slow
@pytest.mark.parametrize("run", ["ddp4", "pp4_1f1b_m4", "straggler_ddp4", "dp4_ep2"])
def test_whatif_fits(doc, store, run):
    from traceparse.document import given
    from traceparse.render.whatif import render_sweep, render_whatif
    from traceparse.whatif import sweep_document, whatif_document

    con, d = store(FIXTURE_RUNS / run), doc(FIXTURE_RUNS / run)
    known = given(con, {})[0]
    sweep = sweep_document(con, d, known, None)
    forecast = whatif_document(con, d, {"pp": 2, "microbatches": 8, "balanced": False, "without_straggler": False},
                               known)
    assert not broken(fitted_text(lambda: render_sweep(sweep), WIDTH))
    assert not broken(fitted_text(lambda: render_whatif(forecast), WIDTH))


@pytest.mark.parametrize("hang", [h if h in ("pp_deadlock", "tp_hang_in_dp_tp") else
                                  pytest.param(h, marks=pytest.mark.slow) for h in HANGS])
def test_hang_fits(store, hang):
    from traceparse.hang.forensics import hang_document
    from traceparse.render.hang import render_hang

    con = store(FIXTURE_RUNS.parent / "hangs" / hang)
    assert not broken(fitted_text(lambda: render_hang(hang_document(con)), WIDTH))


def test_the_cli_fits_100_columns_off_a_terminal_and_columns_when_set():
    from click.testing import CliRunner

    from traceparse.cli import main

    run = str(FIXTURE_RUNS / "ddp2")
    wide = CliRunner().invoke(main, ["analyze", run], env={"COLUMNS": None})  # a pipe: 100 columns
    narrow = CliRunner().invoke(main, ["analyze", run], env={"COLUMNS": "72"})
    assert wide.exit_code == narrow.exit_code == 0
    assert 80 < max(map(len, wide.stdout.splitlines())) <= 100 and not broken(wide.stdout, 100)
    assert max(map(len, narrow.stdout.splitlines())) <= 72 and not broken(narrow.stdout, 72)
