"""The range of every number a layout or a model fact takes, whichever way it comes: ``--layout``, ``--given``
(traceparse/layout/stated.py) or the traces' metadata (traceparse/ingest/plugin_metadata.py,
traceparse/layout/declared.py). A value outside its key's range is refused (an option) or dropped with a load
issue or a note (metadata), never used.

These bound the values; what a value sizes (the actions of a pipeline's order, its stages) is capped where the work
is built (traceparse/models/pipeline.py MAX_ACTIONS, MAX_STAGES), or computed in closed form.
"""

from traceparse.axes import AXES, HSDP_KEYS

RANKS = (1 << 31) - 1  # ranks, world sizes and degrees: the store keeps them as INTEGER (int32)
COUNT = 10**15  # every other count (parameters, layers, micro-batches, ...): those of the largest models fit
MEMORY_BYTES = 1 << 60  # a device's memory (whatif --device-memory): within an exbibyte, as the parser's memory counts
RANGE = {
    "zero_stage": (0, 3),
    "n_opt": (0, 64),  # state tensors per parameter (0: plain SGD)
    **{k: (1, RANKS) for k in AXES + HSDP_KEYS + ("ranks_per_node",)},
}


def int_range(key: str) -> tuple[int, int]:
    """(lowest, highest) whole number ``key`` takes."""
    return RANGE.get(key, (1, COUNT))


def in_range(key: str, v) -> bool:
    """Whether ``v`` is a whole number (not a bool) within ``key``'s range."""
    lo, hi = int_range(key)
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi
