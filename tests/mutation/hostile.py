"""Hostile stores and hostile text in traces: the classes of the surfaces where what traceparse reads was written by
someone else (a store, a trace's names and metadata, a path), their operators, and the checks they need beyond
``checks.classify`` (``run.run_case`` calls ``prepare`` after a case's setting-up commands and ``judge`` after its
command).

- ``store``: a store (``analyze RUN --db S``, made by a first command of the case) edited afterwards: its ``meta``
  row ``parts`` naming ``../victim``, an absolute path, a folder escaping the store's, or the folder holding the
  store when it has a file named ``BUILD`` (a Bazel project); its build folder a symlink to one elsewhere; a view or
  macro added or replaced (reading a file outside, listing a folder). ``compare --base-db S``, ``sql --db S``,
  ``whatif --db S``, ``analyze --db S`` must refuse it (exit 2, one line naming it), change nothing outside what
  they made (the victim folders, the project's files, the store itself), and never show the outside file; a store
  as traceparse made it (loaded once or twice) is still read;
- ``control_chars``: op, thread, process-group and backend names and the run's folder holding OSC title and OSC 52
  clipboard sequences, CSI, ``\\r``, backspace, DEL, C1 controls and bidi overrides (escaped in the JSON, or raw
  UTF-8 where JSON allows it): no raw control byte on the standard output of ``analyze`` (text), ``sql`` (table),
  ``compare`` (text), ``whatif`` (text); exit 0 or 1;
- ``markdown``: op names and the run's folder holding blank lines, headings, images, links, autolinks, HTML,
  ``|`` (escaped or after a backslash), backticks and fences, a forged verdict: ``compare --format markdown`` keeps
  every table whole (each row as many cells as its header) and nothing of the names acts as Markdown (no line of
  its own, no image, link, autolink or tag outside code spans);
- ``huge_numbers``: the plugin metadata's layout and model numbers at 10^15 (the most it takes) and past it,
  ``--given`` and ``--layout`` of 10^15 or ``1e15``, ``--sweep --device-memory 1e308``: ``whatif`` exits 0, 1 or 2
  within time and memory bounds, and its JSON is strict (no ``NaN`` or ``Infinity``);
- ``path_chars``: ``[ ] * ? { } ' "`` spaces, newlines, ``$`` and ``~`` in the store's path, the cache's
  (``$TRACEPARSE_CACHE``), ``$TMPDIR`` and the home folder's (the cache under ``~/.cache``), and ``--layout`` /
  ``--given`` values over 255 bytes: exit 0 (or a clean refusal), nothing left behind in those folders.

A case says what it needs in ``Case.action_args["hostile"]`` (not ``expect``: the ``surfaces`` checks stay off):

- ``env``: variables to set (``None``: to remove) for the command; ``{in}`` and ``{dir}`` stand for the case's
  input folder and its own folder; ``mkdirs``: folders to make first;
- ``store`` (a path under ``in/``) and ``edit``: how to damage it once made (``parts``: the value to write,
  ``{token}``/``{dir}`` in it; ``victims``: folders to make, ``copy`` of the build folder or a ``project`` with a
  ``BUILD`` file; ``symlink``: the build folder moved there and linked; ``sql``: statements run on it);
- ``guard``: paths (under the case's folder) that must be byte-identical after, whatever the exit; ``guard_refused``:
  the same when the command refused; ``quiet_refusal``: nothing new under ``in/`` after a refusal;
- ``secret``: a text the standard output must not hold (an outside file's);
- ``controls``: the standard output holds no raw control byte; ``markdown``: the checks above (``MARK`` tags the
  names); ``strict_json``: exit 0/1 with a strict JSON document; ``caches``: folders whose temporary files are
  leftovers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from .bases import tiny_text
from .generate import CLASSES, OPS, Case, _run_files, op

NEW = {
    "store": "stores whose meta 'parts' names ../x, an absolute path, an escaping folder or one holding a BUILD file, "
             "a build folder linked elsewhere, a view or macro made by someone else: compare --base-db, sql --db, "
             "whatif --db, analyze --db refuse; nothing outside is deleted or written",
    "control_chars": "OSC title / OSC 52 / CSI, \\r, C1 and bidi overrides in op, thread, group names and the run's "
                     "folder: no raw control byte on the text output of analyze, sql, compare, whatif",
    "markdown": "blank lines, images, links, pipes, backticks, a forged verdict in names: compare --format markdown "
                "keeps its tables whole",
    "huge_numbers": "10^15 and more in the plugin metadata's layout and model, --given, --layout; --device-memory "
                    "1e308: whatif bounded, exit 0/1/2, strict JSON",
    "path_chars": "[ ] * ? { ' spaces and newlines in the store's, the cache's, $TMPDIR's and $HOME's paths; --layout "
                  "and --given over 255 bytes: exit 0 or one clean line",
}
CLASSES.update(NEW)
OPS.update({c: [] for c in NEW})
HOSTILE_CLASSES = tuple(NEW)
MARK = "HX7"  # tags every piece of a hostile name (markdown, control_chars)
S = "S.duckdb"
TIMEOUT = 90.0
MAX_RSS_MB = 1200  # whatif on 4 small ranks peaks near 300 MB


def _tiny_run(folder: str, world: int = 1, edit=None) -> dict:
    """The hand-made trace's ranks under ``folder``, each passed through ``edit(bytes)``."""
    out = {}
    for r in range(world):
        data = tiny_text(rank=r, world=world)
        out[f"{folder}/rank{r}.json"] = edit(data) if edit else data
    return out


