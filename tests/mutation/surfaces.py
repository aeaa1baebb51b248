"""The newer surfaces: ``-o`` targets (``output``), run histories (``history``), argument checks
(``arguments``) and the Python API called at once (``concurrent``); their operators, and the checks
they need beyond ``checks.classify`` (``run.run_case`` calls ``prepare`` before a case's command and
``judge`` after it).

A case says what it needs checked in ``Case.expect``:

- ``same_kind``: paths that must keep their kind (a FIFO or device stays one, a symlink stays a link
  to the same target, and what it points to stays special if it was): else ``clobbered``;
- ``unchanged`` / ``unchanged_if_refused``: byte-identical (absent stays absent): else ``clobbered``;
- ``report`` (+ ``fmt``): on exit 0/1 that file (``fifo:REL``: what the FIFO's reader drained) holds
  the report (JSON parses, HTML is a page; not the old content): else ``bad output``;
- ``may_create``: what may appear in the case folder on exit 0/1; anything else new (a ``.name.*``
  temporary, ``H.lock``, a ``.new``), and anything new after a refusal, is a ``leftover``;
- ``gone_if_ok``: files exit 0 must remove (a dead writer's ``.H.<pid>.<n>.new``);
- ``fresh_cache_if_refused``: a refusal must come before any work: the cache is still empty;
- ``rc``: the only exit codes a non-refused run may have (exit 0 where it must be 1: ``silent pass``);
  ``reason``: a pattern stdout or stderr must match then;
- ``mentions``: words the refusal line must hold (the valid ids);
- ``immutable``: files made read-only for root too (``chattr +i``; ``chmod 444`` when not root);
- ``api``: stdout is ``api_driver.py``'s summary (errors: ``traceback``, other documents: ``bad output``);
  ``cache_clean``: the cache holds only entries, their stamps, documents and per-rank folders (one build each).

Every case also checks that the system's /dev/null is still the null device (a target resolved
through a link to it and replaced would break the machine): if not, it is made again, the case is
``clobbered`` and a warning is printed.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading
from functools import cache
from pathlib import Path

from .generate import CLASSES, CLASS_WEIGHT, OPS, Case, _run_files, op

NEW = {
    "output": "-o naming a device, a FIFO, a link (to a file, dangling), a folder, a missing folder, an input, "
              "the history or the store (analyze, hang, whatif, compare, dashboard)",
    "history": "--record / dashboard given damaged or foreign histories: random bytes, zeroed blocks, cut, "
               "not a history, no runs table, a NaN metric, read-only, a folder, a dead writer's .new",
    "arguments": "compare --threshold and missing ranks, impossible whatif targets, duplicate --layout keys, "
                 "--device-memory, --address without ray, --label with invalid UTF-8",
    "concurrent": "traceparse.analyze(paths) from N threads and N processes at once on a fresh cache",
}
CLASSES.update(NEW)
OPS.update({c: [] for c in NEW})
CLASS_WEIGHT["concurrent"] = 0.5
SURFACE_CLASSES = (*NEW, "dump")  # dump: hostile Flight Recorder dumps (dumps.py), judged as these are
DRIVER = str(Path(__file__).with_name("api_driver.py"))
H = "H.duckdb"


def _charts() -> dict:
    """The dashboard's charts run V8 (vl_convert), which reserves over 64 GiB of address space up front: such a
    case gets a looser RLIMIT_AS (run.run_case reads it) and a bound on resident memory instead."""
    return {"action_args": {"mem_limit_mb": 256 << 10}, "max_rss_mb": 1500}


def _in(folder: str, run: str = "ddp2", keep=None) -> dict:
    files = _run_files(run)[0]
    return {f"{folder}/{n}": d for k, (n, d) in enumerate(files.items()) if keep is None or k in keep}


# --- histories (built with DuckDB and traceparse.history.store's schema) ---------------------------------

METRICS = [("layout.dp", "layout", 2.0, "", None), ("step_time.mean", "step_time", 20828855.5, "ns", "lower"),
           ("step_time.p95", "step_time", 24151550.0, "ns", "lower"), ("exposed_comm.dp", "exposed_comm", 2581072.75,
           "ns", "lower"), ("overlap.dp", "overlap", 0.0, "fraction", "higher"),
           ("imbalance.max_over_mean", "imbalance", 1.1378, "ratio", "lower"), ("bytes.dp", "bytes", 922624.0, "bytes",
           "lower")]


@cache
def history(variant: str = "valid") -> bytes:
    """A history of two runs (``valid``), with one metric NaN/Infinity (``nan:VALUE``), only its
    history_meta (``meta_only``), or a DuckDB file of another program (``foreign``)."""
    import duckdb

    from traceparse import __version__
    from traceparse.history.store import FORMAT, SCHEMA, SCHEMA_VERSION, label_key

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "h.duckdb"
        con = duckdb.connect(str(p))
        if variant == "foreign":
            con.execute("CREATE TABLE runs (id INTEGER, name VARCHAR); INSERT INTO runs VALUES (1, 'mine')")
        elif variant == "meta_only":
            con.execute("CREATE TABLE history_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        else:
            con.execute(SCHEMA)
        if variant != "foreign":
            con.executemany("INSERT INTO history_meta VALUES (?, ?)",
                            [("format", FORMAT), ("schema_version", str(SCHEMA_VERSION))])
        if variant not in ("foreign", "meta_only"):
            for k, labels in enumerate([{"commit": "a", "job": "x"}, {"commit": "b", "job": "x"}]):
                run_id = con.execute(
                    "INSERT INTO runs (recorded_at, labels, label_key, files, version, report) VALUES "
                    "(TIMESTAMP '2025-01-01' + ? * INTERVAL 1 HOUR, map(?::VARCHAR[], ?::VARCHAR[]), ?, ?, ?, NULL) "
                    "RETURNING run_id", [k, list(labels), list(labels.values()), label_key(labels),
                                         ["rank0.json.gz", "rank1.json.gz"], __version__]).fetchone()[0]
                con.executemany('INSERT INTO metrics (run_id, id, "group", value, text_value, unit, better) '
                                "VALUES (?, ?, ?, ?, NULL, ?, ?)",
                                [[run_id, i, g, v * (1 + k / 10), u, b] for i, g, v, u, b in METRICS])
            if variant.startswith("nan:"):
                con.execute(f"UPDATE metrics SET value = '{variant[4:]}'::DOUBLE "
                            "WHERE run_id = 2 AND id = 'step_time.mean'")
        con.close()
        return p.read_bytes()


# --- output: -o targets ---------------------------------------------------------------------------

OUT_COMMANDS = ["analyze", "hang", "whatif", "compare", "dashboard"]


def _command(cmd: str, target: str, cache=False, extra=()) -> dict:
    """Files, arguments, report format and what may appear (on success) of ``cmd -o target``."""
    if cmd == "dashboard":
        return {"files": {H: history(), "run": None}, "args": ["dashboard", f"{{in}}/{H}", "-o", target, *extra],
                "fmt": "html", "may": [H + ".lock"]}
    files = {**_in("run"), **(_in("new") if cmd == "compare" else {})}
    head = {"analyze": ["analyze", "{in}/run"], "hang": ["hang", "{in}/run"], "compare": ["compare", "{in}/run",
            "{in}/new"], "whatif": ["whatif", "{in}/run", "--layout", "dp=1"]}[cmd]
    args = [*head, "--format", "json", "-o", target, *extra, *([] if cache else ["--no-cache"])]
    return {"files": files, "args": args, "fmt": "json", "may": []}


def _out_case(rng, desc, target, accept, names, *, cmds=OUT_COMMANDS, cache=False, extra=(), files=None, links=None,
              fifos=(), nodes=None, may=(), **expect) -> Case:
    cmd = rng.choice(cmds)
    c = _command(cmd, target, cache, extra)
    expect.setdefault("fmt", c["fmt"])
    expect["may_create"] = c["may"] + list(may)
    return Case("", "", f"{cmd} -o {target}: {desc}", files={**c["files"], **(files or {})}, links=links or {},
                fifos=fifos, nodes=nodes or {}, args=c["args"], accept=accept, names=names, document=False,
                expect=expect, timeout=90, **(_charts() if cmd == "dashboard" else {}))


def _spell(rng, rel: str) -> str:
    """``rel`` as the command line may give it: absolute, relative, through ``..`` (every case has run/)."""
    return rng.choice([f"{{in}}/{rel}", rel, f"./{rel}", f"{{in}}/run/../{rel}"])


@op("output")
def op_char_device(rng):
    kind = rng.choice(["null", "null", "full"])
    rel = f"dev/{kind}0"
    accept = ("load", "refuse") if kind == "null" else ("refuse",)
    return _out_case(rng, f"a character device (/dev/{kind}'s, made in the case folder)", _spell(rng, rel), accept,
                     (f"{kind}0",), nodes={rel: kind}, same_kind=[rel])


@op("output")
def op_dev_null_link(rng):
    return _out_case(rng, "a symlink to the system's /dev/null: it must stay a link and /dev/null the null device",
                     _spell(rng, "out.json"), ("load", "refuse"), ("out.json",), links={"out.json": "/dev/null"},
                     same_kind=["out.json"])


@op("output")
def op_fifo(rng):
    rel = rng.choice(["out.fifo", "pipes/report.json"])
    return _out_case(rng, "a FIFO a reader drains: the reader gets the report, the FIFO stays one", _spell(rng, rel),
                     ("load", "refuse"), (rel.rsplit("/", 1)[-1],), fifos=(rel,), same_kind=[rel], report="fifo:" + rel)


@op("output")
def op_symlink_to_file(rng):
    link, target = rng.choice([("out.json", "reports/real.json"), ("links/out.json", "../reports/real.json"),
                               ("out.json", "{in}/reports/real.json")])
    return _out_case(rng, f"a symlink to an existing report ({target}): the target gets the report, the link stays",
                     _spell(rng, link), ("load", "refuse"), (link.rsplit("/", 1)[-1], "real.json"),
                     files={"reports/real.json": b"the old report\n"}, links={link: target}, same_kind=[link],
                     report="reports/real.json", unchanged_if_refused=["reports/real.json"])


@op("output")
def op_dangling_symlink(rng):
    target = rng.choice(["reports/new.json", "reports/new.json", "gone/new.json"])
    return _out_case(rng, f"a dangling symlink to {target}", _spell(rng, "out.json"),
                     ("refuse",) if target.startswith("gone") else ("load", "refuse"), ("out.json", "new.json", "gone"),
                     files={"reports": None}, links={"out.json": target}, same_kind=["out.json"], report=target,
                     may=[target])


@op("output")
def op_directory(rng):
    target = rng.choice(["outdir", "outdir/", "{in}/outdir", "{in}/outdir/.", "./outdir"])
    return _out_case(rng, "a folder", target, ("refuse",), ("outdir",), files={"outdir/keep.txt": b"keep\n"},
                     same_kind=["outdir"], unchanged=["outdir/keep.txt"])


@op("output")
def op_missing_folder(rng):
    target = rng.choice(["nope/out.json", "{in}/nope/sub/out.json", "run/rank0.json.gz/out.json"])
    return _out_case(rng, "a file in a folder that does not exist", target, ("refuse",),
                     ("out.json", "nope", "rank0.json.gz"), cmds=OUT_COMMANDS[:4])


@op("output")
def op_input_file(rng):
    cmd = rng.choice(OUT_COMMANDS[:4])
    side = rng.choice(["run", "new"]) if cmd == "compare" else "run"
    rel = f"{side}/rank{rng.randrange(2)}.json.gz"
    way = rng.choice(["path", "path", "symlink", "hardlink"])
    links, nodes, name = {}, {}, rel.rsplit("/", 1)[-1]
    if way == "path":
        target = _spell(rng, rel)
    elif way == "symlink":
        links, target = {"alias.json.gz": rel}, "{in}/alias.json.gz"
    else:
        nodes, target = {"alias.json.gz": "hardlink:" + rel}, "alias.json.gz"
    return _out_case(rng, f"one of its input traces ({rel}, given as {way})", target, ("refuse",),
                     (name, "alias.json.gz"), cmds=[cmd], cache=True, links=links, nodes=nodes, unchanged=[rel],
                     fresh_cache_if_refused=True, same_kind=list(links))


@op("output")
def op_history_file(rng):
    exists = rng.random() < 0.7
    files = {H: history()} if exists else {}
    if rng.random() < 0.3:
        return _out_case(rng, "dashboard's own history", _spell(rng, H), ("refuse",), (H,), cmds=["dashboard"],
                         unchanged=[H])
    return _out_case(rng, f"the history it records to, --record {H} ({'existing' if exists else 'new'})",
                     _spell(rng, H), ("refuse",), (H,), cmds=["analyze"], cache=True, files=files,
                     extra=["--record", rng.choice([H, f"{{in}}/{H}"]), "--label", "job=x"], unchanged=[H],
                     fresh_cache_if_refused=True)


@op("output")
def op_store_file(rng):
    cmd = rng.choice(["analyze", "hang", "whatif", "compare"])
    s = "S.duckdb"
    flag = rng.choice(["--base-db", "--new-db"]) if cmd == "compare" else "--db"
    case = _out_case(rng, f"the store it loads into ({flag} {s})", _spell(rng, s), ("refuse",), (s,), cmds=[cmd],
                     cache=True, extra=[flag, f"{{in}}/{s}"], unchanged=[s])
    if cmd != "compare" and rng.random() < 0.5:  # an existing store: loaded first
        case.action_args["before"] = [["analyze", "{in}/run", "--db", f"{{in}}/{s}", "--format", "json"]]
        case.description += ", made by a first analyze --db"
    return case


# --- history: damaged or foreign histories given to --record / dashboard ------------------------------

def _hist_case(rng, desc, data, accept, *, cmds=("record", "dashboard"), files=None, **expect) -> Case:
    cmd = rng.choice(cmds)
    if cmd == "record":
        args = ["analyze", "{in}/run", "--format", "json", "--no-cache", "--record", _spell(rng, H), "--label", "job=x"]
        files_ = _in("run", keep=[0])
    else:
        args = ["dashboard", _spell(rng, H), "-o", "{in}/page.html"]
        files_ = {"run": None}  # for the spelling run/../H.duckdb
    if data is not None:
        files_[H] = data
    files_.update(files or {})
    expect.setdefault("may_create", [H + ".lock", "page.html"] + ([H] if data is None else []))
    expect.setdefault("unchanged_if_refused", [H])
    return Case("", "", f"{cmd} {H}: {desc}", files=files_, args=args, accept=accept, names=(H,), document=False,
                expect=expect, timeout=90, **(_charts() if cmd == "dashboard" else {}))


@op("history")
def op_random_bytes(rng):
    n = rng.choice([0, 1, 12, 4096, 300_000])
    data = rng.randbytes(n)
    if n >= 12 and rng.random() < 0.5:
        data = data[:8] + b"DUCK" + data[12:]  # DuckDB's magic, then noise
    return _hist_case(rng, f"{n} random bytes{' after a DuckDB magic' if data[8:12] == b'DUCK' else ''}", data,
                      ("load", "refuse") if n == 0 else ("refuse",), unchanged_if_refused=[H])


@op("history")
def op_zeroed_blocks(rng):
    data = bytearray(history("valid"))
    where = rng.choice(["file header", "database headers", "a data block", "several blocks"])
    spans = {"file header": [(0, 4096)], "database headers": [(4096, 12288)]}.get(where)
    if spans is None:
        starts = [rng.randrange(12288, len(data) - 4096) for _ in range(1 if where[0] == "a" else 8)]
        spans = [(o, o + 4096) for o in starts]
    for a, b in spans:
        data[a:b] = bytes(b - a)
    return _hist_case(rng, f"a history with {where} zeroed", bytes(data), ("load", "refuse"))


@op("history")
def op_truncated(rng):
    data = history("valid")
    cut = rng.choice([rng.randrange(1, 4096), rng.randrange(4096, 12288), rng.randrange(12288, len(data))])
    return _hist_case(rng, f"a history cut at byte {cut} of {len(data)}", data[:cut], ("load", "refuse"))


@op("history")
def op_not_a_history(rng):
    return _hist_case(rng, "a DuckDB file of another program (a runs table, no history_meta)", history("foreign"),
                      ("refuse",), unchanged=[H])


@op("history")
def op_meta_without_runs(rng):
    return _hist_case(rng, "history_meta saying it is a history, no runs or metrics table", history("meta_only"),
                      ("load", "refuse"))


@op("history")
def op_nan_metric(rng):
    v = rng.choice(["NaN", "Infinity", "-Infinity"])
    return _hist_case(rng, f"a history whose step_time.mean of run 2 is {v}", history(f"nan:{v}"), ("load", "refuse"))


@op("history")
def op_read_only(rng):
    cmd = rng.choice(["record", "dashboard"])
    return _hist_case(rng, "a read-only history (chattr +i: root too)", history(), ("refuse",) if cmd == "record"
                      else ("load", "refuse"), cmds=[cmd], immutable=[H], unchanged=[H])


@op("history")
def op_folder(rng):
    files = {f"{H}/x": b"x"} if rng.random() < 0.5 else {H: None}
    return _hist_case(rng, "a folder", None, ("refuse",), files=files, same_kind=[H], may_create=[])


@op("history")
def op_leftover_new(rng):
    pid = _dead_pid(rng)
    tmp = f".{H}.{pid}.{rng.randrange(1 << 30)}.new"
    exists = rng.random() < 0.6
    files = {tmp: rng.choice([history("valid")[: rng.randrange(4096, 20000)], b""])}
    if rng.random() < 0.5:
        files[tmp + ".wal"] = rng.randbytes(512)
    return _hist_case(rng, f"{'a history' if exists else 'no history'} and a dead writer's {tmp}",
                      history() if exists else None, ("load",), cmds=("record", "dashboard") if exists else ("record",),
                      files=files, gone_if_ok=list(files))


def _dead_pid(rng) -> int:
    while True:
        pid = rng.randrange(100000, 4000000)
        if not os.path.exists(f"/proc/{pid}"):
            return pid


# --- arguments ----------------------------------------------------------------------------------------

def _arg_case(desc, args, *, files=None, accept=("refuse",), names=(), **expect) -> Case:
    return Case("", "", desc, files=_in("run") if files is None else files, args=args, accept=accept, names=names,
                document=False, expect=expect, timeout=90, **(_charts() if args[0] == "dashboard" else {}))


@op("arguments")
def op_threshold_unknown(rng):
    key = rng.choice(["nosuch", "step_time.nosuch", "Step_Time", "layout.dp", "step_time.p95x", "bubble.", "é"])
    value = rng.choice(["5%", "0.02"])
    if rng.random() < 0.3:
        return _arg_case(f"dashboard --threshold {key}={value}", ["dashboard", H, "-o", "page.html", "--threshold",
                         f"{key}={value}"], files={H: history()}, names=(key, "threshold"),
                         mentions=["step_time", "bubble"])
    return _arg_case(f"compare --threshold {key}={value}: refused, the valid ids listed",
                     ["compare", "{in}/run", "{in}/new", "--no-cache", "--threshold", f"{key}={value}"],
                     files={**_in("run"), **_in("new")}, names=(key, "threshold"), mentions=["step_time", "bubble"])


@op("arguments")
def op_compare_missing_rank(rng):
    run = rng.choice(["ddp2", "ddp2", "pp4_gpipe_m4"])
    n = len(_run_files(run)[0])
    lost = rng.randrange(n)
    keep = [k for k in range(n) if k != lost]
    swap = rng.random() < 0.3  # BASE the smaller one
    files = {**_in("full", run), **_in("part", run, keep=keep)}
    sides = ["{in}/part", "{in}/full"] if swap else ["{in}/full", "{in}/part"]
    return _arg_case(f"compare: {'BASE' if swap else 'NEW'} lacks rank {lost} of {run}: exit 1 saying so",
                     ["compare", *sides, "--no-cache", "--format", rng.choice(["text", "markdown"])], files=files,
                     accept=("load",), rc=[1], reason=r"(?i)missing|lacks?\b|absent|not in (?:base|new)|only in")


@op("arguments")
def op_whatif_impossible(rng):
    target = rng.choice(["virtual_stages=8", "layers=3", "pp=4,layers=3", "pp_schedule=bogus",
                         "microbatches=1000000000", "virtual_stages=8,pp_schedule=gpipe"])
    return _arg_case(f"whatif --layout {target} on a GPipe run of 4 stages (4 layers): impossible",
                     ["whatif", "{in}/pp", "--layout", target, "--no-cache", "--format", rng.choice(["text", "json"])],
                     files=_in("pp", "pp4_gpipe_m4"), names=tuple(re.findall(r"(\w+)=", target)) + ("bogus",))


@op("arguments")
def op_layout_duplicate(rng):
    text = rng.choice(["dp=2,dp=4", "dp=2,dp=2", "tp=1,dp=2,tp=1", "pp=1, pp=1"])
    key = re.findall(r"(\w+)=", text)[0]
    cmd = rng.choice(["analyze", "layout", "compare", "whatif", "whatif --given"])
    if cmd == "compare":
        return _arg_case(f"compare --layout {text!r}",
                         ["compare", "{in}/run", "{in}/new", "--no-cache", "--layout", text],
                         files={**_in("run"), **_in("new")}, names=(key, "layout"))
    opt = "--given" if cmd.endswith("given") else "--layout"
    extra = ["--layout", "dp=1"] if opt == "--given" else []
    return _arg_case(f"{cmd.split()[0]} {opt} {text!r}: a key twice",
                     [cmd.split()[0], "{in}/run", "--no-cache", opt, text, *extra], names=(key, "layout", "given"))


@op("arguments")
def op_device_memory_without_sweep(rng):
    target = rng.choice([["--layout", "dp=1"], ["--balanced"], ["--layout", "pp=2"]])
    return _arg_case(f"whatif {' '.join(target)} --device-memory 80 (no --sweep)",
                     ["whatif", "{in}/run", *target, "--device-memory", "80", "--no-cache"],
                     names=("device-memory", "sweep"))


@op("arguments")
def op_device_memory_nan(rng):
    v = rng.choice(["nan", "NaN", "-nan", "+nan"])
    return _arg_case(f"whatif --sweep --device-memory {v}", ["whatif", "{in}/run", "--sweep", "--device-memory", v,
                                                            "--no-cache"], names=("device-memory", v, "nan"))


@op("arguments")
def op_address_without_ray(rng):
    cmd = rng.choice(["analyze", "hang", "layout", "tags", "sql"])
    addr = rng.choice(["auto", "ray://127.0.0.1:10001", "127.0.0.1:6379"])
    head = ["sql", "SELECT 1", "{in}/run"] if cmd == "sql" else [cmd, "{in}/run"]
    return _arg_case(f"{cmd} --address {addr} (the engine is local)", [*head, "--address", addr, "--no-cache"],
                     names=("address", "engine", "ray"))


@op("arguments")
def op_label_invalid_utf8(rng):
    label = rng.choice(["job=\udcff", "job=llama-\udce9", "commit=ab\udc80cd", "j\udcffb=x", "job=\udced\udca0\udc80"])
    exists = rng.random() < 0.5
    return _arg_case(f"--label {label.encode('utf-8', 'surrogateescape')!r} (invalid UTF-8) with "
                     f"{'an existing' if exists else 'a new'} history: refused, nothing written",
                     ["analyze", "{in}/run", "--no-cache", "--format", "json", "--record", f"{{in}}/{H}", "--label",
                      "commit=a", "--label", label], files={**_in("run"), **({H: history()} if exists else {})},
                     names=("label", label.split("=")[0].encode("utf-8", "surrogateescape").decode("utf-8", "replace")),
                     unchanged=[H])


# --- concurrent: the Python API at once ---------------------------------------------------------------------

def _api_case(rng, mode, n, m=1) -> Case:
    run = rng.choice(["ddp2", "ddp2", "ddp2", "pp4_gpipe_m4"])
    files = _in("run", run)
    paths = rng.choice([["{in}/run"], [f"{{in}}/{r}" for r in files], ["{in}/run/rank*.json.gz"]])
    calls = n * m
    how = f"{mode}: {n}" + (f" x {m} threads" if m > 1 else "")
    return Case("", "", f"traceparse.analyze({run}) {calls} times at once ({how})"
                f" on a fresh cache, each the document of a single call", files=files, program=(DRIVER,),
                args=[mode, str(n), str(m), *paths], accept=("load",), document=False,
                expect={"api": True, "cache_clean": True, "may_create": ["reference.json"]}, timeout=240)


@op("concurrent")
def op_threads(rng):
    return _api_case(rng, "threads", rng.choice([2, 4, 8]))


@op("concurrent")
def op_processes(rng):
    return _api_case(rng, "processes", rng.choice([2, 3, 4]))


@op("concurrent")
def op_threads_in_processes(rng):
    return _api_case(rng, "processes", 2, rng.choice([2, 3]))


# --- before and after a case (run.run_case) ------------------------------------------------------------------

DEV_NULL = os.makedev(1, 3)
_dev_lock = threading.Lock()
# a cache holds entries (a store, its stamp, its kept documents) and the store schema's template (store/template.py)
CACHE_FILE = re.compile(r"^[0-9a-f]+\.duckdb(?:\.stamp|\.[a-z]+-[0-9a-f]+\.json)?$|^schema-[0-9a-f]+\.store-template$")


def _one_build(p: Path) -> bool:
    """An entry's per-rank folder holding one build (the loads that lost a race removed theirs)."""
    if not (p.is_dir() and p.name.endswith(".duckdb.ranks") and p.with_name(p.name[:-6]).is_file()):
        return False
    return len([b for b in p.iterdir() if b.is_dir()]) == 1


