"""Definitions of every number traceparse reports; ``traceparse explain <id>`` prints them."""

METRICS = {
    "step_time": (
        "Step time",
        "duration of the ProfilerStep#N annotation on the rank's main thread",
        "per rank: mean (and max) over the profiled steps; ns",
    ),
    "profiled_window": (
        "Profiled window",
        "from the start of the rank's first ProfilerStep to the end of its last (whole trace when there are no steps)",
        "the denominator of busy and communication fractions",
    ),
    "busy_time": (
        "Busy time per thread / stream",
        "length of the union of the complete events on one CPU thread or GPU stream inside the profiled window "
        "(nested events count once)",
        "busy fraction = busy time / profiled window",
    ),
    "comm_time": (
        "Time in communication",
        "length of the union of the rank's communication operations (comm_ops) inside the profiled window: "
        "the execution interval (GPU kernel, or gloo worker annotation) when known, else the CPU call",
        "comm fraction = time in communication / profiled window",
    ),
    "comm_ops": (
        "Communication operations",
        "rows of comm_ops: one per collective or point-to-point call per rank, however many events show it",
        "counted per rank over the profiled steps",
    ),
    "top_kernels": (
        "Heaviest kernels / ops",
        "total duration of GPU kernels by name; on CPU-only traces, total inclusive duration of cpu_op events by name",
        "share = total / sum over all names of the same kind",
    ),
    "layout": (
        "Inferred layout",
        "degrees = size of the groups whose operations carry each strategy; dp = world / (tp x pp x cp x sp x ep); "
        "zero_stage from the data-parallel groups' pattern; pipeline m and v from the first stage's sends "
        "(m x v to the second stage, m x (v - 1) wrapping around from the last) or the schedule annotations",
        "each value with its evidence; null when unknown (PARALLELISM.md 1, 3.1, 3.2)",
    ),
    "collectives": (
        "Collectives per rank per step",
        "comm_ops grouped by (strategy, variant, op): count, input bytes and time (execution, else the CPU call) "
        "summed over the profiled steps",
        "divided by (ranks x profiled steps); without steps, by ranks",
    ),
    "untagged": (
        "Untagged communication",
        "comm_ops rows no tagging rule matched",
        "share = their time / all communication time",
    ),
}
