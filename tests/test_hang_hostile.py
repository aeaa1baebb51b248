"""Hostile Flight Recorder dumps (docs/reliability.md, class ``dump``): every one is refused with exit 2 and one
line naming the file, within seconds and bounded memory; never exit 3, never a hang, never a silent "no divergence".

Each case is built from the real dumps of ``fixtures/hangs/`` by ``tests/mutation/dumps.py`` and given to
``traceparse hang`` as a subprocess with a timeout and an address-space limit (RLIMIT_AS 4 GiB, as the mutation
campaign's: an idle ``hang`` with its traces maps about 2.7 GB with duckdb 2.0, about 1 GB with earlier versions; the
bombs below would need from 6 GB to forever). ``TRACEPARSE_HOSTILE_PYTHONPATH`` runs another
checkout's traceparse instead (e.g. the code before the fix) to compare.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mutation.dumps import OPCODES, build, dump, files_of, pickled

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses RLIMIT_AS")]

LIMIT_AS = 4 << 30
TIMEOUT = 30  # seconds; a case takes about one (the interpreter's start and imports), a bomb too
SECONDS = 10  # what a refusal may take
PYTHONPATH = os.environ.get("TRACEPARSE_HOSTILE_PYTHONPATH")

# id -> (builder, its fixed choices): hostile Flight Recorder dumps (bombs, wrong types, bad values, cut files...)
CASES = {
    # bombs: by depth (2^40 values as JSON from a 3 KB file) and by sharing (one 8 MiB string listed 1,024 times)
    "dag_input_sizes": ("bomb_depth", {"job": "size_mismatch", "rank": 1, "where": "entry.input_sizes", "depth": 40}),
    "dag_frames": ("bomb_depth", {"job": "rank_dies", "rank": 0, "where": "entry.frames", "depth": 64}),
    "dag_pg_status": ("bomb_depth", {"job": "pp_deadlock", "rank": 0, "where": "pg_status", "depth": 40}),
    "dag_version": ("bomb_depth", {"job": "optype_mismatch", "rank": 1, "where": "version", "depth": 40}),
    "dag_unknown_key": ("bomb_depth", {"job": "skip_allreduce", "rank": 2, "where": "unknown", "depth": 33}),
    "string_8mib_x1024": ("bomb_sharing", {"job": "size_mismatch", "rank": 0, "where": "entry.input_sizes",
                                          "string_mib": 8, "times": 1024}),
    "shared_lists_1000": ("bomb_sharing", {"job": "tp_hang_in_dp_tp", "rank": 2, "where": "entry.frames",
                                          "width": 1000}),
    # nesting
    "nest_200k_pickle": ("deep_nesting", {"job": "size_mismatch", "rank": 1, "where": "entry.input_sizes",
                                         "depth": 200_000, "fmt": "pkl"}),
    "nest_1m_pg_status": ("deep_nesting", {"job": "pp_deadlock", "rank": 1, "where": "pg_status", "depth": 1_000_000,
                                          "fmt": "pkl"}),
    "nest_200k_json": ("deep_nesting", {"job": "rank_dies", "rank": 2, "where": "entry.frames", "depth": 200_000,
                                       "fmt": "json"}),
    # contradictions within a dump and impossible values (the hang said "no divergence", exit 0)
    "collective_twice": ("contradiction", {"job": "size_mismatch", "rank": 1, "how": "collective twice"}),
    "collective_renumbered": ("contradiction", {"job": "skip_allreduce", "rank": 0, "how": "collective renumbered"}),
    "record_twice": ("contradiction", {"job": "optype_mismatch", "rank": 0, "how": "record twice"}),
    "negative_ranks": ("contradiction", {"job": "size_mismatch", "how": "negative ranks"}),
    "key_twice_seq": ("duplicate_key", {"job": "size_mismatch", "rank": 1, "key": "collective_seq_id"}),
    "key_twice_group": ("duplicate_key", {"job": "tp_hang_in_dp_tp", "rank": 0, "key": "process_group"}),
    # pg_status
    "pg_status_tuple_key": ("pg_status_odd", {"job": "size_mismatch", "rank": 0, "how": "tuple key"}),
    "pg_status_cycle": ("pg_status_odd", {"job": "size_mismatch", "rank": 1, "how": "cycle"}),
    "pg_status_list_cycle": ("pg_status_odd", {"job": "rank_dies", "rank": 0, "how": "cycle through a list"}),
    "entries_cycle": ("pg_status_odd", {"job": "pp_deadlock", "rank": 1, "how": "entries in a cycle"}),
    # stacks that are not lists of frames
    **{f"frames_{k}": ("frames_odd", {"job": "skip_allreduce", "rank": 1, "value": v}) for k, v in {
        "strings": ["a frame"], "ints": [1, 2], "none": [None], "a_string": "f (x.py:3)", "a_dict": {"name": "f"},
        "lists": [["f", "x.py", 3]], "an_int": 7, "field_types": [{"name": 1, "filename": 2, "line": "x"}],
        "filename_list": [{"filename": ["x.py"], "name": "f", "line": 1}]}.items()},
    # Infinity, NaN and 1e400 where an integer must be
    **{f"{f}_{v}_{fmt}": ("nonfinite", {"job": "size_mismatch", "rank": 0, "field": f, "value": v, "fmt": fmt})
       for f in ("collective_seq_id", "time_created_ns") for v, fmt in
       (("Infinity", "json"), ("1e400", "json"), ("-Infinity", "pkl"), ("NaN", "pkl"))},
    "op_id_nan_json": ("nonfinite", {"job": "optype_mismatch", "rank": 1, "field": "op_id", "value": "NaN",
                                     "fmt": "json"}),
    # integers the store cannot hold (INT32 ranks, INT64 ids and times) or that cannot be
    "rank_2p31": ("out_of_range", {"job": "size_mismatch", "rank": 0, "field": "rank", "value": 1 << 31}),
    "rank_2p64": ("out_of_range", {"job": "size_mismatch", "rank": 0, "field": "rank", "value": 1 << 64}),
    "rank_minus_1": ("out_of_range", {"job": "skip_allreduce", "rank": 2, "field": "rank", "value": -1}),
    "rank_in_name_2p31": ("out_of_range", {"job": "size_mismatch", "rank": 1, "field": "name", "value": 1 << 31}),
    "rank_in_name_10p30": ("out_of_range", {"job": "size_mismatch", "rank": 1, "field": "name", "value": 10 ** 30}),
    "seq_2p63": ("out_of_range", {"job": "size_mismatch", "rank": 1, "field": "collective_seq_id", "value": 1 << 63}),
    "seq_minus_1": ("out_of_range", {"job": "size_mismatch", "rank": 1, "field": "collective_seq_id", "value": -1}),
    "seq_true": ("out_of_range", {"job": "size_mismatch", "rank": 1, "field": "collective_seq_id", "value": True}),
    "p2p_seq_2p64": ("out_of_range", {"job": "pp_deadlock", "rank": 0, "field": "p2p_seq_id", "value": 1 << 64}),
    "record_id_2p63": ("out_of_range", {"job": "rank_dies", "rank": 2, "field": "record_id", "value": 1 << 63}),
    "time_created_2p64": ("out_of_range", {"job": "rank_dies", "rank": 0, "field": "time_created_ns",
                                           "value": 1 << 64}),
    "timeout_10p30": ("out_of_range", {"job": "optype_mismatch", "rank": 0, "field": "timeout_ms", "value": 10 ** 30}),
    "op_id_2p63": ("out_of_range", {"job": "tp_hang_in_dp_tp", "rank": 3, "field": "op_id", "value": 1 << 63}),
    "op_id_minus_2p63_1": ("out_of_range", {"job": "tp_hang_in_dp_tp", "rank": 3, "field": "op_id",
                                            "value": -(1 << 63) - 1}),
    "group_rank_2p31": ("out_of_range", {"job": "size_mismatch", "rank": 0, "field": "pg_config", "value": 1 << 31}),
    "group_rank_2p63": ("out_of_range", {"job": "size_mismatch", "rank": 0, "field": "pg_config", "value": 1 << 63}),
    "group_ranks_text_2p31": ("out_of_range", {"job": "size_mismatch", "rank": 1, "field": "pg_config",
                                               "value": "[0, 2147483648]"}),
    "group_ranks_text_infinity": ("out_of_range", {"job": "size_mismatch", "rank": 1, "field": "pg_config",
                                                   "value": "[0, Infinity]"}),
    "group_ranks_text_nested": ("out_of_range", {"job": "size_mismatch", "rank": 1, "field": "pg_config",
                                                 "value": "[" * 100_000 + "]" * 100_000}),
    "group_rank_twice": ("out_of_range", {"job": "size_mismatch", "rank": 0, "field": "pg_config", "value": "[0, 0]"}),
    # the in-flight record beside a dump
    "inflight_peer_2p31": ("inflight_odd", {"job": "pp_deadlock", "rank": 0, "field": "peer", "value": 1 << 31}),
    "inflight_peer_2p63": ("inflight_odd", {"job": "pp_deadlock", "rank": 1, "field": "peer", "value": 1 << 63}),
    "inflight_peer_minus_1": ("inflight_odd", {"job": "pp_deadlock", "rank": 1, "field": "peer", "value": -1}),
    "inflight_op_id_2p64": ("inflight_odd", {"job": "size_mismatch", "rank": 1, "field": "op_id", "value": 1 << 64}),
    "inflight_time_1e400": ("inflight_odd", {"job": "skip_allreduce", "rank": 0, "field": "time_ns",
                                             "value": "1e400"}),
    "inflight_group_rank_2p31": ("inflight_odd", {"job": "skip_allreduce", "rank": 2, "field": "group_ranks",
                                                  "value": 1 << 31}),
    # pickle opcodes on the wrong type, and the ones a dump never holds
    **{"opcode_" + "_".join(w.strip("(),") for w in k.split()[:4]): (
        "opcode", {"job": "size_mismatch", "rank": 1, "where": "entry.input_sizes", "which": k}) for k in OPCODES},
    "opcode_in_entries": ("opcode", {"job": "rank_dies", "rank": 2, "where": "entries", "which": "APPENDS to a dict"}),
    "opcode_as_group": ("opcode", {"job": "rank_dies", "rank": 0, "where": "entry.process_group",
                                   "which": "BUILD on a list"}),
}
VALID = ["protocol", "shared frames", "unknown fields", "json dumps"]


def _limits():  # in the child, before exec
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def hang(folder: Path, dumps: list[str]) -> tuple[int | None, str, str, float]:
    """``traceparse hang DUMPS --no-cache --format json`` in ``folder``: (exit code, None past TIMEOUT; stdout;
    stderr; seconds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEPARSE_")}
    env.update(TRACEPARSE_CACHE=str(folder / "cache"), TMPDIR=str(folder / "tmp"))
    if PYTHONPATH:
        env["PYTHONPATH"] = PYTHONPATH
    (folder / "tmp").mkdir(exist_ok=True)
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "traceparse.cli", "hang", *dumps, "--no-cache", "--format", "json"],
                         cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_limits)
    try:
        out, err = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, err = p.communicate()
        return None, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - t0
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - t0