def _hostile(**spec) -> dict:
    return {"hostile": spec}


# --- store: hostile stores ---------------------------------------------------------------------------------

STORE_CMDS = ("analyze", "whatif", "sql", "compare")


def _store_args(rng, cmd: str, store: str, query: str | None = None) -> list:
    if cmd == "analyze":
        return ["analyze", "{in}/run", "--db", store, "--format", rng.choice(["json", "text"])]
    if cmd == "whatif":
        return ["whatif", "{in}/run", "--db", store, "--layout", "dp=1", "--format", rng.choice(["json", "text"])]
    if cmd == "sql":
        return ["sql", query or rng.choice(["SELECT count(*) FROM events", "SELECT * FROM ranks", "SELECT * FROM meta"]),
                "--db", store]
    if rng.random() < 0.5:
        return ["compare", "--base-db", store, "--new-db", store]
    return ["compare", "--base-db", store, "{in}/run", "--no-cache"]


# the setting-up command of a hostile store: the CLI with the ranks' tables written as Parquet in the store's per-rank
# folder, as a run larger than one row group has them (load.run.in_store), so the edits have a build folder to move
PARQUET_STORE = b"""import sys
from traceparse.load import run
run.in_store = lambda _parsed: False
from traceparse.cli import main
sys.exit(main())
"""


def _store_case(rng, desc, edit, *, store=S, accept=("refuse",), guard=(), files=None, secret=None, query=None,
                cmds=STORE_CMDS) -> Case:
    cmd = rng.choice(cmds)
    path = "{in}/" + store
    files = {**_tiny_run("run"), "parquet_store.py": PARQUET_STORE, **(files or {})}
    spec = {"store": store, "edit": edit, "guard": list(guard), "guard_refused": [f"in/{store}", f"in/{store}.ranks"],
            "quiet_refusal": True}
    if secret:
        spec["secret"] = secret
    return Case("", "", f"{cmd} on a store whose {desc}", files=files, args=_store_args(rng, cmd, path, query),
                accept=accept, names=(Path(store).name,), document=False, timeout=TIMEOUT,
                action_args={"before": [["{in}/parquet_store.py", "analyze", "{in}/run", "--db", path, "--format", "json"]],
                             **_hostile(**spec)})


@op("store")
def op_parts_escape(rng):
    """meta 'parts' naming a folder outside the store's, holding a copy of its build (BUILD lock included)."""
    where = rng.choice(["../victim", "../../outside/victim", "{dir}/outside/victim", "{token}/../../victim",
                        "{token}/../../../outside/victim"])
    victim = "in/victim" if "outside" not in where else "outside/victim"
    return _store_case(rng, f"meta 'parts' is {where!r}: a copy of its build folder there", {
        "parts": where, "victims": {victim: "copy"}}, guard=[victim])


@op("store")
def op_parts_build_file(rng):
    """meta 'parts' naming the folder holding the store (or its parent): a project with a BUILD file (Bazel)."""
    up = rng.choice(["..", "../..", "{dir}/in/proj", "."])
    store = "proj/sub/S.duckdb" if up == "../.." else "proj/S.duckdb"
    project = "in/proj"
    spec = {"parts": up, "victims": {project: "project"}}
    if up == ".":  # the store's own per-rank folder, a BUILD file put in it
        spec["victims"] = {project: "project", f"in/{store}.ranks": "build_file"}
    return _store_case(rng, f"meta 'parts' is {up!r} and a file named BUILD is there", spec, store=store,
                       guard=[f"{project}/BUILD", f"{project}/keep.txt", f"{project}/src"],
                       files={str(Path(store).parent): None})


@op("store")
def op_parts_symlink(rng):
    """The build folder the store names is a symlink to a folder elsewhere (moved there)."""
    target = rng.choice(["outside/build", "in/elsewhere/build"])
    return _store_case(rng, f"build folder is a symlink to {target}", {"symlink": target}, accept=("load", "refuse"),
                       guard=[target])


