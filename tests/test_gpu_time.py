"""The analyze document's GPU section (``gpu``: traceparse/document/gpu.py over vocabulary/gpu_time.sql) on tiny
hand-written Kineto traces.

Every trace has three ProfilerStep#N steps of 1000 us on the main thread (pid 1, tid 1), step k starting at
S = 1000 + 1000 k us; GPU activities run on device 0 (pid 0), stream 7 unless said, each launched by a runtime call
on the main thread with its correlation id. Every expected number is worked out by hand in the comments from the
definitions in gpu_time.sql (times in us there, ns in the asserts):

- a step's GPU span runs from the end of the GPU work of the steps before it (step 0: its own first activity's
  start) to the end of its own (an activity belongs to the step its launch falls in);
- HTA's window keeps the activities launched before the latest ProfilerStep#N starts (3000 us here): steps 0, 1.
"""

from __future__ import annotations

from itertools import count

import pytest

from conftest import committed_runs, public_trace
from traces import step, trace, write, x

from traceparse.document import analyze
from traceparse.document.gpu import CAUSE_WORDS

DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
US = 1000  # ns


def step_start(k: int) -> int:
    return 1000 + 1000 * k


def steps() -> list[dict]:
    return [step(k, step_start(k), 1000) for k in range(3)]


_corr = count(1)


def launched(call_ts, call_dur, start, dur, name="gemm", stream=7, cat="kernel", call="cudaLaunchKernel"):
    """A runtime call on the main thread and the GPU activity it launched (linked by a fresh correlation id)."""
    c = next(_corr)
    return [
        x(call, call_ts, call_dur, cat="cuda_runtime", correlation=c),
        x(name, start, dur, cat=cat, pid=0, tid=stream, stream=stream, device=0, correlation=c),
    ]


def gpu_of(tmp_path, events) -> dict:
    f = write(tmp_path / "rank0.json", trace(steps() + events, rank=0, world_size=1))
    return analyze([f], use_cache=False)["gpu"]


def causes_of(gpu) -> dict:
    """{(step, cause): idle_causes row}"""
    return {(c["step"], c["cause"]): c for c in gpu["idle_causes"]}


def step_rows(gpu) -> dict:
    """{step: gpu.temporal row of scope 'step'}"""
    return {t["step"]: t for t in gpu["temporal"] if t["scope"] == "step"}


def hta_row(gpu) -> dict:
    (row,) = [t for t in gpu["temporal"] if t["scope"] == "hta"]
    return row


def the_finding(gpu, cause, op=None, steady=None) -> str:
    """The one finding of ``gpu`` that names a rank's cause, checked to name ``cause``: its words (CAUSE_WORDS; a
    cpu_op finding is worded by its op), the op that took most of the time in backticks when there is one, and in
    how many of the 3 steps the cause was at least 5% (``steady``). (The replay's cost, when material, is a finding
    of its own.)"""
    (finding,) = [f for f in gpu["findings"] if not f.startswith("By replay")]
    assert finding.startswith("rank 0:")
    if cause != "cpu_op":
        assert CAUSE_WORDS[cause] in finding
    if op:
        assert f"`{op}`" in finding
    if steady:
        assert f"{steady} of 3 steps" in finding
    return finding


def dataloader_trace(loads):
    """Step k: the dataloader runs [S, S + loads[k]], then two kernels are launched back to back:
    call [S+d, S+d+10] -> kernel A [S+d+20, S+700]; call [S+d+10, S+d+20] -> kernel B [S+700, S+1000].
    So each step's GPU work ends exactly when the next step (and its dataloader) starts."""
    ev = []
    for k, d in enumerate(loads):
        s = step_start(k)
        ev.append(x(DATALOADER, s, d))
        ev += launched(s + d, 10, s + d + 20, 700 - (d + 20), name="gemm_a")
        ev += launched(s + d + 10, 10, s + 700, 300, name="gemm_b")
    return ev


# --- 1. host wait covered by the dataloader --------------------------------------------

