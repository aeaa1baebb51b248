"""The store's tables and columns, each with its comment.

One definition serves three readers: the CREATE TABLE statements, the
``COMMENT ON`` clauses that DuckDB keeps with the data, and the schema section
of docs/schema.md (``traceparse schema`` prints it; a test keeps them equal).
"""

SCHEMA_VERSION = 5  # 3: ranks.kept_until_ns, incomplete_steps; 4: clocks, clock_shift_ns; 5: lane_busy

TABLES = {
    "meta": (
        "Facts about the store itself: how and from what it was built.",
        [
            ("key", "VARCHAR", "name of the fact"),
            ("value", "VARCHAR", "its value (JSON for structured values)"),
        ],
    ),
    "ranks": (
        "One row per loaded trace file (one rank of the job).",
        [
            ("rank", "INTEGER", "global rank; from distributedInfo.rank, else from the file name"),
            ("rank_source", "VARCHAR", "where the rank came from: 'distributedInfo.rank', 'file name' or 'assumed'"),
            ("world_size", "INTEGER", "distributedInfo.world_size (NULL when the trace lacks it)"),
            ("backend", "VARCHAR", "distributed backend (nccl, gloo, ...) from distributedInfo"),
            ("device_name", "VARCHAR", "name of the first device in deviceProperties (NULL for CPU-only traces)"),
            ("host", "VARCHAR", "host name when the trace records one"),
            ("file", "VARCHAR", "absolute path of the trace file"),
            ("file_bytes", "BIGINT", "size of the file on disk"),
            ("base_time_ns", "BIGINT", "baseTimeNanoseconds from the header (NULL when absent)"),
            ("clock_offset_ns", "BIGINT", "nanoseconds added to this file's timestamps to put it on the run's clock"),
            ("clock_method", "VARCHAR", "how the file's clock was aligned to the run's clock"),
            ("clock_shift_ns", "BIGINT", "nanoseconds added to every time of this rank besides clock_offset_ns: its "
             "host's clock against the first rank's, estimated from the collectives (clocks; 0: none applied)"),
            ("schema_version", "INTEGER", "Kineto schemaVersion"),
            ("trace_id", "VARCHAR", "Kineto trace_id when present"),
            ("versions", "VARCHAR", "JSON of CUPTI/CUDA/ROCm/NCCL versions found in the header"),
            ("record_shapes", "BOOLEAN", "the profiler recorded input shapes"),
            ("profile_memory", "BOOLEAN", "the profiler recorded memory events"),
            ("n_events", "BIGINT", "trace events read from the file (all phases)"),
            ("n_complete", "BIGINT", "complete (ph = X) events, the rows of events for this rank"),
            ("cut_off", "BOOLEAN", "the file ends before its JSON does (a crashed job, a damaged gzip): its complete "
             "events were kept, what was lost is in load_issues"),
            ("kept_until_ns", "BIGINT", "a file cut off inside traceEvents: the start of the last complete event it "
             "kept, on the run's clock, up to when its rank's events are whole (NULL: nothing after an event lost); "
             "the steps that end by then are complete (incomplete_steps)"),
        ],
    ),
    "process_groups": (
        "Process groups from distributedInfo.pg_config, as each rank reports them (a rank lists only its own groups); "
        "where a trace has none, the profiler plugin's groups; a mesh dimension the plugin names a group after is "
        "added to a description that lacks it.",
        [
            ("rank", "INTEGER", "the reporting rank"),
            ("pg_name", "VARCHAR", "process group name (a number or a hash in PyTorch)"),
            ("pg_desc", "VARCHAR", "description: default_pg, mesh_tp, mesh_dp, ... (what the framework called it)"),
            ("backend_config", "VARCHAR", "backend per device type, e.g. cuda:nccl"),
            ("pg_size", "INTEGER", "number of ranks in the group"),
            ("ranks", "INTEGER[]", "global ranks of the members, sorted"),
        ],
    ),
    "plugin_metadata": (
        "What the traceparse profiler plugin wrote into each rank's trace (the `traceparse` key), fields checked.",
        [
            ("rank", "INTEGER", "rank"),
            ("version", "INTEGER", "the metadata's version"),
            ("metadata", "VARCHAR", "JSON: mesh, groups, layout, model, optimizer, sources (traceparse.profiler.metadata)"),
        ],
    ),
    "fr_dumps": (
        "Flight Recorder dumps loaded (pickle or JSON; traceparse.ingest.flight_recorder), one row per rank.",
        [
            ("rank", "INTEGER", "the rank that dumped (the dump's rank, else the number ending its file name)"),
            ("file", "VARCHAR", "absolute path of the dump"),
            ("version", "VARCHAR", "the dump format's version"),
            ("entries", "BIGINT", "entries in its ring buffer"),
            ("pg_status", "VARCHAR", "JSON: per group, the last enqueued, started and completed collective sequence ids"),
        ],
    ),
    "fr_entries": (
        "Flight Recorder entries: one collective or point-to-point call a rank issued, as its ring buffer kept it.",
        [
            ("rank", "INTEGER", "the rank"),
            ("record_id", "BIGINT", "the entry's id in the rank's buffer (issue order)"),
            ("pg_name", "VARCHAR", "process group name: with group_ranks, the group's identity (the same on every "
             "rank; two groups of the same ranks are two groups)"),
            ("pg_desc", "VARCHAR", "process group description (default_pg, mesh_tp, ...)"),
            ("pg_id", "BIGINT", "the group's number in the rank's process (pg_id; not the same across ranks)"),
            ("group_ranks", "INTEGER[]", "global ranks of the group: the dump's pg_config (gloo's '' is the default "
             "group), else another dump's pg_config of that group that lists this rank, else the traces' "
             "process_groups, else every rank whose dump holds calls on that group (group_source)"),
            ("group_source", "VARCHAR", "where group_ranks come from: pg_config, pg_config of rank N, traces, dumps "
             "(the ranks whose dumps call on the group: a member that left no dump is not in it)"),
            ("seq", "BIGINT", "collective_seq_id: collectives issued on the group so far on this rank, from 1"),
            ("p2p_seq", "BIGINT", "p2p_seq_id: point-to-point calls on the group so far (0: not counted)"),
            ("op_id", "BIGINT", "op_id: collectives and point-to-point calls on the group so far, from 1"),
            ("op", "VARCHAR", "all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send, recv, ..."),
            ("backend", "VARCHAR", "nccl, gloo, ... (the profiling name's prefix)"),
            ("peer", "INTEGER", "global rank of the other side of a send or receive"),
            ("input_sizes", "VARCHAR", "JSON: shape of each input tensor"),
            ("output_sizes", "VARCHAR", "JSON: shape of each output tensor"),
            ("input_dtypes", "VARCHAR", "JSON: dtype of each input tensor"),
            ("output_dtypes", "VARCHAR", "JSON: dtype of each output tensor"),
            ("state", "VARCHAR", "scheduled, started or completed (gloo records only scheduled)"),
            ("retired", "BOOLEAN", "the work has ended, completed or failed (gloo marks a failed call retired too), "
             "and left the buffer's active set; false: in flight at the dump"),
            ("time_created_ns", "BIGINT", "when the call was issued (ns since the epoch)"),
            ("timeout_ms", "BIGINT", "the group's timeout"),
            ("frames", "VARCHAR", "JSON: the Python stack at the call ({name, filename, line}, innermost first)"),
        ],
    ),
    "fr_inflight": (
        "What each rank's training thread was blocked in when its Flight Recorder dump was taken (the dump's "
        "<name>.inflight.json, written by traceparse.profiler.flight_recorder): one row per rank that has one.",
        [
            ("rank", "INTEGER", "the rank"),
            ("why", "VARCHAR", "what triggered the dump (a watchdog on a stalled step, an exception, SIGABRT)"),
            ("time_ns", "BIGINT", "when the dump was taken (ns since the epoch)"),
            ("op", "VARCHAR", "the torch.distributed call it was in (send, recv, all_reduce, ...); NULL: none"),
            ("peer", "INTEGER", "global rank of the other side of a send or receive"),
            ("pg_name", "VARCHAR", "process group name of the call"),
            ("pg_desc", "VARCHAR", "process group description"),
            ("group_ranks", "INTEGER[]", "global ranks of the call's group"),
            ("op_id", "BIGINT", "the group's count of calls issued so far (collectives and point-to-point, this one "
             "included): Flight Recorder's op_id of the call"),
            ("input_sizes", "VARCHAR", "JSON: shape of the call's tensor"),
            ("input_dtypes", "VARCHAR", "JSON: dtype of the call's tensor"),
            ("frames", "VARCHAR", "JSON: the thread's Python stack ({name, filename, line}, innermost first)"),
        ],
    ),
    "rank_slots": (
        "Each loaded trace file's slot (its position among the load's files) and rank: the rows of the ranks' "
        "Parquet carry the slot (traceparse/store/parts.py).",
        [
            ("slot", "INTEGER", "the file's position among the load's files"),
            ("rank", "INTEGER", "its rank"),
            ("clock_shift_ns", "BIGINT", "nanoseconds added to every time of its tables as they are read (ranks)"),
        ],
    ),
    "clocks": (
        "Each rank's clock against the first rank's, from the traces themselves (traceparse/load/clocks.py): a member "
        "of a collective cannot leave it before its last member arrived, nor a receive complete before its send began; "
        "on a blocking collective the members leave together. One row per rank of a run whose ranks have two hosts "
        "or more, or do not say their host.",
        [
            ("rank", "INTEGER", "rank"),
            ("clock", "VARCHAR", "the clock it shares: 'host <name>', else 'rank <n>'"),
            ("shift_ns", "BIGINT", "nanoseconds its times were moved by (ranks.clock_shift_ns; 0 when the traces are "
             "consistent with one clock)"),
            ("low_ns", "BIGINT", "the least shift the traces allow, the clocks placed before it as placed (NULL: "
             "unbounded)"),
            ("high_ns", "BIGINT", "the greatest shift the traces allow (NULL: unbounded)"),
            ("estimate_ns", "BIGINT", "its estimate: the middle of low_ns and high_ns (bounded on one side only: "
             "where its collectives end with the other members')"),
            ("collectives", "BIGINT", "collectives of its clock with members on another clock"),
            ("transfers", "BIGINT", "point-to-point transfers to or from another clock"),
        ],
    ),
    "threads": (
        "Names of processes and threads (CPU threads and GPU streams) from the trace's metadata events.",
        [
            ("rank", "INTEGER", "rank"),
            ("pid", "BIGINT", "process id (the device index for GPU events)"),
            ("tid", "BIGINT", "thread id (the stream for GPU events); NULL for a process row"),
            ("kind", "VARCHAR", "thread_name, process_name or process_labels"),
            ("label", "VARCHAR", "the name or label"),
        ],
    ),
    "steps": (
        "Profiler steps (ProfilerStep#N annotations) per rank.",
        [
            ("rank", "INTEGER", "rank"),
            ("step", "BIGINT", "N of ProfilerStep#N"),
            ("start_ns", "BIGINT", "start on the run's clock, ns"),
            ("end_ns", "BIGINT", "end on the run's clock, ns"),
            ("dur_ns", "BIGINT", "duration, ns"),
        ],
    ),
    "events": (
        "One row per complete (ph = X) event of every rank.",
        [
            ("rank", "INTEGER", "rank"),
            ("ev_id", "BIGINT", "index of the event among the rank's complete events, in file order"),
            ("pid", "BIGINT", "process id, or the device index for GPU events"),
            ("tid", "BIGINT", "thread id, or the stream id for GPU events"),
            ("thread_name", "VARCHAR", "thread name from metadata, when given"),
            ("cat", "VARCHAR", "category: cpu_op, user_annotation, kernel, gpu_memcpy, cuda_runtime, ..."),
            ("name", "VARCHAR", "event name"),
            ("ts_ns", "BIGINT", "start on the run's clock, ns (exact: parsed from the JSON text)"),
            ("dur_ns", "BIGINT", "duration, ns"),
            ("external_id", "BIGINT", "args 'External id': links a CPU op to what it launched"),
            ("correlation", "BIGINT", "args 'correlation': links a runtime launch to its GPU activity"),
            ("stream", "BIGINT", "GPU stream (args 'stream') for device activity"),
            ("device", "BIGINT", "GPU index (args 'device') for device activity"),
            ("step", "BIGINT", "the ProfilerStep#N this event starts in (NULL outside steps)"),
        ],
    ),
    "op_args": (
        "Recorded shapes of CPU ops (record_shapes=True), by event.",
        [
            ("rank", "INTEGER", "rank"),
            ("ev_id", "BIGINT", "the event (events.ev_id)"),
            ("input_dims", "VARCHAR", "args 'Input Dims' as JSON"),
            ("input_types", "VARCHAR", "args 'Input type' as JSON"),
            ("concrete_inputs", "VARCHAR", "args 'Concrete Inputs' as JSON (scalars, split sizes, peers)"),
        ],
    ),
    "comm_args": (
        "Communication metadata by event: as the trace gives it (record_param_comms, NCCL/RCCL kernels) or as read from the recorded shapes of c10d ops and gloo annotations.",
        [
            ("rank", "INTEGER", "rank"),
            ("ev_id", "BIGINT", "the event (events.ev_id)"),
            ("coll_name", "VARCHAR", "args 'Collective name'"),
            ("in_nelems", "BIGINT", "args 'In msg nelems'"),
            ("out_nelems", "BIGINT", "args 'Out msg nelems'"),
            ("group_size", "BIGINT", "args 'Group size'"),
            ("dtype", "VARCHAR", "args 'dtype'"),
            ("in_split", "VARCHAR", "args 'In split size'"),
            ("out_split", "VARCHAR", "args 'Out split size'"),
            ("pg_name", "VARCHAR", "args 'Process Group Name'"),
            ("pg_desc", "VARCHAR", "args 'Process Group Description'"),
            ("pg_ranks", "VARCHAR", "args 'Process Group Ranks'"),
            ("seq", "BIGINT", "args 'Seq' (newer Kineto): the collective's sequence number in its group"),
            ("rank_start", "BIGINT", "args 'Global rank start'"),
            ("rank_stride", "BIGINT", "args 'Global rank stride'"),
            ("peer", "BIGINT", "peer or root rank as the op states it (for c10d ops: the rank within the op's group)"),
            ("source", "VARCHAR", "'args': the trace's own communication args; 'shapes': derived from the recorded shapes of a c10d op, a gloo annotation or an nccl:<op> annotation (whose recorded inputs are the collective's input tensors)"),
        ],
    ),
    "memory": (
        "Allocator events ([memory] instants, profile_memory=True).",
        [
            ("rank", "INTEGER", "rank"),
            ("ts_ns", "BIGINT", "time on the run's clock, ns"),
            ("device_type", "BIGINT", "args 'Device Type' (0 CPU, 1 CUDA)"),
            ("device_id", "BIGINT", "args 'Device Id'"),
            ("bytes", "BIGINT", "allocated (+) or freed (-) bytes"),
            ("total_allocated", "BIGINT", "allocated bytes on the device after the event"),
            ("total_reserved", "BIGINT", "reserved bytes on the device after the event"),
        ],
    ),
    "comm_ops": (
        "One row per communication operation per rank: a collective or point-to-point call, "
        "however the trace shows it (CPU op, annotation, kernel).",
        [
            ("rank", "INTEGER", "rank"),
            ("op_id", "BIGINT", "identifier of the operation within the rank (the ev_id of its anchor event)"),
            ("op", "VARCHAR", "all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, reduce, gather, scatter, send, recv, barrier, unknown"),
            ("source", "VARCHAR", "what the row was built from: record_param_comms, c10d, symm_mem, nccl_annotation, functional, kernel, custom_kernel"),
            ("name", "VARCHAR", "name of the anchor event"),
            ("dtype", "VARCHAR", "element type"),
            ("elem_bytes", "INTEGER", "bytes per element (NULL when the dtype is unknown)"),
            ("in_nelems", "BIGINT", "elements in the input on this rank"),
            ("out_nelems", "BIGINT", "elements in the output on this rank"),
            ("bytes_in", "BIGINT", "bytes of the input on this rank (all_gather: the shard; reduce_scatter: the full tensor; all_to_all: sum sent)"),
            ("bytes_out", "BIGINT", "bytes of the output on this rank (all_to_all: sum received)"),
            ("size_source", "VARCHAR", "where in_nelems came from, the first of: 'args' (record_param_comms' In/Out msg nelems), 'annotation shapes' (recorded input shapes of the nccl:<op> annotation; an all_to_all's output stays unknown), 'c10d shapes' or 'symm_mem shapes' (the op's recorded shapes), 'kernel args' (the NCCL kernel's args), 'peer ranks' (an all_reduce, broadcast or reduce whose copy on another loaded rank of its group, matched by seq or by order within the group in the same step, has it); NULL when no size is known (load_issues says why)"),
            ("in_split", "VARCHAR", "all_to_all send split sizes (JSON list) when known"),
            ("out_split", "VARCHAR", "all_to_all receive split sizes (JSON list) when known"),
            ("pg_name", "VARCHAR", "process group name when known"),
            ("pg_desc", "VARCHAR", "process group description when known"),
            ("group_size", "INTEGER", "ranks in the group"),
            ("group_ranks", "INTEGER[]", "global ranks of the group when known"),
            ("group_source", "VARCHAR", "how the group was found: trace args, process group name, global rank start/stride, the rank's only process group, or inferred (see docs/loading.md)"),
            ("peer", "INTEGER", "global peer rank of send/recv, root of broadcast/reduce, when known"),
            ("peer_in_group", "INTEGER", "peer or root as the call states it, a rank within its group (c10d ops)"),
            ("seq", "BIGINT", "sequence number within the group when the trace has it"),
            ("group_index", "BIGINT", "order of this operation among the rank's operations in the same group (0-based)"),
            ("step", "BIGINT", "ProfilerStep#N the operation starts in"),
            ("host_ts_ns", "BIGINT", "start of the CPU-side call, ns on the run's clock"),
            ("host_dur_ns", "BIGINT", "duration of the CPU-side call, ns"),
            ("tid", "BIGINT", "CPU thread of the call"),
            ("exec_ts_ns", "BIGINT", "start of the execution (GPU kernel, or gloo worker annotation), ns"),
            ("exec_dur_ns", "BIGINT", "duration of the execution, ns"),
            ("exec_stream", "BIGINT", "GPU stream, or the worker thread id for gloo"),
            ("kernel", "VARCHAR", "name of the executing kernel or worker annotation"),
            ("strategy", "VARCHAR", "parallelism strategy the operation serves: dp, tp, pp, cp, sp, ep; NULL when no rule matched (untagged)"),
            ("variant", "VARCHAR", "dp: zero0..zero3; tp: megatron or megatron_sp; pp: p2p; cp: ring; sp: ulysses; ep: moe or embedding"),
            ("rule_id", "VARCHAR", "the rule that tagged it (traceparse explain <rule_id>)"),
            ("confidence", "DOUBLE", "the rule's confidence, 0 to 1"),
        ],
    ),
    "layout": (
        "The job's parallel layout as inferred from the tagged communication, one row per key.",
        [
            ("key", "VARCHAR", "dp, tp, pp, cp, sp, ep, zero_stage, pp_schedule, microbatches, virtual_stages, dp_replicate, dp_shard"),
            ("value", "VARCHAR", "the value as JSON (null when unknown)"),
            ("evidence", "VARCHAR", "why: what in the trace gave the value, or why it is unknown"),
        ],
    ),
    "load_issues": (
        "Every problem met while loading. Reports show it.",
        [
            ("file", "VARCHAR", "the file concerned (NULL for run-wide issues)"),
            ("severity", "VARCHAR", "info, warning or error"),
            ("what", "VARCHAR", "the problem"),
            ("count", "BIGINT", "how many times (events, bytes, ...) as stated in what"),
        ],
    ),
}

