"""The parallel axes and the keys of a layout, defined once (docs/parallelism.md 1).

Every module that lists axes or layout keys imports them from here: the inferred layout, ``--layout``,
the plugin's metadata, the report, compare, whatif and the tagging rules.
"""

AXES = ("dp", "tp", "pp", "cp", "sp", "ep")  # the order a layout is written in
MODEL_AXES = ("tp", "pp", "cp", "sp")  # the world is dp x these; ep is carved out of dp x cp x sp
SCHEDULE_KEYS = ("zero_stage", "pp_schedule", "microbatches", "virtual_stages")
HSDP_KEYS = ("dp_replicate", "dp_shard")  # HSDP's two dp groups
LAYOUT_KEYS = AXES + SCHEDULE_KEYS + HSDP_KEYS  # every key of a layout, in report order
INT_LAYOUT_KEYS = frozenset(AXES + HSDP_KEYS + ("zero_stage", "microbatches", "virtual_stages"))  # whole numbers
