"""The ranks' Parquet, written by the tasks that parsed them, is the store's per-rank folder: read through views, kept
with the store, one folder per build, never shared by two loads nor removed under a reader."""

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from traceparse.errors import TraceError
from traceparse.load.run import connect, load_run
from traceparse.store.parts import VIEWS, detach, folder_of

pytestmark = pytest.mark.usefixtures("per_rank_parquet")  # a store with its per-rank folder, as a larger run's

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "fixtures" / "runs" / "ddp2"


def builds(store: Path) -> list[Path]:
    return sorted(p for p in folder_of(store).iterdir() if p.is_dir())


def test_the_rank_tables_are_views_over_each_ranks_parquet(tmp_path):
    store, _ = load_run([RUN], db=tmp_path / "s.duckdb")
    [build] = builds(store)
    assert {p.name for p in build.iterdir() if p.is_dir()} >= set(VIEWS)
    con = connect(store)
    try:
        for table in VIEWS:  # views in this connection, over the files
            kind = con.execute("SELECT table_type FROM information_schema.tables WHERE table_name = ? "
                               "AND table_type = 'VIEW'", [table]).fetchone()
            assert kind == ("VIEW",), table
        # every complete event of each file is a row of events, with its rank from the folder
        per_rank = dict(con.execute("SELECT rank, count(*) FROM events GROUP BY rank").fetchall())
        stated = dict(con.execute("SELECT rank, n_complete FROM ranks").fetchall())
        assert per_rank == stated and sum(stated.values()) > 0
    finally:
        con.close()


@pytest.mark.slow
def test_a_store_without_its_folder_is_one_line_naming_it(tmp_path):
    store, _ = load_run([RUN], db=tmp_path / "s.duckdb")
    shutil.rmtree(folder_of(store))
    with pytest.raises(TraceError, match="per-rank folder"):
        connect(store)
    # loading the same files into it again builds it again
    again, reused = load_run([RUN], db=store)
    assert not reused
    connect(again).close()


@pytest.mark.slow
def test_a_cached_store_whose_folder_was_damaged_is_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEPARSE_CACHE", str(tmp_path / "cache"))
    store, _ = load_run([RUN])
    [build] = builds(store)
    events = next(build.glob("events/*.parquet"))
    events.write_bytes(events.read_bytes()[:100])  # cut off
    again, reused = load_run([RUN])
    assert not reused and again == store
    con = connect(again)
    try:
        assert con.execute("SELECT count(*) FROM events").fetchone()[0] > 0
    finally:
        con.close()
    assert len(builds(store)) == 1  # the damaged build, read by nobody, is gone


@pytest.mark.slow
def test_a_reader_keeps_its_folder_while_the_store_is_replaced(tmp_path):
    db = tmp_path / "s.duckdb"
    load_run([RUN], db=db)
    reader = connect(db)
    first = builds(db)
    other = ROOT / "fixtures" / "runs" / "tp2"
    load_run([other], db=db)  # another run into the same store
    try:
        # the reader still reads its run: its folder was not collected
        assert reader.execute("SELECT count(DISTINCT rank) FROM events").fetchone()[0] == 2
        assert first[0] in builds(db)
    finally:
        reader.close()
    del reader
    load_run([RUN], db=db)  # the next load collects the folders nobody reads
    assert len(builds(db)) == 1


def _analyze(args):
    cache, path = args
    env = {**os.environ, "TRACEPARSE_CACHE": cache}
    parquet = "from traceparse.load import run; run.in_store = lambda _: False; from traceparse.cli import main; main()"
    out = subprocess.run([sys.executable, "-c", parquet, "analyze", "--format", "json", str(path)],  # parquet_parts
                         capture_output=True, text=True, env=env, timeout=300)
    return out.returncode, out.stdout, out.stderr


@pytest.mark.slow
def test_loads_of_one_run_at_once_each_read_a_whole_store(tmp_path):
    cache = str(tmp_path / "cache")
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        got = pool.map(_analyze, [(cache, RUN)] * 3)
    assert [rc for rc, _, _ in got] == [0, 0, 0], [err for _, _, err in got]
    docs = [json.loads(out) for _, out, _ in got]
    assert all(d["checks"] == docs[0]["checks"] for d in docs)
    [store] = list(Path(cache).glob("*.duckdb"))
    assert 1 <= len(builds(store)) <= 3
    connect(store).close()


@pytest.mark.slow
def test_the_folder_of_a_removed_cache_entry_is_swept_by_the_next_load(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEPARSE_CACHE", str(tmp_path / "cache"))
    store, _ = load_run([RUN])
    store.unlink()  # the entry removed by hand: its folder is garbage
    load_run([ROOT / "fixtures" / "runs" / "tp2"])
    assert not folder_of(store).exists()


def test_a_failed_load_leaves_no_build_folder(tmp_path):
    db = tmp_path / "s.duckdb"
    load_run([RUN], db=db)
    before = builds(db)
    bad = tmp_path / "rank0.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError):
        load_run([bad], db=db)
    assert builds(db) == before


def test_small_files_are_parsed_in_batches_large_ones_alone(tmp_path):
    from traceparse.load.run import BATCH_BYTES, batches

    small = []
    for i in range(8):
        (tmp_path / f"s{i}").write_bytes(b"x" * 1000)
        small.append(tmp_path / f"s{i}")
    assert batches(small, 2) == [[0], [1], [2], [3], [4], [5], [6], [7]]  # a quarter of a worker's share each
    assert batches(small * 8, 2) == [list(range(k, k + 8)) for k in range(0, 64, 8)]
    big = tmp_path / "big"
    big.write_bytes(b"x" * BATCH_BYTES)
    assert batches([big, *small[:2], big], 1) == [[0], [1, 2, 3]]


def _replaced_meanwhile(db: Path):
    """A thread putting in place a copy of the store ``db`` naming a build folder of its own (a copy of the current
    one), as a load of the same run finishing now would, and collecting the folders nobody holds."""
    import threading

    import duckdb

    from traceparse.store.parts import new_build, publish, release, stored

    def put():
        token, folder, lock = new_build(db)
        shutil.copytree(folder_of(db) / stored(db)[1], folder, dirs_exist_ok=True)
        tmp = db.with_name(f".{db.name}.{token}.tmp")
        shutil.copyfile(db, tmp)
        con = duckdb.connect(str(tmp))
        con.execute("UPDATE meta SET value = ? WHERE key = 'parts'", [token])
        con.close()
        publish(tmp, db, token)
        release(lock, db, token)

    t = threading.Thread(target=put)
    t.start()
    return t


@pytest.mark.slow
def test_a_store_replaced_while_each_connection_opens_it_is_read_whole(tmp_path, monkeypatch):
    """A load of the same store puts its own in place while a reader has opened the store and not yet taken hold
    of its folder: the load waits for the hold (or the folder would go under the reader, every time)."""
    import traceparse.store.build as build

    db = tmp_path / "s.duckdb"
    load_run([RUN], db=db)
    real, loads = build.open_store, []

    def open_store(path, full_access=False):
        con = real(path, full_access)
        if len(loads) < build.ATTEMPTS:
            loads.append(_replaced_meanwhile(db))
            loads[-1].join(timeout=0.5)  # done by now unless it must wait for this reader
        return con

    monkeypatch.setattr(build, "open_store", open_store)
    con = connect(db)
    try:
        assert con.execute("SELECT count(DISTINCT rank) FROM events").fetchone()[0] == 2
    finally:
        con.close()
        detach(con)
    for t in loads:
        t.join()
    assert len(builds(db)) == 1  # the folder it read, let go of, collected as the store names another
