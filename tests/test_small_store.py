"""A small run parsed in this process (fewer events than one DuckDB row group: ``load.run.in_store``) has its ranks'
tables made by the store's build into the store itself, in one DuckDB session, with no per-rank Parquet: the same
rows, on the same clocks, and the same document as the Parquet path larger runs take."""

import json

import pytest
from conftest import committed_runs, parquet_parts
from test_clocks import moved_copy

from traceparse.document import document
from traceparse.load import run as load
from traceparse.load.run import connect, load_run
from traceparse.store.parts import COPIED, VIEWS, folder_of

RUNS = committed_runs("ddp2", "dp2_tp2")


def tables_and_document(path, tmp_path, name) -> tuple[dict, dict, object]:
    store, _ = load_run([path], db=tmp_path / f"{name}.duckdb")
    con = connect(store)
    try:
        rows = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in VIEWS + COPIED}
        token = con.execute("SELECT value FROM meta WHERE key = 'parts'").fetchone()
        return rows, json.loads(json.dumps(document(con), default=str)), token
    finally:
        con.close()


@pytest.mark.parametrize("case", ["ddp2", "dp2_tp2 with a host's clock 3 ms off"])
def test_a_small_run_is_one_store_with_the_rows_and_document_of_the_parquet_path(case, tmp_path):
    path = RUNS / "ddp2" if case == "ddp2" else moved_copy("dp2_tp2", {1, 3}, 3_000_000, tmp_path / "moved")
    rows, doc, token = tables_and_document(path, tmp_path, "here")
    assert token is None and not any(p.is_dir() for p in folder_of(tmp_path / "here.duckdb").glob("*"))
    assert rows["events"] and rows["comm_ops"]
    with parquet_parts():
        parquet_rows, parquet_doc, parquet_token = tables_and_document(path, tmp_path, "parquet")
    assert parquet_token is not None
    for table in VIEWS + COPIED:
        assert rows[table] == parquet_rows[table], table
    if case != "ddp2":
        assert doc["run"]["clock"]["applied"]
    assert doc == parquet_doc


def test_a_run_of_a_row_group_of_events_or_more_keeps_its_parquet():
    small = [{"n_events": load.ROW_GROUP_ROWS - 1}, {"kind": "flight_recorder"}]
    assert load.in_store(small) and not load.in_store(small + [{"n_events": 1}])
