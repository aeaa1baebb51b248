"""What rules, checks and findings cite is in the repository: every "docs/parallelism.md N"
names a section that docs/parallelism.md has (in the code, the rules, the README and the docs pages); the README's
test command installs what .ci/run installs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "parallelism.md"
CITE = re.compile(r"docs/parallelism\.md`?,? (?:section )?(\d+(?:\.\d+)?(?:(?:, | and )\d+(?:\.\d+)?)*)")


def cited() -> dict:
    """{section: [file, ...]} over the code, rules, README and docs pages."""
    files = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("rules/**/*.toml"), *ROOT.glob("analyzers/*.py"),
             *ROOT.glob("analyzers/*.sql"), *ROOT.glob("traceparse/**/*.py"), *ROOT.glob("traceparse/**/*.sql")]
    out = {}
    for f in files:
        for m in CITE.finditer(f.read_text()):
            for section in re.split(r", | and ", m.group(1)):
                out.setdefault(section, []).append(f.relative_to(ROOT).as_posix())
    return out


def test_every_cited_section_exists():
    headings = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", DOC.read_text(), re.MULTILINE))
    citations = cited()
    assert len(citations) >= 8  # the rules and checks cite sections 1-6
    missing = {s: sorted(set(f)) for s, f in citations.items() if s not in headings}
    assert not missing, f"cited sections missing from docs/parallelism.md: {missing}"


def test_no_citation_points_outside_the_repository():
    for f in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("rules/**/*.toml"), *ROOT.glob("analyzers/*.py"),
              *ROOT.glob("traceparse/**/*.py")]:
        assert "PARALLELISM.md" not in f.read_text(), f


def test_readme_test_command_is_ci():
    extras = re.search(r"pip install -q -e '(\.\[[\w,]+\])'", (ROOT / ".ci" / "run").read_text())[1]
    readme = (ROOT / "README.md").read_text()
    assert f"pip install -e '{extras}' && python -m pytest" in readme
    assert f"`pip install -e '{extras}'`, the README's test command" in (ROOT / "docs" / "testing.md").read_text()
