"""Text from a trace is data (traceparse.escape): an op, kernel, thread or group name, or the profiler plugin's
optimizer name, that holds a terminal's control sequences (an OSC title, an OSC 52 clipboard write, a carriage
return that overwrites the line, a right-to-left override) or Markdown (blank lines, an image, a fake verdict) reaches
the terminal and the pull request as visible text: never a raw control byte, never a second table row or live
Markdown. Each case runs the command on a real run (fixtures/runs/ddp2) whose names were rewritten."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceparse.cli import main
from traceparse.escape import markdown_cell, terminal

ROOT = Path(__file__).resolve().parents[1]
DDP2 = ROOT / "fixtures" / "runs" / "ddp2"
HANG = ROOT / "fixtures" / "hangs" / "size_mismatch"

OSC_TITLE = "\x1b]0;pwned\x07"
OSC_52 = "\x1b]52;c;ZWNobyBoaQ==\x07"
RLO = "\u202e"
MD = "\n\n![img](http://x)\n\nLGTM: no regression\n\n|"
RENAMED = {  # ddp2's op name -> the hostile name it gets
    "aten::mm": "aten::mm" + OSC_TITLE,
    "aten::linear": "aten::linear" + MD,
    "aten::matmul": f"aten::matmul{RLO}evil",
    "DistributedDataParallel.forward": f"DistributedDataParallel.forward\r{RLO}X",  # the critical path's finding
}
THREAD = "py\rOVERWRITTEN"  # the python threads' name: "thread 391 (python)" -> "thread 391 (py\rOVERWRITTEN)"
OPTIMIZER = "AdamW" + OSC_52  # the plugin's metadata: optimizer.name
RAW = ("\x1b", "\x07", "\r", RLO)  # what must never reach stdout


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def assert_clean(out: str):
    for c in RAW:
        assert c not in out, f"raw {c!r} in the output"
    assert "\x1b" not in out and not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out)


def hostile_run(folder: Path) -> Path:
    """ddp2 as plain JSON, its names rewritten (RENAMED, THREAD, OPTIMIZER)."""
    folder.mkdir()
    for f in sorted(DDP2.glob("rank*.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        for e in doc["traceEvents"]:
            if e.get("name") in RENAMED:
                e["name"] = RENAMED[e["name"]]
            if e.get("ph") == "M" and e.get("name") == "thread_name" and "(python)" in e["args"]["name"]:
                e["args"]["name"] = e["args"]["name"].replace("python", THREAD)
        doc["traceparse"]["optimizer"]["name"] = OPTIMIZER
        (folder / f.name.removesuffix(".gz")).write_text(json.dumps(doc))
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{'hostile': (folder, store), 'plain': (folder, store)}: ddp2 rewritten and as committed, loaded once."""
    from traceparse.load.run import load_run

    base = tmp_path_factory.mktemp("trace_text")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACEPARSE_CACHE", str(base / "cache"))
        for name, folder in (("hostile", hostile_run(base / "hostile")), ("plain", DDP2)):
            out[name] = folder, load_run([folder], db=base / f"{name}.duckdb")[0]
    return out


# --- the two functions ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, shown", [
    (OSC_TITLE, "\\x1b]0;pwned\\x07"),
    (OSC_52, "\\x1b]52;c;ZWNobyBoaQ==\\x07"),
    ("50%\rdone", "50%\\rdone"),
    ("a\nb\tc", "a\\nb\\tc"),
    ("csi\x9b2J del\x7f nul\x00", "csi\\x9b2J del\\x7f nul\\x00"),
    (f"{RLO}gnp.exe", "U+202Egnp.exe"),
    ("\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069", "U+200EU+200FU+202AU+202BU+202CU+202DU+2066U+2067"
     "U+2068U+2069"),
    ("\ufeffbom\u2028line\u2029para", "U+FEFFbomU+2028lineU+2029para"),
    ("lone \ud800", "lone U+D800"),
    ("aten::日本語 café ñ 👨\u200d👩\u200d👧 a\u00a0b", "aten::日本語 café ñ 👨\u200d👩\u200d👧 a\u00a0b"),  # printable: kept
    ("C:\\path\\x1b", "C:\\path\\x1b"),  # a backslash stays as it is
    (42, "42"),
    (None, "None"),
])
def test_terminal_shows_controls_and_bidi_visibly(text, shown):
    assert terminal(text) == shown
    assert terminal(shown) == shown  # what it shows is printable: showing it again changes nothing


