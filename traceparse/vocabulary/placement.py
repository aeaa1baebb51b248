"""The placement of pipeline stages on ranks, from the stages each rank's schedule annotations name
(pipeline_marks): the one test the layout inference and the bubble check both use."""


def placement(stage_sets: list[set], n_ranks: int) -> str | None:
    """'v' when the ranks hold V-shaped stages (2 n_ranks stages, rank p holds p and 2 n_ranks - 1 - p: ZB-V,
    DualPipeV), else None. ``stage_sets``: per rank, the stages it runs."""
    if not stage_sets or not all(stage_sets):
        return None
    n_stages = max(max(s) for s in stage_sets) + 1
    if n_stages == 2 * n_ranks and all(len(s) == 2 and min(s) + max(s) == n_stages - 1 for s in stage_sets):
        return "v"
    return None
