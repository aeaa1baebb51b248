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
        "length of the union of a lane's work inside the profiled window (nested events count once). A GPU "
        "stream's work is its device work: its kernels, memcpys and memsets (gpu_activity), the same the GPU "
        "section's busy and idle read (gpu.temporal); a gpu_user_annotation (a label drawn over work) or a "
        "cuda_sync (a wait) is no work. A CPU thread's: every event with a duration but ProfilerStep#N",
        "busy fraction = busy time / profiled window",
    ),
    "comm_time": (
        "Time in communication: comm total, comm in windows, comm %",
        "comm total (summary.per_rank[].comm_ns): per step window, the length of the union of the rank's counted "
        "comm_intervals anchored in it (each operation's execution: kernels, gloo worker annotation, custom kernel; "
        "its CPU call when no execution is known; a kernel anchored by its launch), summed over the windows "
        "(window_totals.comm_ns); the same number as overlap.per_rank[].comm_ns. It counts what the steps launched "
        "whole, also where it executes after the step's end (a GPU running behind its CPU), so it can exceed the "
        "windows' length. comm in windows (comm_in_window_ns): the length of the union of all the rank's counted "
        "comm_intervals, whatever step launched them, clipped to its step windows: the time inside the windows "
        "during which the rank communicates",
        "comm % (comm_fraction) = comm in windows / profiled window (the windows' total length): numerator and "
        "denominator over the same windows, so never above 100% (it was comm total / profiled window, 147% on a "
        "GPU trace whose kernels ran 30 ms behind their launches)",
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
        "below 0 (compute anchored in a window may run past its end). On a GPU rank the chart splits idle_ns by "
        "what kept the GPU idle in that step, in proportion to gpu.idle_causes (idle_ns x the cause's idle / the "
        "step's GPU idle): the GPU's causes measured over the step's GPU span, laid over the step window's idle",
        "each as a share of window_ns, the step window's length",
    ),
    "gpu.temporal": (
        "GPU temporal breakdown: compute, non-compute, idle",
        "from gpu_activity (every kernel, memcpy and memset with its launching call). Per rank and profiled step "
        "(scope 'step'): the steps tile the GPU's timeline, step N's span running from the end of the GPU work "
        "launched in the steps before it (the first step: its own first activity's start) to the end of its own "
        "(an activity belongs to the step its launch falls in), so the GPU's wait for a step's first kernel (the "
        "next batch, the optimizer, the loop's Python) belongs to that step. idle_ns = span_ns - the length of the "
        "union of every GPU activity inside the span (any stream); compute_ns = the union of the compute kernels "
        "(compute_intervals: kernels executing no communication) inside it; non_compute_ns = busy - compute "
        "(communication kernels, memcpy, memset). Per rank, scope 'hta' (step null): HTA's get_temporal_breakdown, "
        "over HTA's window (hta_gpu_activity: with two step numbers or more, what was launched before the rank's "
        "latest ProfilerStep#N starts) from its first activity's start to its last one's end. Deliberate "
        "differences from HTA: exact ns times, where HTA shrinks float-microsecond events to whole microseconds "
        "(ceil start, floor end; measured on the public traces: 1.01 points of idle on the B200 vLLM trace, 0.95 on "
        "ns_resolution, 0.55 on nccl_parser_config, 0.20 on the MI250 trace, none where times are whole "
        "microseconds; more the more activities a few microseconds long; equal with HTA_DISABLE_NS_ROUNDING=1); "
        "PyTorch's symmetric-memory and custom all-reduce kernels and the custom communication kernels of "
        "rules/comm_kernels (DeepEP) are communication (non-compute), where HTA counts only '^nccl.*Kernel' "
        "(2.60 points of compute on the B200 vLLM trace, 2.37 on the DeepSeek one); cuda_sync events (a stream, "
        "event or context synchronization: the GPU waiting, not working) are no GPU activity, where HTA counts "
        "them in its span and in non-compute (the A100 AlexNet trace's 41 stretch HTA's span by 75.8 ms); time "
        "where two activities overlap on one stream counts once, where HTA counts it twice (0.08 points of idle "
        "on the B200 vLLM trace); a gpu_user_annotation is no activity in either (docs/gpu.md, Against HTA)",
        "idle, compute, non_compute = each / span_ns (they add up to 1)",
    ),
    "gpu.idle": (
        "GPU idle time per stream: host wait, kernel wait, other",
        "HTA's get_idle_time_breakdown over HTA's window: per rank and stream, in start order, each activity's "
        "gap since the end of the one before it on the stream. host wait: it was launched after that end (the "
        "CPU had not asked for it yet); kernel wait: otherwise, when the gap is under 30 us (HTA's "
        "consecutive_kernel_delay of 30, compared with its microsecond times: the overhead of back-to-back "
        "kernels); other: queued, but waiting on something else (an event, another stream, a peer). Activities "
        "overlapping on one stream make a gap negative; where that makes the stream's idle or a category negative "
        "(impossible), the stream's gaps are measured from the latest end before each activity, none below 0, "
        "and load_issues says so",
        "host_wait_ns, kernel_wait_ns, other_ns, ns; idle_ns = their sum",
    ),
    "gpu.idle_causes": (
        "What kept the GPU idle, per step",
        "every moment of a step's GPU span (gpu.temporal) when no stream is busy: a gap [a, b], ended by the "
        "activity that starts at b, launched by a call [L, E] on a CPU thread. If L > a, [a, min(L, b)] is the "
        "host's: split by the launching thread's outermost CPU event at each moment (cpu_op, user_annotation, "
        "runtime call; not ProfilerStep#N), its cause by name: dataloader (/dataloader/i), optimizer "
        "(Optimizer.*), synchronize (/synchronize/i, aten::item, aten::_local_scalar_dense: the host waiting on "
        "the GPU), communication (c10d::*, nccl:*, record_param_comms, ...), cpu_op (any other op: the host too "
        "slow to launch), python (no recorded op: the training loop's own code). The launch call itself, [L, E], "
        "splits the rest: while it runs, [max(a, L), min(E, b)] is launch_call (the host launching: the runtime "
        "call not yet returned, named by the call; side host); from its end, [max(a, E), b] is launch (launch "
        "latency: launched, not yet started; at most the activity's gpu.launch delay). If E <= a, the gap is "
        "device (the work was launched before the GPU went idle: waiting on an event, another device, a peer). "
        "No launch in the trace: unknown. A finding names a cause for a rank when "
        "it is material (rules/thresholds.toml [gpu] cause_share of the rank's steps' GPU span together) and "
        "steady (that share in a majority of its steps), so one odd step names nothing",
        "per rank, step and cause: idle_ns and share = idle_ns / the step's span_ns; ops: the op names that took "
        "most of it (up to 3)",
    ),
    "gpu.host_cost": (
        "What the GPUs' waits on their hosts cost the step, by replay",
        "the step graph (traceparse explain step_graph) replayed with the launching thread's time in every host "
        "wait of gpu.idle_causes (from the moment a GPU went idle, a, to the launch of its next activity, "
        "min(L, b)) taken as nothing, so each launch comes when its GPU went idle; saved_ns = the step's measured "
        "end - its replayed end, per profiled step (per_step); cause = the host cause that kept the GPUs idle "
        "longest before a launch call began (not launch_call: the replay keeps each call's own time). The "
        "section warns from rules/thresholds.toml [gpu] cause_share of the step and fails from "
        "fail_cost_share",
        "saved_per_step_ns: the mean over the profiled steps; share: the savings / the steps' total length",
    ),
    "gpu.launch": (
        "Kernel launches: delay, outliers, launch-bound kernels",
        "per rank over HTA's window, every GPU activity whose launching call is in the trace (any runtime or "
        "driver call with its correlation id: cudaLaunchKernel, cuLaunchKernel, cudaMemcpyAsync, hipLaunchKernel, "
        "...; HTA's get_cuda_kernel_launch_stats counts only cudaLaunchKernel(ExC), cudaMemcpyAsync and "
        "cudaMemsetAsync). delay = its start on the GPU - the end of its launching call, 0 when it starts before "
        "(HTA's launch_delay). delay_outliers: delay > 100 us; runtime_outliers: a launching call longer than 50 "
        "us (HTA's defaults); short_gpu: activities shorter on the GPU than their launching call on the CPU "
        "(launch-bound: the GPU finishes them faster than the host can ask)",
        "delay_p50/p90/p99/max_ns over the launches; short_gpu_share = their GPU time / HTA's span (gpu.temporal "
        "scope 'hta')",
    ),
    "gpu.queue": (
        "Queue length per stream, and when it runs dry",
        "per rank and stream over HTA's window, HTA's queue length: the activities launched and not yet started "
        "(+1 at each launching call's start, -1 at each start on the GPU; activities whose launch is in the "
        "trace and starts no later than they do: one that starts first is counted in load_issues). Running dry: "
        "moments between the stream's first start and last end with nothing queued and nothing running (the "
        "stream waits for the host)",
        "max_length; mean_length = the mean over the counter's change points (HTA's summary); dry_ns, dry_share = "
        "dry_ns / span_ns (first start to last end), dry_count = how many times it ran dry",
    ),
    "critical_path": (
        "The critical path of a step",
        "the chain of work and transfers that ended last: the binding path of the step graph (explain step_graph) "
        "from the end of the step (the end of the window of the rank whose step ends last) back to the start of that "
        "window, so its length is that rank's measured step. Replayed with the measured durations the graph gives "
        "back every recorded moment, so at each point one dependency set its time and the path goes on from it: a "
        "stretch of a lane's own work (a CPU thread's outermost op or its time in no op, a kernel) is on the path; a "
        "wait (a CPU thread blocked in a communication call or wait, a synchronization, a gloo Work's wait inside an "
        "op's own time such as FSDP's hooks, a gap while another thread of the rank worked) is on the path from what "
        "it waited for to its end, and the path goes on from that (a completion, a GPU activity, another thread's "
        "op); when that came before the wait began, the wait is the lane's own time (a call's own time). A "
        "communication operation's transfer is on the path from the moment it was released (the last member of a "
        "collective arrived, at its execution; a send and its matched receive both arrived, at their calls) to its "
        "completion; before that it waited for a late peer, and the path goes on from that peer at that moment, so "
        "a blocked thread's time belongs to what released it. A GPU activity starts after an activity of another "
        "stream that ended last before it (an event), else after the one before it on its stream when that ended "
        "after its launch call returned, else after its launch (the path goes on from the launching CPU thread). "
        "Causes: compute (kernels that compute; a CPU-only rank's CPU ops), communication (a transfer, or a call's "
        "own time, per strategy), host (a GPU rank's CPU work, a synchronization), launch (from a launch call to its "
        "start on the GPU), idle (a CPU thread in no recorded op and waiting for nothing), device (a GPU activity "
        "queued on a dependency, memcpy/memset), other (a guard on the path's length). Waiting for a late peer is "
        "never on the path: the path follows the peer instead. Limits: an op's own time in which an operation of its "
        "thread completes counts as a wait even when the thread did Python work there; an event between streams is "
        "read as the other stream's activity that ended last before a start later than both the stream and the "
        "launch allowed. The checks read it: imbalance names a straggler only where the path runs through it most, "
        "and reports the rank and pipeline stage the path runs through most; overlap reports each strategy's "
        "communication on the path and gives its advice for that communication alone",
        "per step: length_ns = the window's length = the sum of the pieces (covered_ns); by_cause, by_strategy "
        "(communication), by_rank: ns on the path; top: its longest pieces (rank, lane, cause, name, share = "
        "dur_ns / length_ns); segments: consecutive pieces of one rank and cause merged, for the timeline",
    ),
    "clocks": (
        "Each host's clock against the first rank's (run.clock)",
        "the clocks are the hosts the traces name (ranks.host), each rank its own where one names none; a run on one "
        "host has one clock and nothing is estimated. The traces bound each clock's offset from the first rank's: a "
        "member of a blocking collective (all_reduce, all_gather, reduce_scatter, all_to_all, barrier: every member "
        "needs every other's data) cannot leave it before its last member arrived (its execution's end after the "
        "others' execution starts), and a receive cannot complete before its send began. low_ns, high_ns: the "
        "least and greatest shift those bounds allow, closed over every chain of clocks (the longest paths of the "
        "difference constraints), the clocks placed before it as placed (the best bounded first); estimate_ns: the "
        "middle of the bounds, the least error they allow in the worst case (bounded on one side only: the median "
        "over its collectives of the other members' mean end less its own). A clock whose bounds hold 0 stays at 0; "
        "one they exclude is placed at its estimate. The shifts "
        "are applied (every time of the clock's ranks moved by shift_ns before anything crosses ranks: arrivals, "
        "waits, groups, the step graph, the critical path) only where the traces prove the clocks differ: some "
        "bound broken as written by more than 1 us (Kineto's microsecond timestamps). Where the operations as "
        "matched contradict every shift (gloo's groups are inferred from ends being together, which an offset "
        "breaks) or a clock shares none with the others, a first estimate needs no matching: the offset at which "
        "most ends of blocking operations of the two clocks lie within 200 us of each other (within 100 ms), where "
        "that peak has a chance below 1e-6 against a uniform spread (Poisson; rules/thresholds.toml [clocks]); the store "
        "is built again with it, "
        "then estimated as above (traceparse/load/clocks.py)",
        "shift_ns, low_ns, high_ns, estimate_ns: ns added to the clock's times; a clock moved is a load issue, a "
        "warning where its shift is at least the median wait in a collective (the waits it changes)",
    ),
    "step_graph": (
        "The step graph and its replay",
        "each profiled step across ranks as a graph that can be replayed with its durations changed "
        "(vocabulary/step_graph.py). A rank's lanes (its CPU threads, its GPU streams) are sequences of the moments "
        "the trace recorded (the bounds of outermost ops and of blocking intervals, where it issued communication "
        "and launched kernels, kernels' starts and ends, its step window); between two moments lies work (own time, "
        "replayed as its duration), a wait (a CPU thread blocked until a communication operation completes or is "
        "released, a GPU activity ends, or another thread's op ends: replayed as max(start, what it waited for) + the "
        "measured tail after it), a kernel's start (after the kernel before it on its stream, its launch, and an event "
        "from another stream: the activity of another stream that ended last before a start later than both; the lag "
        "after the latest kept) or a communication kernel (max(start, release) + transfer). A communication "
        "operation is released at the latest arrival of its members that arrived before it completed (a collective's "
        "members, a point-to-point operation's matched peer), each arrival a moment of the member's lane (its call, "
        "or its kernel's start); it completes a measured transfer later. Replayed with the measured durations, every "
        "moment comes out at its measured time (a test holds it on every bundled run and public trace). A cause's "
        "cost is a counterfactual: the step's measured end less its end replayed with the cause taken away, so "
        "causes that overlap are not counted twice and a number that sets nobody's pace costs nothing. Used by "
        "imbalance (cost: a rank's work at its peers' median), overlap (cost: a strategy's transfers hidden) and the "
        "document's causes (explain: causes)",
        "per step: the step's end replayed (max over ranks of each window's end) against the measured one; a cost = "
        "measured end - replayed end, share = cost / the step's length (from the start of the window of the rank "
        "that ended last)",
    ),
    "causes": (
        "Why the steps are slow: the causes priced by replay",
        "every cause a check priced by replay on the step graph (explain: step_graph), in one list, the costliest "
        "first (document/causes.py): a rank's excess over its peers (imbalance.cost.cause: its work at its peers' "
        "median, with the kind of the excess and in how many profiled steps it was the costliest rank), a heavy "
        "pipeline stage (imbalance.heavy_stage_cost: its ops at the mean stage's compute), each "
        "strategy's communication hidden under compute (overlap.per_strategy[s].cost: its transfers replayed as "
        "nothing, the waits for a late member kept; its note says when it cannot be hidden in this setup). The "
        "report's head names the costliest three that save at least 1% of a step. The costs are not added up: "
        "causes overlap (a late rank also lengthens the exposed wait of its collectives)",
        "per cause: saved_per_step_ns = the mean over the profiled steps of (measured step - step replayed without "
        "the cause); share = the savings summed over the steps / the steps' measured lengths",
    ),
    "timeline": (
        "Timeline of one step",
        "the step: among the steps every rank has a window for (step_windows), the one whose window length "
        "averaged over the ranks is the median (the lower of an even count; ties: the lower step; without "
        "ProfilerStep#N the whole-trace window); per rank, kind ('compute', 'comm') and strategy ('untagged' "
        "when none), the union (interval_pieces) of its compute_intervals and counted comm_intervals anchored in "
        "that window, one bar per piece, named after its longest interval; past max_bars (3000) bars, the bars "
        "of one rank, kind and strategy at most merge_gap_ns apart are merged (the least gap that fits; "
        "aggregated, merged = bars merged away)",
        "start_ns from one origin for all ranks, origin_ns: the earliest start of the step's windows (one "
        "clock for the run); dur_ns; windows: each rank's window from the same origin",
    ),
    "comm_ops": (
        "Communication operations",
        "rows of comm_ops: one per collective or point-to-point call per rank, however many events show it",
        "communication by op: totals over all ranks and the whole trace (ops total, input bytes total, time total: "
        "execution, else the CPU call); per rank, comm ops total: the operations with a counted interval anchored in "
        "the rank's step windows",
    ),
    "top_kernels": (
        "Heaviest kernels / ops",
        "total duration of GPU kernels by name; on CPU-only traces, total inclusive duration of cpu_op events by name; "
        "calls total and time total over all ranks and the whole trace",
        "share = time total / sum over all names of the same kind",
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
    "metadata": (
        "Configuration declared by the traces (profiler plugin)",
        "the `traceparse` key traceparse.profiler writes into each rank's trace: degrees from the mesh dimensions "
        "(or the groups named by the caller or held by DDP / FSDP2 / ZeroRedundancyOptimizer), each dimension's "
        "axis read from its name; a mesh covering the world sets the model axes it does not name to 1 and dp to "
        "the world over them; zero_stage from the wrappers; params and layers = the modules' parameters (a "
        "DTensor counts whole) and blocks summed over one pipeline group, params left undeclared under expert "
        "parallelism; the other model dims and the optimizer from the lowest rank that has them. The checks take "
        "each key stated with --layout, else declared here (source 'metadata'), else inferred from the trace",
        "each declared key is checked against the inferred layout (layout_check, source 'metadata'): a "
        "contradiction is reported, the inferred layout is never overridden; ranks without metadata and "
        "disagreeing ranks are noted",
    ),
    "hang": (
        "Divergence of a hung or crashed job (traceparse hang)",
        "every rank's calls per group, from Flight Recorder dumps (fr_entries) or else the traces (comm_ops numbered "
        "per rank and group in issue order): collectives matched across the group's members by sequence number, "
        "the first number where members differ is the group's divergence: missing_rank (a member never issued it), "
        "rank_died (the missing member left no dump, or its trace is cut off), op_mismatch, size_mismatch, "
        "dtype_mismatch; sends and receives paired per direction in issue order, the first without a partner a "
        "p2p_mismatch (the dumps' send/recv entries, plus the send or receive each rank was blocked in at its dump "
        "from fr_inflight, numbered op_id minus the collectives issued on the group before it). Sequence numbers below the highest first one a member's buffer holds are not compared",
        "a group is its name (pg_id, or the trace's process group) and its members, never its members alone, so two "
        "groups over the same ranks stay apart; divergence = the root cause: of the groups' divergences, the first "
        "not explained by another (a divergence is explained when each missing rank is blocked in another group's "
        "collective that its own earlier steps issue first, or never reached an earlier root), with the group's "
        "ranks, mesh dimension (its description), strategy and variant (the tags of the traces' operations on that "
        "group and op), entered and missing ranks and each missing rank's last call; the explained ones follow as "
        "its consequences; a member that left no dump is taken never to have entered the earliest call nobody is "
        "known to have completed; each call's outcome: completed, in flight, failed (NCCL), or ended (gloo marks "
        "a completed and a failed call alike retired: ended is taken as completed only with evidence: a later call "
        "in flight with every member dumped, a later step, every member entered and ended it, or another member "
        "completed it); last_completed = per rank and group the highest sequence number completed; contradictions "
        "between dumps (a group's members, a rank dumped twice with different buffers) are findings",
    ),
    "whatif": (
        "Forecast of another layout of the same model (traceparse whatif)",
        "--without-straggler first takes the named straggler's cost out of the measured run (whatif/straggler.py): "
        "the step = the measured step - the mean over the profiled steps of what the step graph's replay with the "
        "straggler's work at its peers' median saves (imbalance.cost.per_step; without a step graph, the sum of the "
        "terms); the mean compute with its compute replaced by the others' mean, each strategy's exposed time less "
        "straggler.lost_per_step_ns x (N - 1) / N in proportion to its waits for a late peer (never below 0), other "
        "the rest of the step; "
        "bytes_per_rank_per_step[strategy] = the communication volume (notes' count: all-reduce 2x; traceparse "
        "explain volume) by the notes' formula (comm_volume) with the target's degrees, ZeRO stage, "
        "m and v and the measured Phi (x measured tp pp / target tp pp x target layers / measured layers), delta, "
        "b S H, layers; memory_per_device_bytes = the ZeRO table (docs/parallelism.md 3.1) with the target's N_DP "
        "and stage + activation_bytes (null without memory events) = the micro-batches the target's order holds "
        "(most forwards without their backward on a rank) x one micro-batch's activations, measured: "
        "(memory.step_growth - the gradients where they exist at the peak) / the micro-batches the run's order "
        "holds (x layers per chunk and work per device where the stages change), the rank holding the most; bubble = the notes' formula for the target schedule (3.2); "
        "bubble_replay = the target's order (as for the step, below) replayed (models.pipeline.replay) with the "
        "target's compute per action (forward, backward, split backward) per micro-batch and "
        "stage (bubble.action_ns of the run: each stage's own where the target keeps the stages, else the measured "
        "compute per layer, mean over the stages, x layers per chunk; x N_TP N_CP N_SP measured / target), "
        "1 - compute / makespan, mean over ranks (a run without a pipeline: equal stages, B = 2 F); "
        "exposed_comm_ns[strategy] = measured exposed time of that strategy (window_strategy_comm, comm_ns - "
        "hidden_ns) x the target's calls' cost / the run's calls' (whatif/calls.py: a call costs alpha x steps + "
        "beta x bytes moved per rank by the ring model, all-reduce 2 (g - 1) steps and 2 (g - 1) / g of its bytes, "
        "all-gather and reduce-scatter (g - 1) and (g - 1) / g, broadcast (g - 1) and all; alpha and beta by least "
        "squares over the run's collectives' transfers, from the last member's arrival to the completion, each kept "
        "where it is shown above 0 at the [stats] alpha; where neither is, the geometric mean of the ratio read as "
        "all latency and as all bandwidth, both in how.calls; the target's calls: the run's, resized, where it keeps "
        "the implementation, else DDP's all-reduce per bucket, ZeroRedundancyOptimizer's broadcast per rank, FSDP2's "
        "all-gather and reduce-scatter per unit (layers + the root)), else x target bytes / the run's bytes by the "
        "same formula, else the run's exposed time per byte over every strategy; step_time_ns = compute_ns + exposed_comm_ns + other_ns; the optimizer (inputs."
        "optimizer_ns: compute within Optimizer.step* annotations x params per device target / measured x "
        "1/N_DP from ZeRO-1 on) is taken out of the measured step and compute and the target's added to both. "
        "Without a pipeline in the run or in the target: compute_ns = measured compute x (m, layers held, 1/N_TP, 1/(N_CP N_SP) "
        "target / measured), "
        "other_ns = the measured step - compute - exposed, and a pipelined target adds compute x bubble / (1 - "
        "bubble) to exposed pp. From a measured pipeline: the target's order (the run's reconstructed bubble.order "
        "where the target keeps schedule, N_PP, m and v, else the textbook GPipe, 1F1B or interleaved 1F1B order) "
        "replayed with its compute per action + an overhead per action o, o being the one with which the run's "
        "order (reconstructed, else textbook) replayed with its measured compute lasts the measured step less "
        "exposed non-pipeline communication and the optimizer; "
        "step = that makespan + exposed non-pipeline communication; compute_ns = the replay's compute per rank; "
        "other_ns = the measured other x target actions / measured actions; exposed pp = the remainder. Where "
        "no order can be replayed: 2 m v actions x (the slowest stage's compute per action + the overhead per "
        "action) / (1 - bubble). --sweep: every "
        "dp x tp x pp of the world size (cp, sp, ep as measured), every ZeRO stage where dp > 1, 1F1B with m = "
        "max(m, N_PP) and interleaved v = 2 where the layers divide into 2 N_PP chunks; excluded when TP > "
        "ranks_per_node or kv_heads, PP > layers or the layers do not divide, memory > --device-memory. "
        "step_time_range_ns = the least and greatest of the same forecast made from each profiled step's own "
        "step, compute and exposed communication (means over that step's rank windows; a pipeline's overhead "
        "per action calibrated on it; the straggler's replay of that step), less and plus what each strategy's exposed "
        "time moves to when its calls are read as all latency and as all bandwidth (how.calls low_ns, high_ns; "
        "readings: whether they did)",
        "step_time_ns, compute_ns, exposed_comm_ns, other_ns per rank per step; volume per rank per step; memory per "
        "device; bubble a "
        "fraction of the step; every input with its source in inputs and measured",
    ),
    "collectives": (
        "Collectives per rank per step",
        "comm_ops grouped by (strategy, variant, op): count, input bytes (input_bytes_per_rank_per_step; traceparse "
        "explain input_bytes) and time (execution, else the CPU call) summed over the profiled steps; input bytes are "
        "null when no operation of the group has a size, else the known sum, with ops_without_size saying how many "
        "are left out",
        "divided by (ranks x profiled steps); without steps, by ranks",
    ),
    "input_bytes": (
        "Input bytes: what the ranks pass to the calls",
        "comm_ops.bytes_in: the bytes of the tensor a rank passes to a collective or send (all-gather: its shard; "
        "reduce-scatter and all-reduce: the full tensor), each call counted once. The collectives table's 'input "
        "bytes' (input_bytes_per_rank_per_step) and comm_volume.per_strategy[].input_bytes per rank per step; the "
        "summary's 'input bytes total' and traceparse tags' over all ranks and the whole trace. Not the "
        "communication volume (traceparse explain volume): an all-reduce's volume is twice its input bytes",
        "per rank per profiled step where the column says so, else a total (the column says 'total')",
    ),
    "untagged": (
        "Untagged communication",
        "comm_ops rows no tagging rule matched; untagged.why counts them by reason: a collective of one rank (its "
        "group or world has one rank: it serves no strategy), its process group unknown (the rules that need a "
        "group's pattern cannot decide), or no rule matched",
        "share = their time / all communication time",
    ),
    # The metrics of a run (traceparse.history.run_metrics) that traceparse compare compares; bubble, overlap.<strategy>
    # and imbalance.max_over_mean are the checks' numbers: traceparse explain bubble / overlap / imbalance.
    "step_time_p95": (
        "Step time of the run: step_time.mean and step_time.p95",
        "over every (rank, step) window of a profiled step (summary.per_step window_ns): step_time.mean = their "
        "mean; step_time.p95 = their nearest-rank 95th percentile, the smallest window with at least 95% of the "
        "windows at or below it (with few windows, nearly the longest)",
        "ns per step; lower is better",
    ),
    "exposed_comm": (
        "Exposed communication per strategy: exposed_comm.<strategy>",
        "numerator: overlap.per_strategy[<strategy>].exposed_ns, the strategy's communication not under compute "
        "summed over every rank's step windows (traceparse explain overlap); denominator: the number of (rank, "
        "step) windows",
        "ns per rank per step; lower is better",
    ),
    "cost": (
        "What a cause costs a step, by replay: cost.rank, cost.cause, cost.stage, cost.<strategy>",
        "cost.rank: per profiled step, the largest saving of any rank's work at its peers' median (imbalance.cost."
        "per_step; traceparse explain step_graph), as a share of the step, of the kinds the imbalance check grades "
        "(its own work, a stall, its input; not slower, the same ops taking longer: its host); the value is their "
        "mean, 0 in a step where no such excess saves anything. cost.cause: imbalance.cost.cause.share, the rank "
        "the check names as a cause (of a graded kind; 0 when none). cost.stage: imbalance.heavy_stage_cost.share "
        "(0 when no stage is heavy). cost.<strategy>: overlap.per_strategy[<strategy>].cost.share, what "
        "hiding the strategy's communication saves, per step as samples",
        "fraction of the step; lower is better: traceparse compare gates a cause that appears or grows by more than "
        "its threshold (0.05, the checks' warn share) beyond the step-to-step variation; a named cause (cost.cause, "
        "cost.stage) by its growth alone, the check having weighed its evidence",
    ),
    "volume": (
        "Communication volume per strategy: volume.<strategy> (volume (notes' count: all-reduce 2x))",
        "comm_volume.per_strategy[<strategy>].measured_volume_bytes: the bytes a rank sends for the strategy per "
        "profiled step in the notes' count (docs/parallelism.md 2: all-reduce 2 x its size, reduce-scatter, "
        "all-gather, all-to-all and broadcast the full size, send the size, recv 0; traceparse explain "
        "comm_volume), averaged over the loaded ranks; what the notes' formulas predict. Not the input bytes of the "
        "collectives table (traceparse explain input_bytes): a DDP run's volume is twice its input bytes. Named "
        "bytes.<strategy> before: a history recorded then is read, and --threshold bytes=... taken, as volume",
        "bytes per rank per step; lower is better",
    ),
    "bytes": (
        "Which bytes: two quantities, two names",
        "input bytes (traceparse explain input_bytes): what the ranks pass to the calls, each call once, in the "
        "collectives table; volume (notes' count: all-reduce 2x) (traceparse explain volume): what "
        "docs/parallelism.md 2's formulas count, in the communication volume table, the comm_volume check, its "
        "chart and traceparse compare's volume.<strategy> (formerly bytes.<strategy>)",
        "both per rank per step",
    ),
    "straggler": (
        "Straggler rank: imbalance.straggler",
        "imbalance.straggler_rank, the rank the others wait for at their collectives, only when named: material "
        "and conclusive (traceparse explain imbalance); absent when the verdict is not conclusive, none or unknown",
        "a rank, not a size: traceparse compare reports a straggler that appears or changes rank as a regression "
        "when NEW's cost.cause (its own work, stall or input) reaches the cost threshold, else as reported only (its "
        "host's slowness); since only a conclusive straggler is a metric, a pattern that is not conclusive in NEW "
        "never gates",
    ),
    "per_microbatch": (
        "Per micro-batch: <id>_per_microbatch",
        "numerator: a per-step metric (step_time.mean, step_time.p95, exposed_comm.<strategy>, volume.<strategy>); "
        "denominator: layout.microbatches, the micro-batches per optimizer step (the pipeline's m, or the "
        "gradient-accumulation passes; traceparse explain layout)",
        "the metric's unit per micro-batch; traceparse compare compares these instead of the per-step metrics when "
        "the two runs differ in micro-batches per step (the same micro-batch size: more micro-batches are "
        "proportionally more work per step), and says so",
    ),
    "compare": (
        "Comparison of two runs: traceparse compare BASE NEW",
        "per metric of both runs (layout, step_time, exposed_comm, bubble, overlap, imbalance, cost, volume; per "
        "micro-batch "
        "when the micro-batches per step differ): delta = new - base, relative = delta / base (none when base is "
        "0), its threshold and whether it regressed (traceparse explain regression); layout changes first, a "
        "change of parallel degrees said plainly; a metric of one run only is reported, never a regression",
        "the verdict: regressed (exit 1) when any metric regressed, else ok (exit 0); bad input exits 2. A metric "
        "regresses past its threshold only when the change is also beyond the two runs' step-to-step variation "
        "(Welch's t, p <= 0.01) and, for step time and exposed communication, not explained by a busier host "
        "(imbalance.stretch); the straggler only when named (conclusive) in NEW (traceparse explain regression)",
    ),
    "diff": (
        "What changed, kernel by kernel: the diff section of traceparse compare",
        "per name of GPU activity (kernel: events of cat kernel, gpu_memcpy or gpu_memset, each anchored by its "
        "launch, the runtime call with its correlation id, else its start) and of CPU op (cpu_op: events of cat "
        "cpu_op, anchored by their start; each op's whole duration, so an op nested in another counts in both), the "
        "instances anchored in a step window (step_windows), as every per-step number counts them. "
        "numerator: their total duration over all ranks (calls: their count); denominator: the windows, ranks x "
        "profiled steps (the distinct (rank, step) of step_windows; a rank without ProfilerStep#N is one whole-trace "
        "window): time per rank per step, so runs of different sizes and step counts compare. delta = new - base; "
        "a name of one run only has 0 on the other side (only_in). A kernel that executes communication "
        "(comm_intervals part 'exec') carries the strategy of its operations, the most common over its instances "
        "('untagged' when none); like HTA's trace diff (TraceDiff.compare_traces), over every rank and step",
        "per kind (kernels, cpu_ops), the names with the largest |delta| per rank per step first (15 by default), "
        "in ns per rank per step; share_of_change = delta / the change of the mean step time per rank (NEW - BASE "
        "of summary.per_rank[].step_mean_ns averaged over the ranks; none when that change is 0 or a run's step "
        "time is unknown). Kernels overlap each other and the CPU, and nested CPU ops count twice, so shares need "
        "not add up to 1; not applicable when a run has no step window or neither has a kernel or a CPU op",
    ),
    "regression": (
        "Regression of a metric",
        "a move in the metric's worse direction (lower or higher is better) by more than its threshold: "
        "|relative| > N for a threshold 'N%' (a base of 0 exceeds any), |delta| > X for an absolute one 'X' in the "
        "metric's unit; thresholds per group or id in rules/compare_thresholds.toml (an id overrides its group, a "
        "per-micro-batch id takes its per-step id's), overridden by --threshold KEY=VALUE (an override of a group "
        "replaces its ids' defaults too); exposed communication "
        "under the [floor] fraction of the new run's mean step time is not gated; layout never regresses by size; "
        "imbalance.straggler regresses when a straggler appears or the straggler rank changes and NEW's cost.cause "
        "reaches the cost threshold. Against the "
        "measured variation: a metric both runs give per profiled step (step_time.mean: the step's mean window "
        "over the ranks; step_time.p95: the step's slowest window; exposed_comm, bubble, overlap, "
        "imbalance.max_over_mean and cost per step) regresses only when, beyond its threshold, the change is also larger "
        "than the step-to-step variation explains: Welch's t on the two runs' per-step values, one-sided in the "
        "worse direction, p <= 0.01 (the row's p); the costliest rank's excess (cost.rank) also when every step of "
        "NEW costs more than every step of BASE by more than the threshold (a rank that grew that slow in every "
        "step, which few steps leave the t-test no power to show); "
        "with fewer than two steps in a run, the threshold alone. "
        "Host contention: a step_time, exposed_comm or cost.<strategy> regression is not gated when NEW's ops ran "
        "longer against "
        "their fastest than BASE's (imbalance.stretch = compute busy time / compute floor over the ranks) by "
        "more than the metric's relative threshold: the host was busier, the work (floor) did not grow. The "
        "bubble: not gated when its part the replay does not price (bubble.unpriced = the bubble less what its pp "
        "transfers and heavy stage cost a step) grew by no more than the bubble's threshold: the transfers or a "
        "stage grew, which exposed_comm.pp, cost.pp and cost.stage judge",
        "delta 0 never regresses: a run compared with itself is ok",
    ),
}