def make_nodes(inp: Path, nodes: dict):
    """The case's device nodes (mknod; a link to /dev/... where that is not allowed) and hard links."""
    for rel, spec in nodes.items():
        p = inp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if spec.startswith("hardlink:"):
            os.link(inp / spec.split(":", 1)[1], p)
            continue
        try:
            os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, {"null": 3, "full": 7}[spec]))
        except PermissionError:
            os.symlink(f"/dev/{spec}", p)


def kind(p: Path) -> str:
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return "missing"
    if stat.S_ISLNK(st.st_mode):
        return "link to " + os.readlink(p)
    kinds = (("file", stat.S_ISREG), ("folder", stat.S_ISDIR), ("FIFO", stat.S_ISFIFO), ("char device", stat.S_ISCHR),
             ("block device", stat.S_ISBLK))
    return next((k for k, f in kinds if f(st.st_mode)), "other")


def _tree(root: Path) -> dict:
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(d) / n
            out[str(p.relative_to(root))] = kind(p)
    return out


def _content(p: Path):
    return kind(p), p.read_bytes() if p.is_file() else None


def dev_null_ok() -> bool:
    try:
        st = os.stat("/dev/null")
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == DEV_NULL


def restore_dev_null():
    if os.path.lexists("/dev/null"):
        os.rename("/dev/null", f"/dev/null.clobbered.{os.getpid()}")
    os.mknod("/dev/null", stat.S_IFCHR | 0o666, DEV_NULL)
    os.chmod("/dev/null", 0o666)


