"""docs/glossary.md is what the checks' specs, the metric glossary and their meanings make (one template for
every check and metric, the text `traceparse explain` prints): regenerate it with `python scripts/glossary.py
--write`."""

from dataclasses import fields
from pathlib import Path

from traceparse.analyzers import specs
from traceparse.analyzers.base import Spec
from traceparse.document.glossary import METRICS
from traceparse.document.glossary_page import page

ROOT = Path(__file__).resolve().parent.parent


def test_the_glossary_page_is_generated_from_the_specs_and_the_glossary():
    assert (ROOT / "docs" / "glossary.md").read_text() == page(), "run: python scripts/glossary.py --write"


def test_every_check_fills_every_field_of_the_template_and_every_metric_is_on_the_page():
    text = page()
    for ident, spec in specs().items():
        assert all(getattr(spec, f.name).strip() for f in fields(Spec)), ident
        assert f"### `{ident}`: {spec.title}" in text
        assert "fixtures/runs" in spec.example, ident  # an example on a bundled run
    for ident, (title, *_) in METRICS.items():
        assert f"### `{ident}`: {title}" in text