FOREIGN_SQL = {
    "view_reads_file": ["CREATE VIEW notes AS SELECT content FROM read_text('{secret}')"],
    "view_lists_folder": ["CREATE VIEW listing AS SELECT file FROM glob('{dir}/outside/*')"],
    "table_as_view": ["CREATE TABLE ranks_kept AS SELECT * FROM ranks", "DROP TABLE ranks",
                      "CREATE VIEW ranks AS SELECT r.* FROM ranks_kept r, (SELECT content FROM read_text('{secret}')) s"],
    "macro_reads_file": ["CREATE OR REPLACE MACRO dtype_bytes(d) AS ("
                         "SELECT length(content) FROM read_text('{secret}'))"],
}
FOREIGN_QUERY = {"view_reads_file": "SELECT * FROM notes", "view_lists_folder": "SELECT * FROM listing",
                 "table_as_view": "SELECT * FROM ranks", "macro_reads_file": "SELECT dtype_bytes('float')"}


@op("store")
def op_foreign_view(rng):
    """A view or macro someone else added to the store (reading or listing files outside it)."""
    kind = rng.choice(list(FOREIGN_SQL))
    secret = f"{MARK}-SECRET-{rng.randrange(1 << 30):08x}"
    return _store_case(rng, f"catalog holds {kind.replace('_', ' ')} (made after traceparse wrote it)",
                       {"sql": FOREIGN_SQL[kind], "secret_file": "outside/secret.txt", "secret_text": secret},
                       guard=["outside/secret.txt"], secret=secret, query=FOREIGN_QUERY[kind])


@op("store")
def op_store_valid(rng):
    """A store as traceparse made it (loaded once or twice): it must still be read (the checks refuse no sound store)."""
    twice = rng.random() < 0.5
    case = _store_case(rng, "files are as traceparse wrote them", {}, accept=("load",))
    if twice:
        case.action_args["before"].append(case.action_args["before"][0])
        case.description += " (loaded twice)"
    return case


# --- control_chars: terminal controls in names ----------------------------------------------------------------

CONTROLS = {
    "osc_title": "\x1b]0;HX7 title\x07",
    "osc52": "\x1b]52;c;SFg3IHB3bmVk\x07",
    "csi": "\x1b[2J\x1b[H\x1b[31m",
    "cr": "HX7 real\rfake",
    "backspace": "abc\x08\x08\x08xyz\x7f",
    "c1_csi": "\u009b2J\u009d0;t\u009c",
    "c1_nel": "a\u0085b\u0090c",
    "bidi": "evil\u202etxt.exe\u2066x\u2069",
    "mixed": "\x1b]0;x\x07\r\u009b\u202e",
}


def _rename(data: bytes, old: str, new: str, raw: bool) -> bytes:
    """Every JSON string ``old`` (as written, with quotes) made ``new``: JSON escapes, or (``raw``) the characters
    JSON allows unescaped written as UTF-8."""
    text = json.dumps(new, ensure_ascii=not raw)
    return data.replace(json.dumps(old).encode(), text.encode("utf-8"))


CC_TARGETS = {  # where a hostile name goes in the hand-made trace: (old string, sql query showing it)
    "op": [("aten::addmm", "SELECT DISTINCT name FROM events ORDER BY name"),
           ("aten::linear", "SELECT name, count(*) AS n FROM events GROUP BY name ORDER BY n DESC, name")],
    "thread": [("gloo worker", "SELECT * FROM threads"), ("python main", "SELECT * FROM threads")],
    "group": [("default_pg", "SELECT * FROM process_groups"), ("gloo", "SELECT * FROM ranks")],
}
CC_COMMANDS = {"op": ("analyze", "sql", "compare", "whatif"), "thread": ("analyze", "sql", "sql", "whatif"),
               "group": ("analyze", "sql", "compare", "whatif")}  # where each shows (whatif names none: a check)


def _cc_args(cmd: str, query: str) -> list:
    return {"analyze": ["analyze", "{in}/run", "--no-cache", "--format", "text"],
            "sql": ["sql", query, "{in}/run", "--no-cache"],
            "compare": ["compare", "{in}/base", "{in}/run", "--no-cache", "--format", "text"],
            "whatif": ["whatif", "{in}/run", "--no-cache", "--layout", "dp=1", "--format", "text"]}[cmd]


def _cc_case(rng, where: str) -> Case:
    kind = rng.choice(list(CONTROLS))
    payload = f"{MARK} {CONTROLS[kind]} {MARK}"
    raw = rng.random() < 0.4
    old, query = rng.choice(CC_TARGETS[where])
    cmd = rng.choice(CC_COMMANDS[where])
    files = {**_tiny_run("run", edit=lambda d: _rename(d, old, payload, raw)), **_tiny_run("base")}
    return Case("", "", f"{cmd} (text) of a trace whose {where} name {old!r} is {payload!r}"
                        f"{' (raw UTF-8 in the JSON)' if raw else ''}", files=files, args=_cc_args(cmd, query),
                accept=("load",), document=False, timeout=TIMEOUT, action_args=_hostile(controls=True))