def _write(folder: Path, files: dict):
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)


def run_case(case_id: str, root: Path):
    kind, choices = CASES[case_id] if case_id in CASES else ("valid", {"how": case_id, "job": "size_mismatch"})
    files, dumps, names, what = build(kind, random.Random(case_id), **choices)
    folder = root / f"c{[*CASES, *VALID].index(case_id)}"  # short: $TMPDIR in it holds multiprocessing's sockets
    _write(folder, files)
    return (*hang(folder, dumps), names, what)


_results: dict = {}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every case run once, two at a time (each is a process of about one second)."""
    if not _results:
        root = tmp_path_factory.mktemp("hostile")
        ids = [*CASES, *VALID]
        with ThreadPoolExecutor(2) as pool:
            _results.update(zip(ids, pool.map(lambda i: run_case(i, root), ids), strict=True))
    return _results


@pytest.mark.parametrize("case_id", list(CASES))
def test_a_hostile_dump_is_refused_in_one_line_naming_it(case_id, results):
    rc, out, err, took, names, what = results[case_id]
    assert rc is not None, f"{what}: still running after {TIMEOUT}s"
    lines = err.strip().splitlines()
    assert rc == 2, f"{what}: exit {rc} ({'no divergence' if rc == 0 else 'a divergence' if rc == 1 else err[-600:]})"
    assert len(lines) == 1 and lines[0].startswith("traceparse: error: "), f"{what}: {err[-600:]}"
    assert any(n in lines[0] for n in names), f"{what}: the line does not name {names}: {lines[0]}"
    assert took < SECONDS, f"{what}: refused after {took:.1f}s"


@pytest.mark.parametrize("how", VALID)
def test_valid_dumps_still_give_the_divergence(how, results):
    """Re-pickled with protocols 2-5 or with stacks shared between entries, with unknown fields of moderate size, or
    as JSON dumps: the job's size mismatch (exit 1)."""
    rc, out, err, took, names, what = results[how]
    assert rc == 1, f"{what}: exit {rc}: {err[-600:]}"
    assert '"size_mismatch"' in out


