"""``traceparse explain ID`` as text, from plain data: a check's spec (its fields as a dict), a tag rule, a
communication kernel rule, a vocabulary table, a metric of the glossary.

A check's or metric's long fields print as short labelled lines: ``  label:`` then the text wrapped to
``WIDTH``, a sentence to a paragraph. A cited section of the parallelism reference ("docs/parallelism.md
3.2") is never split across lines, and the text ends with the command that prints it (``traceparse docs``).
"""

import re
import textwrap

from traceparse.document.reference import CITED, cited_sections
from traceparse.escape import terminal

WIDTH = 100
CHECK_FIELDS = ("definition", "numerator", "denominator", "needs", "notes")
NBSP = "\u00a0"


def labelled(label: str, text: str, width: int = WIDTH) -> str:
    """``  label:`` then ``text`` wrapped to ``width``, a sentence to a paragraph (long definitions read as
    lines)."""
    text = CITED.sub(lambda m: m.group(0).replace(" ", NBSP), str(text).strip())  # a citation stays on one line
    sentences = re.split(r"(?<=\.)\s+(?=[A-Z])", text)
    lines = [f"  {label}:"]
    for sentence in sentences:
        lines += textwrap.wrap(sentence, width=width, initial_indent="    ", subsequent_indent="      ",
                               break_on_hyphens=False, break_long_words=False)
    return "\n".join(lines).replace(NBSP, " ")


def with_docs(text: str) -> str:
    """``text`` and, when it cites docs/parallelism.md, a last line naming ``traceparse docs N`` for each section."""
    sections = cited_sections(text)
    if sections:
        text += "\n  read: " + "; ".join(f"traceparse docs {n}" for n in sections)
    return terminal(text, newlines=True)  # a rule file's examples may hold any text


def render_check(spec: dict) -> str:
    """A check's spec: ``id: title`` then its definition, numerator, denominator, needs and notes."""
    lines = [f"{spec['id']}: {spec['title']}"]
    lines += [labelled(label, spec[label]) for label in CHECK_FIELDS if spec.get(label)]
    return with_docs("\n".join(lines))


def render_metric(ident: str, title: str, definition: str, reported_as: str) -> str:
    return with_docs("\n".join([f"{ident}: {title}", labelled("definition", definition),
                                labelled("reported as", reported_as)]))


def _examples(rule: dict) -> list[str]:
    return ([f"  matches: {ex}" for ex in rule.get("must_match") or ()]
            + [f"  does not match: {ex}" for ex in rule.get("must_not_match") or ()])


def render_rule(rule: dict) -> str:
    """A tag rule: its tags, predicate (``when``), why, and examples."""
    lines = [f"{rule['id']}: {rule['title']}",
             f"  tags: {rule['strategy']} / {rule['variant']} (priority {rule['priority']}, "
             f"confidence {rule['confidence']})",
             f"  when: {rule['when']}", f"  why: {rule['why']}", *_examples(rule)]
    return with_docs("\n".join(lines))


def render_kernel_rule(rule: dict) -> str:
    """A communication kernel rule: the op its kernels are, the pattern, why, and examples."""
    lines = [f"{rule['id']}: {rule['title']}",
             f"  kind: {rule['kind']} (a kernel whose name matches the pattern is one {rule['op']} of its own, "
             "comm_ops.source = 'custom_kernel')",
             f"  op: {rule['op']}", f"  pattern: {rule['pattern']}", f"  why: {rule['why']}", *_examples(rule)]
    return with_docs("\n".join(lines))


def render_vocabulary(ident: str, comment: str, columns) -> str:
    """A vocabulary table: what it holds, then each column with its type and meaning."""
    return with_docs("\n".join([f"{ident}: {comment}", *(f"  {c} ({t}): {doc}" for c, t, doc in columns)]))
