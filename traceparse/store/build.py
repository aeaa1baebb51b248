"""The store's own part of a build: connecting (a new store starts as a copy of the schema's template:
store/template.py), the rows of the run (its ranks, groups, dumps, and the ranks' Parquet attached as views:
traceparse/store/parts.py), and the derivations of the store's own tables that cross ranks (group inference,
finish.sql; derive.sql runs per rank, in the parse tasks). The stages above (tagging, layout, the vocabulary that
needs tags) run from traceparse/load/build.py, which orders the whole build in one transaction."""

import json
import time
from pathlib import Path

import duckdb

from traceparse.errors import TraceError
from traceparse.store.groups import infer_groups
from traceparse.store.parts import Gone, attach, attach_views, copy_vocabulary, missing, opening
from traceparse.store.query import sql_file
from traceparse.store.schema import SCHEMA_VERSION
from traceparse.store.template import discard, fresh_store, schema_sql
from traceparse.store.trust import duckdb_config, open_store, openable, vet, vetted, vouch

# connections to a store whose build folder went while connecting (parts.Gone: a store whose folders have no
# publish lock, parts.opening) before it is said to be missing, the n-th after 0.05 x 2^n s
ATTEMPTS = 7


def macro_connection():
    """An in-memory DuckDB connection with the store's macros (to check rules without a store)."""
    con = duckdb.connect()
    con.execute(sql_file("traceparse.store", "macros.sql"))
    return con


FR_COLUMNS = ("record_id", "pg_name", "pg_desc", "pg_id", "group_ranks", "group_source", "seq", "p2p_seq", "op_id",
              "op", "backend", "peer", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "state",
              "retired", "time_created_ns", "timeout_ms", "frames")
INFLIGHT_COLUMNS = ("why", "time_ns", "op", "peer", "pg_name", "pg_desc", "group_ranks", "op_id", "input_sizes",
                    "input_dtypes", "frames")


def connect_with_limits(db_path, read_only=False, full_access=False):
    """A connection to the store at ``db_path`` (settings of duckdb_config). Read-only: the store checked and its
    per-rank folder attached, the connection confined to them (``trust``, ``parts.attach``; ``full_access``: for
    ``traceparse sql``'s own query); a store replaced by a later load of it while this connects is connected to
    again. Else (a store being built): a plain connection."""
    if not read_only:
        return _connect(db_path, read_only)
    for attempt in range(ATTEMPTS):
        with opening(db_path):  # no load of it replaces the store until its folder is held
            con = open_store(db_path, full_access)
            try:
                _same_schema(con, db_path)
                attach(con, db_path, full_access)
                return con
            except Gone:
                con.close()
            except BaseException:
                con.close()
                raise
        time.sleep(0.05 * 2 ** attempt)
    raise missing(db_path)


def _same_schema(con, db_path):
    """Refuse (TraceError) a store another version of traceparse made with another schema: its tables are not the ones
    this version reads (a load of its traces builds it again)."""
    got = con.execute("SELECT any_value(value) FROM meta WHERE key = 'schema_version'").fetchone()[0]
    if got != str(SCHEMA_VERSION):
        raise TraceError(db_path, f"a store of schema {got or 'unknown'}, made by another version of traceparse (this "
                                  f"one reads schema {SCHEMA_VERSION}): analyze its traces again to build it anew")


def _connect(db_path, read_only):
    config = duckdb_config()
    try:
        return duckdb.connect(str(openable(db_path)), read_only=read_only, config=config)
    except (duckdb.InvalidInputException, duckdb.ParserException) as e:
        if not config:
            raise
        raise TraceError("TRACEPARSE_MEMORY_LIMIT", str(e).splitlines()[0]) from None  # the limit cannot be read


def create_store(db_path):
    """A connection to a fresh store at ``db_path`` holding the store's schema and macros (a copy of their template,
    store/template.py, else written; settings of duckdb_config). The first copy of a template in this process is
    vetted as a store is (``trust.vet``): a template refused is removed and made again."""
    for attempt in range(2):
        copied = fresh_store(db_path)
        con = connect_with_limits(db_path)
        if copied is None:
            con.execute(schema_sql())
        elif not vetted(copied):
            try:
                vet(con, db_path)
            except TraceError:
                if attempt:
                    raise
                con.close()
                Path(db_path).unlink()
                discard()
                continue
            vouch(None, copied)
        con.execute("SET preserve_insertion_order = false")  # rows carry their own order (ev_id)
        return con


def insert_raw(con, ranks: list[dict], issues: list[tuple], meta: dict, dumps=(), parts=None):
    """The rows as loaded, into a store ``create_store`` made: ``ranks`` are parse summaries with rank and clock set,
    their tables in the per-rank folder ``parts`` (attached as views, the per-rank vocabulary copied; None: made
    into the store by the build, ``per_rank.tables_in_store``); ``dumps`` Flight Recorder dumps
    (traceparse.ingest.flight_recorder.read_dump)."""
    _insert_meta(con, meta)
    _insert_ranks(con, ranks)
    _insert_groups(con, ranks)
    _insert_rows(con, "plugin_metadata", [(r["rank"], r["plugin"]["version"], json.dumps(r["plugin"]))
                                          for r in ranks if r.get("plugin")])
    _insert_rows(con, "load_issues", issues)
    _insert_dumps(con, dumps)
    _insert_rows(con, "rank_slots", [(r["slot"], r["rank"], r.get("clock_shift_ns", 0)) for r in ranks])
    if ranks and parts is not None:
        attach_views(con, parts, build=True)
        copy_vocabulary(con, parts)


