"""Model, layout and optimizer facts the comm_volume and memory checks share.

Every fact is ``{"value": v, "source": "..."}``: stated by the user (``ctx.stated``,
the ``--layout`` keys and model dims) or inferred from the trace, and the source
says which and how. A value that cannot be known is ``None`` with the reason as
its source. Symbols follow docs/parallelism.md 1.
"""

import json
import math
from collections import Counter, defaultdict

from traceparse.axes import AXES as DEGREES
from traceparse.store.query import define, table_rows
from traceparse.vocabulary.modules import use

# optimizer tensors per parameter (docs/parallelism.md 1: SGD 0, momentum 1, Adam/AdamW 2, Muon 1)
N_OPT = {"adam": 2, "adamw": 2, "fusedadam": 2, "adamax": 2, "nadam": 2, "radam": 2, "lamb": 2, "fusedlamb": 2,
         "adadelta": 2, "sparseadam": 2, "adagrad": 1, "rmsprop": 1, "lion": 1, "muon": 1}
WRAPPERS = {"zeroredundancyoptimizer", "lrscheduler", "optimizerwrapper"}
NORMS = ("aten::layer_norm", "aten::rms_norm", "aten::_fused_rms_norm")
ATTENTION = ("aten::scaled_dot_product_attention",)
ATTENTION_KERNELS = ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                     "aten::_scaled_dot_product_cudnn_attention", "aten::_flash_attention_forward")


def fact(value, source):
    return {"value": value, "source": source}


def _read(ctx, name: str, order: str = "", columns: str = "*", params=None) -> list[dict]:
    """The rows of a view or macro of model_facts.sql on the store ``ctx.con``."""
    use(ctx.con, "recorded_inputs", "name_totals", "optimizer_spans", "main_thread_ops")
    define(ctx.con, __package__, "model_facts.sql")
    return table_rows(ctx.con, name, order, columns, params=params)


def stated(ctx, key, unit=""):
    v = ctx.stated.get(key)
    return None if v is None else fact(v, f"{ctx.given(key)} ({key}{unit})")


def run_shape(ctx) -> dict:
    """Ranks loaded and profiled steps: the denominators of 'per rank per step' (the complete steps: step_windows).
    ``unmeasured``: the ranks cut short (ranks.kept_until_ns) when some rank is whole: their bytes per step are
    measured through the others, since a cut file may lose its worker threads (gloo's annotations, which give sizes
    and groups) even in its complete steps; ``measured_ranks``: the others, the denominator of bytes per rank."""
    [got] = _read(ctx, "facts_run_shape")
    ranks, steps, stepped, cut = got["ranks"], got["steps"], got["stepped"], got["cut"]
    unmeasured = cut if len(cut) < ranks else []  # every rank cut: each measured as it is
    return {"ranks": ranks, "steps": max(steps, 1), "stepped": stepped, "unmeasured": unmeasured,
            "measured_ranks": ranks - len(unmeasured)}


def degrees(ctx) -> dict:
    """dp..ep, zero_stage, microbatches m, virtual_stages v: stated, else the inferred layout."""
    out = {}
    for k in DEGREES + ("zero_stage", "microbatches", "virtual_stages"):
        if k in ctx.stated:
            out[k] = fact(ctx.stated[k], f"{ctx.given(k)} ({k})")
        elif ctx.layout.get(k) is not None:
            out[k] = fact(ctx.layout[k], f"trace: {ctx.layout['evidence'][k]}")
        elif k in ("microbatches", "virtual_stages"):
            out[k] = fact(1, f"assumed 1 ({ctx.layout['evidence'][k]})")
        else:
            out[k] = fact(None, ctx.layout["evidence"][k])
    return out


def delta(ctx, strategy=None) -> dict:
    """Bytes per element: the element size of the strategy's (else the gradient) collectives, else stated dtype_bytes."""
    if "dtype_bytes" in ctx.stated:
        return stated(ctx, "dtype_bytes")
    got = _read(ctx, "facts_elem_size(?)", params=[strategy or "dp"])
    if got:
        return fact(got[0]["elem_bytes"], f"trace: element size of the {strategy or 'dp gradient'} collectives "
                                          f"({got[0]['dtypes']})")
    return fact(None, f"no {strategy or 'dp'} collective with a known dtype and no stated dtype_bytes")


def _grad_bytes(ctx, shape):
    """Per rank (mean, max) bytes per step of the dp gradient collectives (all-reduce for ZeRO-0/1, reduce-scatter for 2/3)."""
    return _read(ctx, "facts_grad_bytes(?, ?)", "rank", params=[shape["stepped"], shape["unmeasured"]])