def test_dataloader_stall_names_the_dataloader(tmp_path):
    gpu = gpu_of(tmp_path, dataloader_trace([400, 400, 400]))
    # step k: A [S+420, S+700], B [S+700, S+1000], launched at S+400, S+410
    # step 0 span: its first start 1420 .. its end 2000 = 580, all busy
    # step 1 span: 2000 (step 0's end) .. 3000 = 1000; busy [2420, 3000] = 580; gap [2000, 2420]:
    #   A starts at b = 2420, launched by the call [L, E] = [2400, 2410], L > a = 2000: [2000, 2400] host, the
    #   dataloader (starts at 2000, the ProfilerStep#1 annotation around it does not count) = 400; [2400, 2410]
    #   launch_call (the host launching: its call running) = 10; [2410, 2420] launch (launched, not started) = 10
    # step 2: the same, 1000 later
    spans = step_rows(gpu)
    assert {k: (t["span_ns"], t["idle_ns"], t["compute_ns"], t["non_compute_ns"]) for k, t in spans.items()} == {
        0: (580 * US, 0, 580 * US, 0),
        1: (1000 * US, 420 * US, 580 * US, 0),
        2: (1000 * US, 420 * US, 580 * US, 0),
    }
    assert (spans[1]["idle"], spans[1]["compute"]) == (0.42, 0.58)
    causes = causes_of(gpu)
    assert set(causes) == {(k, c) for k in (1, 2) for c in ("dataloader", "launch_call", "launch")}
    for k in (1, 2):
        dl = causes[(k, "dataloader")]
        assert (dl["idle_ns"], dl["share"], dl["side"]) == (400 * US, 0.4, "host")
        assert dl["ops"] == [{"name": DATALOADER, "ns": 400 * US}]
        call = causes[(k, "launch_call")]
        assert (call["idle_ns"], call["share"], call["side"], call["ops"]) == (
            10 * US, 0.01, "host", [{"name": "cudaLaunchKernel", "ns": 10 * US}])
        la = causes[(k, "launch")]
        assert (la["idle_ns"], la["share"], la["side"], la["ops"]) == (10 * US, 0.01, "launch", [])
    # dataloader: 800 of the steps' 580 + 1000 + 1000 = 2580 (31%), at least 5% in 2 of 3 steps: named;
    # launch_call and launch: 20 / 2580 = 0.8% each: not
    # by replay (gpu.host_cost): in steps 1 and 2 the dataloader's [S, S+400] taken away launches A at S, so A
    # [S+20, S+300], B [S+300, S+600], and the thread's time in no op after its launches ends the step at S+600:
    # 400 saved; step 0's wait is before its GPU span (no gap): 0. Over the three 1000 us steps: 800 / 3000, past
    # [gpu] fail_cost_share (a quarter): fail
    host = gpu["host_cost"]
    assert [p["saved_ns"] for p in host["per_step"]] == [0, 400 * US, 400 * US]
    assert (host["share"], host["cause"]) == (round(800 / 3000, 4), "dataloader")
    assert gpu["status"] == "fail"
    assert "By replay, the GPUs' waits on their hosts cost the step 266.7 us (27%)" in gpu["findings"][-1]
    finding = the_finding(gpu, "dataloader", DATALOADER, steady=2)
    assert CAUSE_WORDS["launch"] not in finding
    # HTA's window (steps 0, 1: launched before 3000): A0 [1420, 1700], B0 [1700, 2000], A1 [2420, 2700],
    # B1 [2700, 3000]. B0, B1 follow with no gap (kernel wait 0); A1 starts 420 after B0 ends and was launched
    # (2400) after that end: host wait 420
    assert gpu["idle"] == [
        {"rank": 0, "stream": 7, "host_wait_ns": 420 * US, "kernel_wait_ns": 0, "other_ns": 0, "idle_ns": 420 * US}]
    # HTA's span: 1420 .. 3000 = 1580, busy 280 + 300 + 280 + 300 = 1160
    hta = hta_row(gpu)
    assert (hta["span_ns"], hta["idle_ns"], hta["compute_ns"], hta["non_compute_ns"]) == (
        1580 * US, 420 * US, 1160 * US, 0)


@pytest.mark.slow
def test_a_wrapper_around_the_step_does_not_hide_the_dataloader(tmp_path):
    """A record_function around the whole step is the outermost op at every moment; the DataLoader op inside it
    still names the wait (launcher_ops: the outermost op with a cause of its own wins)."""
    wrapped = [x("## train_step ##", step_start(k), 1000, cat="user_annotation") for k in range(3)]
    gpu = gpu_of(tmp_path, dataloader_trace([400, 400, 400]) + wrapped)
    causes = causes_of(gpu)
    # as in the test above: [S, S+400] is the dataloader's inside the wrapper, then 10 us of launch call and 10 of
    # launch latency
    for k in (1, 2):
        assert (causes[(k, "dataloader")]["idle_ns"], causes[(k, "dataloader")]["ops"]) == (
            400 * US, [{"name": DATALOADER, "ns": 400 * US}])
    assert (1, "cpu_op") not in causes and (2, "cpu_op") not in causes
    the_finding(gpu, "dataloader", DATALOADER, steady=2)


# --- 9. one odd step names nothing ------------------------------------------------------

@pytest.mark.slow
def test_a_stall_in_one_step_of_three_is_not_named(tmp_path):
    gpu = gpu_of(tmp_path, dataloader_trace([10, 400, 10]))
    # step 0: A [1030, 1700], B [1700, 2000]: span 1030 .. 2000 = 970, no gap
    # step 1: gap [2000, 2420]: dataloader [2000, 2400] = 400 (share 0.4), launch_call [2400, 2410] = 10,
    #   launch [2410, 2420] = 10
    # step 2: gap [3000, 3030]: dataloader [3000, 3010] = 10 (share 0.01), launch_call [3010, 3020] = 10 (0.01),
    #   launch [3020, 3030] = 10 (0.01)
    causes = causes_of(gpu)
    assert {k: (c["idle_ns"], c["share"]) for k, c in causes.items()} == {
        (1, "dataloader"): (400 * US, 0.4),
        (1, "launch_call"): (10 * US, 0.01),
        (1, "launch"): (10 * US, 0.01),
        (2, "dataloader"): (10 * US, 0.01),
        (2, "launch_call"): (10 * US, 0.01),
        (2, "launch"): (10 * US, 0.01),
    }
    assert causes[(1, "dataloader")]["ops"] == [{"name": DATALOADER, "ns": 400 * US}]
    assert {k: t["span_ns"] for k, t in step_rows(gpu).items()} == {0: 970 * US, 1: 1000 * US, 2: 1000 * US}
    # dataloader: 410 of 2970 (14%) is material, but at least 5% in only 1 of 3 steps (a majority is 2): not
    # named; launch_call, launch: 20 / 2970 each: not material. By replay the waits still cost what they cost: the dataloader's
    # [2000, 2400] taken away ends step 1 400 sooner, its [3000, 3010] step 2 10 sooner (as in the test above):
    # 410 of the three 1000 us steps, 14%, past [gpu] cause_share: a finding, warn
    assert [p["saved_ns"] for p in gpu["host_cost"]["per_step"]] == [0, 400 * US, 10 * US]
    assert gpu["host_cost"]["share"] == round(410 / 3000, 4)
    (cost,) = gpu["findings"]
    assert cost.startswith("By replay, the GPUs' waits on their hosts cost the step 136.7 us (14%)")
    assert gpu["status"] == "warn"


