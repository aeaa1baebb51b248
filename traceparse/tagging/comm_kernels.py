"""Rules naming custom communication kernels: one TOML file per rule under rules/comm_kernels/.

A GPU kernel whose name matches a rule's ``pattern`` (and is no NCCL/RCCL kernel) is
one communication operation of its own, with the rule's ``op`` (``comm_ops.source`` =
'custom_kernel'; traceparse/store/derive.sql). The loader matches with DuckDB's
``regexp_matches``, which is RE2 and finds the pattern anywhere in the name, so
``validate`` compiles the pattern and runs the examples with that same function, never
with Python's ``re``. Rule ids are unique across tag rules (rules/tags) and kernel rules:
``traceparse explain <id>`` finds either.
"""

import tomllib
from dataclasses import asdict, dataclass
from functools import cache
from importlib.resources import files

from traceparse.rule_files import read_rule

KIND = "comm_kernel"
# comm_ops.op values a kernel can stand for (every normalized op but 'unknown')
OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "gather", "scatter",
       "send", "recv", "barrier")
REQUIRED = ("id", "title", "kind", "op", "pattern", "why", "must_match", "must_not_match")


@dataclass(frozen=True)
class KernelRule:
    id: str
    title: str
    kind: str
    op: str
    pattern: str
    why: str
    must_match: tuple
    must_not_match: tuple
    file: str


def rule_folder():
    return files("traceparse.rules").joinpath("comm_kernels")


def rule_files(folder=None):
    folder = rule_folder() if folder is None else folder
    return sorted((e for e in folder.iterdir() if e.name.endswith(".toml")), key=lambda e: e.name)


def _rule(data: dict, file: str) -> KernelRule:
    return KernelRule(**{k: data.get(k) for k in REQUIRED if k not in ("must_match", "must_not_match")},
                      must_match=tuple(data.get("must_match", ())),
                      must_not_match=tuple(data.get("must_not_match", ())), file=file)


@cache
def load_rules() -> tuple[KernelRule, ...]:
    return tuple(_rule(tomllib.loads(e.read_text()), e.name) for e in rule_files())


def comm_kernel_rules() -> tuple[dict, ...]:
    """The rules as dicts (id, pattern, op, ...), as the store builder reads them."""
    return tuple(asdict(r) for r in load_rules())


def _connect():
    from traceparse.store.build import macro_connection

    return macro_connection()


def matches(con, pattern: str, name: str) -> bool:
    """Does the loader take kernel ``name`` for this rule's kernel? DuckDB's regexp_matches (RE2, a match
    anywhere in the name), applied only to kernels that are no NCCL/RCCL kernel, as derive.sql does."""
    return bool(con.execute("SELECT NOT is_comm_kernel_name(?) AND regexp_matches(?, ?)",
                            [name, name, pattern]).fetchone()[0])


def validate(folder=None) -> list[str]:
    """Every problem with the kernel rule files (of ``folder``, default rules/comm_kernels), as
    'comm_kernels/file: problem' lines (empty when all is well)."""
    import duckdb

    from traceparse.tagging.rules import rule_files as tag_rule_files

    seen = {}  # id -> where it is used: the tag rules first, then these
    for entry in tag_rule_files():
        try:
            seen[tomllib.loads(entry.read_text()).get("id")] = f"the tag rule tags/{entry.name}"
        except tomllib.TOMLDecodeError:
            continue  # reported by the tag rules' own validation
    problems = []
    con = _connect()
    for entry in rule_files(folder):
        data, found = read_rule(entry, f"comm_kernels/{entry.name}", REQUIRED, seen)
        problems += found
        if data is None:
            continue
        name = f"comm_kernels/{entry.name}"
        if data["kind"] != KIND:
            problems.append(f"{name}: kind {data['kind']!r} is not {KIND!r}")
        if data["op"] not in OPS:
            problems.append(f"{name}: op {data['op']!r} is not one of {', '.join(OPS)}")
        examples = {k: data[k] for k in ("must_match", "must_not_match")}
        if not all(isinstance(v, list) and v and all(isinstance(s, str) for s in v) for v in examples.values()):
            problems.append(f"{name}: must_match and must_not_match must be non-empty lists of kernel names")
            continue
        pattern = data["pattern"]
        if not isinstance(pattern, str) or not pattern:
            problems.append(f"{name}: pattern must be a non-empty string")
            continue
        try:
            if con.execute("SELECT regexp_matches('', ?)", [pattern]).fetchone()[0]:
                problems.append(f"{name}: pattern matches an empty name, so it would take every kernel")
        except duckdb.Error as e:
            problems.append(f"{name}: pattern is not a valid RE2 expression for DuckDB's regexp_matches "
                            f"({str(e).splitlines()[0]})")
            continue
        for kind, expected in (("must_match", True), ("must_not_match", False)):
            for i, kernel in enumerate(examples[kind]):
                if matches(con, pattern, kernel) != expected:
                    nccl = expected and con.execute("SELECT is_comm_kernel_name(?)", [kernel]).fetchone()[0]
                    why = " (an NCCL/RCCL kernel: the loader never hands those to kernel rules)" if nccl else ""
                    problems.append(f"{name}: {kind}[{i}] {'does not match' if expected else 'matches'}{why}: {kernel}")
    return problems
