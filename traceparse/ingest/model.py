"""The part of a Kineto event that traceparse reads, as msgspec structs.

Only the fields named here are decoded; everything else in an event is skipped
by the decoder without building Python objects. Timestamps and durations are
kept as their raw JSON text so that microseconds with nanosecond fractions
convert to integer nanoseconds exactly (float64 cannot hold them).
"""

from typing import Any

import msgspec

Raw = msgspec.Raw
EMPTY_RAW = Raw(b"")


def _arg(name: str):
    return msgspec.field(name=name, default=None)


def _raw(name: str):
    return msgspec.field(name=name, default=EMPTY_RAW)


class Args(msgspec.Struct, gc=False):
    external_id: Any = _arg("External id")
    external_id_old: Any = _arg("external id")  # Kineto's spelling before PyTorch 1.11, on GPU activities and runtime
    correlation: Any = None
    stream: Any = None
    device: Any = None
    # communication metadata (record_param_comms, NCCL kernels)
    coll_name: Any = _arg("Collective name")
    in_nelems: Any = _arg("In msg nelems")
    out_nelems: Any = _arg("Out msg nelems")
    group_size: Any = _arg("Group size")
    dtype: Any = None
    in_split: Any = _arg("In split size")
    out_split: Any = _arg("Out split size")
    pg_name: Any = _arg("Process Group Name")
    pg_desc: Any = _arg("Process Group Description")
    pg_ranks: Any = _arg("Process Group Ranks")
    pg_id: Any = _arg("Process Group ID")
    seq: Any = _arg("Seq")
    rank_start: Any = _arg("Global rank start")
    rank_stride: Any = _arg("Global rank stride")
    # recorded shapes (record_shapes=True)
    input_dims: Raw = _raw("Input Dims")
    input_types: Raw = _raw("Input type")
    concrete_inputs: Raw = _raw("Concrete Inputs")
    # memory events (profile_memory=True)
    bytes: Any = _arg("Bytes")
    total_allocated: Any = _arg("Total Allocated")
    total_reserved: Any = _arg("Total Reserved")
    device_id: Any = _arg("Device Id")
    device_type: Any = _arg("Device Type")
    # metadata events
    name: Any = None
    labels: Any = None


EMPTY_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Raw = EMPTY_RAW
    dur: Raw = EMPTY_RAW
    args: Args | None = None


class Header(msgspec.Struct):
    """Top-level keys of a trace file other than the events."""

    schemaVersion: Any = None
    distributedInfo: Any = None
    deviceProperties: Any = None
    baseTimeNanoseconds: Any = None
    trace_id: Any = None
    host_name: Any = None
    hostname: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    roctracer_version: Any = None
    hip_runtime_version: Any = None
    profile_memory: Any = None
    record_shapes: Any = None
    traceName: Any = None
    traceparse: Any = None  # the profiler plugin's metadata (traceparse.ingest.plugin_metadata)
    traceEvents: list[Event] = []


EVENTS = msgspec.json.Decoder(list[Event])
HEADER = msgspec.json.Decoder(Header)