# --- 2, 3. a synchronization; nothing on the host ----------------------------------------

def host_gap_trace(host, cat="cpu_op", launch_b=True):
    """Step k: call [S, S+10] -> A [S+20, S+500]; call [S+600, S+610] -> B [S+620, S+1020] (so the next step's A,
    launched at S+1000, starts right when B ends). Between the calls the main thread runs ``host``:
    'item': aten::item [S+10, S+600] around cudaStreamSynchronize [S+15, S+590];
    'mul': aten::mul [S+10, S+540]; None: no op at all; any other name: that event (``cat``) [S+10, S+600].
    Without ``launch_b``, B's launch is not in the trace."""
    ev = []
    for k in range(3):
        s = step_start(k)
        ev += launched(s, 10, s + 20, 480, name="gemm_a")
        if host == "item":
            ev.append(x("aten::item", s + 10, 590))
            ev.append(x("cudaStreamSynchronize", s + 15, 575, cat="cuda_runtime", correlation=next(_corr)))
        elif host == "mul":
            ev.append(x("aten::mul", s + 10, 530))
        elif host is not None:
            ev.append(x(host, s + 10, 590, cat=cat))
        b = launched(s + 600, 10, s + 620, 400, name="gemm_b")
        ev += b if launch_b else b[1:]
    return ev


# Each step's span is 1000 (step 0: 1020 .. 2020; step k: 1020 + 1000 k .. 2020 + 1000 k), busy 480 + 400 = 880,
# one gap [S+500, S+620]: B launched by the call [S+600, S+610], L > a = S+500, so [S+500, S+600] is the host's,
# [S+600, S+610] launch_call, [S+610, S+620] launch.
HOST_GAP_SPANS = {k: (1000 * US, 120 * US, 880 * US, 0) for k in range(3)}


@pytest.mark.slow
def test_synchronize_gap(tmp_path):
    gpu = gpu_of(tmp_path, host_gap_trace("item"))
    assert {k: (t["span_ns"], t["idle_ns"], t["compute_ns"], t["non_compute_ns"])
            for k, t in step_rows(gpu).items()} == HOST_GAP_SPANS
    causes = causes_of(gpu)
    assert set(causes) == {(k, c) for k in range(3) for c in ("synchronize", "launch_call", "launch")}
    for k in range(3):
        # [S+500, S+600] inside aten::item, the outermost op (cudaStreamSynchronize is nested in it)
        sync = causes[(k, "synchronize")]
        assert (sync["idle_ns"], sync["share"], sync["side"]) == (100 * US, 0.1, "host")
        assert sync["ops"] == [{"name": "aten::item", "ns": 100 * US}]
        assert (causes[(k, "launch_call")]["idle_ns"], causes[(k, "launch_call")]["share"]) == (10 * US, 0.01)
        assert (causes[(k, "launch")]["idle_ns"], causes[(k, "launch")]["share"]) == (10 * US, 0.01)
    # synchronize: 300 / 3000 = 10%, 3 of 3 steps: named; launch_call, launch 30 / 3000 = 1% each: not
    assert gpu["status"] == "warn"
    the_finding(gpu, "synchronize", "aten::item", steady=3)
    # HTA's window: A0 [1020, 1500], B0 [1620, 2020] (launched 1600 > 1500: host wait 120),
    # A1 [2020, 2500] (launched 2000 <= 2020, gap 0), B1 [2620, 3020] (host wait 120)
    assert gpu["idle"] == [
        {"rank": 0, "stream": 7, "host_wait_ns": 240 * US, "kernel_wait_ns": 0, "other_ns": 0, "idle_ns": 240 * US}]


@pytest.mark.slow
def test_gap_with_no_op_on_the_host_is_python(tmp_path):
    gpu = gpu_of(tmp_path, host_gap_trace(None))
    assert {k: (t["span_ns"], t["idle_ns"], t["compute_ns"], t["non_compute_ns"])
            for k, t in step_rows(gpu).items()} == HOST_GAP_SPANS
    causes = causes_of(gpu)
    assert set(causes) == {(k, c) for k in range(3) for c in ("python", "launch_call", "launch")}
    for k in range(3):
        # [S+500, S+600]: only the ProfilerStep#N annotation covers it, which is no op
        py = causes[(k, "python")]
        assert (py["idle_ns"], py["share"], py["side"], py["ops"]) == (100 * US, 0.1, "host", [])
        assert causes[(k, "launch_call")]["idle_ns"] == causes[(k, "launch")]["idle_ns"] == 10 * US
    assert gpu["status"] == "warn"
    # no op to name: the ProfilerStep#N annotation is not one
    assert "ProfilerStep" not in the_finding(gpu, "python", steady=3)
    assert gpu["idle"][0]["host_wait_ns"] == 240 * US