def test_the_reasons_name_what_is_wrong(results):
    """A few refusals, word for word after the file: what the dump holds and where."""
    said = {k: results[k][2].strip().split(".pkl: ", 1)[-1].split(".json: ", 1)[-1] for k in (
        "dag_input_sizes", "string_8mib_x1024", "shared_lists_1000", "nest_200k_pickle", "collective_twice",
        "negative_ranks", "opcode_APPENDS_to_a_dict", "seq_2p63", "inflight_peer_2p31", "pg_status_tuple_key",
        "pg_status_cycle", "frames_strings")}
    assert said == {
        "dag_input_sizes": "Flight Recorder dump: it is nested more than 32 deep (pickle marks within marks; real "
                           "dumps: 5)",
        "string_8mib_x1024": "Flight Recorder dump: entries[3].input_sizes would be 8,192 MiB as JSON, shared parts "
                             "counted each time they appear (at most 8,000,000 values and 256 MiB: real dumps hold "
                             "tens of MiB)",
        "shared_lists_1000": "Flight Recorder dump: entries[2].frames would be 1,001,001,001 values as JSON, shared "
                             "parts counted each time they appear (at most 8,000,000 values and 256 MiB: real dumps "
                             "hold tens of MiB)",
        "nest_200k_pickle": "Flight Recorder dump: entries[1].input_sizes[0][0]... is nested more than 32 deep (real "
                            "dumps: 5)",
        "collective_twice": "Flight Recorder dump: entries 6 and 7 are both collective_seq_id 7 of group '0' "
                            "('default_pg'): one collective numbered twice",
        "negative_ranks": "Flight Recorder dump: its rank is -1, not an integer from 0 to 2^31 - 1",
        "opcode_APPENDS_to_a_dict": "Flight Recorder dump: its pickle opcode APPENDS adds to a dict, not to a list",
        "seq_2p63": "Flight Recorder dump: entry 2: collective_seq_id is 9223372036854775808, not an integer from 0 "
                    "to 2^63 - 1",
        "inflight_peer_2p31": "in-flight record: peer is 2147483648, not an integer from 0 to 2^31 - 1",
        "pg_status_tuple_key": "Flight Recorder dump: its pickle opcode SETITEM gives a dict a tuple as a key: a "
                               "Flight Recorder dump's keys are strings",
        "pg_status_cycle": "Flight Recorder dump: pg_status.loop holds itself (a cycle)",
        "frames_strings": "Flight Recorder dump: entry 4: frames is not a list of frames ({name, filename, line})",
    }


