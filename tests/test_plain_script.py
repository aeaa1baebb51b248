"""The Python API works from a plain script, one without an `if __name__ == "__main__":` guard.

Loading several files parses them on a process pool; pools whose workers re-run the caller's
main script (multiprocessing's forkserver and spawn) broke such scripts with BrokenProcessPool.
Each script runs in a fresh interpreter, as a user would run it: `python script.py`.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
DDP4 = REPO / "fixtures" / "runs" / "ddp4"  # 4 rank files
TRUTH = json.loads((DDP4 / "truth.json").read_text())

SCRIPTS = {
    "analyze": (
        "import traceparse\n"
        f"doc = traceparse.analyze([{str(DDP4)!r}], use_cache=False)\n"
        'print("dp =", doc["layout"]["dp"])\n'
    ),
    "frame": (
        "from traceparse.load.frames import frame\n"
        "df = frame('SELECT count(*) AS n, count(DISTINCT rank) AS ranks FROM comm_ops', "
        f"[{str(DDP4)!r}], use_cache=False)\n"
        'print("comm_ops =", df["n"][0], "ranks =", df["ranks"][0])\n'
    ),
    # the pool whatever the machine's core count
    "load_run": (
        "from traceparse.load.run import connect, load_run\n"
        f"path, _ = load_run([{str(DDP4)!r}], db='store.duckdb', workers=2)\n"
        "con = connect(path)\n"
        'print("ranks =", con.execute("SELECT count(DISTINCT rank) FROM comm_ops").fetchone()[0])\n'
    ),
}
EXPECTED = {
    "analyze": f"dp = {TRUTH['layout']['dp']}",  # 4
    # truth.json counts operations per rank and profiled step: one all_reduce each, 2 steps -> 8
    "frame": f"comm_ops = {sum(c['count'] for c in TRUTH['comm']) * TRUTH['profiled_steps']} "
    f"ranks = {TRUTH['world_size']}",
    "load_run": f"ranks = {TRUTH['world_size']}",
}


@pytest.mark.parametrize("api", sorted(SCRIPTS))
def test_unguarded_script_loads_several_files(api, tmp_path):
    assert len(sorted(DDP4.glob("rank*.json.gz"))) == 4, "the fixture run must have several files to use the pool"
    script = tmp_path / f"plain_{api}.py"
    script.write_text(SCRIPTS[api])
    # the same interpreter and environment as the tests: it imports the same traceparse
    env = dict(os.environ, TRACEPARSE_CACHE=str(tmp_path / "cache"))
    r = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert r.returncode == 0, r.stderr
    assert "BrokenProcessPool" not in r.stderr
    assert r.stdout.strip() == EXPECTED[api], r.stdout + r.stderr