@pytest.mark.slow
def test_gap_partly_covered_by_an_op_splits_at_its_end(tmp_path):
    gpu = gpu_of(tmp_path, host_gap_trace("mul"))
    causes = causes_of(gpu)
    assert set(causes) == {(k, c) for k in range(3) for c in ("cpu_op", "python", "launch_call", "launch")}
    for k in range(3):
        # [S+500, S+540] inside aten::mul, [S+540, S+600] no op
        op = causes[(k, "cpu_op")]
        assert (op["idle_ns"], op["share"], op["ops"]) == (40 * US, 0.04, [{"name": "aten::mul", "ns": 40 * US}])
        assert (causes[(k, "python")]["idle_ns"], causes[(k, "python")]["share"]) == (60 * US, 0.06)
    # cpu_op: 120 / 3000 = 4% < 5%: not named; python: 180 / 3000 = 6%, at least 5% in 3 of 3 steps: named
    assert "aten::mul" not in the_finding(gpu, "python", steady=3)


@pytest.mark.parametrize(("name", "cat", "cause"), [
    ("Optimizer.step#AdamW.step", "user_annotation", "optimizer"),
    ("c10d::allreduce_", "cpu_op", "communication"),
    ("aten::_local_scalar_dense", "cpu_op", "synchronize"),
    ("cudaDeviceSynchronize", "cuda_runtime", "synchronize"),
    ("aten::index_select", "cpu_op", "cpu_op"),
])
@pytest.mark.slow
def test_host_cause_by_the_op_name(tmp_path, name, cat, cause):
    gpu = gpu_of(tmp_path, host_gap_trace(name, cat=cat))
    # as test_synchronize_gap: [S+500, S+600] inside the op, in each of the 3 steps
    causes = causes_of(gpu)
    assert set(causes) == {(k, c) for k in range(3) for c in (cause, "launch_call", "launch")}
    for k in range(3):
        c = causes[(k, cause)]
        assert (c["idle_ns"], c["share"], c["side"], c["ops"]) == (100 * US, 0.1, "host", [{"name": name, "ns": 100 * US}])
    the_finding(gpu, cause, name, steady=3)


@pytest.mark.slow
def test_activity_launched_outside_the_trace_is_unknown(tmp_path):
    gpu = gpu_of(tmp_path, host_gap_trace(None, launch_b=False))
    # B has no launch: it belongs to the step its start falls in (the same one here), and the gap
    # [S+500, S+620] it ends is 'unknown', whole
    assert {k: (t["span_ns"], t["idle_ns"]) for k, t in step_rows(gpu).items()} == {
        k: (1000 * US, 120 * US) for k in range(3)}
    causes = causes_of(gpu)
    assert set(causes) == {(k, "unknown") for k in range(3)}
    assert {(c["idle_ns"], c["share"], c["side"], tuple(c["ops"])) for c in causes.values()} == {
        (120 * US, 0.12, "unknown", ())}
    # HTA leaves out what was launched outside the trace: only A0 [1020, 1500] and A1 [2020, 2500] are its,
    # A1 launched (2000) after A0 ended: host wait 520
    assert gpu["idle"] == [
        {"rank": 0, "stream": 7, "host_wait_ns": 520 * US, "kernel_wait_ns": 0, "other_ns": 0, "idle_ns": 520 * US}]
    hta = hta_row(gpu)
    assert (hta["span_ns"], hta["idle_ns"], hta["compute_ns"]) == (1480 * US, 520 * US, 960 * US)


# --- 4. launch latency -------------------------------------------------------------------

@pytest.mark.slow
def test_launch_latency(tmp_path):
    # step k: aten::add [S, S+100] around cudaLaunchKernel [S+20, S+90] -> K [S+300, S+1000]
    ev = []
    for k in range(3):
        s = step_start(k)
        ev.append(x("aten::add", s, 100))
        ev += launched(s + 20, 70, s + 300, 700)
    gpu = gpu_of(tmp_path, ev)
    # step 0: 1300 .. 2000 = 700, busy; step k >= 1: S .. S+1000, gap [S, S+300], K launched by the call
    # [L, E] = [S+20, S+90], L > a = S: [S, S+20] host in aten::add (cpu_op); [S+20, S+90] launch_call (the host
    # launching: the call not yet returned); [S+90, S+300] launch (launched, the kernel not yet started)
    assert {k: (t["span_ns"], t["idle_ns"]) for k, t in step_rows(gpu).items()} == {
        0: (700 * US, 0), 1: (1000 * US, 300 * US), 2: (1000 * US, 300 * US)}
    causes = causes_of(gpu)
    assert set(causes) == {(k, c) for k in (1, 2) for c in ("cpu_op", "launch_call", "launch")}
    for k in (1, 2):
        la = causes[(k, "launch")]
        assert (la["idle_ns"], la["share"], la["side"], la["ops"]) == (210 * US, 0.21, "launch", [])
        call = causes[(k, "launch_call")]
        assert (call["idle_ns"], call["share"], call["side"], call["ops"]) == (
            70 * US, 0.07, "host", [{"name": "cudaLaunchKernel", "ns": 70 * US}])
        op = causes[(k, "cpu_op")]
        assert (op["idle_ns"], op["share"], op["ops"]) == (20 * US, 0.02, [{"name": "aten::add", "ns": 20 * US}])
    # of the steps' 700 + 1000 + 1000 = 2700: launch 420 (16%) and launch_call 140 (5.2%), each at least 5% in 2
    # of 3 steps: both named, the larger first; cpu_op 40: not
    assert gpu["status"] == "warn"
    launch, call = [f for f in gpu["findings"] if not f.startswith("By replay")]
    assert launch.startswith("rank 0: GPU idle 22% of its steps' GPU time: 16 points waiting on " + CAUSE_WORDS["launch"])
    assert call.startswith("rank 0: GPU idle 22% of its steps' GPU time: 5 points waiting on "
                           + CAUSE_WORDS["launch_call"] + ", most in `cudaLaunchKernel`, in 2 of 3 steps")
    # HTA: K0 [1300, 2000], K1 [2300, 3000], K1 launched at 2020 > 2000: host wait 300
    assert gpu["idle"][0]["host_wait_ns"] == 300 * US
    # each launch: call 70 (> 50: a runtime outlier), delay 300 - 90 = 210 (> 100: a delay outlier): the launch
    # latency of a gap is its activity's delay
    (launch,) = gpu["launch"]
    assert (launch["launches"], launch["delay_max_ns"], launch["delay_outliers"], launch["runtime_outliers"]) == (
        2, 210 * US, 2, 2)