def test_the_restricted_unpickler_reads_what_real_dumps_hold():
    """The real dumps load as the standard unpickler reads them, shared objects staying shared."""
    from traceparse.ingest.flight_recorder import _unpickle

    for p in sorted((Path(__file__).resolve().parents[1] / "fixtures" / "hangs").glob("*/fr_rank*.pkl")):
        data = p.read_bytes()
        assert _unpickle(data) == pickle.loads(data)
    shared = ["x"] * 3
    got = _unpickle(pickled({"a": [shared, shared]}))
    assert got["a"][0] is got["a"][1]


# ------------------------------------------------------------------ membership contradictions: found, never "no divergence"
# id -> (job, {rank: the ranks its pg_config lists for the default group}, the contradictions said, in order)
OWN = "call on a group their own dumps list without them"
MEMBERSHIP = {
    "both_ranks_list_5_6": ("size_mismatch", {0: [5, 6], 1: [5, 6]}, [f"ranks [0, 1] {OWN}"]),
    "one_rank_lists_itself_out": ("skip_allreduce", {2: [0, 1]}, [
        "dumps list different ranks for one group", f"ranks [2] {OWN}"]),
    "one_rank_lists_a_stranger": ("optype_mismatch", {1: [0, 5]}, [
        "dumps list different ranks for one group", f"ranks [1] {OWN}"]),
    "three_ranks_list_a_world_of_two": ("rank_dies", {0: [0, 1], 2: [0, 1]}, [f"ranks [2] {OWN}"]),
}


@pytest.mark.parametrize("case_id", list(MEMBERSHIP))
def test_dumps_contradicting_their_own_membership_are_reported(case_id, tmp_path):
    """A dump's ``pg_config`` listing the default group without the rank that dumped it (and calls on it): exit 1 with
    the contradiction named, never exit 0 and "no divergence"."""
    job, lists, said = MEMBERSHIP[case_id]
    changed = {}
    for r, ranks in lists.items():
        d = dump(job, r)
        d["pg_config"] = {"": {"name": "", "desc": "", "ranks": str(ranks)}}
        changed[f"fr_rank{r}.pkl"] = pickled(d)
    files, dumps = files_of(job, changed)
    _write(tmp_path / "c", files)
    rc, out, err, _took = hang(tmp_path / "c", dumps)
    assert rc == 1, f"{case_id}: exit {rc}: {err[-600:]}"
    doc = json.loads(out)
    assert doc["verdict"] != "no_divergence"
    assert [c["what"] for c in doc["contradictions"]] == said
