#!/usr/bin/env python
"""Replica maker: an N-rank run built from a real R-rank run, for benchmarking the analyzer at scale.

Usage:
  python bench/replicate.py SRC_RUN_DIR OUT_DIR --ranks N [--seed S] [--jitter-us J] [--workers W]

N must be a multiple of the source world size R; k = N / R replicas; replica j of source rank r is
written as ``OUT_DIR/rank{j*R + r}.json.gz`` (gzip level 1). Each source file is parsed once and its
k copies written from it (``--workers W`` > 1: a process pool over source ranks; default serial).

Rewritten, consistently on every output rank:

- process groups (``distributedInfo.pg_config``, the plugin metadata's ``groups``, and the
  ``record_param_comms`` / NCCL kernel args ``Process Group Name/Ranks``, ``Group size``,
  ``Global rank start/stride``, ``Rank``). A group that spans the whole source world, and a
  data-parallel group (metadata ``dim`` or ``pg_desc`` ``mesh_<d>`` with d in ``DP_DIMS``), becomes
  the union of its copies over all replicas, ``{g + i*R for g in G for i in range(k)}`` (the job gets
  k times wider in data parallelism); every other group gets one shifted copy per replica, ``G + j*R``.
  Names: a numeric pg_name p becomes ``p*k`` for a union and ``p*k + j`` for copy j, so a rank's groups
  keep their creation order (the analyzer matches gloo worker threads to groups in that order);
  another name stays for a union and copy 0 and becomes ``{name}_r{j}`` for copy j > 0;
- gloo ``c10d::send`` / ``c10d::recv_``: the peer is an index into the op's group, which the trace
  does not name. In a shifted group the index stays valid; in a union it must move by ``j * len(G)``
  to reach the same peer within replica j. The index is kept when any of the rank's groups where it
  names another rank is shifted (pipeline p2p runs in a pp group, shifted), else moved for the
  smallest such union (p2p on the world group, the only group, as in the pp4 runs). A p2p on a union
  group while a shifted group also fits the index is therefore not rewritten correctly;
- ``distributedInfo`` rank, world_size, pg_count (x k); metadata rank, world_size, mesh (the
  data-parallel or unioned dimension's size x k and coordinate + j * size; a mesh without one gets a
  leading ``dp`` dimension of size k), layout ``dp`` / ``dp_replicate`` (x k);
- ``trace_id`` of copies j > 0 (the loader refuses files of one run with several shared trace ids);
- every event's ``ts`` + one offset per output rank, uniform in [0, jitter_us] in whole nanoseconds
  (seeded): durations and order within a rank are unchanged.

The mesh coordinate matches the rank numbering when the scaled dimension is the mesh's outermost.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import msgspec  # a traceparse dependency

_loads, _dumps = msgspec.json.decode, msgspec.json.encode

DP_DIMS = ("dp", "dp_replicate", "edp")  # data-parallel mesh dimensions: their groups are unioned
GROUP_ARGS = ("Process Group Name", "Process Group Ranks", "Group size", "Global rank start", "Global rank stride",
              "Rank")
P2P_OPS = ("c10d::send", "c10d::recv_")
P2P_PEER = 2  # index of the peer in their Concrete Inputs (traceparse.ingest.c10d_shapes)
RANK_FILE = re.compile(r"rank(\d+)\.json(\.gz)?$")


def source_files(src) -> dict[int, Path]:
    """{rank: file} of the run folder, from the file names ``rank{r}.json[.gz]``."""
    files = {int(m.group(1)): p for p in Path(src).iterdir() if (m := RANK_FILE.search(p.name))}
    if not files or sorted(files) != list(range(len(files))):
        raise SystemExit(f"{src}: expected rank0..rank{{R-1}}.json[.gz], found ranks {sorted(files)}")
    return files


def offsets(n: int, seed: int, jitter_us: float) -> list[float]:
    """One timestamp offset (microseconds, whole nanoseconds) per output rank."""
    rng = random.Random(seed)
    top = int(round(jitter_us * 1000))
    return [rng.randint(0, top) / 1000 for _ in range(n)]


def is_union(ranks, desc, dim, world) -> bool:
    """Whether a group's copies are unioned (it spans the world, or is data-parallel) rather than shifted."""
    return (sorted(set(ranks)) == list(range(world)) or dim in DP_DIMS
            or (isinstance(desc, str) and desc in {f"mesh_{d}" for d in DP_DIMS}))


class Groups:
    """The rewriting rule for the groups of one source rank, in replica j."""

    def __init__(self, world: int, k: int, j: int):
        self.R, self.k, self.j = world, k, j

    def is_union(self, ranks, desc=None, dim=None) -> bool:
        return is_union(ranks, desc, dim, self.R)

    def ranks(self, ranks, union):
        if union:
            return sorted(g + i * self.R for g in ranks for i in range(self.k))
        return [g + self.j * self.R for g in ranks]

    def name(self, name, union):
        if isinstance(name, str) and name.isdigit():
            return str(int(name) * self.k + (0 if union else self.j))
        return name if union or self.j == 0 or name is None else f"{name}_r{self.j}"


