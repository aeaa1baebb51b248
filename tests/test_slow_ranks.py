"""A seeded sample of the slow-rank campaign (scripts/slow_ranks.py): real runs, generated here, with one rank made
slow in one place, and the balanced twin of each job. The whole campaign (every place, with a busy host) is the
script; this runs two of its slow runs with their twins (``TRACEPARSE_SAMPLE_SEED`` picks them; about a minute).

Expected from the construction, not from the tool: the rank made slow (a pipeline's: its stage) and the kind of its
slowness (extra matmuls: its own work; a slower data loader: its input)."""
import importlib.util
import json
import os
import random
from pathlib import Path

import pytest

from fixtures.configs import CAMPAIGN

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slow_ranks.py"
GRADED = ("work", "stall", "input")  # kinds a check grades; a twin on a loaded host may show "slower", its host's


def _script():
    spec = importlib.util.spec_from_file_location("slow_ranks", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sample() -> list[str]:
    seed = int(os.environ.get("TRACEPARSE_SAMPLE_SEED", "40"))
    return random.Random(seed).sample(sorted(n for n in CAMPAIGN if not n.endswith("_busy")), 2)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("slow_ranks")
    got = out / "got.json"
    _script().main(["--out", str(out / "runs"), "--only", *_sample(), "--json", str(got)])
    return json.loads(got.read_text())


@pytest.mark.parametrize("pick", [0, 1])
def test_the_slow_rank_is_named_with_its_kind(campaign, pick):
    name = _sample()[pick]
    want = _script().expected(name)
    got = [w for w in campaign["windows"] if w["run"] == name]
    assert got, name
    assert {w["cause"] for w in got} <= {want["cause"], None}, got  # never another rank
    assert any(w["cause"] == want["cause"] and w["kind"] == want["kind"] for w in got), got


def test_no_rank_is_named_in_a_balanced_twin(campaign):
    twins = [w for w in campaign["windows"] if w["expected"] is None]
    assert twins
    assert all(w["cause"] is None or w["kind"] not in GRADED for w in twins), twins


def test_compare_gates_the_slow_run_and_no_slow_rank_in_the_twin(campaign):
    """A twin's two windows gate no slow rank or stage; what its busy host moved between them (a strategy's cost,
    the step time) is not what the construction controls (scripts/slow_ranks.py, SLOW_RANK_GATES)."""
    for c in campaign["compares"]:
        if c["want"] == 0:
            assert c["slow_rank_gates"] == [], f"{c['base']} -> {c['new']}: gated {c['regressions']}"
    for name in _sample():
        assert any(c["exit"] == 1 for c in campaign["compares"] if c["new"][0] == name), name