# The vocabulary: the basic facts of a trace, defined once (traceparse/vocabulary/*.sql) and selected
# from by every check and the report. The interval macros interval_union(_ns) and interval_intersect
# (store/macros.sql) are the only interval arithmetic.
VOCABULARY = {
    "main_threads": (
        "Vocabulary: per rank, the thread that runs the training loop: the CPU thread carrying the ProfilerStep#N "
        "annotations, else the one with the most cpu_op time (ties: the lowest tid). Events join it on (rank, pid, tid); "
        "what records a thread id alone (comm_ops.tid, the step graph's CPU lanes) on (rank, tid): a CPU thread's id is "
        "unique on its host while the thread runs.",
        [
            ("rank", "INTEGER", "rank"),
            ("pid", "BIGINT", "process id of the thread"),
            ("tid", "BIGINT", "thread id"),
            ("thread_name", "VARCHAR", "thread name from metadata, when given"),
            ("chosen_by", "VARCHAR", "why this thread: 'ProfilerStep#N annotations' or 'most cpu_op time (no ProfilerStep#N)'"),
        ],
    ),
    "step_windows": (
        "Vocabulary: the windows every per-step number is computed in: one per ProfilerStep#N of a rank, of the "
        "complete steps only (a step a rank cut short did not finish is left out for every rank: incomplete_steps), "
        "or one whole-trace window (step NULL) for a rank without ProfilerStep#N. An interval belongs to the window its "
        "anchor falls in (comm_intervals, compute_intervals: step, in_window) and counts whole there, also where it "
        "ends after the window; intervals anchored before the first or after the last step belong to no window and "
        "are left out of per-step numbers.",
        [
            ("rank", "INTEGER", "rank"),
            ("step", "BIGINT", "N of ProfilerStep#N; NULL for the whole-trace window of a rank without steps"),
            ("start_ns", "BIGINT", "start, ns on the run's clock"),
            ("end_ns", "BIGINT", "end, ns on the run's clock"),
            ("dur_ns", "BIGINT", "end_ns - start_ns"),
            ("source", "VARCHAR", "'ProfilerStep#N' or 'whole trace (no ProfilerStep#N)'"),
        ],
    ),
    "incomplete_steps": (
        "Vocabulary: the profiler steps left out of every per-step number because a rank cut short did not finish "
        "them (traceparse/vocabulary/complete_steps.sql). A step is complete when every rank whose file was cut off "
        "inside traceEvents (ranks.kept_until_ns) has its ProfilerStep#N and it ends by the rank's kept_until_ns; "
        "an incomplete step is left out for every rank (its windows are not in step_windows), since the other "
        "ranks' waits, collectives and step graph in it involve what the cut rank never recorded. Empty when no "
        "file was cut.",
        [
            ("step", "BIGINT", "N of ProfilerStep#N (a step some rank has)"),
            ("rank", "INTEGER", "the rank cut short that did not finish it (the lowest, when several)"),
            ("kept_until_ns", "BIGINT", "that rank's ranks.kept_until_ns"),
            ("why", "VARCHAR", "'ends after the last event its file kept' or 'not in what its file kept'"),
        ],
    ),
    "backward_passes": (
        "Vocabulary: the forward/backward passes of each step (traceparse/vocabulary/phases.sql). With gradient "
        "accumulation or a pipeline a step runs several. The step's autograd frames (autograd::engine::"
        "evaluate_function*, on any thread) split into passes wherever forward compute (aten::linear, mm, matmul, "
        "addmm, bmm, embedding, convolution, scaled_dot_product_attention) runs on the main thread (main_threads, "
        "carrying ProfilerStep#N) outside every autograd frame there. A pass's backward runs from its first "
        "autograd frame to its last; what runs between two passes is the next pass's forward.",
        [
            ("rank", "INTEGER", "rank"),
            ("step", "BIGINT", "N of ProfilerStep#N"),
            ("pass", "BIGINT", "forward breaks on the main thread before it in the step (0: no forward compute "
             "before it); numbers may skip"),
            ("start_ns", "BIGINT", "start of its first autograd frame, ns"),
            ("end_ns", "BIGINT", "end of its last autograd frame, ns"),
            ("frames", "BIGINT", "autograd frames in it, on every thread"),
            ("main_thread_frames", "BIGINT", "of those, on the main thread (a GPU job runs autograd on its own thread)"),
            ("after_forward", "BOOLEAN", "forward compute on the main thread precedes it in the step (pass > 0)"),
        ],
    ),
    "pipeline_marks": (
        "Vocabulary: the pipeline-schedule annotations (user_annotation events), parsed once "
        "(traceparse/vocabulary/pipeline_marks.sql): PP:<stage><action><mb> of torch.distributed.pipelining, "
        "DualPipeV's fused PP:(<stage>F<mb>;<stage>B<mb>)OVERLAP_F_B (two rows: F, then B), and GPipe's "
        "Forward <mb> / Backward <mb> (no stage).",
        [
            ("rank", "INTEGER", "rank"),
            ("tid", "BIGINT", "thread of the annotation"),
            ("main_thread", "BOOLEAN", "the annotation is on the rank's main thread (main_threads)"),
            ("step", "BIGINT", "ProfilerStep#N it starts in (events.step)"),
            ("name", "VARCHAR", "the annotation as written"),
            ("ts_ns", "BIGINT", "start, ns"),
            ("dur_ns", "BIGINT", "duration, ns"),
            ("stage", "INTEGER", "the (virtual) pipeline stage it names; NULL for Forward/Backward <mb>"),
            ("action", "VARCHAR", "F (forward), B (backward), I (input-grad), W (weight-grad), or another action "
             "of torch's schedules as written (SEND_F, RECV_B, ...); NULL when the name has none"),
            ("microbatch", "INTEGER", "the micro-batch it names"),
            ("fused", "BOOLEAN", "one half of a fused OVERLAP_F_B pair (which has no compute of its own per half)"),
            ("part", "INTEGER", "1, or 2 for the B half of a fused pair (F is part 1)"),
        ],
    ),
    "comm_intervals": (
        "Vocabulary: when each communication operation occupies a CPU thread (its call) and when it executes (its "
        "kernels, gloo worker annotation or custom kernel); and CPU waits on communication outside any call. "
        "Communication time = the union of the counted intervals.",
        [
            ("rank", "INTEGER", "rank"),
            ("op_id", "BIGINT", "the operation (comm_ops.op_id); NULL for a wait"),
            ("ev_id", "BIGINT", "the event giving the interval (events.ev_id): the call's outermost event, the "
             "kernel, the wait; NULL for a gloo worker annotation"),
            ("part", "VARCHAR", "call: the CPU-side call (outermost of its nested events); exec: one execution "
             "interval (one communication kernel, the gloo worker annotation, a custom kernel); wait: a CPU event "
             "named as communication (c10d::*, _c10d_functional::*, nccl:*, symm_mem::*, record_param_comms) inside "
             "no operation's call, such as c10d::wait or wait_tensor"),
            ("name", "VARCHAR", "the event's name"),
            ("tid", "BIGINT", "CPU thread (call, wait, gloo worker); NULL on a GPU stream"),
            ("stream", "BIGINT", "GPU stream of a kernel; NULL on a CPU thread"),
            ("start_ns", "BIGINT", "start, ns"),
            ("end_ns", "BIGINT", "end, ns"),
            ("counted", "BOOLEAN", "the interval is communication time: every exec interval, and the call of an "
             "operation without one; never a wait"),
            ("op", "VARCHAR", "the operation's op (comm_ops.op)"),
            ("strategy", "VARCHAR", "the operation's strategy (comm_ops.strategy; NULL: untagged)"),
            ("variant", "VARCHAR", "the operation's variant"),
            ("anchor_ns", "BIGINT", "the time that places it in a window: its start; a kernel's launch (the runtime "
             "call with its correlation id), else its start"),
            ("step", "BIGINT", "the window's step (NULL outside every window, or in a whole-trace window)"),
            ("in_window", "BOOLEAN", "the anchor is inside one of the rank's step_windows"),
        ],
    ),
    "compute_intervals": (
        "Vocabulary: compute on the device that runs it. A rank with GPU kernels: every kernel that does not "
        "execute a communication operation (comm_intervals part 'exec'); memcpy and memset are neither compute nor "
        "communication. A CPU-only rank: the main thread's cpu_op events that overlap none of its communication "
        "calls and waits (so a wrapper enclosing a call, and the ops inside a call, are not compute; the ops "
        "beside the call in the same wrapper are). Events nest: take the union (interval_union) so nested ones "
        "count once.",
        [
            ("rank", "INTEGER", "rank"),
            ("ev_id", "BIGINT", "the event (events.ev_id)"),
            ("part", "VARCHAR", "kernel (GPU) or cpu_op (main thread)"),
            ("name", "VARCHAR", "the event's name"),
            ("tid", "BIGINT", "CPU thread (cpu_op)"),
            ("stream", "BIGINT", "GPU stream (kernel)"),
            ("start_ns", "BIGINT", "start, ns"),
            ("end_ns", "BIGINT", "end, ns"),
            ("anchor_ns", "BIGINT", "the time that places it in a window: a kernel's launch, else its start"),
            ("step", "BIGINT", "the window's step (NULL outside every window, or in a whole-trace window)"),
            ("in_window", "BOOLEAN", "the anchor is inside one of the rank's step_windows"),
        ],
    ),
    "op_self_times": (
        "Vocabulary: per rank, step window and CPU op name and recorded input shapes, its instances among the rank's "
        "in-window cpu_op compute_intervals and the shortest self time of one (its length minus that of the compute "
        "ops nested right inside it). The compute floor (vocabulary/compute_floor.sql) takes the shortest over ranks.",
        [
            ("rank", "INTEGER", "rank"),
            ("step", "BIGINT", "the step window (step_windows.step; NULL: the whole-trace window)"),
            ("name", "VARCHAR", "the op's name"),
            ("dims", "VARCHAR", "its recorded input shapes (op_args.input_dims), NULL when not recorded"),
            ("n", "BIGINT", "instances"),
            ("min_self_ns", "BIGINT", "the shortest self time of one instance, ns"),
        ],
    ),
    "lane_busy": (
        "Vocabulary: per rank, each lane (a CPU thread, or a GPU stream: a lane holding an event the profiler records "
        "on a GPU's stream) and how long it worked inside the rank's profiled span (its first step window's start to "
        "its last one's end): the length of the union of its work there (a GPU stream's device work, gpu_activity; a "
        "CPU thread's events with a duration but ProfilerStep#N), nested and overlapping work once "
        "(vocabulary/busy_time.sql; the summary's busy table, explain busy_time).",
        [
            ("rank", "INTEGER", "rank"),
            ("pid", "BIGINT", "process"),
            ("tid", "BIGINT", "thread, or GPU stream"),
            ("thread_name", "VARCHAR", "the thread's name (events.thread_name)"),
            ("kind", "VARCHAR", "cpu thread or gpu stream"),
            ("events", "BIGINT", "its events (a GPU stream: its device work)"),
            ("busy_ns", "BIGINT", "the union of its work inside the profiled span, ns"),
            ("busy_fraction", "DOUBLE", "busy_ns / the profiled span's length (4 decimals)"),
        ],
    ),
    "gpu_activity": (
        "Vocabulary: every activity of a GPU (kernel, memcpy, memset) with what it does and what launched it: the "
        "runtime or driver call with its correlation id (cudaLaunchKernel, cudaMemcpyAsync, hipLaunchKernel, ...). "
        "What the GPU-time section (gpu.temporal, gpu.idle, gpu.launch, gpu.queue, gpu.idle_causes) is computed from "
        "(vocabulary/gpu_time.sql). Like events, a view over the ranks' Parquet.",
        [
            ("rank", "INTEGER", "rank"),
            ("ev_id", "BIGINT", "the activity (events.ev_id)"),
            ("cat", "VARCHAR", "kernel, gpu_memcpy or gpu_memset"),
            ("name", "VARCHAR", "the activity's name"),
            ("stream", "BIGINT", "GPU stream (args 'stream', else the event's tid)"),
            ("kind", "VARCHAR", "comm: a kernel executing a communication operation (comm_intervals part 'exec'); "
                                "compute: every other kernel (compute_intervals); memory: memcpy and memset"),
            ("start_ns", "BIGINT", "start on the GPU, ns"),
            ("end_ns", "BIGINT", "end on the GPU, ns"),
            ("launch_ev_id", "BIGINT", "the launching runtime/driver call (events.ev_id); NULL when not in the trace"),
            ("launch_pid", "BIGINT", "process of the launching call"),
            ("launch_tid", "BIGINT", "CPU thread of the launching call"),
            ("launch_ns", "BIGINT", "start of the launching call, ns"),
            ("launch_end_ns", "BIGINT", "end of the launching call, ns"),
            ("step", "BIGINT", "the step window its launch falls in (its start without a launch); NULL outside every "
                               "window or in a whole-trace window"),
            ("in_window", "BOOLEAN", "the launch (or start) is inside one of the rank's step_windows"),
            ("before_last_step", "BOOLEAN", "launched before the rank's latest ProfilerStep#N event starts (HTA's "
                                            "window); NULL without a launch or without ProfilerStep#N"),
        ],
    ),
    # the per-window totals every report section and check selects (computed once, at the build)
    "window_totals": (
        "Vocabulary: per step window of each rank, its compute and communication time. Every per-rank and "
        "per-step number of a report (summary, bubble, overlap, imbalance) sums these.",
        [
            ("rank", "INTEGER", "rank"),
            ("step", "BIGINT", "the window's step (step_windows.step)"),
            ("window_ns", "BIGINT", "the window's length"),
            ("compute_ns", "BIGINT", "length of the union of the compute_intervals anchored in the window"),
            ("comm_ns", "BIGINT", "length of the union of the counted comm_intervals anchored in the window"),
            ("hidden_ns", "BIGINT", "length of (that communication) intersected with (the union of all the rank's "
             "compute_intervals): communication during which the rank computes"),
        ],
    ),
    "window_strategy_comm": (
        "Vocabulary: per step window and strategy, communication time and the part hidden under compute. "
        "A strategy's time is the union of its own intervals, so strategies communicating at the same moment "
        "each count it: the sum over strategies exceeds window_totals.comm_ns by that concurrent time.",
        [
            ("rank", "INTEGER", "rank"),
            ("step", "BIGINT", "the window's step"),
            ("strategy", "VARCHAR", "comm_ops.strategy, 'untagged' when no rule matched"),
            ("comm_ns", "BIGINT", "length of the union of the strategy's counted comm_intervals in the window"),
            ("hidden_ns", "BIGINT", "length of their intersection with the union of the rank's compute_intervals"),
            ("waiting_ns", "BIGINT", "of the exposed part (comm_ns - hidden_ns), the time inside the strategy's "
             "collective_arrivals waits (arrival_ns to last_arrival_ns): waiting for the last member to arrive; "
             "the rest of the exposed time is transfer"),
        ],
    ),
    "collective_arrivals": (
        "Vocabulary: each collective matched across the members of its group, one row per member. A collective "
        "(all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, reduce, gather, scatter, barrier) of a "
        "group of two or more ranks, all loaded, is matched by comm_ops.seq when it has one, else by its order "
        "among the rank's operations of that group in the same profiler step (the whole trace without steps); "
        "it is matched when every member has exactly one operation under that key, all of one kind. Arrival: "
        "the execution start when every member has one (GPU: the first communication kernel; gloo: the worker "
        "annotation), else the CPU call's start when every member has one; ranks share one clock.",
        [
            ("rank", "INTEGER", "rank"),
            ("op_id", "BIGINT", "comm_ops.op_id"),
            ("op", "VARCHAR", "comm_ops.op"),
            ("strategy", "VARCHAR", "comm_ops.strategy, 'untagged' when no rule matched"),
            ("step", "BIGINT", "comm_ops.step"),
            ("group_ranks", "INTEGER[]", "the group's global ranks, sorted"),
            ("matched_by", "VARCHAR", "'seq' or 'order' (position among the group's operations in the step)"),
            ("match_key", "VARCHAR", "the key shared by the members' copies: group, then seq or step and position"),
            ("basis", "VARCHAR", "'execution' or 'call': which start is the arrival"),
            ("arrival_ns", "BIGINT", "this member's arrival"),
            ("last_arrival_ns", "BIGINT", "the latest arrival of the collective's members"),
            ("second_arrival_ns", "BIGINT", "the latest arrival among the other members than the last one"),
            ("wait_ns", "BIGINT", "last_arrival_ns - arrival_ns: how long this member waited for the last one"),
            ("lateness_ns", "DOUBLE", "arrival_ns - the mean arrival of the members"),
            ("is_last", "BOOLEAN", "arrived strictly last (a tie makes no one last)"),
        ],
    ),
}



