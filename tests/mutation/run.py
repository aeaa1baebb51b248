"""Run one case: the traceparse CLI as a subprocess in its own session, folders and limits.

Each case gets a folder with ``in/`` (its files; the working directory), ``tmp/`` ($TMPDIR) and
``cache/`` ($TRACEPARSE_CACHE, also under $XDG_CACHE_HOME). The command runs as
``python -m traceparse.cli ARGS`` with ``start_new_session=True`` (its own process group), stdin
empty, RLIMIT_AS set in ``preexec_fn`` (memory) and core dumps off, and a marker in its environment
that every descendant inherits. After it exits, anything still alive in its process group or
carrying the marker is a survivor (then killed), and anything in ``tmp/`` or a temporary file in
``cache/`` is a leftover. Peak memory is the main process's VmHWM, sampled until it exits (peak_rss_mb).
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import hostile, surfaces
from .checks import classify, leftover_files
from .generate import Case

CLI = [sys.executable, "-m", "traceparse.cli"]
# address space (RLIMIT_AS), not resident memory: traceparse maps about 2.2 GB before it loads anything
# (DuckDB, pyarrow and their thread pools reserve more than they touch); resident memory is bounded
# per case (Case.max_rss_mb)
MEM_LIMIT_MB = 4096
# another checkout's traceparse to run instead of the installed one (its folder, put first on PYTHONPATH;
# it needs traceparse/analyzers and traceparse/rules importable there): scripts/mutation_campaign.py --pythonpath,
# or $TRACEPARSE_MUTATION_PYTHONPATH for the pytest sample
PYTHONPATH: str | None = os.environ.get("TRACEPARSE_MUTATION_PYTHONPATH") or None
_spawn_lock = threading.Lock()


@dataclass
class Proc:
    """What one command did."""

    args: list
    rc: int | None = None  # exit code; negative: killed by that signal
    timed_out: bool = False
    elapsed: float = 0.0
    max_rss_mb: float = 0.0
    stdout: bytes = b""
    stderr: str = ""
    survivors: list = field(default_factory=list)  # command lines of processes left running
    signal_sent: int | None = None
    signal_at: float | None = None


@dataclass
class Result:
    id: str
    cls: str
    op: str
    description: str
    outcome: str
    detail: str
    rc: int | None
    elapsed: float
    max_rss_mb: float
    stderr: str
    flags: list
    leftovers: list
    survivors: list
    events: int | None = None
    issues: list | None = None
    folder: str | None = None


class Sandbox:
    """The folders and environment of one case."""

    def __init__(self, root: Path, case: Case):
        self.dir = Path(root) / case.id
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.inp, self.tmp, self.cache, self.xdg = (self.dir / p for p in ("in", "tmp", "cache", "xdg"))
        for p in (self.inp, self.tmp, self.cache, self.xdg):
            p.mkdir(parents=True)
        self.marker = f"TRACEPARSE_MUTATION_CASE={uuid.uuid4().hex}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACEPARSE_", "PYTEST_"))}
        self.env.update({"TMPDIR": str(self.tmp), "TEMP": str(self.tmp), "TMP": str(self.tmp),
                         "TRACEPARSE_CACHE": str(self.cache), "XDG_CACHE_HOME": str(self.xdg),
                         "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"})
        if PYTHONPATH:
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [PYTHONPATH, self.env.get("PYTHONPATH")]))
        k, v = self.marker.split("=", 1)
        self.env[k] = v
        self.write(case)

    def write(self, case: Case):
        for rel, data in case.files.items():
            p = self.inp / rel
            if data is None:
                p.mkdir(parents=True, exist_ok=True)
                continue
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        for rel, target in case.links.items():
            p = self.inp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target.replace("{in}", str(self.inp)), p)
        surfaces.make_nodes(self.inp, case.nodes)
        for rel in case.fifos:
            p = self.inp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            os.mkfifo(p)

    def args(self, case: Case) -> list:
        return [a.replace("{in}", str(self.inp)) for a in case.args]

    @property
    def cwd(self) -> Path:
        return self.inp


def spawn(cmd, sb: Sandbox, mem_limit_mb: int, tag: str):
    limit = mem_limit_mb << 20

    def limits():  # in the child, before exec: only C calls
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    out = open(sb.dir / f"{tag}.stdout", "wb")  # noqa: SIM115 -- closed by finish()
    err = open(sb.dir / f"{tag}.stderr", "wb")  # noqa: SIM115
    with _spawn_lock:
        p = subprocess.Popen(cmd, cwd=sb.cwd, env=sb.env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                             start_new_session=True, preexec_fn=limits)
    p._files = (out, err)  # type: ignore[attr-defined]
    return p


def peak_rss_mb(pid: int) -> float:
    """The process's own peak resident memory (VmHWM of its address space), 0 once it is gone.

    Not wait4's ru_maxrss: Linux carries the pre-exec peak of a forked child into it, and a child
    forked from a large harness (the full campaign holds its cases, about 1 GB) would show that."""
    try:
        with open(f"/proc/{pid}/status") as f:
            m = re.search(r"VmHWM:\s+(\d+)", f.read())
    except OSError:
        return 0.0
    return int(m[1]) / 1024 if m else 0.0


def wait(p, timeout: float, tick=None) -> tuple[int, float, bool]:
    """Wait for ``p``, sampling its peak memory (peak_rss_mb) until it exits; kill its group past
    ``timeout``. Returns (exit code, peak RSS in MB, timed out)."""
    t0 = time.monotonic()
    delay = 0.005
    timed_out = False
    peak = 0.0
    while True:
        peak = max(peak, peak_rss_mb(p.pid))
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        elapsed = time.monotonic() - t0
        if elapsed > timeout:
            timed_out = True
            _killpg(p.pid)
            pid, status, ru = os.wait4(p.pid, 0)
            break
        if tick is not None:
            tick(elapsed)
        time.sleep(delay)
        delay = min(delay * 1.5, 0.05)
    p.returncode = os.waitstatus_to_exitcode(status)
    for f in p._files:
        f.close()
    return p.returncode, peak, timed_out


def _killpg(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def group(pgid: int, marker: bytes, exclude=()) -> list[int]:
    """Live (not zombie) processes in process group ``pgid`` or whose environment holds ``marker``."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    me = os.getpid()
    for d in entries:
        if not d.isdigit():
            continue
        pid = int(d)
        if pid == me or pid in exclude:
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
            rest = stat[stat.rindex(b")") + 2 :].split()
            if rest[0] in (b"Z", b"X"):
                continue
            mine = int(rest[2]) == pgid
            if not mine:
                with open(f"/proc/{d}/environ", "rb") as f:
                    mine = marker in f.read()
        except (OSError, ValueError, IndexError):
            continue
        if mine:
            found.append(pid)
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def survivors(pgid: int, sb: Sandbox, grace: float) -> list[str]:
    """Processes of the case still alive after ``grace`` seconds; they are killed."""
    marker = sb.marker.encode()
    deadline = time.monotonic() + grace
    alive = group(pgid, marker)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = group(pgid, marker)
    lines = [f"{pid} {cmdline(pid)}" for pid in alive]
    for _ in range(3):
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _killpg(pgid)
        time.sleep(0.05)
        alive = group(pgid, marker)
        if not alive:
            break
    return lines