def insert_kernel_rules(con, rules):
    """The custom communication kernel rules (dicts with id, pattern, op) derive.sql matches kernels against."""
    con.execute("CREATE TEMP TABLE comm_kernel_rules (id VARCHAR, pattern VARCHAR, op VARCHAR)")
    _insert_rows(con, "comm_kernel_rules", [(r["id"], r["pattern"], r["op"]) for r in rules])


def derive(con):
    """What crosses ranks in the store's derived tables: process groups, then finish.sql (comm_ops itself, per rank,
    comes from derive.sql in each rank's task: traceparse/vocabulary/per_rank.py)."""
    infer_groups(con)
    con.execute(sql_file("traceparse.store", "finish.sql"))


def insert_layout(con, layout: dict):
    """The inferred layout, {key: (value, evidence)}."""
    _insert_rows(con, "layout", [(k, json.dumps(v), why) for k, (v, why) in layout.items()])


def _insert_rows(con, table, rows):
    if rows:
        marks = ", ".join("?" * len(rows[0]))
        con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)


def _insert_dumps(con, dumps):
    _insert_rows(con, "fr_dumps", [(d["rank"], d["file"], d["version"], len(d["entries"]), json.dumps(d["pg_status"]))
                                   for d in dumps])
    _insert_rows(con, "fr_entries", [(d["rank"], *(e.get(c) if c != "group_source" else
                                                   ("pg_config" if e["group_ranks"] else None) for c in FR_COLUMNS))
                                     for d in dumps for e in d["entries"]])
    _insert_rows(con, "fr_inflight", [(d["rank"], *(d["inflight"][c] for c in INFLIGHT_COLUMNS))
                                      for d in dumps if d.get("inflight")])
    if not dumps:
        return
    # groups the rank's own pg_config leaves out (gloo lists none but the default group, and that one only when it
    # is the only group): the group is its name with its ranks, never its ranks alone (two groups may have the same)
    con.execute("""
        UPDATE fr_entries f SET group_ranks = g.ranks, group_source = 'pg_config of rank ' || g.rank
        FROM (SELECT pg_name, group_ranks AS ranks, min(rank) AS rank FROM fr_entries
              WHERE group_source = 'pg_config' GROUP BY ALL) g
        WHERE f.group_ranks IS NULL AND g.pg_name = f.pg_name AND list_contains(g.ranks, f.rank);
        UPDATE fr_entries f SET group_ranks = p.ranks, group_source = 'traces'
        FROM (SELECT pg_name, ranks FROM process_groups WHERE ranks IS NOT NULL GROUP BY ALL) p
        WHERE f.group_ranks IS NULL AND p.pg_name = f.pg_name AND list_contains(p.ranks, f.rank);
        UPDATE fr_entries f SET group_ranks = g.ranks, group_source = 'dumps'
        FROM (SELECT pg_name, list_sort(list(DISTINCT rank)) AS ranks FROM fr_entries
              WHERE group_ranks IS NULL GROUP BY 1) g
        WHERE f.group_ranks IS NULL AND g.pg_name = f.pg_name""")


def _insert_meta(con, meta):
    rows = [("schema_version", str(SCHEMA_VERSION))]
    rows += [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in meta.items()]
    _insert_rows(con, "meta", rows)


def _insert_ranks(con, ranks):
    if not ranks:
        return
    cols = [
        "rank", "rank_source", "world_size", "backend", "device_name", "host", "file", "file_bytes",
        "base_time_ns", "clock_offset_ns", "clock_method", "schema_version", "trace_id", "versions",
        "record_shapes", "profile_memory", "n_events", "n_complete", "cut_off", "kept_until_ns", "clock_shift_ns",
    ]
    ranks = [{**r, "clock_shift_ns": r.get("clock_shift_ns", 0),
              "kept_until_ns": None if r.get("kept_until_ns") is None
              else r["kept_until_ns"] + (r["clock_offset_ns"] or 0) + r.get("clock_shift_ns", 0)}
             for r in ranks]  # on the run's clock
    rows = [[json.dumps(r[c]) if c == "versions" else r[c] for c in cols] for r in ranks]
    con.executemany(f"INSERT INTO ranks ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows)


def _rank_groups(r) -> list[dict]:
    """The rank's pg_config; the plugin's groups where the trace has none. A group the plugin names a mesh
    dimension of keeps its pg_config entry, with the dimension added to a description that lacks it."""
    plugin = (r.get("plugin") or {}).get("groups", [])
    if not r["pg_config"]:
        return [{"pg_name": g["name"], "pg_desc": g["desc"] if not g["dim"] else f"{g['desc'] or 'group'} ({g['dim']})",
                 "pg_size": len(g["ranks"]), "ranks": g["ranks"]} for g in plugin]
    dims = {g["name"]: g["dim"] for g in plugin if g["dim"]}
    out = []
    for pg in r["pg_config"]:
        dim, desc = dims.get(pg.get("pg_name")), pg.get("pg_desc")
        if dim and dim not in str(desc):
            pg = {**pg, "pg_desc": f"{desc} ({dim})"}
        out.append(pg)
    return out


def rank_group_rows(r) -> list[tuple]:
    """The process_groups rows of the parse summary ``r`` (with its rank set)."""
    rows = []
    for pg in _rank_groups(r):
        members = pg.get("ranks")
        rows.append((r["rank"], _text(pg.get("pg_name")), _text(pg.get("pg_desc")), _text(pg.get("backend_config")),
                     pg.get("pg_size"), sorted(members) if isinstance(members, list) else None))
    return rows


def _insert_groups(con, ranks):
    _insert_rows(con, "process_groups", [row for r in ranks for row in rank_group_rows(r)])


def _text(value):
    """A header value for a VARCHAR column: strings as they are, other JSON values as JSON text."""
    return value if value is None or isinstance(value, str) else json.dumps(value)
