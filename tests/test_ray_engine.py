"""--engine ray on a real Ray cluster of this machine (started for this module on 127.0.0.1, as a user starts
one, and ended after it): the same analyze document as the local pool, also when a worker is killed mid-parse
(Ray runs the task again), and bad input is bad input as before. Its failure modes: tests/test_ray_hardening.py."""

import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path

import pytest

if importlib.util.find_spec("ray") is None:  # found, not imported: its import takes a second or more
    pytest.skip("the ray extra is not installed (pip install 'traceparse[ray]')", allow_module_level=True)
import psutil  # noqa: E402 -- a dependency of Ray
from conftest import public_trace  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "fixtures" / "runs"
BIG = "hta/df_index_resolver/df_index_resolver.json.gz"  # 54 MB of JSON, a public trace (conftest.public_trace)
RAY = Path(sys.executable).with_name("ray")
sys.path.insert(0, str(REPO / "bench"))
import replicate  # noqa: E402 -- bench/ is no package

pytestmark = pytest.mark.slow

HOME = {}  # the cluster's home (below), which the drivers share


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def end_processes(marker: str) -> None:
    """End the processes whose command line names ``marker`` (a folder of their own) and their children: unlike
    ``ray stop``, no other Ray of this machine."""
    procs = [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or ())]
    for p in list(procs):
        with suppress(psutil.Error):
            procs += p.children(recursive=True)
    for p in procs:
        with suppress(psutil.Error):
            p.kill()  # as ray stop --force
    psutil.wait_procs(procs, timeout=10)


@pytest.fixture(scope="module")
def cluster():
    """``ray start --head --node-ip-address 127.0.0.1`` with a home of its own holding ~/.ray/auth_token, as any
    earlier Ray run here leaves one: Ray then turns token authentication on, and a driver given the address must
    bring the token (the home is the drivers' too). Ray writes under a short folder of its own (its socket paths
    must fit in 107 bytes), which names its processes: they alone are ended after the module."""
    root = Path(tempfile.mkdtemp(prefix="tpc", dir="/tmp"))
    token = root / "home" / ".ray" / "auth_token"
    token.parent.mkdir(parents=True)
    token.write_text(secrets.token_hex(32))
    HOME["HOME"] = str(root / "home")
    port = _free_port()
    start = [str(RAY), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", "2",
             "--object-store-memory", str(100 << 20), "--include-dashboard", "false", "--disable-usage-stats",
             "--temp-dir", str(root / "ray")]
    try:
        subprocess.run(start, check=True, capture_output=True, timeout=180, env=environ())
        yield f"127.0.0.1:{port}"
    finally:
        end_processes(str(root))
        shutil.rmtree(root, ignore_errors=True)
        HOME.clear()