@pytest.mark.slow
def test_a_long_launch_call_is_the_host_launching_not_the_queue(tmp_path):
    """A launch call that began before the GPU went idle and returned long after (a 6.5 ms hipLaunchKernel on a
    real MI250 trace): the host had not launched yet. It was 'device' (launched before the GPU went idle) or
    'launch' (the call began, the work not started); it is the launch call, and the queue after it is launch."""
    # step k: hipLaunchKernel [S, S+10] -> A [S+20, S+100]; hipLaunchKernel [S+50, S+700] -> B [S+720, S+1020]
    # (the next step's A, launched at S+1000, starts when B ends)
    ev = []
    for k in range(3):
        s = step_start(k)
        ev += launched(s, 10, s + 20, 80, name="k_a", call="hipLaunchKernel")
        ev += launched(s + 50, 650, s + 720, 300, name="k_b", call="hipLaunchKernel")
    gpu = gpu_of(tmp_path, ev)
    # spans: 1020 .. 2020, 2020 .. 3020, 3020 .. 4020; busy 80 + 300; one gap [S+100, S+720] ended by B, launched
    # by [L, E] = [S+50, S+700]: L <= a = S+100 < E: [S+100, S+700] launch_call = 600, [S+700, S+720] launch = 20
    assert {k: (t["span_ns"], t["idle_ns"]) for k, t in step_rows(gpu).items()} == {
        k: (1000 * US, 620 * US) for k in range(3)}
    causes = causes_of(gpu)
    assert set(causes) == {(k, c) for k in range(3) for c in ("launch_call", "launch")}
    for k in range(3):
        call, la = causes[(k, "launch_call")], causes[(k, "launch")]
        assert (call["idle_ns"], call["share"], call["side"], call["ops"]) == (
            600 * US, 0.6, "host", [{"name": "hipLaunchKernel", "ns": 600 * US}])
        assert (la["idle_ns"], la["share"], la["side"]) == (20 * US, 0.02, "launch")
    # launch_call 1800 / 3000 = 60%, 3 of 3 steps: named; launch 2%: not. No host wait before a launch call began
    # (L <= a): nothing for the replay to take away
    assert the_finding(gpu, "launch_call", "hipLaunchKernel", steady=3)
    assert gpu["host_cost"] is None
    # the launch table agrees: delays A 20 - 10 = 10, B 720 - 700 = 20 (max 20, under the 620 of each gap); B's
    # call 650 > 50: a runtime outlier. HTA's window, steps 0 and 1: A0, B0, A1, B1
    (launch,) = gpu["launch"]
    assert (launch["launches"], launch["delay_max_ns"], launch["delay_outliers"], launch["runtime_outliers"]) == (
        4, 20 * US, 0, 2)
    # HTA's idle categories go by the call's start: B's (S+50) is before A's end (S+100), so B's gap of 620 is
    # other (queued, waiting), twice in its window
    assert gpu["idle"] == [
        {"rank": 0, "stream": 7, "host_wait_ns": 0, "kernel_wait_ns": 0, "other_ns": 1240 * US, "idle_ns": 1240 * US}]


# --- 5. queued work waiting: kernel wait, other, device ---------------------------------

def test_queued_kernels_wait_on_the_device(tmp_path):
    # step k: three calls at S, S+10, S+20 -> K1 [S+20, S+300], K2 [S+320, S+500], K3 [S+700, S+1020]
    # (the next step's K1, launched at S+1000, starts when K3 ends)
    ev = []
    for k in range(3):
        s = step_start(k)
        ev += launched(s, 10, s + 20, 280, name="k1")
        ev += launched(s + 10, 10, s + 320, 180, name="k2")
        ev += launched(s + 20, 10, s + 700, 320, name="k3")
    gpu = gpu_of(tmp_path, ev)
    # spans: 1020 .. 2020, 2020 .. 3020, 3020 .. 4020; busy 280 + 180 + 320 = 780; gaps [S+300, S+320] and
    # [S+500, S+700], both ended by a kernel launched (S+10, S+20) before the gap began: device, 20 + 200
    assert {k: (t["span_ns"], t["idle_ns"], t["compute_ns"]) for k, t in step_rows(gpu).items()} == {
        k: (1000 * US, 220 * US, 780 * US) for k in range(3)}
    causes = causes_of(gpu)
    assert set(causes) == {(0, "device"), (1, "device"), (2, "device")}
    for c in causes.values():
        assert (c["idle_ns"], c["share"], c["side"], c["ops"]) == (220 * US, 0.22, "device", [])
    assert gpu["status"] == "warn"
    the_finding(gpu, "device", steady=3)
    # HTA's window, steps 0 and 1: K2 starts 20 after K1 ends, launched before that end: kernel wait (< 30);
    # K3 200 after K2: other; the next step's K1 0 after K3 (kernel wait 0). 2 x (20 + 200)
    assert gpu["idle"] == [
        {"rank": 0, "stream": 7, "host_wait_ns": 0, "kernel_wait_ns": 40 * US, "other_ns": 400 * US,
         "idle_ns": 440 * US}]