def sync_rounds(ctx, deg) -> dict:
    """Gradient reduce-scatter rounds per step (ZeRO-2/3): the notes reduce-scatter after every micro-batch (m);
    FSDP2 with set_requires_gradient_sync(False) on all but the last micro-batch buffers the gradients and
    reduce-scatters once. Per rank and step, each reduce-scatter size (a sharded unit, or units of one size)
    repeats once a round: rounds = the greatest common divisor of those counts and m, the most common value."""
    m = deg["microbatches"]["value"] or 1
    rows = _read(ctx, "facts_reduce_scatters")
    if not rows:
        return fact(m, "no ZeRO-2/3 gradient reduce-scatter seen: the notes' one per micro-batch (m)")
    counts = defaultdict(lambda: m)
    for r in rows:
        counts[(r["rank"], r["step"])] = math.gcd(counts[(r["rank"], r["step"])], r["n"])
    rounds = Counter(counts.values()).most_common(1)[0][0]
    return fact(rounds, f"trace: gradient reduce-scatters per step, each unit's repeats (gcd with m = {m})")


def _stated_phi(ctx, split: int, caveat: str) -> dict:
    """Stated params divided by the tp x pp split of the model."""
    return fact(ctx.stated["params"] / split, f"{ctx.given('params')} params / (tp x pp) = {ctx.stated['params']} / {split}"
                f" (assumes every parameter is split by TP and PP{caveat})")


def phi_dp(ctx, shape, deg, dlt) -> dict:
    """Parameters one DP replica synchronizes per device (Phi / (N_TP N_PP) for a dense model), mean over ranks."""
    tp, pp, ep = (deg[k]["value"] or 1 for k in ("tp", "pp", "ep"))
    if "params" in ctx.stated and ep <= 1:
        return _stated_phi(ctx, tp * pp, "; replicated norms and embeddings make it larger")
    rows = _grad_bytes(ctx, shape)
    if rows and dlt["value"]:
        per_mb = rows[0]["variant"] in ("zero2", "zero3")  # reduce-scatter rounds: after every micro-batch, or once
        m = sync_rounds(ctx, deg)["value"] if per_mb else 1
        total = sum(r["b"] for r in rows) / (shape["measured_ranks"] * shape["steps"]) / dlt["value"] / m
        what = "reduce-scatter input" if per_mb else "all-reduce"
        note = "; EP: the experts are not in it" if ep > 1 else ""
        return fact(total, f"trace: dp gradient {what} bytes per rank per step / delta"
                           f"{' / its rounds per step (' + str(m) + ')' if m > 1 else ''}{note}")
    why = "stated params include experts that DP does not synchronize when EP folds into DP; " if "params" in ctx.stated else ""
    return fact(None, why + "no dp gradient collective with a known size, and no stated params")


def phi_device(ctx, shape, deg, dlt) -> dict:
    """Parameters held per device before ZeRO sharding (max over ranks): Phi / (N_TP N_PP) for a dense model."""
    tp, pp, ep = (deg[k]["value"] or 1 for k in ("tp", "pp", "ep"))
    if pp > 1 and tp <= 1 and ep <= 1:  # stages differ (embedding, head): the trace counts each stage's own
        acc = accumulated(ctx, shape, deg)
        if acc:
            return fact(acc, "trace: elements of the gradients accumulated (AccumulateGrad) per step / m, largest "
                             "rank (pipeline stages hold different parameters)")
    if "params" in ctx.stated and ep <= 1:
        return _stated_phi(ctx, tp * pp, "")
    grads = _grad_bytes(ctx, shape)
    if grads and dlt["value"] and ep <= 1:
        per_mb = grads[0]["variant"] in ("zero2", "zero3")
        best = max(r["b"] for r in grads) / shape["steps"] / dlt["value"] / (sync_rounds(ctx, deg)["value"] if per_mb
                                                                            else 1)
        return fact(best, "trace: dp gradient collective bytes per step / delta, largest rank")
    if tp <= 1:
        acc = accumulated(ctx, shape, deg)
        if acc:
            return fact(acc, "trace: elements of the gradients accumulated (AccumulateGrad) per step / m, largest rank"
                        + (" (experts included)" if ep > 1 else ""))
    if grads and dlt["value"]:
        best = max(r["b"] for r in grads) / shape["steps"] / dlt["value"]
        return fact(best, "trace: dp gradient collective bytes / delta, largest rank (EP: dense parameters only, experts missing)")
    return fact(None, "no stated params (or EP, where stated params cannot be split), no dp gradient collective "
                      "with a known size, no recorded AccumulateGrad shapes usable (TP shards hide behind logical shapes)")


