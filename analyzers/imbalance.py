"""The imbalance check (being written)."""

from .base import Spec, not_applicable

SPEC = Spec(
    id="imbalance",
    title="imbalance",
    definition="not yet defined",
    numerator="-",
    denominator="-",
    needs="-",
    notes="-",
)


def run(ctx):
    return not_applicable("this check is not implemented yet")
