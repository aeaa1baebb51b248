"""``traceparse explain ID`` as text, from plain data: a check's spec (its fields as a dict), a tag rule, a
communication kernel rule, a vocabulary table, a metric of the glossary; every id (``--list``), and the line for an
unknown one.

A check or metric opens with what its number means for the user in plain words (``  what it means:``, from
traceparse/document/meaning.py), then its definition. Its long fields print as short labelled lines: ``  label:``
then the text wrapped to the width a command fits (``fit.WIDTH``; ``fit.DEFAULT`` outside one), a sentence to a
paragraph. A cited section of the parallelism reference
("docs/parallelism.md 3.2") is never split across lines, and the text ends with the command that prints it
(``traceparse docs``).
"""

import difflib
import re
import textwrap

from traceparse.document.reference import CITED, cited_sections
from traceparse.errors import shown
from traceparse.escape import terminal
from traceparse.render.fit import DEFAULT
from traceparse.render.fit import WIDTH as FITTED

CHECK_FIELDS = ("definition", "numerator", "denominator", "needs", "notes", "example")
NBSP = "\u00a0"


def labelled(label: str, text: str, width: int | None = None) -> str:
    """``  label:`` then ``text`` wrapped to ``width``, a sentence to a paragraph (long definitions read as
    lines)."""
    width = width or FITTED.get() or DEFAULT
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


def render_check(spec: dict, meaning: str) -> str:
    """A check's spec: ``id: title``, what it means in plain words, then its definition, numerator, denominator,
    needs, notes and an example."""
    lines = [f"{spec['id']}: {spec['title']}", labelled("what it means", meaning)]
    lines += [labelled(label, spec[label]) for label in CHECK_FIELDS if spec.get(label)]
    return with_docs("\n".join(lines))


def render_metric(ident: str, title: str, definition: str, reported_as: str, meaning: str) -> str:
    """A metric: ``id: title``, what it means in plain words, then its definition and how it is reported."""
    return with_docs("\n".join([f"{ident}: {title}", labelled("what it means", meaning),
                                labelled("definition", definition), labelled("reported as", reported_as)]))


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


def render_ids(groups: dict[str, list[str]]) -> str:
    """Every id ``explain`` knows, by kind (``groups``: kind -> ids), each list wrapped."""
    return "\n".join(["traceparse explain ID prints one of:"] + [labelled(kind, ", ".join(ids)) for kind, ids in groups.items()])


def unknown_id(ident: str, known: list[str]) -> str:
    """The one line for an id ``explain`` does not know: the known ids closest to it (letter case aside), then where
    the whole list is."""
    by_lower = {k.lower(): k for k in known}
    close = [by_lower[k] for k in difflib.get_close_matches(ident.lower(), list(by_lower), n=3)]
    guess = f"; did you mean: {', '.join(close)}?" if close else ""
    return f"unknown id '{shown(ident)}'{guess} (every id: traceparse explain --list)"