# --- 6. compute, communication, memcpy --------------------------------------------------

def test_temporal_breakdown_compute_and_non_compute(tmp_path):
    # step k: gemm on stream 7 [S+20, S+420]; the NCCL all-reduce on stream 20 [S+300, S+600] (overlapping the
    # gemm 120); a memcpy on stream 7 [S+650, S+700]; all three launched at S, S+10, S+20
    ev = []
    for k in range(3):
        s = step_start(k)
        ev += launched(s, 10, s + 20, 400, name="gemm")
        ev += launched(s + 10, 10, s + 300, 300, name=ALLREDUCE, stream=20)
        ev += launched(s + 20, 10, s + 650, 50, name="Memcpy HtoD (Pageable -> Device)", cat="gpu_memcpy",
                       call="cudaMemcpyAsync")
    gpu = gpu_of(tmp_path, ev)
    # step 0: 1020 .. 1700 = 680; busy [1020, 1600] + [1650, 1700] = 630: compute (the gemm) 400, non-compute
    #   the all-reduce outside the gemm 180 + the memcpy 50 = 230; idle 680 - 630 = 50
    # step k >= 1: from the previous step's end S-300 to S+700 = 1000; the same busy 630; idle 370
    rows = step_rows(gpu)
    assert {k: (t["span_ns"], t["idle_ns"], t["compute_ns"], t["non_compute_ns"]) for k, t in rows.items()} == {
        0: (680 * US, 50 * US, 400 * US, 230 * US),
        1: (1000 * US, 370 * US, 400 * US, 230 * US),
        2: (1000 * US, 370 * US, 400 * US, 230 * US),
    }
    # 50/680, 400/680, 230/680 rounded to 4 places
    assert (rows[0]["idle"], rows[0]["compute"], rows[0]["non_compute"]) == (0.0735, 0.5882, 0.3382)
    assert (rows[1]["idle"], rows[1]["compute"], rows[1]["non_compute"]) == (0.37, 0.4, 0.23)
    # HTA's window, steps 0 and 1: 1020 .. 2700 = 1680, busy 2 x 630, compute 2 x 400, idle 420
    hta = hta_row(gpu)
    assert (hta["step"], hta["span_ns"], hta["idle_ns"], hta["compute_ns"], hta["non_compute_ns"]) == (
        None, 1680 * US, 420 * US, 800 * US, 460 * US)
    assert (hta["idle"], hta["compute"], hta["non_compute"]) == (0.25, 0.4762, 0.2738)
    # per stream (HTA's window): stream 7: the memcpy 230 after the gemm, launched before it ended: other;
    # step 1's gemm 320 after step 0's memcpy, launched (2000) after it ended (1700): host wait.
    # stream 20: the second all-reduce 700 after the first, launched (2010) after it ended (1600): host wait
    assert gpu["idle"] == [
        {"rank": 0, "stream": 7, "host_wait_ns": 320 * US, "kernel_wait_ns": 0, "other_ns": 460 * US,
         "idle_ns": 780 * US},
        {"rank": 0, "stream": 20, "host_wait_ns": 700 * US, "kernel_wait_ns": 0, "other_ns": 0, "idle_ns": 700 * US},
    ]


# --- 7. launches and the queue ----------------------------------------------------------