def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def ddl(tables=None, comments=True) -> str:
    """CREATE TABLE statements (of ``tables``, default all) followed by their COMMENT ON clauses (unless not
    ``comments``)."""
    parts = []
    for table, (comment, cols) in {**TABLES, **VOCABULARY}.items():
        if tables is not None and table not in tables:
            continue
        body = ",\n  ".join(f"{c} {t}" for c, t, _ in cols)
        parts.append(f"CREATE TABLE {table} (\n  {body}\n);")
        if comments:
            parts.append(f"COMMENT ON TABLE {table} IS {_q(comment)};")
            parts.extend(f"COMMENT ON COLUMN {table}.{c} IS {_q(doc)};" for c, _, doc in cols)
    return "\n".join(parts)


# a group trait of an operation whose group is unknown (features.sql: unknown_group_traits)
UNKNOWN_GROUP = ("; of an operation whose group is unknown: false when no operation of its rank with an unknown "
                 "group shows it, else NULL (unknown)")

# comm_features (built by traceparse/tagging/features.sql), what tagging rules see: name -> (DuckDB type, definition)
FEATURES = {
    "rank": ("INTEGER", "rank of the operation"),
    "op_id": ("BIGINT", "the operation (comm_ops.op_id)"),
    "step": ("BIGINT", "ProfilerStep#N it starts in"),
    "op": ("VARCHAR", "all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, send, recv, ..."),
    "source": ("VARCHAR", "how the operation shows in the trace (comm_ops.source)"),
    "kernel": ("VARCHAR", "executing kernel or worker annotation"),
    "bytes_in": ("BIGINT", "input bytes on this rank"),
    "bytes_out": ("BIGINT", "output bytes on this rank"),
    "group_size": ("INTEGER", "ranks in the group"),
    "group_ranks": ("INTEGER[]", "global ranks of the group"),
    "group_key": ("VARCHAR", "the sorted group ranks as text: equal for every member's view of one group"),
    "pg_name": ("VARCHAR", "process group name"),
    "pg_desc": ("VARCHAR", "process group description"),
    "peer": ("INTEGER", "global peer rank of a send or recv"),
    "world_size": ("INTEGER", "ranks in the job"),
    "axis": ("VARCHAR", "the parallelism axis the group's description or name states (dp, tp, pp, cp, sp, ep), else NULL"),
    "geometry": ("VARCHAR", "the group's ranks: world, contiguous, strided, irregular, single; NULL when unknown"),
    "ctx": ("VARCHAR", "enclosing annotations and autograd/optimizer frames on the calling thread, outermost first, ' > ' between"),
    "phase": ("VARCHAR", "optimizer (inside Optimizer.step); backward (in an autograd frame or thread, or within a backward pass: between the first and last autograd frame of one forward/backward pass of the step, passes split by forward compute outside autograd frames on the step's thread, so the forwards of gradient accumulation's later micro-batches are forward); after_backward (later in the step); forward (earlier in the step, or anywhere in a trace without backward, such as inference); outside_step; unknown (no CPU call)"),
    "dtensor": ("BOOLEAN", "the call is a DTensor / functional collective (_c10d_functional::*): a redistribution of tensor-parallel activations or parameters, never an FSDP or DDP gradient sync"),
    "before_backward": ("BOOLEAN", "the call starts before the first autograd frame of its step (false without a backward)"),
    "uneven_split": ("BOOLEAN", "an all_to_all whose split sizes differ between ranks (data-dependent routing)"),
    "attention_between": ("BOOLEAN", "an attention op runs between this all_to_all and the next one of its group on the rank"),
    "p2p_shape": ("VARCHAR", "for send/recv: ring (every member sends to its ring neighbours equally often) or chain (anything else)"),
    "group_forward_all_reduce": ("BOOLEAN", "the group all-reduces during forward on some rank (activations, not gradients)" + UNKNOWN_GROUP),
    "group_forward_reduce_scatter": ("BOOLEAN", "the group reduce-scatters during forward on some rank (activations: sequence parallelism)" + UNKNOWN_GROUP),
    "group_backward_reduce_scatter": ("BOOLEAN", "the group reduce-scatters during backward on some rank (gradients)" + UNKNOWN_GROUP),
    "group_uneven_all_to_all": ("BOOLEAN", "the group has an all_to_all with uneven split sizes" + UNKNOWN_GROUP),
    "group_attention_all_to_all": ("BOOLEAN", "the group has an all_to_all next to attention" + UNKNOWN_GROUP),
}



FEATURES_COMMENT = "What tagging rules see, one row per comm_ops row (built with the tags; rules/tags/*.toml are predicates over it)."


def features_comments() -> str:
    parts = [f"COMMENT ON TABLE comm_features IS {_q(FEATURES_COMMENT)};"]
    parts += [f"COMMENT ON COLUMN comm_features.{c} IS {_q(doc)};" for c, (_, doc) in FEATURES.items()]
    return "\n".join(parts)


def markdown() -> str:
    out = []
    tables = {**TABLES, **VOCABULARY}
    tables["comm_features"] = (FEATURES_COMMENT, [(c, t, doc) for c, (t, doc) in FEATURES.items()])
    for table, (comment, cols) in tables.items():
        out.append(f"### `{table}`\n\n{comment}\n\n| column | type | meaning |\n|---|---|---|")
        out.extend(f"| `{c}` | {t} | {doc} |" for c, t, doc in cols)
        out.append("")
    return "\n".join(out)