def accumulated(ctx, shape, deg):
    """Largest per-rank elements of AccumulateGrad inputs per step / m (the rank's parameters that get gradients).

    A pipeline stage's received activation is a leaf that requires grad, so its gradient is accumulated too: an
    AccumulateGrad whose shape is one the rank receives on a pp-tagged call is not a parameter. None unless every
    loaded rank accumulates every shape m times a step: schedules that split the backward (zero-bubble, DualPipeV)
    compute some weight gradients without AccumulateGrad, so the count would miss parameters."""
    rows = _read(ctx, "facts_accumulate_grad(?)", params=[shape["stepped"]])
    received = {(r["rank"], tuple(d)) for r in _read(ctx, "facts_pp_received")
                for d in _shapes(json.loads(r["input_dims"] or "[]"))}
    per_rank, times = Counter(), Counter()
    for r in rows:
        rank, d = r["rank"], json.loads(r["input_dims"] or "[]")
        if d and isinstance(d[0], list) and (rank, tuple(d[0])) not in received:
            per_rank[rank] += math.prod(d[0])
            times[(rank, tuple(d[0]))] += 1
    m = deg["microbatches"]["value"] or 1
    if (not per_rank or len(per_rank) < _read(ctx, "facts_event_ranks")[0]["n"]
            or any(n % (shape["steps"] * m) for n in times.values())):
        return None
    return max(per_rank.values()) / shape["steps"] / m


def _shapes(dims):
    """Every tensor shape (a list of ints) in a recorded input_dims, however nested."""
    if isinstance(dims, list) and dims and all(isinstance(x, int) for x in dims):
        return [dims]
    return [s for x in dims for s in _shapes(x)] if isinstance(dims, list) else []


def _mode_dims(ctx, names, shape):
    """The most common input_dims of the ops named ``names`` (in the profiled steps when there are any)."""
    got = _read(ctx, "facts_mode_dims(?, ?)", params=[list(names), shape["stepped"]])
    return (json.loads(got[0]["input_dims"]), got[0]["n"]) if got else (None, 0)


def activation(ctx, shape, deg) -> dict:
    """b, S, H and their product bSH (whole sequence, one micro-batch): stated, else the recorded shapes."""
    out = {k: stated(ctx, k) for k in ("micro_batch", "seq", "hidden")}
    split = (deg["cp"]["value"] or 1) * (deg["sp"]["value"] or 1)
    if not all(out.values()):
        dims, n = _mode_dims(ctx, NORMS, shape)
        x = dims[0] if dims and dims[0] else None
        if x and len(x) >= 2:
            src = f"trace: input of the norms ({n} calls, shape {x}, batch first assumed)"
            if split > 1:
                src += f", sequence x cp x sp = x {split}"
            guess = {"hidden": x[-1], "seq": (x[-2] if len(x) == 3 else None), "micro_batch": (x[0] if len(x) == 3 else None)}
            tokens = math.prod(x[:-1]) * split
            for k in out:
                if out[k] is None:
                    v = guess[k] * split if k == "seq" and guess[k] else guess[k]
                    out[k] = fact(v, src if v is not None else f"2-D norm input {x}: only b x S = {tokens} known")
            if not (out["micro_batch"]["value"] and out["seq"]["value"]):
                out["bSH"] = fact(tokens * out["hidden"]["value"], src)
    for k in out:
        if out[k] is None:
            out[k] = fact(None, f"not stated ({k}) and no recorded norm shapes")
    if "bSH" not in out:
        vals = [out[k]["value"] for k in ("micro_batch", "seq", "hidden")]
        kinds = {out[k]["source"].split(" ")[0].rstrip(":") for k in ("micro_batch", "seq", "hidden")}
        out["bSH"] = fact(math.prod(vals) if None not in vals else None,
                          f"{_given_kind(kinds)}: b x S x H" if None not in vals else "b, S or H unknown")
    return out


def _given_kind(kinds: set) -> str:
    """'stated' when all came from --layout, 'metadata' when all were given (some by the plugin), else 'trace'."""
    return "stated" if kinds <= {"stated"} else "metadata" if kinds <= {"stated", "metadata"} else "trace"


