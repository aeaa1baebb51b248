"""A document is a function of what the store holds, never of the order it holds its rows in: the same store with
its tables' rows put in another order (as another build can leave them: the parse tasks of ``--engine ray`` finish in
any order) gives the same analyze document, byte for byte. Ties (ranks whose excess is equal, events with the same
span, collective members that arrived at the same moment) are broken by a stated order, not by the rows' order."""

import json
import sys
from pathlib import Path

import duckdb
import pytest

from traceparse.document import document
from traceparse.load.run import connect, load_run

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import replicate  # noqa: E402 -- bench/ is no package

pytestmark = pytest.mark.slow  # a 64-rank replica loaded once, documented twice


def analyze_document(store: Path) -> str:
    con = connect(store)
    try:
        return json.dumps(document(con), sort_keys=True)
    finally:
        con.close()


def reorder(store: Path, share: float) -> list[str]:
    """Put the rows of every table of the store in another order: from the row ``share`` of the way down, round to
    the one before it. Returns the tables."""
    with duckdb.connect(str(store)) as con:
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = "
                                            "current_database() AND table_name <> 'meta'").fetchall()]
        for t in tables:
            con.execute(f'CREATE OR REPLACE TEMP TABLE moved AS SELECT * FROM "{t}" '
                        f'ORDER BY (rowid + (SELECT count(*) FROM "{t}") * {share}) % (SELECT count(*) FROM "{t}")')
            con.execute(f'DELETE FROM "{t}"')
            con.execute(f'INSERT INTO "{t}" SELECT * FROM moved')
        con.execute("CHECKPOINT")
    return tables


def test_the_document_does_not_depend_on_the_order_of_the_stores_rows(tmp_path):
    """dp2 x pp2 x tp2 eight times wider (64 ranks of the same work: many ties) in two row orders."""
    replicate.replicate(REPO / "fixtures" / "runs" / "dp2_pp2_tp2", tmp_path / "run", 64, seed=3)
    store, _ = load_run([tmp_path / "run"], db=tmp_path / "s.duckdb", use_cache=False)
    before = analyze_document(store)
    assert "step_windows" in reorder(store, share=0.55)
    assert analyze_document(store) == before
