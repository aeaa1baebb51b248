"""The public GPU traces are other projects' files: none is in the repository, one place finds them
(fixtures/public_traces.py), a test that needs a missing one skips with one line, CI refuses to run without them,
and the fetch script gets each from its repository, checked against the manifest's SHA-256."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REQUIRE_PUBLIC, public_trace

from fixtures import public_traces

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import fetch_public_traces as fetch  # noqa: E402


def tracked() -> list[str]:
    return subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")


def test_no_public_trace_is_in_the_repository():
    """Nothing under fixtures/public, and no tracked file has the bytes of a public trace or of the JSON inside one."""
    files = [f for f in tracked() if f]
    if not files:
        pytest.skip("not a git checkout")
    assert not [f for f in files if f.startswith("fixtures/public/")]
    digests = {t["sha256"] for t in public_traces.manifest()["trace"]}
    for f in files:
        path = ROOT / f
        if path.is_file() and path.stat().st_size > 1024:
            assert hashlib.sha256(path.read_bytes()).hexdigest() not in digests, f


def test_the_manifest_names_each_trace_once_with_its_source_and_license():
    m = public_traces.manifest()
    names = public_traces.names()
    assert len(names) == len(set(names)) >= 16
    for t in m["trace"]:
        assert {"file", "repo", "path", "commit", "sha256", "notable"} <= t.keys(), t["file"]
        assert len(t["sha256"]) == 64 and t["repo"] in m["licenses"]
        assert fetch.url(t) == f"https://github.com/{t['repo']}/raw/{t['commit']}/{t['path']}"


@pytest.mark.parametrize("rel", public_traces.names())
def test_each_public_trace_is_the_manifests(rel):
    """The folder in use holds the manifest's files, byte for byte (the JSON inside, for a file gzipped here)."""
    t = public_traces.entry(rel)
    assert fetch.have(public_trace(rel), t)


def test_a_missing_trace_skips_with_one_line_saying_how_to_get_it(tmp_path, monkeypatch):
    rel = "hta/trace_diff/control/control.json.gz"
    monkeypatch.setenv(public_traces.ENV, str(tmp_path))
    monkeypatch.delenv(REQUIRE_PUBLIC, raising=False)
    why = public_traces.missing(rel)
    assert why == (f"public trace {rel} is missing (not in {public_traces.ENV}={tmp_path}): fetch them with "
                   f"`python scripts/fetch_public_traces.py DIR` and set {public_traces.ENV}=DIR")
    with pytest.raises(pytest.skip.Exception, match="fetch_public_traces.py"):
        public_trace(rel)
    monkeypatch.setenv(REQUIRE_PUBLIC, "1")  # as .ci/run sets it: the test fails instead
    with pytest.raises(pytest.fail.Exception, match="is missing"):
        public_trace(rel)


def test_without_env_the_folder_beside_the_checkout(monkeypatch):
    monkeypatch.delenv(public_traces.ENV, raising=False)
    want = public_traces.BESIDE.resolve() if public_traces.BESIDE.is_dir() else None
    assert public_traces.folder() == want
    assert public_traces.BESIDE == ROOT.parent / "shared" / "traces"


def test_ci_stops_at_once_without_the_public_traces(tmp_path):
    """.ci/run in a clone with no ../shared/traces: one line on stderr and exit 1, before it installs anything."""
    clone = tmp_path / "clone"
    (clone / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", clone / ".ci" / "run")
    env = {k: v for k, v in os.environ.items() if k != public_traces.ENV}
    got = subprocess.run(["bash", str(clone / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=30)
    assert got.returncode == 1 and got.stdout == ""
    (line,) = got.stderr.splitlines()
    assert line.startswith(".ci/run: the public traces are missing: no folder ") and "../shared/traces" in line
    assert not (clone / ".venv").exists()


class _Served:
    """urlopen as a repository would answer: the bytes of the manifest's source file, from the traces folder."""

    def __init__(self, by_url: dict[str, bytes]):
        self.by_url, self.asked = by_url, []

    def __call__(self, url, timeout=None):  # noqa: ARG002 -- urlopen's signature
        self.asked.append(url)
        return io.BytesIO(self.by_url[url])


def _served(rels) -> dict[str, bytes]:
    out = {}
    for rel in rels:
        t = public_traces.entry(rel)
        data = public_trace(rel).read_bytes()
        out[fetch.url(t)] = gzip.decompress(data) if t.get("gzip") else data
    return out


def test_fetch_writes_each_file_checked_and_keeps_what_is_there(tmp_path, monkeypatch):
    rels = ["hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "deepseek/dsv3_ep64_dualpipe_rank0.json.gz"]
    served = _Served(_served(rels))
    monkeypatch.setattr(fetch.urllib.request, "urlopen", served)
    for rel in rels:
        assert fetch.fetch(public_traces.entry(rel), tmp_path).startswith("fetched  ")
        assert fetch.have(tmp_path / rel, public_traces.entry(rel))
    # the one served as plain JSON is gzipped here, with the same JSON inside
    assert gzip.decompress((tmp_path / rels[1]).read_bytes()) == gzip.decompress(public_trace(rels[1]).read_bytes())
    assert fetch.fetch(public_traces.entry(rels[0]), tmp_path).startswith("kept     ")
    assert len(served.asked) == 2


def test_fetch_keeps_nothing_of_a_file_whose_checksum_differs(tmp_path, monkeypatch):
    rel = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    t = public_traces.entry(rel)
    monkeypatch.setattr(fetch.urllib.request, "urlopen", _Served({fetch.url(t): b"not the file"}))
    with pytest.raises(ValueError, match="the manifest says"):
        fetch.fetch(t, tmp_path)
    assert not any(tmp_path.rglob("*"))
    assert fetch.main([str(tmp_path), "--only", "cpu_only"]) == 1