def test_launch_stats_and_queue(tmp_path):
    # step k: calls [S, S+10], [S+10, S+20], [S+20, S+80] (60: longer than 50) back to back, then [S+110, S+120]:
    #   K1 [S+25, S+100]  delay 25 - 10 = 15
    #   K2 [S+100, S+150] delay 100 - 20 = 80
    #   K3 [S+150, S+190] delay 150 - 80 = 70; runs 40, shorter than its 60 call
    #   K4 [S+270, S+470] delay 270 - 120 = 150 (> 100)
    ev = []
    for k in range(3):
        s = step_start(k)
        ev += launched(s, 10, s + 25, 75, name="k1")
        ev += launched(s + 10, 10, s + 100, 50, name="k2")
        ev += launched(s + 20, 60, s + 150, 40, name="k3")
        ev += launched(s + 110, 10, s + 270, 200, name="k4")
    gpu = gpu_of(tmp_path, ev)
    # HTA's window: steps 0 and 1, 8 launches; delays sorted 15 15 70 70 80 80 150 150:
    # quantile_disc takes the value at index floor(q (n - 1)): p50 index 3 -> 70, p90 index 6 -> 150, p99 -> 150
    # HTA's span 1025 .. 2470 = 1445; short GPU: K3 twice, 80: 80 / 1445 = 0.0554
    assert gpu["launch"] == [{
        "rank": 0, "launches": 8,
        "delay_p50_ns": 70 * US, "delay_p90_ns": 150 * US, "delay_p99_ns": 150 * US, "delay_max_ns": 150 * US,
        "delay_outliers": 2, "runtime_outliers": 2, "short_gpu": 2, "short_gpu_ns": 80 * US,
        "short_gpu_share": 0.0554,
    }]
    # the queue (launched, not started) at each change (a launch +1, a start -1), in time order, per step:
    #   S +1 -> 1, S+10 -> 2, S+20 -> 3, S+25 K1 starts -> 2, S+100 K2 -> 1, S+110 launch -> 2, S+150 K3 -> 1,
    #   S+270 K4 -> 0: max 3, sum 12 over 8 changes; steps 0 and 1: mean 24 / 16 = 1.5
    # dry (nothing queued, nothing running) between the first start 1025 and the last end 2470: from K4's end
    # 1470 to step 1's first launch 2000 = 530, once (at S+190 K4 is queued, so the stream is not dry)
    assert gpu["queue"] == [{
        "rank": 0, "stream": 7, "max_length": 3, "mean_length": 1.5, "span_ns": 1445 * US,
        "dry_ns": 530 * US, "dry_share": 0.3668, "dry_count": 1,
    }]
    # idle causes: step 0 (1025 .. 1470): [1190, 1270] ended by K4, launched at 1110 before it: device 80;
    # step 1 (1470 .. 2470): [1470, 2025]: no op on the host until the call [2000, 2010] (python 530), the call
    # (launch_call 10), then launched, not started (launch 15); [2190, 2270] device 80
    causes = causes_of(gpu)
    assert {k: c["idle_ns"] for k, c in causes.items() if k[0] < 2} == {
        (0, "device"): 80 * US, (1, "python"): 530 * US, (1, "launch_call"): 10 * US, (1, "launch"): 15 * US,
        (1, "device"): 80 * US}


# --- 8. a CPU-only run --------------------------------------------------------------------

def test_cpu_only_run_is_not_applicable():
    # one rank of the committed gloo run (CPU only): loading both doubles the time and shows nothing more
    gpu = analyze([committed_runs("ddp2") / "ddp2" / "rank0.json.gz"], use_cache=False)["gpu"]
    assert gpu["status"] == "not_applicable"
    assert gpu["reason"]
    assert {k: v for k, v in gpu.items() if k not in ("status", "reason") and v} == {}


# --- the section in the text report, the page and explain -------------------------------------

@pytest.mark.slow  # over 2 s: the fast tier keeps its area's other tests
def test_text_page_and_explain_show_the_section(tmp_path):
    from click.testing import CliRunner

    from traceparse.cli import main
    from traceparse.render.html import render_html
    from traceparse.render.text import render

    trace_file = write(tmp_path / "rank0.json", trace(steps() + dataloader_trace([400, 400, 400]), rank=0,
                                                      world_size=1))
    doc = analyze([trace_file], use_cache=False)
    text = render(doc)
    assert "gpu [fail]" in text and "HTA span" in text and "dataloader 40.0%" in text
    page = render_html(doc)
    assert '<section id="gpu">' in page
    # the op's name goes through the page's escaping (its '#' and '()' are kept, '<' would not be)
    assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in page
    for ident in ("gpu.temporal", "gpu.idle", "gpu.idle_causes", "gpu.launch", "gpu.queue", "gpu_activity"):
        got = CliRunner().invoke(main, ["explain", ident])
        assert got.exit_code == 0 and got.output.startswith(ident), ident


@pytest.mark.slow
def test_op_names_are_escaped_in_the_page(tmp_path):
    from traceparse.render.html import render_html

    evil = "<script>alert(1)</script>"
    ev = []
    for k in range(3):
        s = step_start(k)
        ev.append(x(evil, s, 400))
        ev += launched(s + 400, 10, s + 420, 580)
    doc = analyze([write(tmp_path / "rank0.json", trace(steps() + ev, rank=0, world_size=1))], use_cache=False)
    assert any(o["name"] == evil for c in doc["gpu"]["idle_causes"] for o in c["ops"])
    page = render_html(doc)
    assert evil not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_trace_without_steps_is_one_whole_trace_span(tmp_path):
    """An inference server's trace has no ProfilerStep#N: the dataloader trace's events without the steps. Its span
    runs from the first activity's start, 1420, to the last one's end, 4000 = 2580 us, busy 3 x 580 = 1740: idle
    840, of which the dataloader 2 x 400 = 800 (31%, named: one span, a majority of one), launch_call 2 x 10 and
    launch 2 x 10."""
    f = write(tmp_path / "rank0.json", trace(dataloader_trace([400, 400, 400]), rank=0, world_size=1))
    gpu = analyze([f], use_cache=False)["gpu"]
    (span,) = [t for t in gpu["temporal"] if t["scope"] == "step"]
    assert (span["step"], span["span_ns"], span["idle_ns"]) == (None, 2580 * US, 840 * US)
    causes = causes_of(gpu)
    assert [causes[(None, c)]["idle_ns"] for c in ("dataloader", "launch_call", "launch")] == [
        800 * US, 20 * US, 20 * US]
    # by replay: the dataloader's two waits taken away end the trace 800 sooner, of its 3000 us window (the first
    # event, the dataloader at 1000, to the last end, 4000): 27%, past [gpu] fail_cost_share
    assert (gpu["host_cost"]["saved_per_step_ns"], gpu["host_cost"]["share"]) == (800 * US, round(800 / 3000, 4))
    assert gpu["status"] == "fail"
    assert "cost the trace 800.0 us (27%)" in gpu["findings"][-1]
    from traceparse.render.text import render

    assert "GPU idle waiting on the host costs 800.0 us over the whole trace (27%)" in render(
        analyze([f], use_cache=False))
    finding = the_finding(gpu, "dataloader", DATALOADER)
    assert finding.endswith("over its whole trace (no ProfilerStep#N)")