def execute(case: Case, sb: Sandbox, tag: str, *, mem_limit_mb: int, grace: float, tick=None, timeout=None,
            args=None) -> Proc:
    args = [a.replace("{in}", str(sb.inp)) for a in args] if args is not None else sb.args(case)
    if args and args[0].endswith(".py"):  # a setting-up script of the case's own (hostile.PARQUET_STORE)
        command = [sys.executable, *args]
    else:
        command = ([sys.executable, *case.program] if case.program and tag == "run" else CLI) + args
    p = spawn(command, sb, mem_limit_mb, tag)
    proc = Proc(args=args)
    t0 = time.monotonic()
    rc, rss, timed_out = wait(p, timeout or case.timeout, tick=(lambda el: tick(p, proc, el)) if tick else None)
    proc.elapsed = round(time.monotonic() - t0, 3)
    proc.rc, proc.max_rss_mb, proc.timed_out = rc, round(rss, 1), timed_out
    proc.survivors = survivors(p.pid, sb, grace)
    proc.stdout = (sb.dir / f"{tag}.stdout").read_bytes()
    proc.stderr = (sb.dir / f"{tag}.stderr").read_bytes().decode("utf-8", "replace")
    return proc


def run_case(case: Case, root, *, baseline=None, mem_limit_mb: int = MEM_LIMIT_MB, grace: float = 2.0,
             keep: bool = False) -> Result:
    """Run ``case`` under ``root`` and judge it; ``baseline``: the control's load issue signatures."""
    sb = Sandbox(Path(root), case)
    before = {rel: (sb.inp / rel).read_bytes() for rel in case.preserve}
    mem_limit_mb = case.action_args.get("mem_limit_mb", mem_limit_mb)  # charts (V8) reserve more (surfaces.CHARTS)
    state: dict = {}
    try:
        for k, args in enumerate(case.action_args.get("before", ())):  # setting up: e.g. a store to name
            first = execute(case, sb, f"before{k}", mem_limit_mb=mem_limit_mb, grace=grace, args=args)
            if first.rc != 0:
                raise RuntimeError(f"setting up, {' '.join(args)} exited {first.rc}: {first.stderr.strip()[-300:]}")
        hostile_state = hostile.prepare(case, sb)  # after the setting-up commands: their environment is the usual
        state = surfaces.prepare(case, sb)
        if case.action == "kill":
            procs, extra = _kill(case, sb, mem_limit_mb, grace)
        elif case.action == "cache":
            procs, extra = _cache(case, sb, mem_limit_mb, grace)
        else:
            procs, extra = [execute(case, sb, "run", mem_limit_mb=mem_limit_mb, grace=grace)], {}
        changed = [rel for rel, data in before.items()
                   if not (sb.inp / rel).is_file() or (sb.inp / rel).read_bytes() != data]
        left = leftover_files(sb.tmp, sb.cache) + extra.get("leftovers", [])
        verdict = classify(case, procs, baseline=baseline, leftovers=left, changed=changed,
                           mem_limit_mb=mem_limit_mb, note=extra.get("note"),
                           found=surfaces.judge(case, sb, procs[-1], state)
                           + hostile.judge(case, sb, procs[-1], hostile_state))
    finally:
        surfaces.release(state)
        if not keep:
            shutil.rmtree(sb.dir, ignore_errors=True)
    last = procs[-1]
    return Result(case.id, case.cls, case.op, case.description, verdict.outcome, verdict.detail, last.rc,
                  round(sum(p.elapsed for p in procs), 2), max(p.max_rss_mb for p in procs), last.stderr[-2000:],
                  verdict.flags, left, [s for p in procs for s in p.survivors], verdict.events, verdict.issues,
                  str(sb.dir) if keep else None)