@op("control_chars")
def op_op_name(rng):
    return _cc_case(rng, "op")


@op("control_chars")
def op_thread_name(rng):
    return _cc_case(rng, "thread")


@op("control_chars")
def op_group_name(rng):
    return _cc_case(rng, "group")


@op("control_chars")
def op_folder_name(rng):
    """The run's folder (shown by compare and in load issues) named with controls."""
    kind = rng.choice([k for k in CONTROLS if k != "mixed"])  # (a folder name: any character but '/' and NUL)
    folder = f"run {CONTROLS[kind]}"
    cmd = rng.choice(["compare", "compare", "analyze", "sql"])
    args = [a.replace("{in}/run", "{in}/" + folder) for a in _cc_args(cmd, "SELECT * FROM meta")]
    files = {**_tiny_run(folder), **_tiny_run("base")}
    return Case("", "", f"{cmd} (text) of the run in folder {folder!r}", files=files, args=args, accept=("load",),
                document=False, timeout=TIMEOUT, action_args=_hostile(controls=True))


# --- markdown: Markdown in names, compare --format markdown -------------------------------------------------------

MD_PAYLOADS = {
    "blank_lines": ["HX7 a\n\nHX7 b", "HX7 x\n\n\nHX7 # heading\n\nHX7 y", "HX7 a\r\n\r\nHX7 b", "HX7 a\n---\nHX7 b"],
    "image_link": ["HX7 ![img](http://x.invalid/p.png)", "HX7 [LGTM](http://x.invalid/ok)", "HX7 <img src=x.png>",
                   "HX7 http://x.invalid/a", "HX7 [a]: http://x.invalid", "HX7 <details><summary>x"],
    "pipes_backticks": ["HX7 a|b|c", "HX7 a\\|b", "HX7 a\\\\|b |", "HX7 ``x`` `y", "HX7 ```\nHX7 fence",
                        "HX7 `|`|` a"],
    "fake_verdict": ["HX7 x\n\n_verdict: ok (no metric regressed)_", "HX7\n\nHX7 LGTM: no regression",
                     "HX7 x |\n| | `step_time.mean` | 1 ms | 1 ms | ok |", "HX7\n### \u2705 traceparse compare: ok"],
}


def _md_case(rng, family: str) -> Case:
    payload = rng.choice(MD_PAYLOADS[family])
    old = rng.choice(["aten::addmm", "aten::linear", "autograd::engine::evaluate_function: AddmmBackward0"])
    hostile_new = rng.random() < 0.7  # the name in NEW (only there) or in BASE
    edited = _tiny_run("new" if hostile_new else "base", edit=lambda d: _rename(d, old, payload, False))
    files = {**_tiny_run("base"), **_tiny_run("new"), **edited}
    return Case("", "", f"compare --format markdown; an op of {'NEW' if hostile_new else 'BASE'} named {payload!r}",
                files=files, args=["compare", "{in}/base", "{in}/new", "--no-cache", "--format", "markdown"],
                accept=("load",), document=False, timeout=TIMEOUT, action_args=_hostile(markdown=True))


@op("markdown")
def op_blank_lines(rng):
    return _md_case(rng, "blank_lines")


@op("markdown")
def op_image_link(rng):
    return _md_case(rng, "image_link")


@op("markdown")
def op_pipes_backticks(rng):
    return _md_case(rng, "pipes_backticks")


@op("markdown")
def op_fake_verdict(rng):
    return _md_case(rng, "fake_verdict")


@op("markdown")
def op_md_folder_name(rng):
    """The run's folder (in the '- base: ...' lines) named with Markdown."""
    name = rng.choice(["HX7 ![x](x.png)", "HX7 [LGTM](#ok)", "HX7 a\n\nHX7 b", "HX7 <img src=x.png>", "HX7 `a|b",
                       "HX7 **bold** _verdict: ok_"])
    side = rng.choice(["base", "new"])
    files = {**_tiny_run("base" if side == "new" else name), **_tiny_run("new" if side == "base" else name)}
    sides = ["{in}/" + name, "{in}/new"] if side == "base" else ["{in}/base", "{in}/" + name]
    return Case("", "", f"compare --format markdown; the {side.upper()} run's folder named {name!r}", files=files,
                args=["compare", *sides, "--no-cache", "--format", "markdown"], accept=("load",), document=False,
                timeout=TIMEOUT, action_args=_hostile(markdown=True))


# --- huge_numbers: whatif on huge metadata and option numbers ---------------------------------------------------

BIG = 10**15
PIPELINE = "pp4_gpipe_m4"


