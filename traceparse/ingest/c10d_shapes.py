"""Communication facts of ``c10d::*`` ops, ``gloo:*`` and ``nccl:*`` annotations, read from recorded shapes.

The gloo backend writes no ``record_param_comms``: the only record of what a
collective moved is the op's "Input Dims" / "Input type" / "Concrete Inputs"
(``record_shapes=True``). The positions below follow the c10d op schemas
(torch/csrc/distributed/c10d/Ops.cpp).

Older NCCL traces (PyTorch before the communication args of ``record_param_comms``)
carry the size only in the shapes of the ``nccl:<op>`` annotation that
ProcessGroupNCCL's work records around the collective: its recorded inputs are
the collective's *input* tensors (ProcessGroupNCCL.cpp, ``collective(inputs, ...,
"nccl:<op>")``), so the annotation gives the input's element count and dtype; the
output's only for ops whose output is the input (all-reduce, broadcast, reduce,
send, recv). A list all-to-all (``c10d::alltoall_``) records only its first input
tensor there: derive.sql does not take that one.
"""

import msgspec

# op name -> (normalized op, input arg, output arg, peer/root arg, out split arg, in split arg)
C10D = {
    "broadcast_": ("broadcast", 0, 0, 2, None, None),
    "allreduce_": ("all_reduce", 0, 0, None, None, None),
    "allreduce_coalesced_": ("all_reduce", 0, 0, None, None, None),
    "allgather_": ("all_gather", 1, 0, None, None, None),
    "_allgather_base_": ("all_gather", 1, 0, None, None, None),
    "allgather_coalesced_": ("all_gather", 1, 0, None, None, None),
    "allgather_into_tensor_coalesced_": ("all_gather", 1, 0, None, None, None),
    "reduce_scatter_": ("reduce_scatter", 1, 0, None, None, None),
    "_reduce_scatter_base_": ("reduce_scatter", 1, 0, None, None, None),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1, 0, None, None, None),
    "reduce_": ("reduce", 0, 0, 3, None, None),
    "gather_": ("gather", 1, 0, 3, None, None),
    "scatter_": ("scatter", 1, 0, 3, None, None),
    "alltoall_": ("all_to_all", 1, 0, None, None, None),
    "alltoall_base_": ("all_to_all", 1, 0, None, 3, 4),
    "barrier": ("barrier", None, None, None, None, None),
    "monitored_barrier_": ("barrier", None, None, None, None, None),
    "send": ("send", 0, 0, 2, None, None),
    "recv_": ("recv", 0, 0, 2, None, None),
    "recv_any_source_": ("recv", 0, 0, None, None, None),
}

GLOO = {
    "all_reduce": "all_reduce", "allreduce": "all_reduce", "all_gather": "all_gather", "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter", "all_to_all": "all_to_all", "alltoall": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "send": "send", "recv": "recv", "barrier": "barrier",
}

# nccl:<title> annotation -> (normalized op, output = input)
NCCL = {
    "all_reduce": ("all_reduce", True), "all_reduce_coalesced": ("all_reduce", True),
    "allreduce_coalesced": ("all_reduce", True),
    "broadcast": ("broadcast", True), "_broadcast_oop": ("broadcast", True),
    "reduce": ("reduce", True), "_reduce_oop": ("reduce", False),
    "all_gather": ("all_gather", False), "_all_gather_base": ("all_gather", False),
    "all_gather_into_tensor_coalesced": ("all_gather", False),
    "reduce_scatter": ("reduce_scatter", False), "_reduce_scatter_base": ("reduce_scatter", False),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", False),
    "all_to_all": ("all_to_all", False), "gather": ("gather", False),
    "send": ("send", True), "recv": ("recv", True),
}

LIST_TYPES = ("TensorList", "GenericList", "Tensor[]")
NON_TENSOR_TYPES = ("", "Scalar", "ScalarList", "String", "Device", "None") + LIST_TYPES


def _numel(dims, typ):
    """Elements of a recorded tensor (or tensor list); None when the shape was not recorded: older
    profilers write a tensor list's dims as ``[]``, which says nothing (a collective's list is never empty)."""
    if not isinstance(dims, list):
        return 0
    if typ in LIST_TYPES and not dims:
        return None
    if typ in LIST_TYPES or (dims and all(isinstance(d, list) for d in dims)):
        parts = [_numel(d, "") for d in dims]
        return None if None in parts else sum(parts)
    n = 1
    for d in dims:
        if not isinstance(d, int):
            return 0
        n *= d
    return n


def _decode(text):
    if not text:
        return []
    try:
        v = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return []
    return v if isinstance(v, list) else []


def _at(seq, i):
    return seq[i] if i is not None and i < len(seq) else None


def _dtype(types):
    return next((t for t in types if isinstance(t, str) and t not in NON_TENSOR_TYPES), None)


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _split(text):
    return text if isinstance(text, str) and text.startswith("[") else None


def comm_from_shapes(name: str, dims_text, types_text, concrete_text):
    """(op, in_nelems, out_nelems, dtype, peer, in_split, out_split) or None when the name is no collective."""
    if name.startswith("c10d::"):
        sig = C10D.get(name[6:])
        if sig is None:
            return None
        op, i_in, i_out, i_peer, i_osplit, i_isplit = sig
        dims, types, concrete = _decode(dims_text), _decode(types_text), _decode(concrete_text)
        n_in = _numel(_at(dims, i_in), _at(types, i_in)) if i_in is not None else 0
        n_out = _numel(_at(dims, i_out), _at(types, i_out)) if i_out is not None else 0
        dtype = _dtype(types[: max(i_in or 0, i_out or 0) + 1]) if types else None
        return (op, n_in, n_out, dtype, _int(_at(concrete, i_peer)),
                _split(_at(concrete, i_isplit)), _split(_at(concrete, i_osplit)))
    if name.startswith("symm_mem::") and "all_reduce" in name:
        # symmetric-memory all-reduce (multimem_all_reduce_, one_shot_all_reduce, ...): input first
        dims, types = _decode(dims_text), _decode(types_text)
        n = _numel(_at(dims, 0), _at(types, 0))
        return ("all_reduce", n, n, _dtype(types[:1]), None, None, None)
    if name.startswith("gloo:"):
        op = GLOO.get(name[5:])
        if op is None:
            return None
        dims, types = _decode(dims_text), _decode(types_text)
        parts = _tensor_parts(dims, types)
        return (op, None if None in parts else sum(parts), None, _dtype(types), None, None, None)
    if name.startswith("nccl:"):
        sig = NCCL.get(name[5:])
        if sig is None:
            return None
        op, out_is_in = sig
        dims, types = _decode(dims_text), _decode(types_text)
        parts = _tensor_parts(dims, types)
        dtype = _dtype(types)
        if not parts or None in parts or dtype is None:
            return None  # nothing recorded: no facts (the op name alone is in the events)
        n = sum(parts)
        return (op, n, n if out_is_in else None, dtype, None, None, None)
    return None


def _tensor_parts(dims, types):
    """Elements of each recorded tensor (or tensor list) among a record's inputs; None for one not recorded."""
    return [_numel(d, t) for d, t in zip(dims, types, strict=False) if t not in NON_TENSOR_TYPES or t in LIST_TYPES]
