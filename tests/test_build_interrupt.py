"""Ctrl-C while the store is built: the interrupt is what the user sees, never an error about the rollback, and no
store is left. DuckDB ends the transaction itself when the interrupt lands in its COMMIT, so the rollback after it
finds none (a mutation-campaign case: SIGINT to the main process of a pooled load)."""
from pathlib import Path

import duckdb
import pytest

import traceparse.load.build as build
from traceparse.load.run import load_run

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "ddp2"


def test_an_interrupt_after_duckdb_ended_the_transaction_stays_an_interrupt(tmp_path, monkeypatch):
    def interrupted(con):
        con.execute("ROLLBACK")  # what DuckDB does with a COMMIT it was interrupted in
        raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")

    monkeypatch.setattr(build, "tag_comm_ops", interrupted)
    db = tmp_path / "run.duckdb"
    with pytest.raises(duckdb.InterruptException):
        load_run(sorted(RUN.glob("rank*.json*")), db=db, use_cache=False, workers=1)
    assert not db.exists()
