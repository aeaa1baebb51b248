"""``traceparse whatif``: forecast another layout of the same job from a measured run.

``whatif_document(con, doc, target)`` returns the versioned document: the measured facts it used (each with its
source), the target layout, and the prediction (step time, bubble, bytes per rank per step and exposed
communication per strategy, memory per device). The models are in ``forecast``.
"""

from .forecast import forecast
from .measured import measured
from .sweep import sweep

VERSION = 1


def whatif_document(con, doc: dict, target: dict) -> dict:
    """The whatif document of the run in ``con`` (its analyze document ``doc``) for the layout ``target``."""
    facts = measured(con, doc)
    got = forecast(facts, target)
    return {"version": VERSION, "run": doc["run"], "measured": facts, **got}


def sweep_document(con, doc: dict, given: dict, device_memory_bytes=None) -> dict:
    """The ``--sweep`` document: every layout of the run's world size, ranked (``sweep.sweep``). ``given``: what
    is known of the model (stated and the traces' metadata: ranks_per_node, kv_heads bound the candidates)."""
    facts = measured(con, doc)
    bounds = {k: given.get(k) for k in ("ranks_per_node", "kv_heads")}
    bounds["device_memory_bytes"] = device_memory_bytes
    return {"version": VERSION, "run": doc["run"], "measured": facts, **sweep(facts, bounds, facts["world_size"]["value"])}
