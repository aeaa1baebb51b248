"""The package's folders are the stages of its pipeline: no module imports a later stage, render reads
documents only, and no import cycle, function-level imports included (scripts/import_graph.py)."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import import_graph  # noqa: E402
from conftest import package_sources  # noqa: E402


def test_no_cycle_and_no_upward_import():
    assert import_graph.problems() == []


def test_every_module_is_in_a_layer_and_the_graph_sees_function_level_imports():
    g = import_graph.graph()
    assert all(import_graph.layer(m) is not None for m in g)
    # the CLI imports most of its commands' code inside the commands
    assert "traceparse.whatif" in g["traceparse.cli"] and "traceparse.render.html" in g["traceparse.cli"]


def test_an_upward_or_circular_import_is_found(tmp_path, monkeypatch):
    pkg = tmp_path / "traceparse"
    (pkg / "store").mkdir(parents=True)
    (pkg / "render").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "store" / "__init__.py").write_text("")
    (pkg / "store" / "build.py").write_text("def f():\n    from traceparse.render import text\n")
    (pkg / "render" / "__init__.py").write_text("")
    (pkg / "render" / "text.py").write_text("from traceparse.store import build\n")
    monkeypatch.setattr(import_graph, "PACKAGES", {"traceparse": pkg})
    found = import_graph.problems()
    assert "upward import: traceparse.store.build (store) imports traceparse.render.text (render)" in found
    assert "forbidden import: traceparse.render.text (render) imports traceparse.store.build (store)" in found
    assert any(p.startswith("import cycle: traceparse.render.text <-> traceparse.store.build") for p in found)


# Nothing above the stages that build the vocabulary (ingest, load, store, vocabulary) reads the parser's raw tables
# (events, threads, op_args, comm_args, memory): the checks, tagging, layout, history, whatif and the document select
# from the vocabulary. The one reader, by design: the export, which writes the events themselves.
RAW = re.compile(r"\b(?:FROM|JOIN)\s+(?:events|threads|op_args|comm_args|memory)\b")
BELOW = ("traceparse/ingest/", "traceparse/load/", "traceparse/store/", "traceparse/vocabulary/")
RAW_READS = {"traceparse/job_export.py": 7}


def test_nothing_above_the_vocabulary_reads_a_raw_table():
    found = {}
    for rel, path in package_sources():
        if not rel.startswith(BELOW):
            n = len(RAW.findall(path.read_text()))
            if n:
                found[rel] = n
    assert found == RAW_READS


def test_the_document_layout_whatif_and_hang_forensics_keep_no_query_inline():
    """Their SQL lives in .sql files beside them (views and table macros, read by name: store.query.table_rows);
    their Python assembles."""
    found = []
    for folder in ("document", "layout", "whatif", "hang"):
        for path in sorted((Path(__file__).resolve().parents[1] / "traceparse" / folder).glob("*.py")):
            found += [f"{path.name}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
                      if re.search(r"\bSELECT\b", line)]
    assert found == []
