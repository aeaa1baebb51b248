"""The Python API returns polars DataFrames of store queries."""

import gzip
import json

import polars as pl
from conftest import committed_runs

from traceparse.load.frames import frame

RUN = committed_runs("ddp2") / "ddp2"


def test_frame_of_a_run_counts_its_complete_events(tmp_path):
    expected = sum(1 for f in sorted(RUN.glob("rank*.json.gz"))
                   for e in json.loads(gzip.open(f).read())["traceEvents"] if e.get("ph") == "X")
    db = tmp_path / "s.duckdb"
    df = frame("SELECT rank, count(*) AS n FROM events GROUP BY rank ORDER BY rank", [RUN], db=db)
    assert isinstance(df, pl.DataFrame)
    assert df["rank"].to_list() == [0, 1]
    assert df["n"].sum() == expected
    again = frame("SELECT count(*) AS n FROM events", db=db)  # the store alone, without the traces
    assert again["n"][0] == expected