def _parse_ranks(value):
    """'Process Group Ranks' as written ('[0, 1]' text, or a list) -> list of ints, or None."""
    try:
        out = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return None
    return out if isinstance(out, list) and all(isinstance(r, int) for r in out) else None


class SourceRank:
    """One parsed source trace and what its copies rewrite."""

    def __init__(self, path, rank: int, world: int):
        with gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb") as f:
            self.doc = _loads(f.read())
        info = self.doc.get("distributedInfo") or {}
        if info.get("rank", rank) != rank or info.get("world_size", world) != world:
            raise SystemExit(f"{path}: distributedInfo says rank {info.get('rank')} of {info.get('world_size')}, "
                             f"expected rank {rank} of {world}")
        self.rank, self.R = rank, world
        meta = self.doc.get("traceparse") if isinstance(self.doc.get("traceparse"), dict) else {}
        dims = {g.get("name"): g.get("dim") for g in meta.get("groups") or [] if isinstance(g, dict)}
        # the rank's groups: pg_name -> (ranks, desc, dim)
        self.pgs = {pg.get("pg_name"): (pg["ranks"], pg.get("pg_desc"), dims.get(pg.get("pg_name")))
                    for pg in info.get("pg_config") or [] if isinstance(pg.get("ranks"), list)}
        events = self.doc.get("traceEvents") or []
        self.timed = [e for e in events if isinstance(e.get("ts"), (int, float)) and not isinstance(e["ts"], bool)]
        self.ts = [e["ts"] for e in self.timed]
        self.comm = []  # (args, original values of GROUP_ARGS)
        self.p2p = []  # (args, original Concrete Inputs, peer index, group ranks or None)
        for e in events:
            args = e.get("args")
            if not isinstance(args, dict):
                continue
            if any(a in args for a in GROUP_ARGS[:5]):
                self.comm.append((args, {a: args[a] for a in GROUP_ARGS if a in args}))
            if e.get("name") in P2P_OPS and isinstance(args.get("Concrete Inputs"), list):
                ci = args["Concrete Inputs"]
                try:
                    peer = int(ci[P2P_PEER])
                except (IndexError, TypeError, ValueError):
                    continue
                self.p2p.append((args, ci, peer, self._p2p_group(peer)))

    def _p2p_group(self, peer):
        """The group a send/recv with this peer index is taken to run in, among the rank's groups where that
        index names another rank: None (index kept) when one of them is shifted, else the smallest union."""
        cands = [(r, d, m) for r, d, m in self.pgs.values() if peer < len(r) and r[peer] != self.rank]
        if any(not is_union(*c, self.R) for c in cands):
            return None
        return min(cands, key=lambda c: len(c[0]), default=None)

    def copy(self, j: int, k: int, offset: float) -> dict:
        """The document of replica j (the events are rewritten in place; the header is a new dict)."""
        g = Groups(self.R, k, j)
        n = j * self.R + self.rank
        for e, t in zip(self.timed, self.ts, strict=True):
            e["ts"] = t + offset
        for args, orig in self.comm:
            self._comm_args(g, args, orig, n)
        for args, ci, peer, group in self.p2p:
            new = list(ci)
            if group is not None:
                new[P2P_PEER] = str(peer + j * len(group[0]))
            args["Concrete Inputs"] = new
        doc = dict(self.doc)
        doc["distributedInfo"] = self._info(g, n)
        if isinstance(self.doc.get("traceparse"), dict):
            doc["traceparse"] = self._meta(g, n)
        if j and isinstance(doc.get("trace_id"), str):
            doc["trace_id"] = hashlib.md5(f"{doc['trace_id']}:{j}".encode()).hexdigest().upper()
        return doc

    def _comm_args(self, g, args, orig, n):
        name = orig.get("Process Group Name")
        known = self.pgs.get(name)
        ranks = known[0] if known else _parse_ranks(orig.get("Process Group Ranks"))
        if ranks is None:
            return
        union = g.is_union(*known) if known else g.is_union(ranks, args.get("Process Group Description"))
        new = g.ranks(ranks, union)
        if "Process Group Name" in orig:
            args["Process Group Name"] = g.name(name, union)
        if "Process Group Ranks" in orig:
            text = orig["Process Group Ranks"]
            args["Process Group Ranks"] = "[" + ", ".join(map(str, new)) + "]" if isinstance(text, str) else new
        if "Group size" in orig:
            args["Group size"] = len(new)
        if "Global rank start" in orig:
            stride = new[1] - new[0] if len(new) > 1 else 1
            if new == list(range(new[0], new[0] + stride * len(new), stride)):
                args["Global rank start"] = new[0]
                if "Global rank stride" in orig:
                    args["Global rank stride"] = stride
            else:  # not a progression: leave the ranks to 'Process Group Ranks'
                args.pop("Global rank start", None)
                args.pop("Global rank stride", None)
        if "Rank" in orig and self.rank in ranks:
            old = orig["Rank"]
            args["Rank"] = new.index(n) if old == ranks.index(self.rank) else n if old == self.rank else old

    def _info(self, g, n):
        info = dict(self.doc.get("distributedInfo") or {})
        info.update(rank=n, world_size=self.R * g.k)
        if isinstance(info.get("pg_count"), int):
            info["pg_count"] = info["pg_count"] * g.k
        pgs = []
        for pg in info.get("pg_config") or []:
            pg = dict(pg)
            if isinstance(pg.get("ranks"), list):
                ranks, desc, dim = self.pgs[pg.get("pg_name")]
                union = g.is_union(ranks, desc, dim)
                pg["ranks"] = g.ranks(ranks, union)
                pg["pg_size"] = len(pg["ranks"])
                pg["pg_name"] = g.name(pg.get("pg_name"), union)
            pgs.append(pg)
        if "pg_config" in info:
            info["pg_config"] = pgs
        return info

    def _meta(self, g, n):
        meta = dict(self.doc["traceparse"])
        meta.update(rank=n, world_size=self.R * g.k)
        groups, union_dims = [], set()
        for grp in meta.get("groups") or []:
            grp = dict(grp)
            if isinstance(grp.get("ranks"), list):
                union = g.is_union(grp["ranks"], grp.get("desc"), grp.get("dim"))
                if union and grp.get("dim"):
                    union_dims.add(grp["dim"])
                grp["ranks"] = g.ranks(grp["ranks"], union)
                grp["name"] = g.name(grp.get("name"), union)
            groups.append(grp)
        if "groups" in meta:
            meta["groups"] = groups
        if isinstance(meta.get("mesh"), dict):
            meta["mesh"] = _mesh(meta["mesh"], g, union_dims)
        if isinstance(meta.get("layout"), dict):
            meta["layout"] = {key: v * g.k if key in ("dp", "dp_replicate") and isinstance(v, int) else v
                              for key, v in meta["layout"].items()}
        return meta