def test_terminal_keeps_the_newlines_of_a_block():
    assert terminal("one\ntwo\r\x1b", newlines=True) == "one\ntwo\\r\\x1b"


@pytest.mark.parametrize("text, shown", [
    (MD, "\\\\n\\\\n\\!\\[img\\](http://x)\\\\n\\\\nLGTM: no regression\\\\n\\\\n\\|"),
    ("<img src=x onerror=alert(1)> &lt; *a* _b_ `c` ~d~ $e$ #f [g]: h", "\\<img src=x onerror=alert(1)\\> \\&lt; "
     "\\*a\\* \\_b\\_ \\`c\\` \\~d\\~ \\$e\\$ \\#f \\[g\\]: h"),
    ("back\\slash", "back\\\\slash"),
    ("- item", "\\- item"), ("+ item", "\\+ item"), ("1. item", "1\\. item"), ("===", "\\==="),
    ("0.10", "0.10"), ("x - y", "x - y"), ("aten::mm", "aten::mm"),
    (OSC_TITLE, "\\\\x1b\\]0;pwned\\\\x07"),
])
def test_markdown_cell_escapes_every_active_character(text, shown):
    assert markdown_cell(text) == shown
    assert "\n" not in markdown_cell(text)


@pytest.mark.parametrize("text, shown", [
    ("</td><script>x</script> & <b>", "`</td><script>x</script> & <b>`"),  # inside a code span: text as it is
    ("a|b", "`a\\|b`"),  # but the table's separator escaped
    (MD, "`\\n\\n![img](http://x)\\n\\nLGTM: no regression\\n\\n\\|`"),
    (OSC_TITLE, "`\\x1b]0;pwned\\x07`"),
    ("a`b", "a\\`b"),  # a backtick: no code span, plain escaped text
    ("a\\|b", "a\\\\\\|b"),  # a backslash before '|' would end the cell in a code span
    ("", ""),
])
def test_markdown_cell_as_a_code_span(text, shown):
    assert markdown_cell(text, code=True) == shown


def cells(row: str) -> list[str]:
    """A GFM table row's cells: split on '|' that no backslash escapes (GFM reads '\\' + any character as a pair)."""
    return [c.strip() for c in re.findall(r"((?:\\.|[^|\\])*)\|", row.strip()[1:])]


def test_cells_splits_as_gfm_does():
    assert cells("| a | b\\|c | `x\\|y` | d\\\\ |") == ["a", "b\\|c", "`x\\|y`", "d\\\\"]


# --- the commands on the rewritten run -------------------------------------------------------------------------------

def test_analyze_text_shows_names_as_data(runs):
    folder, store = runs["hostile"]
    r = invoke("analyze", folder, "--db", store, "--full", "--color", "never")
    assert r.exit_code == 0, r.output
    assert_clean(r.stdout)
    out = r.stdout
    assert "aten::mm\\x1b]0;pwned\\x07" in out  # the heaviest kernels / ops
    assert "thread 391 (py\\rOVERWRITTEN)" in out  # busy time per thread
    assert "optimizer=AdamW\\x1b]52;c;ZWNobyBoaQ==\\x07" in out  # the plugin's metadata line
    assert "DistributedDataParallel.forward\\rU+202EX" in out  # the critical path's finding and table
    assert "aten::linear\\n\\n![img](http://x)\\n\\nLGTM: no regression\\n\\n|" in out
    assert not any(ln.startswith("LGTM") for ln in out.splitlines())
    heaviest = out.split("heaviest kernels / ops")[1].split("\n\n")[0].splitlines()
    assert all(len(ln) == len(heaviest[2]) for ln in heaviest[2:]), "a name broke the table's alignment"


def test_sql_table_shows_names_as_data(runs):
    _, store = runs["hostile"]
    r = invoke("sql", "--db", store, "SELECT DISTINCT name FROM events WHERE name LIKE 'aten::m%' "
               "OR name LIKE 'aten::lin%' ORDER BY name")
    assert r.exit_code == 0, r.output
    assert_clean(r.stdout)
    lines = r.stdout.splitlines()
    assert "aten::mm\\x1b]0;pwned\\x07" in r.stdout and "aten::matmulU+202Eevil" in r.stdout
    assert any(ln.rstrip() == "aten::linear\\n\\n![img](http://x)\\n\\nLGTM: no regression\\n\\n|" for ln in lines)
    names = invoke("sql", "--db", store, "SELECT DISTINCT name FROM events WHERE name LIKE 'aten::m%' OR name LIKE "
                   "'aten::lin%'", "--format", "json")
    assert len(lines) == 2 + len(json.loads(names.stdout))  # header, rule, one line per name
    threads = invoke("sql", "--db", store, "SELECT label FROM threads")
    assert threads.exit_code == 0 and "(py\\rOVERWRITTEN)" in threads.stdout
    assert_clean(threads.stdout)


