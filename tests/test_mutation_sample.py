"""A seeded sample of the mutation campaign (docs/reliability.md): every case must be ok.

110 damaged traces and command lines over the loading classes (``tests/mutation/generate.py``), and one case
per operator of the newer surfaces (``tests/mutation/surfaces.py``: -o targets, run histories, argument
checks; ``tests/mutation/dumps.py``: hostile Flight Recorder dumps for hang) plus one of the Python API called at
once, and one case per operator of the hostile-input classes (``tests/mutation/hostile.py``: hostile stores, control
characters and Markdown in names, huge metadata numbers, odd characters in paths), each run
as a ``traceparse`` subprocess in its own folders, session and memory limit (``tests/mutation/run.py``)
and judged by ``tests/mutation/checks.py``: exit 0/1 with every lost event or field counted in
load_issues, or exit 2 with one line naming the file; no traceback, no signal, nothing left running
or in $TMPDIR, memory and time bounded. The full campaign is ``scripts/mutation_campaign.py``.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import pytest

from conftest import public_trace
from mutation.bases import PUBLIC_NEEDED
from mutation.campaign import run_cases
from mutation.generate import CLASSES, OPS, generate_cases
from mutation.hostile import HOSTILE_CLASSES
from mutation.surfaces import SURFACE_CLASSES

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc, os.wait4 and RLIMIT_AS")]

SEED = 20251201
CASES = 110  # over the loading classes: every operator met
# the surface classes: one case per operator (one for concurrent, the slow one); about a minute at 2 at a time
SURFACE_CASES = {"output": 10, "history": 9, "arguments": 8, "concurrent": 1, "dump": 9}
# the hostile-input classes: one case per operator; about 40 s at 2 at a time
HOSTILE_CASES = {"store": 5, "control_chars": 4, "markdown": 5, "huge_numbers": 5, "path_chars": 4}
LOADING_CLASSES = [c for c in CLASSES if c not in SURFACE_CLASSES and c not in HOSTILE_CLASSES]
JOBS = int(os.environ.get("TRACEPARSE_MUTATION_JOBS") or min(2, os.cpu_count() or 1))

_state: dict = {"cases": None, "baselines": {}, "results": {}, "controls": {}}


def _sample():
    if _state["cases"] is None:
        _state["cases"] = generate_cases(CASES, SEED, LOADING_CLASSES) + [
            c for cls, n in {**SURFACE_CASES, **HOSTILE_CASES}.items() for c in generate_cases(n, SEED, [cls])]
    return _state["cases"]


@pytest.fixture(scope="module", autouse=True)
def public_bases():
    """Cases start from public traces too: without them the sample skips, saying which is missing."""
    for rel in PUBLIC_NEEDED:
        public_trace(rel)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("mutation")


def results_for(cls: str, work):
    """Run the sample's cases of ``cls`` (and the controls they need, once per module)."""
    if cls not in _state["results"]:
        cases = _sample()
        mine = [c for c in cases if c.cls == cls]
        keys = {c.baseline for c in mine if c.baseline}
        controls = [c for c in cases if c.cls == "control" and (cls == "control" or c.action_args["key"] in keys)]
        results = run_cases(controls + mine, work, jobs=JOBS, baselines=_state["baselines"])
        _state["controls"].update((r.id, r) for r in results if r.cls == "control")
        _state["results"][cls] = [r for r in results if r.cls == cls]
    if cls == "control":
        return list(_state["controls"].values())
    return _state["results"][cls]


@pytest.mark.parametrize("cls", ["control", *CLASSES])
def test_mutation_class(cls, work):
    results = results_for(cls, work)
    assert results, f"the sample has no {cls} case"
    bad = [r for r in results if r.outcome != "ok"]
    tally = Counter(r.outcome for r in bad)
    lines = [f"{len(bad)} of {len(results)} {cls} cases fail ({', '.join(f'{k} {v}' for k, v in tally.items())}):"]
    lines += [f"  {r.id} [{r.op}] {r.outcome}: {r.detail[:300]}\n      case: {r.description[:200]}" for r in bad[:12]]
    assert not bad, "\n".join(lines)


def test_sample_meets_every_operator():
    """Every operator but those of ``concurrent`` (one case: the full campaign meets them all)."""
    met = {(c.cls, c.op) for c in _sample()}
    missing = {(cls, name) for cls, ops in OPS.items() if cls != "concurrent" for name, _ in ops} - met
    assert not missing, f"operators the sample never uses: {sorted(missing)}"
    assert set(SURFACE_CASES) == set(SURFACE_CLASSES)
    assert set(HOSTILE_CASES) == set(HOSTILE_CLASSES)
