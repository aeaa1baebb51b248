"""``traceparse explain`` opens every metric and check with what its number means in plain words
(traceparse/document/meaning.py), before the definition: one to three short sentences, no store names."""

import re

import pytest
from click.testing import CliRunner

from traceparse.analyzers import specs
from traceparse.cli import main
from traceparse.document.glossary import METRICS
from traceparse.document.meaning import MEANING

IDS = [*METRICS, *specs()]


def sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+", text.strip())


def test_every_metric_and_check_has_a_meaning_and_nothing_else_does():
    assert sorted(MEANING) == sorted(IDS)


@pytest.mark.parametrize("ident", IDS)
def test_a_meaning_is_short_and_plain(ident):
    text = MEANING[ident]
    assert 1 <= len(sentences(text)) <= 3, sentences(text)
    assert len(text) < 400, len(text)
    assert text[0].isupper() and text.rstrip().endswith("."), text
    # no table or column of the store: their names all hold an underscore (comm_ops, window_totals, ..._ns)
    assert not re.search(r"\w_\w|_ns\b", text), re.findall(r"\S*_\S*", text)
    assert "=" not in text, "a formula belongs in the definition"


@pytest.mark.parametrize("ident", IDS)
def test_explain_prints_the_meaning_first(ident):
    r = CliRunner().invoke(main, ["explain", ident])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{ident}: ") and lines[1] == "  what it means:", lines[:3]
    after = lines[2:lines.index("  definition:")]
    assert " ".join(line.strip() for line in after) == " ".join(MEANING[ident].split())  # all of it, nothing else