# --- 10. one definition of device work: the busy table and the GPU section ------------------

@pytest.mark.slow
def test_an_annotation_or_a_sync_on_a_stream_is_no_work(tmp_path):
    """Kineto draws a gpu_user_annotation over the work of a stream, and writes a cuda_sync where the stream waited;
    neither is work. The busy table's GPU stream and the GPU section read the same device work (gpu_activity)."""
    # step k: call [S, S+10] -> gemm [S+100, S+300] on stream 7; on the same stream a gpu_user_annotation over the
    # whole step [S, S+1000] and a cuda_sync [S+300, S+400]
    ev = []
    for k in range(3):
        s = step_start(k)
        ev += launched(s, 10, s + 100, 200)
        ev.append(x("## forward ##", s, 1000, cat="gpu_user_annotation", pid=0, tid=7, device=0))
        ev.append(x("Stream Sync", s + 300, 100, cat="cuda_sync", pid=0, tid=7, stream=7, device=0))
    f = write(tmp_path / "rank0.json", trace(steps() + ev, rank=0, world_size=1))
    doc = analyze([f], use_cache=False)
    # busy table, over the profiled span [1000, 4000] = 3000: stream 7 busy 3 x 200 = 600 (20%), its events the 3
    # gemms (the annotations made it 3000, 100%)
    (stream,) = [t for t in doc["summary"]["threads"] if t["kind"] == "gpu stream"]
    assert (stream["pid"], stream["tid"], stream["events"], stream["busy_ns"], stream["busy_fraction"]) == (
        0, 7, 3, 600 * US, 0.2)
    # no CPU thread made of the GPU's lane
    assert {(t["pid"], t["tid"]) for t in doc["summary"]["threads"] if t["kind"] == "cpu thread"} == {(1, 1)}
    # the GPU section: step 0 [1100, 1300], step k [S-700, S+300]: busy 200 each, the same 600 in all
    rows = step_rows(doc["gpu"])
    assert {k: (t["span_ns"], t["idle_ns"], t["compute_ns"], t["non_compute_ns"]) for k, t in rows.items()} == {
        0: (200 * US, 0, 200 * US, 0), 1: (1000 * US, 800 * US, 200 * US, 0), 2: (1000 * US, 800 * US, 200 * US, 0)}
    assert sum(t["span_ns"] - t["idle_ns"] for t in rows.values()) == stream["busy_ns"]


# --- 11. the public traces ----------------------------------------------------------------

B200 = "tracelens/b200_vllm_tp8_rank0.json.gz"
MI250 = "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"


@pytest.mark.slow
def test_b200_busy_table_agrees_with_the_gpu_section():
    """The B200 vLLM trace's stream 7 holds gpu_user_annotation events over its work: the busy table said 96.2%
    busy while the GPU section said 86.3% idle. One stream, no ProfilerStep#N: both spans hold all its work, so
    the stream's busy time is the GPU section's span less its idle, to the nanosecond."""
    doc = analyze([str(public_trace(B200))], use_cache=False)
    (stream,) = [t for t in doc["summary"]["threads"] if t["kind"] == "gpu stream"]
    (whole,) = [t for t in doc["gpu"]["temporal"] if t["scope"] == "step"]
    assert stream["busy_ns"] == whole["span_ns"] - whole["idle_ns"]
    assert stream["busy_fraction"] + whole["idle"] < 1.01  # 13% busy beside 86% idle, no longer 96% beside 86%


@pytest.mark.slow
def test_mi250_long_launch_call_is_not_launch_latency():
    """The MI250 trace: 76 points of 'launch latency (launched, not yet started)' while the launch table's delay
    max was 0.008 ms. The time is a hipLaunchKernel call of 6.5 ms: the host launching. Now launch_call, and the
    queue after the calls (launch) is bounded by the launch table: at most one delay per launch."""
    gpu = analyze([str(public_trace(MI250))], use_cache=False)["gpu"]
    causes = sorted(gpu["idle_causes"], key=lambda c: -c["idle_ns"])
    assert causes[0]["cause"] == "launch_call" and causes[0]["side"] == "host"
    assert causes[0]["ops"][0]["name"] == "hipLaunchKernel"
    (launch,) = gpu["launch"]
    queued = sum(c["idle_ns"] for c in causes if c["cause"] == "launch")
    assert queued <= launch["launches"] * launch["delay_max_ns"]
    # every gap's parts add up to the GPU's idle time
    for t in gpu["temporal"]:
        if t["scope"] == "step":
            assert sum(c["idle_ns"] for c in causes if c["step"] == t["step"]) == t["idle_ns"]
    said = [f for f in gpu["findings"] if CAUSE_WORDS["launch_call"] in f]
    assert said and "`hipLaunchKernel`" in said[0]
    assert not any(CAUSE_WORDS["launch"] in f for f in gpu["findings"])
