"""docs/glossary.md, generated: every check and every metric in one template, from the same data ``traceparse
explain`` prints (a check's spec, ``traceparse.analyzers.specs()``; a metric's entry, ``glossary.METRICS``; what
each means, ``meaning.MEANING``). ``python scripts/glossary.py --write`` writes it; tests/test_glossary_page.py
holds the page to what this makes, so the page, ``explain`` and the document never disagree.
"""

from dataclasses import asdict

HEADER = """# Glossary

[Back to the README](../README.md) · [Documentation](README.md)

Every check and every reported number, in one template: what it means for the job, what it measures, its numerator
and denominator, what it needs, where it comes from, and (for a check) what it says of a bundled run.
`traceparse explain <id>` prints the same text. This page is generated from the checks' specs (`analyzers/`),
the metric glossary (`traceparse/document/glossary.py`) and their plain-words meanings
(`traceparse/document/meaning.py`) by `python scripts/glossary.py --write`; a test keeps it so.
"""

CHECK = (("What it means", "meaning"), ("What it measures", "definition"), ("Numerator", "numerator"),
         ("Denominator", "denominator"), ("What it needs", "needs"), ("Where it comes from", "notes"),
         ("Example", "example"))
METRIC = (("What it means", "meaning"), ("What it measures", "definition"), ("Reported as", "reported_as"))


def _entry(ident: str, title: str, fields: dict, template) -> str:
    lines = [f"### `{ident}`: {title}", ""]
    for label, key in template:
        if fields.get(key):
            lines += [f"**{label}.** {fields[key].strip()}", ""]
    return "\n".join(lines)


def page() -> str:
    """The whole of docs/glossary.md."""
    from traceparse.analyzers import specs
    from traceparse.document.glossary import METRICS
    from traceparse.document.meaning import MEANING

    checks = specs()
    out = [HEADER, "## Checks", "", "Each is graded `ok`, `warn` or `fail` (or `not_applicable`, with the reason): "
           "[checks.md](checks.md) says how, with the thresholds and what they say of every bundled run.", ""]
    out += [_entry(i, s.title, {**asdict(s), "meaning": MEANING[i]}, CHECK) for i, s in checks.items()]
    out += ["## Metrics", ""]
    for ident, (title, definition, reported_as) in METRICS.items():
        out.append(_entry(ident, title, {"meaning": MEANING[ident], "definition": definition,
                                         "reported_as": reported_as}, METRIC))
    return "\n".join(out).rstrip() + "\n"
