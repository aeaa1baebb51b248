"""--engine ray's failure modes: an address where Ray does not answer (nothing listens, something else does, a
silent listener, a dead cluster named by RAY_ADDRESS or by the last ``ray start``) is one line on stderr and exit 2
within seconds; without an address a fresh Ray instance of this machine is started, whatever the last ``ray
start`` left, and nothing of it stays behind (its folder, a token in ~/.ray, its processes), nor after a load
killed mid-way (the next load removes its folder)."""

import http.server
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

if importlib.util.find_spec("ray") is None:  # found, not imported: its import takes a second or more
    pytest.skip("the ray extra is not installed (pip install 'traceparse[ray]')", allow_module_level=True)
import psutil  # noqa: E402 -- a dependency of Ray
from test_ray_engine import end_processes  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "fixtures" / "runs" / "ddp2"
COMMAND = [sys.executable, "-m", "traceparse.cli", "analyze", "--no-cache", "--format", "json", "-q"]


@pytest.fixture
def tmp():
    """The temporary folder of the traceparse processes: short, as a user's usually is (Ray's socket paths in it
    must fit in 107 bytes), and made for the test; their processes are ended and it is removed after it."""
    folder = Path(tempfile.mkdtemp(prefix="tph", dir="/tmp"))
    home(folder).mkdir()
    yield folder
    end_processes(str(folder))
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(home(folder), ignore_errors=True)


def home(tmp: Path) -> Path:
    return tmp.with_name(f"{tmp.name}-home")


def environ(tmp: Path, **more) -> dict:
    """An environment without Ray's settings (RAY_ADDRESS...), with ``tmp`` as TMPDIR and a home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "TMPDIR": str(tmp), "HOME": str(home(tmp)), **more}


def analyze(tmp: Path, *args, **env):
    """(exit code, stdout, stderr, seconds) of ``traceparse analyze --no-cache --format json -q ARGS ddp2``."""
    start = time.monotonic()
    r = subprocess.run([*COMMAND, *args, str(RUN)], capture_output=True, text=True, timeout=300,
                       env=environ(tmp, **env))
    return r.returncode, r.stdout, r.stderr, time.monotonic() - start


def one_error_line(stderr: str, where: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"traceparse: error: {where}: "), stderr[-2000:]
    return lines[0]


def left_behind(tmp: Path) -> list:
    """What a load left: files under ``tmp`` and the home (a token in ~/.ray), live processes naming ``tmp``."""
    deadline = time.monotonic() + 10  # Ray's processes may take a moment to end
    while (procs := naming(tmp)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return sorted(str(p) for p in [*tmp.rglob("*"), *home(tmp).rglob("*")]) + procs


def naming(folder: Path) -> list:
    return [p.pid for p in psutil.process_iter(["cmdline"]) if str(folder) in " ".join(p.info["cmdline"] or ())]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def web_server():
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_web_server_at_the_address_is_one_line_in_seconds(tmp):
    """Ray's driver retried for as long as it ran (over 200 s), warning on stderr all along."""
    with web_server() as address:
        code, out, err, seconds = analyze(tmp, "--engine", "ray", "--address", address)
    assert code == 2 and out == "" and seconds < 60
    assert "answers, but not as Ray (gRPC) does" in one_error_line(err, address)
    assert left_behind(tmp) == []


def test_a_listener_that_never_answers_is_one_line_in_seconds(tmp):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        code, out, err, seconds = analyze(tmp, "--engine", "ray", "--address", address)
    assert code == 2 and out == "" and seconds < 60
    assert one_error_line(err, address).endswith("no Ray cluster to connect to: timed out")


def test_a_dead_cluster_named_by_ray_address_or_the_last_ray_start_is_one_line(tmp):
    """RAY_ADDRESS stands for --address; ``auto`` finds the address the last ``ray start`` wrote (under Ray's
    temporary folder, $TMPDIR/ray), whose cluster died without ``ray stop``."""
    dead = f"127.0.0.1:{_free_port()}"
    code, out, err, seconds = analyze(tmp, "--engine", "ray", RAY_ADDRESS=dead)
    assert code == 2 and out == "" and seconds < 60
    assert one_error_line(err, dead).endswith("no Ray cluster to connect to: Connection refused")
    (tmp / "ray").mkdir()
    (tmp / "ray" / "ray_current_cluster").write_text(dead)
    code, out, err, seconds = analyze(tmp, "--engine", "ray", "--address", "auto")
    assert code == 2 and out == "" and seconds < 60
    assert one_error_line(err, "auto").endswith("no Ray cluster to connect to: Connection refused")


def test_a_local_instance_is_fresh_and_leaves_nothing_behind(tmp):
    """Without --address: a Ray instance of this machine, started even though the last ``ray start`` recorded a
    cluster (dead since), which Ray's own default would have tried for ever; the same document as the local
    pool. After it, nothing but that record: no session folder (44 files were left under $TMPDIR/ray), no token
    written to ~/.ray (which would turn authentication on for the next ``ray start``), no process."""
    (tmp / "ray").mkdir()
    (tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{_free_port()}")
    code, local, err, _ = analyze(tmp)
    assert code == 0, err
    code, out, err, _ = analyze(tmp, "--engine", "ray")
    assert code == 0 and out == local, err[-2000:]
    assert left_behind(tmp) == [str(tmp / "ray"), str(tmp / "ray" / "ray_current_cluster")]


def test_what_a_killed_load_left_is_removed_by_the_next(tmp):
    """A load killed (SIGKILL) while its Ray instance starts leaves its folder (traceparse-<pid>-*): the next
    load, once that process is gone, removes it."""
    job = subprocess.Popen([*COMMAND, "--engine", "ray", str(RUN)], env=environ(tmp),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp.glob(f"traceparse-{job.pid}-*/session_*/logs")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert job.poll() is None, "the load ended before its Ray instance was seen"
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    assert list(tmp.glob(f"traceparse-{job.pid}-*/session_*"))
    end_processes(str(tmp))  # as Ray's reaper does, the agents only in a minute
    code, _, err, _ = analyze(tmp)
    assert code == 0, err
    assert not list(tmp.glob(f"traceparse-{job.pid}-*"))


def test_the_local_instance_folder_fits_ray_sockets(monkeypatch):
    """Under a temporary folder too long for Ray's socket paths (107 bytes), the instance's folder goes to /tmp,
    where remove_stale_leftovers also looks after a killed load."""
    from traceparse.load import run as load, ray_engine

    long = Path(tempfile.mkdtemp(prefix="x" * 60, dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    folder = Path(ray_engine._ray_temp_dir())
    short = Path(tempfile.mkdtemp(prefix="tps", dir="/tmp"))
    try:
        assert folder.parent == Path("/tmp") and folder.name.startswith(f"traceparse-{os.getpid()}-")
        monkeypatch.setattr(tempfile, "tempdir", str(short))
        assert Path(ray_engine._ray_temp_dir()).parent == short
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(short, ignore_errors=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = Path(f"/tmp/traceparse-{dead.pid}-ray") / "session_x"
    stale.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    load.remove_stale_leftovers()
    shutil.rmtree(long)
    assert not stale.parent.exists()
