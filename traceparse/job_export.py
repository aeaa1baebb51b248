"""``traceparse export``: one Chrome / Perfetto JSON of the whole job, on the run's aligned clock.

Each rank is a process (pid = its rank) whose threads are its CPU threads and its GPU streams (a stream's thread
id is ``STREAM_TID`` + the stream). Every event the analysis reads is written back as the rank's trace had it (its
category, name, times in microseconds with their nanoseconds, the args traceparse reads), moved by its host's clock
shift (``traceparse explain clocks``), each with its original pid and tid among its args. Beside them, the
analysis: each matched collective as flow events from its last member's arrival to each other member's execution
(where it was released), the critical path of each step as a process of its own (one slice per stretch of one rank
and cause), and the causes with what fixing each saves per step as instant events at each step's start. Opens in
Perfetto's UI and ``chrome://tracing``; traceparse reads it back as the ranks' traces
(``ingest/job_file.py``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import msgspec

from traceparse.errors import TraceError
from traceparse.ingest.job_file import KEY, OWN, PATH_PID, STREAM_TID
from traceparse.store.query import rows
from traceparse.vocabulary.graph_rows import graph_tables

VERSION = 1

_US = "(({}::DECIMAL(38,0)) * 0.001::DECIMAL(4,3))::DECIMAL(38,3)"  # ns -> us, exactly (DuckDB writes it as is)


# the args an event is written with (those traceparse reads: ingest/model.py), by key: the column it is read from
RAW = (("External id", "e.external_id"), ("correlation", "e.correlation"), ("stream", "e.stream"),
       ("device", "e.device"), ("Input Dims", "o.input_dims"), ("Input type", "o.input_types"),
       ("Concrete Inputs", "o.concrete_inputs"), ("In msg nelems", "c.in_nelems"), ("Out msg nelems", "c.out_nelems"),
       ("Group size", "c.group_size"), ("Seq", "c.seq"), ("Global rank start", "c.rank_start"),
       ("Global rank stride", "c.rank_stride"), ("original pid", "e.pid"), ("original tid", "e.tid"))  # as JSON text
STRINGS = (("Collective name", "c.coll_name"), ("dtype", "c.dtype"), ("In split size", "c.in_split"),
           ("Out split size", "c.out_split"), ("Process Group Name", "c.pg_name"),
           ("Process Group Description", "c.pg_desc"), ("Process Group Ranks", "c.pg_ranks"))  # as JSON strings


def _args_sql() -> str:
    """The args of an event as JSON text, only those it has (a null would read back as a value)."""
    items = [f"CASE WHEN {col} IS NOT NULL THEN '\"{key}\":' || {value} END"
             for pairs, cast in ((RAW, "{}::VARCHAR"), (STRINGS, "to_json({})"))
             for key, col in pairs for value in [cast.format(col)]]
    return "('{' || concat_ws(',', " + ", ".join(items) + ") || '}')::JSON"


def export_job(con, doc: dict, out: Path, ranks=None, steps=None) -> dict:
    """Write the job of the store on ``con`` (its analyze document ``doc``) to ``out``; ``ranks``, ``steps``: the
    ranks and profiled steps to keep (None: all). Returns ``{ranks, steps, events}`` written."""
    all_ranks = [r for (r,) in con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
    keep = [r for r in all_ranks if ranks is None or r in ranks]
    if not keep:
        raise TraceError(out, f"no rank to export: the run has ranks {', '.join(map(str, all_ranks))}")
    windows = _windows(con, keep, steps)
    out = Path(out)
    store = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()[0]
    spill = Path(f"{store}.tmp")  # where a store's connection may write (traceparse.store.trust.confine)
    spill.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"export-{os.getpid()}-", dir=spill))
    try:
        part = tmp / "events.json"
        con.execute("CREATE OR REPLACE TEMP TABLE export_spans (rank INTEGER, s BIGINT, e BIGINT)")
        con.executemany("INSERT INTO export_spans VALUES (?, ?, ?)", [(r, *w) for r, w in windows.items()])
        n = con.execute(f"""
            COPY (SELECT 'X' AS ph, e.cat, e.name, e.rank AS pid,
                         CASE WHEN device_event(e.cat) AND e.stream IS NOT NULL THEN {STREAM_TID} + e.stream
                              ELSE e.tid END AS tid,
                         {_US.format('e.ts_ns')} AS ts, {_US.format('e.dur_ns')} AS dur, {_args_sql()} AS args
                  FROM events e JOIN export_spans w ON w.rank = e.rank
                  LEFT JOIN op_args o ON o.rank = e.rank AND o.ev_id = e.ev_id
                  LEFT JOIN comm_args c ON c.rank = e.rank AND c.ev_id = e.ev_id AND c.source = 'args'
                  WHERE w.s IS NULL OR (e.ts_ns + coalesce(e.dur_ns, 0) >= w.s AND e.ts_ns <= w.e)
                  ORDER BY e.rank, e.ev_id) TO '{_quoted(part)}' (FORMAT json)""").fetchone()[0]  # rows written
        cpu_pid = dict(con.execute("SELECT rank, mode(pid) FROM events WHERE NOT device_event(cat) "
                                   "GROUP BY rank").fetchall())  # the process of each rank's CPU events
        own = [*_names(con, keep), *_memory(con, windows, cpu_pid), *_flows(con, keep, windows),
               *_path(doc, keep, steps)]
        _write(out, _header(con, keep, doc, cpu_pid), part, own)
    finally:
        for p in tmp.iterdir():
            p.unlink()
        tmp.rmdir()
    return {"ranks": keep, "steps": sorted({s for s in (steps or [])}) or None, "events": n}


def _quoted(p: Path) -> str:
    return str(p).replace("'", "''")


def _windows(con, keep: list, steps) -> dict:
    """Per rank, the span its kept events lie in: from the start of its first kept step to the end of its last
    (None, None: the whole trace)."""
    if steps is None:
        return {r: (None, None) for r in keep}
    got = {r: (s, e) for r, s, e in con.execute(
        "SELECT rank, min(start_ns), max(end_ns) FROM step_windows WHERE list_contains(?, step) GROUP BY rank",
        [sorted(steps)]).fetchall()}
    have = [s for (s,) in con.execute("SELECT DISTINCT step FROM step_windows WHERE step IS NOT NULL "
                                      "ORDER BY 1").fetchall()]
    if not got:
        raise TraceError(None, f"no profiled step {', '.join(map(str, sorted(steps)))} in the run (its steps: "
                               f"{', '.join(map(str, have)) or 'none'})")
    return {r: got[r] for r in keep if r in got}


def _header(con, keep: list, doc: dict, cpu_pid: dict) -> dict:
    """The export's own header: per rank what its trace's header said (to read it back) and the run's clock."""
    ranks = {r["rank"]: r for r in rows(con, "SELECT * FROM ranks ORDER BY rank")}
    groups = {}
    for g in rows(con, "SELECT rank, pg_name, pg_desc, backend_config, pg_size, ranks FROM process_groups"):
        groups.setdefault(g.pop("rank"), []).append(g)
    plugin = dict(con.execute("SELECT rank, metadata FROM plugin_metadata").fetchall())
    per_rank = []
    for r in keep:
        x = ranks[r]
        per_rank.append({"rank": r, "host": x["host"], "world_size": x["world_size"], "backend": x["backend"],
                         "device_name": x["device_name"], "pid": cpu_pid.get(r), "pg_config": groups.get(r, []),
                         "record_shapes": x["record_shapes"], "profile_memory": x["profile_memory"],
                         "schema_version": x["schema_version"], "trace_id": x["trace_id"],
                         "plugin": json.loads(plugin[r]) if r in plugin else None})
    return {KEY: {"version": VERSION, "ranks": per_rank, "clock": doc["run"]["clock"]},
            "schemaVersion": 1, "displayTimeUnit": "ms"}


