"""What every check is made of: a spec that defines its numbers, and a result."""

from dataclasses import dataclass, field

from traceparse.store.query import sql_file


def sql(name: str) -> str:
    """The check query ``analyzers/<name>.sql``."""
    return sql_file("traceparse.analyzers", f"{name}.sql")


@dataclass(frozen=True)
class Spec:
    id: str
    title: str
    definition: str  # what is measured, exactly
    numerator: str
    denominator: str
    needs: str  # the data it requires
    notes: str  # the section of docs/parallelism.md it comes from, and deliberate choices
    example: str  # what it says of a bundled run (fixtures/runs), its expected value worked from the run's configuration


@dataclass
class Result:
    status: str
    numbers: dict = field(default_factory=dict)  # the check's section of the JSON document
    tables: dict = field(default_factory=dict)  # name -> list of row dicts, for detail and charts
    findings: list = field(default_factory=list)  # one sentence each: what is off and the likely cause
    reason: str | None = None  # why not applicable

    def document(self) -> dict:
        doc = {"status": self.status, **self.numbers, "findings": self.findings}
        if self.reason:
            doc["reason"] = self.reason
        return doc


def not_applicable(reason: str) -> Result:
    return Result(status="not_applicable", reason=reason)


def grade(value, warn, fail, higher_is_worse=True) -> str:
    """ok / warn / fail of ``value`` against two thresholds (None value -> ok)."""
    if value is None:
        return "ok"
    if higher_is_worse:
        return "fail" if value >= fail else "warn" if value >= warn else "ok"
    return "fail" if value <= fail else "warn" if value <= warn else "ok"


INLINE_P2P = "on gloo, send/recv run inline on the calling thread, so nothing can hide them"


def inline_p2p(ranks, gpu_ranks) -> str | None:
    """Why the point-to-point communication of ``ranks`` cannot be hidden in this setup (INLINE_P2P): one of them
    runs no GPU work, so its send/recv run inline on the calling thread; None when every one is a GPU rank."""
    return INLINE_P2P if any(r not in gpu_ranks for r in ranks) else None
