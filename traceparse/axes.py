"""The parallel axes and the keys of a layout, defined once (docs/parallelism.md 1).

Every module that lists axes or layout keys imports them from here: the inferred layout, ``--layout``,
the plugin's metadata, the report, compare, whatif and the tagging rules.
"""

AXES = ("dp", "tp", "pp", "cp", "sp", "ep")  # the order a layout is written in
MODEL_AXES = ("tp", "pp", "cp", "sp")  # the world is dp x these; ep is carved out of dp x cp x sp
# the axes whose collectives move a layer's activations (b S H) inside the model's layers (in torch, DTensor's
# functional collectives): not dp (parameters and gradients) nor pp (a stage's boundary)
ACTIVATION_AXES = ("tp", "sp", "cp", "ep")
SCHEDULE_KEYS = ("zero_stage", "pp_schedule", "microbatches", "virtual_stages")
HSDP_KEYS = ("dp_replicate", "dp_shard")  # HSDP's two dp groups
LAYOUT_KEYS = AXES + SCHEDULE_KEYS + HSDP_KEYS  # every key of a layout, in report order
INT_LAYOUT_KEYS = frozenset(AXES + HSDP_KEYS + ("zero_stage", "microbatches", "virtual_stages"))  # whole numbers