def _us(ns: int) -> msgspec.Raw:
    """Nanoseconds as microseconds, exactly, as a JSON number (a float64 cannot hold them)."""
    text = f"{ns // 1000}.{ns % 1000:03d}" if ns >= 0 else f"-{-ns // 1000}.{-ns % 1000:03d}"
    return msgspec.Raw(text.encode())


def _names(con, keep: list) -> list[dict]:
    """The ranks' own metadata events (their thread names), then each rank's process and stream names."""
    hosts = dict(con.execute("SELECT rank, host FROM ranks").fetchall())
    out = []
    for t in rows(con, "SELECT * FROM threads WHERE list_contains(?, rank) ORDER BY rank, kind, pid, tid", [keep]):
        out.append({"ph": "M", "name": t["kind"], "pid": t["rank"], "tid": t["tid"] if t["tid"] is not None else 0,
                    "args": {"name" if t["kind"] != "process_labels" else "labels": t["label"],
                                            "original pid": t["pid"]}})
    for r in keep:
        host = f" ({hosts[r]})" if hosts.get(r) else ""
        out.append({"ph": "M", "cat": OWN, "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}{host}"}})
        out.append({"ph": "M", "cat": OWN, "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}})
    for r, stream in con.execute("SELECT DISTINCT rank, stream FROM events WHERE device_event(cat) AND stream IS "
                                 "NOT NULL AND list_contains(?, rank) ORDER BY 1, 2", [keep]).fetchall():
        out.append({"ph": "M", "cat": OWN, "name": "thread_name", "pid": r, "tid": STREAM_TID + stream,
                    "args": {"name": f"stream {stream}"}})
    out.append({"ph": "M", "cat": OWN, "name": "process_name", "pid": PATH_PID, "tid": 0,
                "args": {"name": "critical path and causes (traceparse)"}})
    return out


def _memory(con, windows: dict, cpu_pid: dict) -> list[dict]:
    """The ranks' memory events in their kept spans, on their CPU process (``cpu_pid``)."""
    out = []
    for m in rows(con, "SELECT * FROM memory WHERE list_contains(?, rank) ORDER BY rank, ts_ns", [list(windows)]):
        s, e = windows[m["rank"]]
        if s is not None and not s <= m["ts_ns"] <= e:
            continue
        args = {k: m[c] for k, c in (("Device Type", "device_type"), ("Device Id", "device_id"), ("Bytes", "bytes"),
                                     ("Total Allocated", "total_allocated"), ("Total Reserved", "total_reserved"))
                if m[c] is not None}
        out.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": m["rank"], "tid": 0,
                    "ts": _us(m["ts_ns"]), "args": {**args, "original pid": cpu_pid.get(m["rank"])}})
    return out