def _compare(runs, fmt):
    r = invoke("compare", "--base-db", runs["hostile"][1], "--new-db", runs["plain"][1], "--format", fmt)
    assert r.exit_code in (0, 1), r.output  # 1 only for a regression, never 3
    return r


@pytest.fixture(scope="module")
def compared(runs) -> dict:
    """compare's JSON document of the rewritten run (base) against ddp2 (new)."""
    return json.loads(_compare(runs, "json").stdout)


def test_compare_text_with_a_newline_in_a_name(runs, compared):
    """The renamed ops are only in base, their plain names only in new: the diff's notes column beside a name that
    holds newlines (was exit 3: zip(strict=True) of the table's lines and the notes)."""
    r = _compare(runs, "text")
    assert_clean(r.stdout)
    rows = compared["diff"]["cpu_ops"]
    assert any("LGTM" in row["name"] for row in rows) and any(row["only_in"] for row in rows)
    section = r.stdout.split("  CPU ops: ")[1].split("\n\n")[0].splitlines()[1:]
    assert len(section) == len(rows) + 2  # header, rule, one line per name
    assert any("aten::linear\\n\\n![img](http://x)\\n\\nLGTM: no regression\\n\\n|" in ln and ln.endswith("only in base")
               for ln in section)
    assert "aten::mm\\x1b]0;pwned\\x07" in r.stdout and "aten::matmulU+202Eevil" in r.stdout
    assert r.stdout.rstrip().splitlines()[-1].startswith("verdict:")


def test_compare_markdown_renders_one_row_per_name(runs, compared):
    r = _compare(runs, "markdown")
    assert_clean(r.stdout)
    doc = compared
    lines = r.stdout.splitlines()
    head = lines.index("| cpu_op | base | new | delta | share | calls/step |")
    assert lines[head + 1].startswith("|---")
    end = next(i for i in range(head + 2, len(lines)) if not lines[i].startswith("|"))
    body = lines[head + 2:end]
    assert len(body) == len(doc["diff"]["cpu_ops"]) and lines[end] == ""
    assert all(len(cells(row)) == 6 for row in body), "a name added or split a cell"
    evil = next(row for row in body if "LGTM" in row)
    assert cells(evil)[0].startswith("`aten::linear\\n\\n![img](http://x)\\n\\nLGTM: no regression\\n\\n\\|`")
    for needle in ("LGTM", "![img]", "pwned"):  # the injected text: inside table rows only
        assert all(ln.startswith("| ") for ln in lines if needle in ln), needle
    metrics = lines.index("| | metric | base | new | delta | relative | threshold | note |")
    rows = [ln for ln in lines[metrics + 2:] if ln.startswith("|")][:len([m for m in doc["metrics"]
                                                                           if m["group"] != "layout"])]
    assert all(len(cells(row)) == 8 for row in rows)
    assert lines[-1] == "_verdict: ok (no metric regressed beyond its threshold; exit 0)_"


def test_hang_shows_a_group_name_as_data(tmp_path):
    """A process group's description in the dumps and the traces holding an RLO, a newline and an OSC title."""
    job = tmp_path / "job"
    shutil.copytree(HANG, job)
    for p in job.glob("*.pkl"):  # the JSON dumps say the same
        p.unlink()
    evil = json.dumps("default" + RLO + "_pg\n" + OSC_TITLE)
    for p in [*job.glob("*.json"), *job.glob("*.json.gz")]:
        gz = p.suffix == ".gz"
        text = (gzip.decompress(p.read_bytes()) if gz else p.read_bytes()).decode().replace('"default_pg"', evil)
        p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    r = invoke("hang", job, "--no-cache")
    assert r.exit_code == 1, r.output  # a divergence found, as in the job as committed
    assert_clean(r.stdout)
    assert "size_mismatch: all_reduce #7 on group [0, 1] (defaultU+202E_pg\\n\\x1b]0;pwned\\x07, pg 0" in r.stdout
    table = r.stdout.split("last completed collective per rank and group")[1].strip().splitlines()[1:]
    assert len(table) == 4 and all("defaultU+202E_pg\\n\\x1b]0;pwned\\x07, pg 0" in ln for ln in table[2:])
