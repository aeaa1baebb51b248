"""The colours every chart gives the same thing: compute, each part of a step, each strategy."""

COMPUTE = "#4c78a8"
STEP_PARTS = {"compute": COMPUTE, "exposed communication": "#e45756", "idle": "#bab0ac"}
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
