"""The colours every chart gives the same thing: compute, each part of a step, each strategy."""

COMPUTE = "#4c78a8"
STEP_PARTS = {"compute": COMPUTE, "exposed communication": "#e45756", "idle": "#bab0ac"}
# a GPU rank's idle time by what kept the GPU waiting (gpu.idle_causes), greys and browns after the parts above
IDLE_CAUSES = {"idle: dataloader": "#8c564b", "idle: optimizer": "#c49c94", "idle: synchronize": "#7f7f7f",
               "idle: communication": "#f7b6d2", "idle: cpu_op": "#9d755d", "idle: python": "#d8b5a5",
               "idle: launch_call": "#aec7e8", "idle: launch": "#c7c7c7", "idle: device": "#bcbd22", "idle: unknown": "#dbdb8d"}
OVERLAP_PARTS = {"hidden": "#72b7b2", "exposed": "#e45756"}
STRATEGIES = {"dp": "#f58518", "tp": "#54a24b", "pp": "#b279a2", "cp": "#ff9da6", "sp": "#9d755d",
              "ep": "#eeca3b", "untagged": "#79706e"}
OTHER = "#d67195"  # a strategy outside the list


def strategy(name: str) -> str:
    return STRATEGIES.get(name, OTHER)


def scale(colours: dict):
    """An Altair colour scale with exactly these names and colours, in this order."""
    import altair as alt

    return alt.Scale(domain=list(colours), range=list(colours.values()))