class FifoReader(threading.Thread):
    """Drains a FIFO (opened non-blocking, so that the command never waits for a reader) until stopped."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.fd, self.data, self.done = os.open(path, os.O_RDONLY | os.O_NONBLOCK), bytearray(), threading.Event()
        self.start()

    def run(self):
        while True:
            stopping = self.done.is_set()
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                chunk = b""
            self.data += chunk
            if not chunk:
                if stopping:
                    break
                self.done.wait(0.01)
        os.close(self.fd)

    def stop(self) -> bytes:
        self.done.set()
        self.join(10)
        return bytes(self.data)


def prepare(case: Case, sb) -> dict:
    """Before the command: the folder's tree and the contents to compare, FIFO readers, read-only files."""
    e, inp = case.expect, sb.inp
    state = {"tree": _tree(inp) if e else {}, "kinds": {}, "contents": {}, "readers": {}, "immutable": [],
             "dev_null": dev_null_ok()}
    for rel in e.get("same_kind", []):
        p = inp / rel
        state["kinds"][rel] = (kind(p), kind(p.resolve()) if p.is_symlink() else None)
    for rel in {*e.get("unchanged", []), *e.get("unchanged_if_refused", [])}:
        state["contents"][rel] = _content(inp / rel)
    for rel in e.get("immutable", []):
        p = inp / rel
        if os.geteuid() == 0:
            if subprocess.run(["chattr", "+i", str(p)], capture_output=True).returncode:
                raise RuntimeError(f"cannot make {rel} read-only for root (chattr +i failed)")
        else:
            p.chmod(0o444)
        state["immutable"].append(p)
    rep = e.get("report", "")
    state["old"] = (inp / rep).read_bytes() if rep and (inp / rep).is_file() else None
    if rep.startswith("fifo:"):
        state["readers"][rep] = FifoReader(inp / rep[5:])
    return state


