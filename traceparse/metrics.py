"""Definitions of every number traceparse reports; ``traceparse explain <id>`` prints them."""

METRICS = {
    "step_time": (
        "Step time",
        "duration of the ProfilerStep#N annotation on the rank's main thread",
        "per rank: mean (and max) over the profiled steps; ns",
    ),
    "profiled_window": (
        "Profiled window",
        "the rank's step windows (step_windows: one per ProfilerStep#N; the whole trace when it has none), summed",
        "the denominator of communication fractions; busy time uses the span from the first window's start to the "
        "last window's end",
    ),
    "busy_time": (
        "Busy time per thread / stream",
        "length of the union of the complete events on one CPU thread or GPU stream inside the profiled window "
        "(nested events count once)",
        "busy fraction = busy time / profiled window",
    ),
    "comm_time": (
        "Time in communication",
        "per step window, the length of the union of the rank's counted comm_intervals anchored in it (each "
        "operation's execution: kernels, gloo worker annotation, custom kernel; its CPU call when no execution is "
        "known), summed over the windows (window_totals.comm_ns); the same number as overlap.per_rank[].comm_ns",
        "comm fraction = time in communication / profiled window",
    ),
    "compute_time": (
        "Compute time",
        "per step window, the length of the union of the rank's compute_intervals anchored in it (GPU: kernels "
        "executing no communication, placed by their launch; CPU-only: main-thread cpu_ops overlapping no "
        "communication call or wait), summed over the windows (window_totals.compute_ns); per window it is "
        "imbalance.per_rank[].compute_ns and bubble.per_stage[].compute_ns",
        "per rank, summed over its windows; the checks report the mean per window",
    ),
    "step_split": (
        "Step split: compute, exposed communication, idle",
        "per rank and step window (summary.per_step, from window_totals): compute_ns; exposed_ns = comm_ns - "
        "hidden_ns, the communication not under compute; idle_ns = window_ns - compute_ns - exposed_ns, never "
        "below 0 (compute anchored in a window may run past its end)",
        "each as a share of window_ns, the step window's length",
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
        "degrees = size of the groups whose operations carry each strategy, counted as Megatron-Core and "
        "torchtitan count them: world = dp x tp x pp x cp x sp (cp ring, sp Ulysses: the sequence split), so "
        "dp = world / (tp x pp x cp x sp), every rank that is not model-parallel; expert parallelism is carved "
        "out of the data-parallel ranks (ep divides dp x cp x sp, no factor of the world): an MoE or "
        "recommendation job whose dense gradients sync over all its ranks has dp = world, its experts or "
        "model-parallel embedding tables give ep; dp_replicate x dp_shard = dp, dp_shard the size of the DP "
        "groups that shard state (ZeRO 1-3; HSDP: its shard groups), plain DDP dp_replicate = dp; zero_stage "
        "from the data-parallel groups' pattern; microbatches without a pipeline: forward/backward passes per "
        "optimizer step (gradient accumulation), with one: m and v from the first stage's sends "
        "(m x v to the second stage, m x (v - 1) wrapping around from the last) or the schedule annotations",
        "each value with its evidence; null when unknown (docs/parallelism.md 1, 3.1, 3.2, 5)",
    ),
    "collectives": (
        "Collectives per rank per step",
        "comm_ops grouped by (strategy, variant, op): count, input bytes and time (execution, else the CPU call) "
        "summed over the profiled steps; bytes are null when no operation of the group has a size, else the "
        "known sum, with ops_without_size saying how many are left out",
        "divided by (ranks x profiled steps); without steps, by ranks",
    ),
    "untagged": (
        "Untagged communication",
        "comm_ops rows no tagging rule matched",
        "share = their time / all communication time",
    ),
}