def environ(**more) -> dict:
    """This process's environment without Ray's settings (RAY_ADDRESS, RAY_AUTH_MODE...), in the cluster's home."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")}, **HOME, **more}


def analyze(paths, *engine, **env):
    """(exit code, the document or the error line) of ``traceparse analyze --no-cache --format json -q`` run in a
    process of its own: a Ray driver whose cluster goes away may end its process, which must not be the tests'.
    A driver that Ray's own code ended (its connection to the cluster lost on a loaded machine: exit 1, no line of
    traceparse's) is run once more, and what it printed is kept for the assertion's message if that fails too."""
    for attempt in range(2):
        r = subprocess.run([sys.executable, "-m", "traceparse.cli", "analyze", "--no-cache", "--format", "json",
                            "-q", *engine, *map(str, paths)], capture_output=True, text=True, timeout=900,
                           env=environ(**env))
        said = "\n".join(line for line in r.stderr.splitlines() if line.startswith("traceparse: "))
        if not (r.returncode == 1 and not said and "--engine" in engine and attempt == 0):
            break
    if r.returncode:
        return r.returncode, said or r.stderr[-3000:]
    return r.returncode, r.stdout


@pytest.mark.parametrize("run", ["ddp2", "dp2_pp2_tp2", "fsdp2_zero3_dp4", "dp4_ep2"])
def test_ray_and_the_local_pool_give_the_same_document(cluster, run):
    local = analyze([RUNS / run])
    assert local[0] == 0
    assert analyze([RUNS / run], "--engine", "ray", "--address", cluster) == local


def test_a_64_rank_replica_gives_the_same_document(cluster, tmp_path):
    """dp2 x pp2 x tp2 made eight times wider (dp16 x pp2 x tp2, 64 files): the same document both ways."""
    replicate.replicate(RUNS / "dp2_pp2_tp2", tmp_path / "run", 64, seed=3)
    local = analyze([tmp_path / "run"])
    assert local[0] == 0 and json.loads(local[1])["run"]["world_size"] == 64
    assert analyze([tmp_path / "run"], "--engine", "ray", "--address", cluster) == local


def test_a_worker_killed_mid_parse_gives_the_same_result(cluster, tmp_path):
    """The worker parsing the 54 MB trace is killed (SIGKILL) while it parses: Ray runs the task again."""
    shutil.copy(public_trace(BIG), tmp_path / "rank0.json.gz")
    code, local = analyze([tmp_path])
    assert code == 0
    env = environ(TRACEPARSE_CACHE=str(tmp_path / "cache"))
    job = subprocess.Popen([sys.executable, "-m", "traceparse.cli", "analyze", "--no-cache", "--format", "json", "-q",
                            "--engine", "ray", "--address", cluster, str(tmp_path / "rank0.json.gz")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    killed, deadline = None, time.monotonic() + 120
    while killed is None and job.poll() is None and time.monotonic() < deadline:
        ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
        busy = [int(line.split()[0]) for line in ps if line.split()[1:2] == ["ray::parse_batch"]]
        if busy:
            time.sleep(0.3)  # into the parse
            os.kill(busy[0], signal.SIGKILL)
            killed = busy[0]
        time.sleep(0.05)
    out, err = job.communicate(timeout=300)
    assert killed is not None, "no worker was seen parsing"
    assert job.returncode == 0, err
    assert json.loads(out) == json.loads(local)


def test_a_rank_that_cannot_be_parsed_is_bad_input(cluster, tmp_path):
    shutil.copy(RUNS / "ddp2" / "rank0.json.gz", tmp_path / "rank0.json.gz")
    (tmp_path / "rank1.json").write_text('{"traceEvents": 7}')
    code, out = analyze([tmp_path], "--engine", "ray", "--address", cluster)
    local = analyze([tmp_path])
    assert code == local[0] == 2, (out, local)
    assert out == local[1] and len(out.strip().splitlines()) == 1 and str(tmp_path / "rank1.json") in out


def test_no_cluster_at_the_address_is_one_line(tmp_path):
    shutil.copy(RUNS / "ddp2" / "rank0.json.gz", tmp_path / "rank0.json.gz")
    code, out = analyze([tmp_path], "--engine", "ray", "--address", f"127.0.0.1:{_free_port()}")
    assert code == 2 and len(out.strip().splitlines()) == 1 and "no Ray cluster" in out, out


def test_tasks_not_done_in_time_are_one_line(cluster):
    """Waiting on the tasks is bounded (TRACEPARSE_RAY_TIMEOUT seconds in all): 0 s leaves them undone."""
    code, out = analyze([RUNS / "ddp2"], "--engine", "ray", "--address", cluster, TRACEPARSE_RAY_TIMEOUT="0")
    from traceparse.load.run import batches

    n = len(batches(sorted((RUNS / "ddp2").iterdir()), None))  # one task per batch of files
    assert code == 2 and out == f"traceparse: error: {cluster}: {n} of {n} Ray tasks not done after 0 s " \
        "(TRACEPARSE_RAY_TIMEOUT): are the cluster's nodes up, with CPUs free?", out
    code, out = analyze([RUNS / "ddp2"], "--engine", "ray", "--address", cluster, TRACEPARSE_RAY_TIMEOUT="soon")
    assert code == 2 and out == "traceparse: error: TRACEPARSE_RAY_TIMEOUT: not a number of seconds: 'soon'", out