def layers_local(ctx, shape, deg) -> dict:
    """Transformer layers per device (L / N_PP): stated layers, else attention calls (or norms / 2) per micro-batch."""
    pp, m = deg["pp"]["value"] or 1, deg["microbatches"]["value"] or 1
    if "layers" in ctx.stated:
        return fact(ctx.stated["layers"] / pp, f"{ctx.given('layers')} layers / pp = {ctx.stated['layers']} / {pp}")
    for names, per, what in ((ATTENTION, 1, "scaled_dot_product_attention calls"),
                             (ATTENTION_KERNELS, 1, "attention kernels"),
                             (NORMS, 2, "norm calls / 2 (pre-norm: two per layer)")):
        n = _read(ctx, "facts_calls(?, ?)", params=[list(names), shape["stepped"]])[0]["n"]
        if n:
            each = n / (shape["ranks"] * shape["steps"] * m)
            return fact(each if per == 1 else math.floor(each / per),
                        f"trace: {what} per rank per step / m (forward only; recomputation would count twice)")
    return fact(None, "not stated (layers) and no attention or norm calls recorded")


def kv_ratio(ctx, shape) -> dict:
    """N_kv / N_q: stated kv_heads / heads, else the heads of k and q at scaled_dot_product_attention, else 1 (MHA)."""
    if "kv_heads" in ctx.stated and "heads" in ctx.stated:
        return fact(ctx.stated["kv_heads"] / ctx.stated["heads"], f"{ctx.given('kv_heads')} kv_heads / heads")
    dims, _ = _mode_dims(ctx, ATTENTION + ATTENTION_KERNELS, shape)
    if dims and len(dims) >= 2 and len(dims[0]) == 4 and len(dims[1]) == 4 and dims[0][1]:
        return fact(dims[1][1] / dims[0][1], f"trace: heads of k / q at attention ({dims[1][1]} / {dims[0][1]})")
    return fact(1, "assumed 1 (MHA): not stated (kv_heads, heads) and no attention shapes")


def top_k(ctx) -> dict:
    """K_MoE: stated top_k, else the k of the router's aten::topk calls."""
    if "top_k" in ctx.stated:
        return stated(ctx, "top_k")
    got = _read(ctx, "facts_top_k")
    k = got[0]["k"] if got else None
    if k and k.isdigit():
        return fact(int(k), "trace: k of the aten::topk calls (the router)")
    return fact(None, "not stated (top_k) and no aten::topk call recorded")


def optimizer(ctx) -> dict:
    """{name, n_opt}: stated n_opt / optimizer, else the Optimizer.step#<Name>.step annotations."""
    name = ctx.stated.get("optimizer")
    src = f"{ctx.given('optimizer')} (optimizer)"
    if name is None:
        names = [r["c"] for r in _read(ctx, "facts_optimizers", "c")]
        inner = [n for n in names if n.lower() not in WRAPPERS] or names
        name = inner[0] if inner else None
        src = f"trace: Optimizer.step#{name}.step annotation" if name else "no Optimizer.step annotation"
    if "n_opt" in ctx.stated:
        return {"name": fact(name, src), "n_opt": stated(ctx, "n_opt")}
    key = (name or "").lower()
    if key in N_OPT:
        how = src.split(" ")[0].rstrip(":")  # stated, metadata or trace
        return {"name": fact(name, src), "n_opt": fact(N_OPT[key], f"{how}: {name} keeps {N_OPT[key]} state tensors per parameter")}
    if key in ("sgd", "fusedsgd"):
        mom = _sgd_momentum(ctx, name)
        if mom is not None:
            return {"name": fact(name, src), "n_opt": fact(int(mom), (
                "trace: SGD step multiplies (momentum buffers)" if mom else
                "trace: SGD step only adds (no momentum buffer ops)"))}
        return {"name": fact(name, src), "n_opt": fact(None, "SGD: 0 or 1 (momentum) and the step's ops do not tell; state n_opt")}
    return {"name": fact(name, src), "n_opt": fact(None, f"optimizer {name or 'unknown'}: state tensors per parameter unknown; state n_opt")}


def _sgd_momentum(ctx, name):
    """True when the SGD step multiplies (buf.mul_(momentum)), False when it only adds, None when nothing is inside."""
    [got] = _read(ctx, "facts_sgd_ops(?)", params=[f"Optimizer.step#{name}.step"])
    if not (got["muls"] or got["adds"]):
        return None
    return got["muls"] > 0