# --- actions -------------------------------------------------------------------------------

def _kill(case: Case, sb: Sandbox, mem_limit_mb: int, grace: float):
    """Signal the main process mid-load; wait ``grace`` for its helpers to go; run again."""
    sig, mode, delay = case.action_args["signal"], case.action_args["mode"], case.action_args["delay"]
    state = {"helpers_at": None}
    marker = sb.marker.encode()

    def tick(p, proc, elapsed):
        if proc.signal_sent is not None:
            return
        due = elapsed >= delay
        if mode == "after_helpers":
            if state["helpers_at"] is None:
                if group(p.pid, marker, exclude=(p.pid,)):
                    state["helpers_at"] = elapsed
                due = elapsed >= 10.0  # no helpers: a late kill anyway
            else:
                due = elapsed - state["helpers_at"] >= delay
        if due:
            try:
                os.kill(p.pid, sig)
                proc.signal_sent, proc.signal_at = sig, round(elapsed, 3)
            except ProcessLookupError:
                pass

    first = execute(case, sb, "killed", mem_limit_mb=mem_limit_mb, grace=case.action_args.get("grace", 3.0),
                    tick=tick, timeout=60)
    note = (f"signal {sig} sent at {first.signal_at}s" if first.signal_sent else
            f"the command exited (rc {first.rc}) before the signal")
    left = leftover_files(sb.tmp, sb.cache)
    if left:  # acceptable if the next run cleans them up
        note += f"; after it: {', '.join(left[:3])}"
    second = execute(case, sb, "run", mem_limit_mb=mem_limit_mb, grace=grace)
    return [first, second], {"note": note}