def _with_metadata(data: bytes, meta: dict, rank: int, world: int, gz: bool) -> bytes:
    """The trace with a plugin metadata key (``traceparse``, traceparse/ingest/plugin_metadata.py) holding ``meta``."""
    import gzip

    doc = json.loads(gzip.decompress(data) if gz else data)
    doc["traceparse"] = {"version": 1, "rank": rank, "world_size": world, **meta}
    return json.dumps(doc).encode()


def _pipeline(folder: str, meta: dict | None = None) -> dict:
    files = _run_files(PIPELINE)[0]
    if meta is None:
        return {f"{folder}/{n}": d for n, d in files.items()}
    return {f"{folder}/{n.removesuffix('.gz')}": _with_metadata(d, meta, k, len(files), True)
            for k, (n, d) in enumerate(files.items())}


def _whatif_case(rng, desc, files, extra, fmt=None) -> Case:
    fmt = fmt or rng.choice(["json", "json", "text"])
    return Case("", "", f"whatif {' '.join(extra)} --format {fmt}: {desc}", files=files,
                args=["whatif", "{in}/run", "--no-cache", *extra, "--format", fmt], accept=("load", "refuse"),
                document=False, timeout=TIMEOUT, max_rss_mb=MAX_RSS_MB,
                action_args=_hostile(strict_json=fmt == "json"))


def _big(rng):
    """Mostly the most the metadata takes (10^15), else past it (dropped with a load issue)."""
    return rng.choice([BIG, BIG, BIG, BIG - 1, BIG + 1, 2**53 + 1, 2**63 - 1, 2**64])


@op("huge_numbers")
def op_metadata_layout(rng):
    """The plugin metadata of a 4-stage GPipe run saying microbatches (or virtual_stages, a degree) is 10^15."""
    key = rng.choice(["microbatches", "microbatches", "microbatches", "virtual_stages", "pp", "dp", "dp_shard"])
    value = _big(rng)
    layout = {key: value}
    if key == "virtual_stages":
        layout["pp_schedule"] = rng.choice(["interleaved_1f1b", "gpipe"])
    extra = rng.choice([["--layout", "dp=1"], ["--sweep"], ["--layout", "pp=2"], ["--balanced"]])
    return _whatif_case(rng, f"{PIPELINE} whose plugin metadata says layout {layout}", _pipeline("run", {"layout": layout}),
                        extra)


@op("huge_numbers")
def op_metadata_model(rng):
    """Model numbers of the plugin metadata (params, layers, hidden, seq, micro_batch...) at or past 10^15."""
    keys = rng.sample(["params", "layers", "hidden", "heads", "ffn", "vocab", "seq", "micro_batch", "layers_local",
                       "params_local", "experts", "dtype_bytes"], rng.randint(1, 4))
    model = {k: _big(rng) for k in keys}
    extra = rng.choice([["--layout", "dp=1"], ["--sweep"], ["--layout", "tp=2"], ["--layout", "layers=8"]])
    return _whatif_case(rng, f"{PIPELINE} whose plugin metadata says model {model}", _pipeline("run", {"model": model}),
                        extra)


@op("huge_numbers")
def op_given(rng):
    key = rng.choice(["microbatches", "microbatches", "microbatches", "virtual_stages", "layers", "seq", "micro_batch",
                      "params"])
    value = rng.choice(["1e15", str(BIG), "999999999999999", "1e15", "1E+15"])
    extra = ["--given", f"{key}={value}", *rng.choice([["--layout", "dp=1"], ["--sweep"], ["--layout", "pp=2"]])]
    return _whatif_case(rng, f"{PIPELINE}, told {key} = {value}", _pipeline("run"), extra)


@op("huge_numbers")
def op_layout_degrees(rng):
    target = rng.choice([f"dp={BIG}", f"dp={BIG},tp={BIG}", f"tp=2,layers={BIG}", f"dp=2,microbatches={BIG}",
                         f"ep={BIG}", f"dp=1,seq={BIG}", f"dp=1,micro_batch={BIG}", f"pp=2,microbatches={BIG}",
                         f"dp_replicate={BIG},dp_shard=2", "dp=1e15", f"dp=1,params={BIG}", f"dp=1,hidden={BIG}"])
    return _whatif_case(rng, f"a target of huge degrees or sizes on the hand-made {'pipeline' if 'pp=' in target else 'run'}",
                        _tiny_run("run", 2), ["--layout", target])


@op("huge_numbers")
def op_device_memory(rng):
    gib = rng.choice(["1e308", "1.7976931348623157e308", "1e300", "1e-300", "5e-324", "1e19"])
    pipeline = rng.random() < 0.3
    return _whatif_case(rng, f"every layout under {gib} GiB per device",
                        _pipeline("run") if pipeline else _tiny_run("run", 2), ["--sweep", "--device-memory", gib],
                        fmt=rng.choice(["json", "json", "text"]))