def release(state: dict):
    for r in state.get("readers", {}).values():
        if r.is_alive():
            r.stop()
    for p in state.get("immutable", []):
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(p)], capture_output=True)
        else:
            p.chmod(0o644)


def judge(case: Case, sb, proc, state: dict) -> list[tuple[str, str]]:
    """What the surface checks found: (outcome, detail) pairs for checks.classify."""
    e, inp, found = case.expect, sb.inp, []
    captured = {k: r.stop() for k, r in state["readers"].items()}
    if state["dev_null"] and not dev_null_ok():
        with _dev_lock:
            if not dev_null_ok():
                restore_dev_null()
        print(f"\n*** {case.id}: THE SYSTEM'S /dev/null WAS REPLACED; made again ***\n", file=sys.stderr, flush=True)
        found.append(("clobbered", "the system's /dev/null was replaced (made again)"))
    for p in Path("/dev").glob(".null.*"):  # a temporary file beside it: -o resolved a link to /dev/null
        p.unlink(missing_ok=True)
        found.append(("leftover", f"left beside the system's /dev/null: {p}"))
    if not e:
        return found
    rc, ran = proc.rc, proc.rc in (0, 1) and not proc.timed_out
    for rel, (k, target) in state["kinds"].items():
        p = inp / rel
        now = (kind(p), kind(p.resolve()) if p.is_symlink() else None)
        if now[0] != k or (target in ("char device", "FIFO") and now[1] != target):
            found.append(("clobbered", f"{rel} was a {k}{f' ({target})' if target else ''}, is now a {now[0]}"
                                       f"{f' ({now[1]})' if now[1] else ''}"))
    for rel, before in state["contents"].items():
        if rel in e.get("unchanged", []) or (rc == 2 and rel in e.get("unchanged_if_refused", [])):
            if _content(inp / rel) != before:
                found.append(("clobbered", f"{rel} was changed" + (" (refused)" if rc == 2 else "")))
    rep = e.get("report")
    if rep and ran:
        f = inp / rep
        data = captured[rep] if rep.startswith("fifo:") else (f.read_bytes() if f.is_file() else None)
        bad = _report_problem(data, e.get("fmt"), state["old"])
        if bad:
            found.append(("bad output", f"{rep}: {bad} (exit {rc})"))
    after = _tree(inp)
    allowed = set(e.get("may_create", [])) if ran else set()
    when = " after a refusal" if rc == 2 else ""
    for rel in sorted(set(after) - set(state["tree"]) - allowed):
        found.append(("leftover", f"left beside the target: {rel} ({after[rel]}){when}"))
    if rc == 0:
        found += [("leftover", f"{rel} not removed") for rel in e.get("gone_if_ok", []) if os.path.lexists(inp / rel)]
    if rc == 2 and e.get("fresh_cache_if_refused"):
        work = sorted(p.name for p in sb.cache.rglob("*"))
        if work:
            found.append(("wrong refusal", f"refused only after loading: the cache holds {', '.join(work[:3])}"))
    if rc == 2 and e.get("mentions"):
        missing = [w for w in e["mentions"] if w not in proc.stderr]
        if missing:
            found.append(("wrong refusal", f"the refusal does not list {', '.join(missing)}: {proc.stderr[:200]}"))
    if ran and e.get("rc") and rc not in e["rc"]:
        found.append(("silent pass" if rc == 0 else "wrong refusal", f"exit {rc}, must be {e['rc']}"))
    if ran and e.get("reason") and rc in e.get("rc", [rc]):
        out = proc.stdout.decode("utf-8", "replace") + proc.stderr
        if not re.search(e["reason"], out):
            found.append(("silent pass", f"exit {rc} without the reason ({e['reason']}) on stdout or stderr"))
    if e.get("api") and not proc.timed_out and rc in (0, 1):
        found += _api_problems(proc.stdout)
    if e.get("cache_clean"):
        odd = sorted(str(p.relative_to(sb.cache)) for p in sb.cache.iterdir()
                     if not CACHE_FILE.match(p.name) and not _one_build(p))
        if odd:
            found.append(("leftover", f"in the cache beside its entries: {', '.join(odd[:4])}"))
    return found


def _report_problem(data, fmt, old) -> str | None:
    if data is None:
        return "no report there"
    if not data.strip():
        return "empty"
    if data == old:
        return "still the old content"
    if fmt == "json":
        try:
            json.loads(data)
        except ValueError as x:
            return f"not the JSON report ({x})"
    elif fmt == "html" and b"<html" not in data[:2000].lower():
        return "not an HTML page"
    return None


def _api_problems(stdout: bytes) -> list[tuple[str, str]]:
    try:
        s = json.loads(stdout)
    except ValueError:
        return [("bad output", f"no summary from the driver: {stdout[:200]!r}")]
    found = [("traceback", f"{len(s['errors'])} of {s['calls']} calls raised: {s['errors'][0]}")] if s["errors"] else []
    if s["mismatches"]:
        found.append(("bad output", f"{len(s['mismatches'])} of {s['calls']} calls returned another document than a "
                                    f"single call: {s['mismatches'][0]}"))
    if s["ok"] + len(s["errors"]) + len(s["mismatches"]) != s["calls"]:
        found.append(("bad output", f"only {s['ok']} of {s['calls']} calls returned"))
    return found