def _cache(case: Case, sb: Sandbox, mem_limit_mb: int, grace: float):
    first = execute(case, sb, "first", mem_limit_mb=mem_limit_mb, grace=grace)
    entries = sorted(p for p in sb.cache.rglob("*.duckdb") if p.is_file())
    if first.rc not in (0, 1) or not entries:
        return [first], {"note": "first run failed" if first.rc not in (0, 1) else "no cache entry to damage"}
    damage = case.action_args["damage"]
    _damage(entries[0], damage, random.Random(case.action_args.get("seed", 0)))
    second = execute(case, sb, "run", mem_limit_mb=mem_limit_mb, grace=grace)
    return [first, second], {"note": f"cache entry {entries[0].name} damaged: {damage}"}


def _damage(path: Path, how: str, rng: random.Random):
    size = path.stat().st_size
    if how == "truncate_zero":
        path.write_bytes(b"")
    elif how == "truncate_part":
        os.truncate(path, int(size * rng.uniform(0.05, 0.95)))
    elif how in ("garbage_header", "garbage_block", "zero_block"):
        n = 65536 if how == "zero_block" else 4096
        at = 0 if how == "garbage_header" else rng.randrange(4096, max(4097, size - n))
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(bytes(n) if how == "zero_block" else rng.randbytes(n))
    elif how == "text_file":
        path.write_bytes(b"this is not a database\n")
    elif how == "directory":
        path.unlink()
        path.mkdir()
        (path / "x").write_bytes(b"x")
    elif how == "dangling_symlink":
        path.unlink()
        os.symlink(path.name + ".missing", path)
    elif how == "stale_wal":
        Path(str(path) + ".wal").write_bytes(rng.randbytes(4096))
    elif how in ("empty_duckdb", "foreign_store"):
        import duckdb

        path.unlink()
        con = duckdb.connect(str(path))
        if how == "empty_duckdb":
            con.execute("CREATE TABLE t (x INTEGER)")
        else:
            con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
            con.execute("INSERT INTO meta VALUES ('key', 'not-this-key'), ('schema', '0')")
        con.close()
    elif how == "stale_tmp_dead_pid":
        pid = _dead_pid(rng)
        tmp = path.with_name(f".{path.name}.{pid}.tmp")
        tmp.write_bytes(rng.randbytes(8192))
        Path(str(tmp) + ".wal").write_bytes(rng.randbytes(512))
    else:
        raise ValueError(how)


def _dead_pid(rng) -> int:
    while True:
        pid = rng.randrange(100000, 4000000)
        if not os.path.exists(f"/proc/{pid}"):
            return pid


def save_case(case: Case, folder: Path):
    """The case's inputs and a case.json saying how to reproduce it, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    sb_in = folder / "in"
    if sb_in.exists():
        shutil.rmtree(sb_in)
    Sandbox.write(type("S", (), {"inp": sb_in})(), case)  # write the files only
    prog = f"python {case.program[0]} " if case.program else "python -m traceparse.cli "
    cmd = prog + " ".join(_quote(a.replace("{in}", ".")) for a in case.args)
    for args in case.action_args.get("before", ()):
        run = "python " if args[0].endswith(".py") else "python -m traceparse.cli "
        cmd = run + " ".join(_quote(a.replace("{in}", ".")) for a in args) + " && " + cmd
    info = case.summary()
    env = "export TMPDIR=$(mktemp -d) TRACEPARSE_CACHE=$(mktemp -d)"
    if case.action == "kill":
        a = case.action_args
        when = (f"{a['delay']}s after its worker processes appear" if a["mode"] == "after_helpers"
                else f"{a['delay']}s after it starts")
        info["reproduce"] = (f"cd in && {env} && ({cmd} &) # send signal {a['signal']} to it {when}; "
                             f"wait 3s: nothing may run on; {cmd} # then nothing may be left in $TMPDIR or *.tmp in the cache")
    elif case.action == "cache":
        info["reproduce"] = (f"cd in && {env} && {cmd} > /dev/null; # damage $TRACEPARSE_CACHE/*.duckdb: "
                             f"{case.action_args['damage']} (tests/mutation/run.py _damage); {cmd}")
    else:
        info["reproduce"] = f"cd in && {env} && {cmd}"
    if case.action_args.get("hostile"):  # its environment and the store's damage: tests/mutation/hostile.py prepare
        info["reproduce"] += " # after the setting-up commands, with action_args.hostile applied (hostile.prepare)"
    (folder / "case.json").write_text(json.dumps(info, indent=2, default=str))


def _quote(a: str) -> str:
    return shlex.quote(a.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))
