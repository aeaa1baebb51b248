"""What each reported number means for the person running the job, in plain words: ``traceparse explain <id>``
prints it first, before the definition.

One entry per metric of the glossary (``glossary.METRICS``) and per check (``traceparse.analyzers.specs()``):
one to three sentences saying what the number tells about the training job, when it is good or bad, and what
to do when it is bad. No formula and no name of a table or column: the definition that follows gives those.
tests/test_explain_meaning.py holds every id to it.
"""

MEANING = {
    # --- metrics (glossary.METRICS) ---
    "step_time": (
        "How long one training step takes on a rank, from the profiler's step marker: the mean over the profiled "
        "steps, with the slowest beside it. Every other number is weighed against it: a rank slower than its "
        "peers is the imbalance check's to explain, a slowest step far above the mean an occasional stall."
    ),
    "profiled_window": (
        "How much time the profile covers on a rank: its profiled steps added up, or the whole trace when it marks "
        "no steps. The communication and busy shares are shares of it; with only one or two steps every share is "
        "noisy, so profile more steps when the numbers jump from run to run."
    ),
    "busy_time": (
        "How much of the profiled time each CPU thread and each GPU stream was working, overlapping work counted "
        "once. On a GPU stream only kernels, memory copies and sets count, not labels or synchronization waits. A GPU "
        "stream far from busy while steps are slow is waiting, on its host, a peer or data: the GPU section says "
        "on what."
    ),
    "comm_time": (
        "How much time each rank spends communicating (collectives and point-to-point transfers), overlapping "
        "transfers counted once. The total counts what the steps launched, even where it ran after the step ended; "
        "the percentage counts only the time inside the steps, so it never exceeds 100%. Much communication is a "
        "problem only when compute does not hide it: the overlap check says whether it does."
    ),
    "compute_time": (
        "How long each rank computes in its steps: GPU kernels that do no communication, or on a CPU-only run the "
        "main thread's work outside communication, summed over the rank's steps (the checks quote it per step). "
        "Against the step time it shows how much of the step is not compute; across ranks it shows uneven load."
    ),
    "step_split": (
        "Where each rank's step went, as shares of the step: computing, communicating with no compute to hide it, "
        "and idle (on a GPU rank, idle is split by what kept the GPU waiting). Compute should dominate: a large "
        "communication share calls for better overlap, a large idle share for a faster host, input or launch path."
    ),
    "gpu.temporal": (
        "Where each GPU's time went in each step: computing, other work (communication kernels, memory copies and "
        "sets) or idle, the three adding up to the step's GPU time; also once per rank as HTA measures it. A "
        "training GPU should be mostly computing; a large idle share means it waited, and the GPU section says on "
        "what."
    ),
    "gpu.idle": (
        "How long each GPU stream sat idle, split as HTA splits it: waiting for the host to launch the next piece "
        "of work, the short normal gap between back-to-back kernels, or waiting on something else (an event, "
        "another stream, a peer). Much host wait means the CPU cannot keep the GPU fed: launch less often (fused "
        "kernels, CUDA graphs) or make the host's loop faster."
    ),
    "gpu.idle_causes": (
        "What kept the GPU idle in each step, by what its host was doing then: loading data, the optimizer, a "
        "synchronization, communication, slow CPU ops, the loop's own Python, the launch itself, or the GPU "
        "waiting on other work. A cause is named only when it takes a sizeable share in most steps; fix that one "
        "first (more loader workers, no .item() in the loop, CUDA graphs)."
    ),
    "gpu.host_cost": (
        "How much shorter each step would be if the host never kept the GPU waiting, found by replaying the step "
        "with every launch issued the moment its GPU went idle, per step and as a share of the step. A large share "
        "means the job is host-bound: speed up the named host cause, or launch less often."
    ),
    "gpu.launch": (
        "How long work waits between the host's launch call and its start on the GPU, how many launches are "
        "unusually slow, and which kernels run shorter on the GPU than the host takes to launch them. Many such "
        "short kernels mean the run is launch-bound: fuse kernels, use larger batches or CUDA graphs."
    ),
    "gpu.queue": (
        "How much work each GPU stream has queued ahead of it, and how often and how long it runs dry, with "
        "nothing queued and nothing running while it waits for the host. A stream that often runs dry is starved "
        "by its host; a steady queue of several kernels means the host keeps ahead."
    ),
    "critical_path": (
        "The chain of work and transfers, across ranks, that decided when each step ended. Shortening anything on "
        "it shortens the step, while work off it could run slower at no cost; its split by cause, strategy and "
        "rank says where effort pays."
    ),
    "clocks": (
        "On a job that spans machines, each machine's clock may be off by milliseconds, as much as the waits being "
        "judged: who arrived last, who waited, the slow rank. traceparse works out each machine's offset from the "
        "collectives themselves and moves its times before comparing anything; a moved clock is named with how far "
        "it may be off. If no clock was moved, the traces agree with one clock."
    ),
    "step_graph": (
        "A model of each profiled step across all ranks that can be replayed with some work made faster or taken "
        "away; replayed unchanged it gives back every measured moment. It is how traceparse prices a problem: the "
        "time a fix would save the step, so overlapping causes are not counted twice and what sets nobody's pace "
        "costs nothing."
    ),
    "causes": (
        "What makes the steps slow, each cause priced by the time fixing it would save per step (a slow rank, a "
        "heavy pipeline stage, communication left unhidden), the costliest first. Start at the top; the savings "
        "overlap, so do not add them up."
    ),
    "timeline": (
        "One typical step, the median by length, drawn for every rank on one clock: when each rank computed and "
        "when it communicated, by parallelism strategy. It shows the pattern behind the numbers: a rank that "
        "starts late, communication that does not overlap compute, gaps where nothing runs."
    ),
    "comm_ops": (
        "The communication calls themselves, one per collective or point-to-point call per rank, with how many "
        "there were, their bytes and their time over the whole trace. Far more calls than the model needs, or "
        "many tiny ones, point to communication that could be batched (larger gradient buckets, coalesced calls)."
    ),
    "top_kernels": (
        "Which GPU kernels (on a CPU-only run, which CPU ops) took the most time over the whole trace, each with "
        "its share of the total. The first few are where optimizing the model's code pays off most."
    ),
    "layout": (
        "How the job is split over its ranks, as the trace shows it: the data, tensor, pipeline, context, "
        "sequence and expert parallel degrees, the ZeRO stage and the micro-batches per step, each with its "
        "evidence, unknown where the trace does not tell. Check it against what you launched: the expected "
        "numbers follow from it, so state what is wrong or unknown with --layout."
    ),
    "metadata": (
        "The configuration the traces declare about themselves when the job was profiled with traceparse's "
        "profiler: parallel degrees, ZeRO stage, model size and optimizer. The checks take what you state first, "
        "then this, then what the trace shows; where this contradicts the trace, the report says so."
    ),
    "hang": (
        "For a hung or crashed job: which group of ranks went out of step first, and how (a rank that never "
        "joined a collective its peers entered, a rank that died, ranks calling different operations or sizes). "
        "Start from the root cause it names; the divergences listed after it follow from it."
    ),
    "whatif": (
        "A forecast of the same model on another parallel layout: step time split into compute, exposed "
        "communication and the rest, communication volume, memory per device and pipeline bubble, every input "
        "with its source. Use it to choose a layout before running it; it is built from this run, so treat close "
        "forecasts as ties."
    ),
    "collectives": (
        "The communication per parallelism strategy and operation, per rank per profiled step: how many calls, "
        "how many bytes passed in, how long they took. It shows which strategy dominates the communication and "
        "whether the calls are what the model and layout should produce."
    ),
    "input_bytes": (
        "The size of the tensors each rank hands to its communication calls, each call counted once, per rank "
        "per step in the collectives table, a total in the summary. It is not the traffic the calls cause: an all-reduce counts twice "
        "its input in the communication volume."
    ),
    "untagged": (
        "The share of communication time that no rule attributes to a parallelism strategy. A large share leaves "
        "the per-strategy numbers incomplete: add a tag rule for those calls, or state the layout."
    ),
    "step_time_p95": (
        "The run's step time as traceparse compare reads it: the mean over every rank's profiled steps, and the "
        "95th percentile, a step near the slowest. Lower is better; a 95th percentile far above the mean means "
        "occasional slow steps (data loading, a noisy host) rather than a uniformly slow job."
    ),
    "exposed_comm": (
        "For each parallelism strategy, how long its communication held a rank with no compute to hide it, per "
        "rank per step. Lower is better; a rise usually means overlap was lost (a changed bucket size, prefetch "
        "turned off) or the network got slower."
    ),
    "cost": (
        "What fixing a cause would save, as a share of the step, found by replaying the step without it: the "
        "costliest rank's excess over its peers, the rank named as the cause, a heavy pipeline stage, or a "
        "strategy's unhidden communication. Lower is better; traceparse compare flags a cause that appears or "
        "grows by more than 5% of the step."
    ),
    "volume": (
        "How many bytes a rank sends per profiled step for each parallelism strategy, counted as the parallelism "
        "reference counts them (an all-reduce twice its size), averaged over the ranks. Lower is better; it "
        "should match what the model and layout predict, which the communication volume check tests."
    ),
    "bytes": (
        "Two byte counts with two names: input bytes, the size of the tensors passed to the calls, and volume, "
        "the traffic the parallelism reference's formulas count (twice the input for an all-reduce). Both are per "
        "rank per step; compare the volume, not the input bytes, with the formulas."
    ),
    "straggler": (
        "The rank the others wait for at their collectives, reported only when the evidence is strong and the "
        "delay costs the step something. When one is named, look at that rank's host, GPU, input data or share "
        "of the work; when none is, no rank is reliably slower."
    ),
    "per_microbatch": (
        "A per-step number divided by the micro-batches per step, so that runs accumulating a different number "
        "of micro-batches per step compare fairly. traceparse compare uses these instead of the per-step numbers "
        "when the two runs' micro-batches per step differ, and says so."
    ),
    "compare": (
        "Whether a new run got worse than a base run: each metric's change against its threshold, a regression "
        "only when the change is also beyond the runs' step-to-step noise. It exits 1 when something regressed, "
        "so it can gate a change; read the layout changes first, since a different layout explains many "
        "differences."
    ),
    "diff": (
        "Which kernels and CPU ops changed their time between two runs, per rank per step, the largest change "
        "first, each with its share of the change in step time. Start at the top to find the code that made the "
        "new run slower or faster."
    ),
    "regression": (
        "A metric regressed when it moved in its worse direction by more than its threshold and by more than the "
        "two runs' step-to-step noise explains. A busier host alone is not a regression, and a run compared with "
        "itself never regresses."
    ),
    # --- checks (traceparse.analyzers.specs()) ---
    "bubble": (
        "How much of each pipeline stage's step passes without compute, against what its schedule must leave idle "
        "anyway. Graded by how much shorter the step would be without the excess (pipeline transfers free, the "
        "slowest stage at the mean); when it costs, use more micro-batches, an interleaved or zero-bubble "
        "schedule, or move layers off the slowest stage."
    ),
    "overlap": (
        "How much of each parallelism strategy's communication runs under the rank's compute (hidden) and how "
        "much holds the rank up (exposed), per rank per step. Data, pipeline and context parallel communication "
        "should hide, and is graded by the time hiding it fully would save the step, so exposed time "
        "that costs nothing never fails. If it costs, start transfers earlier (smaller buckets, prefetch)."
    ),
    "imbalance": (
        "Whether some ranks work longer or arrive late at collectives so that the others wait, compared across "
        "ranks step by step. Graded chiefly by how much shorter the step would be with the slowest rank at its peers' "
        "pace, and a straggler is named only on strong evidence; fix that rank's host, input or share of the work "
        "(layers, experts, sequence)."
    ),
    "comm_volume": (
        "Whether each parallelism strategy sends the bytes per rank per step that the model and layout predict. "
        "Near the prediction is right; far more points to extra traffic (repeated gathers or broadcasts, a higher "
        "ZeRO stage than meant), far less to a layout or model size other than assumed."
    ),
    "memory": (
        "Whether the peak memory measured on the fullest device fits what parameters, gradients and optimizer "
        "state need under the run's ZeRO stage. A peak more than three times that means activations, buffers or "
        "fragmentation dominate: try activation checkpointing or smaller micro-batches."
    ),
}