def _flows(con, keep: list, windows: dict) -> list[dict]:
    """Each matched collective of the kept ranks: a flow from its last member's arrival to each other member's
    execution, where its last member released it."""
    graph_tables(con)  # cp_completions: the stream each operation's execution ran on (its lane)
    found = rows(con, """
        SELECT a.match_key, a.rank, a.op, a.basis, a.arrival_ns, a.last_arrival_ns, a.is_last, c.tid,
               c.exec_stream, c.exec_ts_ns, c.exec_dur_ns, c.host_ts_ns, c.host_dur_ns,
               d.stream IS NOT NULL AS on_gpu
        FROM collective_arrivals a JOIN comm_ops c USING (rank, op_id)
        LEFT JOIN cp_completions d USING (rank, op_id)
        WHERE list_contains(?, a.rank) ORDER BY a.match_key, a.rank""", [keep])
    by_key = {}
    for f in found:
        by_key.setdefault(f["match_key"], []).append(f)
    out, flow = [], 0
    for members in by_key.values():
        last = next((m for m in members if m["is_last"]), None)
        if last is None or not _inside(windows, last["rank"], last["arrival_ns"]):
            continue
        for m in members:
            if m is last:
                continue
            flow += 1
            out.append({"ph": "s", "cat": OWN, "name": f"{m['op']} released", "id": flow, "pid": last["rank"],
                        "tid": _lane(last), "ts": _us(last["arrival_ns"])})
            start, end = _span(m)
            at = min(max(last["last_arrival_ns"], start), max(start, end - 1))
            out.append({"ph": "f", "bp": "e", "cat": OWN, "name": f"{m['op']} released", "id": flow,
                        "pid": m["rank"], "tid": _lane(m), "ts": _us(at)})
    return out


def _inside(windows: dict, rank: int, t: int) -> bool:
    s, e = windows.get(rank, (None, None))
    return rank in windows and (s is None or s <= t <= e)


def _lane(m: dict) -> int:
    """The thread of a member's arrival: its GPU stream's, its gloo worker thread, else its calling thread."""
    if m["basis"] == "execution" and m["exec_stream"] is not None:
        return STREAM_TID + m["exec_stream"] if m["on_gpu"] else m["exec_stream"]
    return m["tid"] or 0


def _span(m: dict) -> tuple[int, int]:
    if m["basis"] == "execution" and m["exec_ts_ns"] is not None:
        return m["exec_ts_ns"], m["exec_ts_ns"] + (m["exec_dur_ns"] or 0)
    return m["host_ts_ns"], m["host_ts_ns"] + (m["host_dur_ns"] or 0)


def _path(doc: dict, keep: list, steps) -> list[dict]:
    """The critical path of each kept step, one slice per stretch of one rank and cause, and the causes (what fixing
    each saves per step) as instant events at each step's start."""
    out = []
    for s in doc["critical_path"].get("steps", []):
        if steps is not None and s["step"] not in steps:
            continue
        for g in s["segments"]:
            if g["rank"] not in keep:
                continue
            out.append({"ph": "X", "cat": OWN, "name": f"rank {g['rank']} {g['cause']}" +
                        (f": {g['name']}" if g["name"] else ""), "pid": PATH_PID, "tid": 0,
                        "ts": _us(g["start_ns"]), "dur": _us(g["end_ns"] - g["start_ns"]),
                        "args": {"step": s["step"], "rank": g["rank"], "cause": g["cause"]}})
        for c in doc.get("causes", []):
            out.append({"ph": "i", "s": "g", "cat": OWN, "name": f"{c['check']}: {c['cause']}", "pid": PATH_PID,
                        "tid": 1, "ts": _us(s["start_ns"]),
                        "args": {"saved_per_step_ns": c["saved_per_step_ns"], "share": c["share"],
                                 "kind": c.get("kind"), "note": c.get("note")}})
    return out


def _write(out: Path, header: dict, part: Path, own: list[dict]):
    """The header's keys first (the export's own first: read back by its start), then the events, written beside
    ``out`` and put in place whole."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("{\n")
            for k, v in header.items():
                f.write(f"{json.dumps(k)}: {msgspec.json.encode(v).decode()},\n")  # a line each
            f.write('"traceEvents": [\n')
            first = True
            with open(part, encoding="utf-8") as events:
                for line in events:
                    if line.strip():
                        f.write(("" if first else ",\n") + line.rstrip("\n"))
                        first = False
            for e in own:
                f.write(("" if first else ",\n") + msgspec.json.encode(e).decode())
                first = False
            f.write("\n]}\n")
        os.replace(tmp, out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise TraceError(out, f"cannot write: {e.strerror or e}") from None
