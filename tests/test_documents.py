"""Every bundled run's analyze document is the one recorded in tests/documents.json (written by ``python
scripts/documents.py --write tests/documents.json``): moving work between the parse tasks and the store, or making
the loader faster, changes no number a user reads. The digests were first written on the design that copied every
event into the store; a change that adds to the document writes them again, after checking that the document
without the addition still has the recorded digest."""

import json
import sys
from pathlib import Path

import pytest
from conftest import public_trace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import documents  # noqa: E402

EXPECTED = json.loads((ROOT / "tests" / "documents.json").read_text())
RUNS = documents.runs()
QUICK = ("runs/ddp2", "runs/pp4_1f1b_m4", "public/hta/nccl_parser_config/nccl_data.json.gz")


def test_every_bundled_run_has_a_digest():
    assert sorted(RUNS) == sorted(EXPECTED)


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in QUICK else [pytest.mark.slow]) for n in RUNS])
def test_document_unchanged(name):
    if name.startswith("public/"):
        public_trace(name.removeprefix("public/"))  # skips, saying so, without the public traces
    got, text = documents.digest(RUNS[name])
    if got != EXPECTED[name]:
        recorded = documents.kept(name, ROOT / "tests" / "documents.json")
        moved = documents.differences(json.loads(recorded.read_text()), json.loads(text)) if recorded.exists() else []
        pytest.fail(f"{name}: the analyze document changed" + "".join(f"\n  {m}" for m in moved)
                    + f"\nsee it whole with python scripts/documents.py --only {name} --write /tmp/d.json")
