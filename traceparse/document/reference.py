"""The parallelism reference (docs/parallelism.md, shipped in the package as ``traceparse.docs``), by
section: findings and ``traceparse explain`` cite it as "docs/parallelism.md 3.2", ``traceparse docs 3.2``
prints that section."""

import re
from importlib.resources import files

CITED = re.compile(r"docs/parallelism\.md ((?:\d+(?:\.\d+)*)(?:, \d+(?:\.\d+)*)*)")  # how a section is cited


def cited_sections(text: str) -> list[str]:
    """The sections of docs/parallelism.md that ``text`` cites, in order, each once."""
    out = []
    for m in CITED.finditer(text):
        out += m.group(1).split(", ")
    return list(dict.fromkeys(out))


def parallelism_text() -> str:
    """docs/parallelism.md as installed (the package data of ``traceparse.docs``)."""
    return files("traceparse.docs").joinpath("parallelism.md").read_text(encoding="utf-8")


def _headings(text: str) -> list[tuple[int, int, str]]:
    """(line index, level, heading text) of every heading outside code fences."""
    out, fenced = [], False
    for i, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^(#{1,6}) (.*)$", line)):
            out.append((i, len(m.group(1)), m.group(2).strip()))
    return out


def sections(text: str) -> list[tuple[str, int, str, int]]:
    """(number, heading level, title, line index) of each numbered heading, in order."""
    out = []
    for at, level, head in _headings(text):
        if level >= 2 and (m := re.match(r"^(\d+(?:\.\d+)*)\.? (.*)$", head)):
            out.append((m.group(1), level, m.group(2).strip(), at))
    return out


def section(text: str, number: str) -> str | None:
    """Section ``number`` ('3.2', '3.2.', '1') with its subsections, its heading first, up to the next heading as
    high as its own; None when there is none."""
    number = number.strip().rstrip(".")
    lines = text.splitlines()
    for n, level, _, at in sections(text):
        if n == number:
            end = next((i for i, lv, _ in _headings(text) if i > at and lv <= level), len(lines))
            return "\n".join(lines[at:end]).rstrip()
    return None


def table_of_contents(text: str) -> str:
    """The numbered sections, indented by level, and how to print one."""
    rows = [f"{'  ' * (level - 2)}{n} {title}" for n, level, title, _ in sections(text)]
    return "\n".join(["docs/parallelism.md (traceparse docs SECTION prints one):", *("  " + r for r in rows)])