# --- path_chars: odd characters in the paths traceparse writes to; long option values ----------------------------

PATH_PIECES = ["[", "]", "*", "?", "{", "}", "'", '"', " ", "\n", "$HOME", "~", ",", "%s", "\\", "[0-9]", "**", "{a,b}",
               "\t", ";", "`x`"]


def _weird(rng, n=None) -> str:
    """A folder name of odd characters (never '/')."""
    pieces = rng.sample(PATH_PIECES, n or rng.randint(2, 6))
    return "d" + "".join(p + rng.choice(["", "x"]) for p in pieces)


def _path_case(desc, args, *, env=None, mkdirs=(), caches=(), tmpdirs=(), files=None, document=True) -> Case:
    spec = {"env": env or {}, "mkdirs": list(mkdirs), "caches": list(caches), "tmpdirs": list(tmpdirs)}
    return Case("", "", desc, files={**_tiny_run("run"), **(files or {})}, args=args, accept=("load", "refuse"),
                events=21 if document else None, ranks=[0] if document else None, document=document, timeout=TIMEOUT,
                action_args=_hostile(**spec))


@op("path_chars")
def op_store_path(rng):
    folder = _weird(rng)
    name = rng.choice([S, "S[1].duckdb", "S*.duckdb", "S?.duckdb", "S'{x}.duckdb", "S\n.duckdb", "S .duckdb"])
    db = f"{{in}}/{folder}/{name}"
    cmd = rng.choice(["analyze", "analyze", "sql", "whatif"])
    head = {"analyze": ["analyze", "{in}/run", "--format", "json"], "sql": ["sql", "SELECT count(*) FROM events",
            "{in}/run"], "whatif": ["whatif", "{in}/run", "--layout", "dp=1", "--format", "json"]}[cmd]
    return _path_case(f"{cmd} --db {db!r} (made, then read back)", [*head, "--db", db], files={folder: None},
                      caches=["{in}/" + folder], document=cmd == "analyze")


@op("path_chars")
def op_cache_path(rng):
    var = rng.choice(["TRACEPARSE_CACHE", "TRACEPARSE_CACHE", "XDG_CACHE_HOME", "TMPDIR"])
    folder = "{dir}/" + _weird(rng)
    env = {var: folder}
    if var == "XDG_CACHE_HOME":
        env["TRACEPARSE_CACHE"] = None
    cmd = rng.choice(["analyze", "analyze", "whatif", "sql"])
    head = {"analyze": ["analyze", "{in}/run", "--format", "json"], "sql": ["sql", "SELECT count(*) FROM events",
            "{in}/run"], "whatif": ["whatif", "{in}/run", "--layout", "dp=1", "--format", "json"]}[cmd]
    tmp = var == "TMPDIR"  # with --no-cache the store is made there, and must be gone after
    return _path_case(f"{cmd}{' --no-cache' if tmp else ''} with ${var} = {folder!r}",
                      [*head, *(["--no-cache"] if tmp else [])], env=env, mkdirs=[folder],
                      **({"tmpdirs": [folder]} if tmp else {"caches": [folder]}), document=cmd == "analyze")


@op("path_chars")
def op_home_path(rng):
    home = "{dir}/" + _weird(rng)
    cmd = rng.choice(["analyze", "compare", "whatif"])
    head = {"analyze": ["analyze", "{in}/run", "--format", "json"],
            "compare": ["compare", "{in}/run", "{in}/run", "--format", "json"],
            "whatif": ["whatif", "{in}/run", "--layout", "dp=1", "--format", "json"]}[cmd]
    return _path_case(f"{cmd} with $HOME = {home!r} (the cache under ~/.cache)", head,
                      env={"HOME": home, "TRACEPARSE_CACHE": None, "XDG_CACHE_HOME": None}, mkdirs=[home],
                      caches=[home], document=cmd == "analyze")


@op("path_chars")
def op_long_option(rng):
    n = rng.choice([256, 300, 1000, 5000])
    text = rng.choice([f"dp={'1' * n}", "dp=2," + " " * n, "x" * n, "a" * n + ".toml", "/".join(["a" * 200] * (n // 200 + 1)),
                       f"dp=1,pp_schedule={'g' * n}", f"{'dp=1,' * (n // 5)}", "dp=" + "9" * n])
    cmd = rng.choice(["analyze", "analyze", "whatif", "compare", "layout"])
    if cmd == "whatif":
        opt = rng.choice(["--layout", "--given"])
        args = ["whatif", "{in}/run", "--no-cache", opt, text, *(["--layout", "dp=1"] if opt == "--given" else []),
                "--format", "json"]
    elif cmd == "compare":
        opt, args = "--layout", ["compare", "{in}/run", "{in}/run", "--no-cache", "--layout", text, "--format", "json"]
    elif cmd == "layout":
        opt, args = "--layout", ["layout", "{in}/run", "--no-cache", "--layout", text, "--format", "json"]
    else:
        opt, args = "--layout", ["analyze", "{in}/run", "--no-cache", "--layout", text, "--format", "json"]
    return _path_case(f"{cmd} {opt} of {len(text.encode())} bytes ({text[:24]!r}...)", args,
                      document=cmd == "analyze")


# --- before and after a case (run.run_case) ---------------------------------------------------------------------

C0 = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]|\xe2\x80[\x8e\x8f]"
                rb"|\xd8\x9c")