def _mesh(mesh, g, union_dims):
    dims, shape, coord = mesh.get("dims"), mesh.get("shape"), mesh.get("coordinate")
    if not (isinstance(dims, list) and isinstance(shape, list) and len(dims) == len(shape)):
        return mesh
    coord = list(coord) if isinstance(coord, list) and len(coord) == len(dims) else None
    i = next((i for i, d in enumerate(dims) if d in DP_DIMS or d in union_dims), None)
    if i is None:
        dims, shape, coord, i = ["dp", *dims], [1, *shape], [0, *coord] if coord else None, 0
    shape = list(shape)
    if coord:
        coord[i] += g.j * shape[i]
    shape[i] *= g.k
    return {**mesh, "dims": list(dims), "shape": shape, "coordinate": coord}


def _write(path: Path, doc: dict):
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(gzip.compress(_dumps(doc), compresslevel=1, mtime=0))
    os.replace(tmp, path)


def replicate_rank(path, rank: int, world: int, k: int, out, offs) -> list[Path]:
    """Write the k copies of one source rank; ``offs`` is the list of every output rank's offset."""
    src = SourceRank(path, rank, world)
    written = []
    for j in range(k):
        n = j * world + rank
        target = Path(out) / f"rank{n}.json.gz"
        _write(target, src.copy(j, k, offs[n]))
        written.append(target)
    return written


def replicate(src, out, ranks: int, seed: int = 0, jitter_us: float = 50.0, workers: int = 1) -> list[Path]:
    """Build the ``ranks``-rank run from the run folder ``src`` in ``out``; the written files, by rank."""
    files = source_files(src)
    world = len(files)
    if ranks < world or ranks % world:
        raise SystemExit(f"--ranks {ranks} is not a multiple of the source world size {world}")
    k = ranks // world
    Path(out).mkdir(parents=True, exist_ok=True)
    offs = offsets(ranks, seed, jitter_us)
    jobs = [(files[r], r, world, k, out, offs) for r in range(world)]
    if workers > 1:
        with ProcessPoolExecutor(min(workers, world)) as pool:
            done = list(pool.map(replicate_rank, *zip(*jobs, strict=True)))
    else:
        done = [replicate_rank(*job) for job in jobs]
    return sorted((p for ps in done for p in ps), key=lambda p: int(RANK_FILE.search(p.name).group(1)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="folder of the source run: rank0.json.gz ... rank{R-1}.json.gz")
    ap.add_argument("out", help="folder for the replicated run (created)")
    ap.add_argument("--ranks", type=int, required=True, help="N, a multiple of the source world size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jitter-us", type=float, default=50.0, help="per-rank clock offsets drawn in [0, J] us")
    ap.add_argument("--workers", type=int, default=1, help="processes over source ranks (default 1: serial)")
    a = ap.parse_args(argv)
    written = replicate(a.src, a.out, a.ranks, a.seed, a.jitter_us, a.workers)
    print(f"wrote {len(written)} ranks to {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
