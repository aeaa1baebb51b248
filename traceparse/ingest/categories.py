"""Kineto's event categories, by what traceparse does with them: the names it reads (in any letter case, and the
names of older PyTorch), the device work it analyzes, the runtime calls that launch it, and the device kinds it
counts but does not analyze. Plain names, no dependency: the loader (columns.py) and the GPU section's reason
(document/gpu.py) read them alike.
"""

# Kineto's category names for complete events, as libkineto's ActivityType names them today (ActivityType.h; the
# table of which PyTorch wrote what: docs/loading.md, Category names). Matched in any letter case: an event whose
# category is one of these in another case is read as this spelling, counted (CASE_READ).
KINETO_CATEGORIES = (
    "cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset", "kernel", "external_correlation",
    "cuda_runtime", "cuda_driver", "cpu_instant_event", "python_function", "overhead", "mtia_runtime",
    "mtia_ccp_events", "mtia_insight", "cuda_sync", "cuda_event", "mtia_counters", "glow_runtime",
    "cuda_profiler_range", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm", "privateuse1_runtime",
    "privateuse1_driver", "xpu_scope_profiler", "xpu_sync",
    "Trace",  # the profiled span Kineto writes once per trace (output_json.cpp handleTraceSpan)
)
# Kineto's category names before PyTorch 1.11 (1.8 to 1.10: the TensorBoard plugin's samples), read as today's
OLD_CATEGORIES = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel", "Memcpy": "gpu_memcpy",
                  "Memset": "gpu_memset"}

# Device work and the host's calls into a device runtime, by category (after the spellings above are read). What
# traceparse analyzes as GPU activity is DEVICE_WORK launched through CUDA_CALLS (vocabulary/gpu_activity.sql);
# the rest is said in load_issues with its counts (device_kind_issues), never taken for a CPU-only run.
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
CUDA_CALLS = ("cuda_runtime", "cuda_driver")
# runtime calls of other accelerators whose device work Kineto writes as DEVICE_WORK (Intel XPU through XPUPTI; a
# PrivateUse1 backend): the kernels are analyzed, these calls are not linked to them
OTHER_CALLS = ("xpu_runtime", "xpu_driver", "privateuse1_runtime", "privateuse1_driver")
# device work of an accelerator traceparse does not analyze, by the accelerator's name (HTA counts MTIA's CCP events
# as kernels; traceparse has no MTIA trace to hold such an analysis to)
UNANALYZED_WORK = {"mtia_ccp_events": "MTIA"}
UNANALYZED_CALLS = {"mtia_runtime": "mtia_ccp_events"}  # that accelerator's runtime calls -> its device work
# a runtime call that puts work on the device: a kernel launch (cudaLaunchKernel, cuLaunchKernel, cudaGraphLaunch,
# hipLaunchKernel, ...; MTIA's runFunction, as HTA reads it), a copy or a memset (cudaMemcpyAsync, hipMemsetAsync, ...)
LAUNCH_NAMES = "(?i)(launch|memcpy|memset|^runFunction)"
COUNTED = (*DEVICE_WORK, *CUDA_CALLS, *OTHER_CALLS, *UNANALYZED_WORK, *UNANALYZED_CALLS)