def _sub(text: str, sb) -> str:
    return text.replace("{in}", str(sb.inp)).replace("{dir}", str(sb.dir))


def _snapshot(p: Path):
    """Everything under ``p`` (kinds and bytes), or None when it is missing."""
    if not os.path.lexists(p):
        return None
    if p.is_symlink() or not p.is_dir():
        return {"": ("link", os.readlink(p)) if p.is_symlink() else ("file", p.read_bytes())}
    out = {}
    for d, dirs, files in os.walk(p):
        for n in dirs + files:
            q = Path(d) / n
            rel = str(q.relative_to(p))
            out[rel] = (("link", os.readlink(q)) if q.is_symlink() else ("folder", None) if q.is_dir()
                        else ("file", q.read_bytes()))
    return out


def _diff(before, after) -> str | None:
    if before == after:
        return None
    if after is None:
        return "deleted"
    if before is None:
        return "made"
    gone = sorted(set(before) - set(after))
    new = sorted(set(after) - set(before))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    parts = [f"{w} {', '.join(repr(x) for x in xs[:3])}" for w, xs in (("lost", gone), ("gained", new),
                                                                          ("changed", changed)) if xs]
    return "; ".join(parts)


def _edit_store(sb, spec: dict):
    """Damage the store the case's first command made, as ``spec['edit']`` says."""
    import duckdb

    edit = spec["edit"]
    store = sb.inp / spec["store"]
    ranks = store.with_name(store.name + ".ranks")
    con = duckdb.connect(str(store))
    try:
        token = con.execute("SELECT value FROM meta WHERE key = 'parts'").fetchone()[0]
        build = ranks / token
        for rel, kind in edit.get("victims", {}).items():
            dest = sb.dir / rel
            if kind == "copy":
                shutil.copytree(build, dest, symlinks=True)
                (dest / "keep.txt").write_text("a file of the victim folder\n")
            elif kind == "project":
                dest.mkdir(parents=True, exist_ok=True)
                (dest / "BUILD").write_text('py_library(name = "lib", srcs = ["src/main.py"])\n')
                (dest / "keep.txt").write_text("a file of the project\n")
                (dest / "src").mkdir(exist_ok=True)
                (dest / "src" / "main.py").write_text("print('hello')\n")
            elif kind == "build_file":
                (dest / "BUILD").write_text("")
        if "symlink" in edit:
            dest = sb.dir / edit["symlink"]
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(build), dest)
            os.symlink(dest, build)
        if "secret_file" in edit:
            p = sb.dir / edit["secret_file"]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(edit["secret_text"] + "\n")
        if "parts" in edit:
            value = _sub(edit["parts"], sb).replace("{token}", token)
            con.execute("UPDATE meta SET value = ? WHERE key = 'parts'", [value])
        for stmt in edit.get("sql", []):
            con.execute(_sub(stmt, sb).replace("{secret}", str(sb.dir / edit.get("secret_file", "x"))))
        con.execute("CHECKPOINT")
    finally:
        con.close()


def prepare(case: Case, sb) -> dict:
    """Before the command: its environment, the store's damage, snapshots of what must not change."""
    h = case.action_args.get("hostile")
    if not h:
        return {}
    for d in h.get("mkdirs", []):
        Path(_sub(d, sb)).mkdir(parents=True, exist_ok=True)
    for k, v in h.get("env", {}).items():
        if v is None:
            sb.env.pop(k, None)
        else:
            sb.env[k] = _sub(v, sb)
    if "edit" in h:
        _edit_store(sb, h)
    from .surfaces import _tree

    return {"guard": {g: _snapshot(sb.dir / g) for g in h.get("guard", []) + h.get("guard_refused", [])},
            "tree": _tree(sb.inp) if h.get("quiet_refusal") else None}


def judge(case: Case, sb, proc, state: dict) -> list[tuple[str, str]]:
    """What the hostile-input checks found: (outcome, detail) pairs for checks.classify."""
    h = case.action_args.get("hostile")
    if not h:
        return []
    found = []
    rc, ran = proc.rc, proc.rc in (0, 1) and not proc.timed_out
    for g, before in state["guard"].items():
        if g in h.get("guard_refused", []) and rc != 2:
            continue
        what = _diff(before, _snapshot(sb.dir / g))
        if what:
            found.append(("clobbered", f"{g} (outside what the command made) was changed: {what} (exit {rc})"))
    if state.get("tree") is not None and rc == 2:
        from .surfaces import _tree

        new = sorted(set(_tree(sb.inp)) - set(state["tree"]))
        if new:
            found.append(("leftover", f"new after a refusal: {', '.join(repr(n) for n in new[:3])}"))
    if h.get("secret") and h["secret"].encode() in proc.stdout:
        found.append(("bad output", "standard output shows the file outside the store a view of it reads"))
    if h.get("controls"):
        m = C0.search(proc.stdout)
        if m:
            at = m.start()
            found.append(("bad output", f"raw control byte(s) {m.group(0)!r} on standard output at byte {at}: "
                                        f"{proc.stdout[max(0, at - 30):at + 20]!r} (exit {rc})"))
    if h.get("markdown") and ran:
        bad = markdown_problems(proc.stdout.decode("utf-8", "replace"))
        if bad:
            found.append(("bad output", f"markdown: {bad}"))
    if h.get("strict_json") and ran:
        try:
            json.loads(proc.stdout, parse_constant=_no_constant)
        except ValueError as e:
            found.append(("bad output", f"not strict JSON on standard output: {str(e)[:160]}"))
    for t in h.get("tmpdirs", []):
        p = Path(_sub(t, sb))
        left = sorted(q.name for q in p.iterdir()) if p.is_dir() else []
        if left:
            found.append(("leftover", f"left in $TMPDIR {p.name!r}: {', '.join(repr(n) for n in left[:3])}"))
    for c in h.get("caches", []):
        p = Path(_sub(c, sb))
        left = [str(q.relative_to(p)) for q in sorted(p.rglob("*")) if TEMP.search(q.name)] if p.is_dir() else []
        if left:
            found.append(("leftover", f"left in {p.name!r}: {', '.join(left[:3])}"))
    return found


TEMP = re.compile(r"\.tmp$|\.wal$|^traceparse-|^pymp-|\.tmp\.")


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


# --- the Markdown checks ------------------------------------------------------------------------------------------

def _cells(row: str) -> int:
    """GFM cells of a table row: split on the pipes a backslash does not escape (a backslash escapes the next
    character, a backslash too), the leading and trailing pipe not counted."""
    body, pipes, i = row.strip(), [], 0
    while i < len(body):
        if body[i] == "\\":
            i += 2
            continue
        if body[i] == "|":
            pipes.append(i)
        i += 1
    lead = bool(pipes) and pipes[0] == 0
    trail = bool(pipes) and pipes[-1] == len(body) - 1 and len(body) > 1
    return len(pipes) + 1 - lead - trail


def _active(text: str) -> str:
    """``text`` without its code spans and backslash-escaped characters: what Markdown would interpret."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append("  ")
            i += 2
            continue
        if c == "`":
            run = len(text[i:]) - len(text[i:].lstrip("`"))
            close = text.find("`" * run, i + run)
            while close != -1 and (text[close + run : close + run + 1] == "`" or text[close - 1] == "`"):
                close = text.find("`" * run, close + 1)
            if close != -1:
                out.append(" " * (close + run - i))
                i = close + run
                continue
            out.append(text[i : i + run])
            i += run
            continue
        out.append(c)
        i += 1
    return "".join(out)


ACTIVE = re.compile(r"!\[|\]\(|\]:|<[A-Za-z/!]|://")


def markdown_problems(text: str) -> str | None:
    """The first way the report's Markdown lets a name act: a line of a name's own (outside a table row, or starting
    with it), a table row with more or fewer cells than its header, an image, link, autolink, tag, heading or quote
    that a name brings outside a code span."""
    lines = text.split("\n")
    header = None
    for k, ln in enumerate(lines):
        s = ln.strip()
        if s.startswith("|"):
            if header is None:
                header = _cells(s)
            elif _cells(s) != header:
                return f"line {k + 1}: {_cells(s)} cells in a table of {header}: {ln[:120]!r}"
        else:
            header = None
        if MARK not in ln:
            continue
        if s.startswith(MARK) or "\r" in ln:
            return f"line {k + 1}: a name's own line: {ln[:120]!r}"
        if not s.startswith(("|", "- ")):
            return f"line {k + 1}: a name outside the tables: {ln[:120]!r}"
        act = _active(ln)[ln.index(MARK):]  # same length as the line: code spans and escapes blanked
        m = ACTIVE.search(act)
        if m:
            return f"line {k + 1}: {m.group(0)!r} acts as Markdown: {ln[:120]!r}"
    return None
