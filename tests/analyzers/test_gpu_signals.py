"""GPU trace signals that older TF versions and xprof's exports write (docs/trace-signals.md,
"GPU traces"): derived device lines, the device `Steps` line as a step source, host CUDA API calls
and the TF ops that issue them. Code-built traces; the recorded TF GPU trace is in
test_recorded_traces.py."""

from __future__ import annotations

import json
from pathlib import Path

from analyzers.ingest.logdir import load_run
from analyzers.steps import step_breakdown
from tests.analyzers.xspace_builder import XSpaceBuilder

MS = 1_000_000
US = 1_000
KERNEL = "void Eigen::internal::EigenMetaKernel<float>(int)"


def _gpu_with_derived_lines(b: XSpaceBuilder, plane: str, plane_id: int, steps: int,
                            step_ms: int = 10) -> None:
    """Per step: 4 kernels of 1 ms on a stream, and the lines xprof derives from them: one
    `Steps` event over the step, a `TensorFlow Ops` event per kernel, a name scope over all."""
    gpu = b.plane(plane, plane_id=plane_id)
    stream = gpu.line("Stream #7(Compute)", line_id=7)
    step_line = gpu.line("Steps", line_id=-1)
    ops = gpu.line("TensorFlow Ops", line_id=-2)
    scope = gpu.line("TensorFlow Name Scope", line_id=-3)
    xla = gpu.line("XLA Ops", line_id=-4)
    for i in range(steps):
        t0 = i * step_ms * MS
        step_line.event(str(i), t0, (step_ms - 1) * MS)
        scope.event("replica_0", t0, (step_ms - 2) * MS)
        for k in range(4):
            ks = t0 + 2 * k * MS
            stream.event(KERNEL, ks, MS, correlation_id=100 * i + k)
            ops.event("dense/MatMul", ks, MS)
            xla.event("fusion.1", ks, MS)


def test_derived_device_lines_feed_no_kind(tmp_path):
    b = XSpaceBuilder()
    main = b.plane("/host:CPU").line("python3", line_id=1)
    for i in range(2):
        main.event("train", i * 10 * MS, 10 * MS, step_num=i, _r=1)
    _gpu_with_derived_lines(b, "/device:GPU:0", 1, steps=2)
    b.write(tmp_path)
    events = load_run(tmp_path).events
    by_line = events.groupby("line", observed=True)["kind"].agg(lambda k: set(map(str, k)))
    assert by_line["Stream #7(Compute)"] == {"device_compute"}
    for line in ("Steps", "TensorFlow Ops", "TensorFlow Name Scope", "XLA Ops"):
        assert by_line[line] == {"other"}, line
    steps = step_breakdown(events)
    assert steps.source == "markers:train"  # host markers win over the device line
    # Only the kernels count as device compute: 4 of each 10 ms step, not the name scope's 8.
    assert steps.table["device_compute"].tolist() == [4 * MS, 4 * MS]


def test_device_steps_line_is_a_step_source(tmp_path):
    b = XSpaceBuilder()
    b.plane("/host:CPU").line("python3", line_id=1).event("some_python_work", 0, MS)
    _gpu_with_derived_lines(b, "/device:GPU:1", 2, steps=2)
    _gpu_with_derived_lines(b, "/device:GPU:0", 1, steps=3)
    b.write(tmp_path)
    steps = step_breakdown(load_run(tmp_path).events)
    # The device with the most steps gives the windows; each runs to the next one's start.
    assert steps.source == "device:Steps (/device:GPU:0)"
    assert steps.table["start_ns"].tolist() == [0, 10 * MS, 20 * MS]
    assert steps.table["dur_ns"].tolist() == [10 * MS, 10 * MS, 9 * MS]
    assert steps.line is None and steps.thread is None
    # Both GPUs' kernels run inside the first two windows.
    assert steps.table["device_compute"].tolist() == [4 * MS, 4 * MS, 4 * MS]


def test_device_steps_line_on_a_host_plane_is_not_a_step_source(tmp_path):
    b = XSpaceBuilder()
    b.plane("/host:CPU").line("Steps", line_id=1).event("0", 0, MS)
    b.write(tmp_path)
    assert step_breakdown(load_run(tmp_path).events).source == "none"


def _launcher_trace(tmp_path):
    """TF 2.4-style: the GPU op runs on a `tf_gpu_private` thread, and CUPTI's host launch
    event (named after the kernel, with a correlation_id) sits inside the op's event."""
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main = host.line("python3", line_id=1)
    launcher = host.line("tf_gpu_private_0/5", line_id=5)
    compute = host.line("tf_Compute/6", line_id=6)
    fetch = host.line("tf_data_iterator_get_next/7", line_id=7)
    stream = b.plane("/device:GPU:0", plane_id=1).line("Stream #7(Compute)", line_id=7)
    main.event("train", 0, 10 * MS, step_num=0, _r=1)
    # The op issuing a kernel; an allocation starting inside it ends before its launch.
    launcher.event("dense/MatMul:MatMul", 0, 3 * MS)
    launcher.event("MemoryAllocation", 100 * US, 0)
    launcher.event(KERNEL, 200 * US, 2 * MS, correlation_id=1)
    stream.event(KERNEL, 3 * MS, MS, correlation_id=1)
    # A host op issuing no device work stays host compute.
    compute.event("strings/StringSplit:StringSplitV2", 4 * MS, 2 * MS)
    # An iterator fetching ahead on its own thread while the launcher issues the next kernel.
    fetch.event("IteratorGetNextOp::DoCompute", 6 * MS, 3 * MS)
    launcher.event("dense/BiasAdd:BiasAdd", 7 * MS, MS)
    launcher.event("cudaLaunchKernel", 7 * MS + 100 * US, 500 * US, correlation_id=2)
    stream.event(KERNEL, 8 * MS + 500 * US, 100 * US, correlation_id=2)
    # CUDA API calls that wait, from CUPTI's driver-API lines.
    cupti = b.plane("/host:CUPTI").line("Host Threads/5", line_id=5)
    cupti.event("cuMemcpyDtoHAsync_v2", 9 * MS, 100 * US, correlation_id=3)
    cupti.event("cuMemcpyHtoDAsync_v2", 9 * MS + 200 * US, 100 * US, correlation_id=4)
    cupti.event("cuCtxSynchronize", 9 * MS + 400 * US, 100 * US, correlation_id=5)
    cupti.event("cuStreamSynchronize", 9 * MS + 600 * US, 100 * US)
    b.write(tmp_path)
    return load_run(tmp_path).events


def test_cuda_api_calls_and_the_ops_issuing_them(tmp_path):
    events = _launcher_trace(tmp_path)
    kind = {str(n): set(map(str, k)) for n, k in
            events.groupby("name", observed=True)["kind"]}
    assert kind["dense/MatMul:MatMul"] == {"launch"}  # holds a launch: dispatching device work
    assert kind["dense/BiasAdd:BiasAdd"] == {"launch"}
    assert kind["strings/StringSplit:StringSplitV2"] == {"host_op"}
    assert kind[KERNEL] == {"launch", "device_compute"}  # the host launch event and the kernel
    assert kind["cudaLaunchKernel"] == {"launch"}
    assert kind["cuMemcpyDtoHAsync_v2"] == {"d2h"}
    assert kind["cuMemcpyHtoDAsync_v2"] == {"h2d"}
    # A wait is not launch overhead, with or without a correlation id.
    assert kind["cuCtxSynchronize"] == kind["cuStreamSynchronize"] == {"sync"}
    assert kind["MemoryAllocation"] == {"framework"}


def test_launching_outranks_an_iterator_fetching_ahead(tmp_path):
    row = step_breakdown(_launcher_trace(tmp_path)).table.iloc[0]
    # 6-9 ms: the fetch runs throughout; the BiasAdd's launch (7-8 ms) counts as launch, and the
    # kernel from 8.5 ms as device compute.
    assert row["input_wait"] == 1_900 * US  # 6-7, 8-8.5 and 8.6-9 ms
    assert row["launch"] == 3 * MS + MS  # MatMul 0-3 ms, BiasAdd 7-8 ms
    assert row["device_compute"] == MS + 100 * US
    assert row["host_compute"] == 2 * MS
    assert row["copy_h2d"] == 200 * US


# ---- PyTorch profiler (Kineto) traces ----------------------------------------------------------

# PyTorch profiler (Kineto) JSON, as HolisticTraceAnalysis's traces have it: the host process
# (pid = tid = 10) and each GPU's stream 7 (pid = the device, `args.device`).
_PROCESS = {"ph": "M", "name": "process_name", "pid": 10, "args": {"name": "python3.10"}}


def _cpu(cat: str, name: str, ts: int, dur: int, **args) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "pid": 10, "tid": 10, "ts": ts, "dur": dur}
    return {**e, "args": args} if args else e


def _gpu(cat: str, name: str, ts: int, dur: int, device: int = 0, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": device, **args}}


def _write_torch(folder: Path, events: list[dict], name: str = "rank0.pt.trace.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _torch_trace(tmp_path, *, gpu: bool = True):
    """One ProfilerStep: aten::linear > aten::addmm > cudaLaunchKernel, then an aten::view that
    launches nothing; on the GPU the kernel, Kineto's copy of the DDP annotation over it, and a
    stream waiting on an event. `gpu=False`: the same CPU ops with no launch or GPU at all."""
    ev = [_PROCESS, _cpu("user_annotation", "ProfilerStep#0", 0, 2000),
          _cpu("cpu_op", "aten::linear", 100, 800), _cpu("cpu_op", "aten::addmm", 150, 700),
          _cpu("cpu_op", "aten::view", 1000, 400)]
    if gpu:
        ev += [_cpu("cuda_runtime", "cudaLaunchKernel", 200, 600, correlation=7),
               _gpu("kernel", "ampere_sgemm_128x64_nn", 900, 300, correlation=7),
               _gpu("gpu_user_annotation", "DistributedDataParallel.forward", 900, 1000),
               _gpu("cuda_sync", "Stream Wait Event", 1300, 400, correlation=9)]
    return _write_torch(tmp_path, ev)


def test_pytorch_ops_annotations_and_syncs(tmp_path):
    from analyzers.events import GPU_ANNOTATIONS_LINE
    from analyzers.ingest.chrome_trace import read_chrome_trace

    events, _ = read_chrome_trace(_torch_trace(tmp_path), "rank0")
    kind = {str(n): str(k) for n, k in zip(events["name"], events["kind"], strict=True)}
    assert kind["aten::linear"] == kind["aten::addmm"] == "launch"  # both levels of the nest
    assert kind["aten::view"] == "framework"  # bookkeeping on the launching thread
    assert kind["cudaLaunchKernel"] == "launch"
    assert kind["ampere_sgemm_128x64_nn"] == "device_compute"
    assert kind["Stream Wait Event"] == "sync"
    ddp = events[events["name"] == "DistributedDataParallel.forward"].iloc[0]
    assert (ddp["plane"], ddp["line"], ddp["kind"]) == ("/device:GPU:0", GPU_ANNOTATIONS_LINE,
                                                       "other")
    row = step_breakdown(events).table.iloc[0]
    # Only the kernel is device work: not the 1 ms annotation over it, nor the stream's wait.
    assert row["device_compute"] == 300 * US
    assert row["launch"] == 800 * US  # aten::linear, 0.1-0.9 ms
    assert row["framework"] == 200 * US  # the view, 1.0-1.4 ms, after the kernel (0.9-1.2)


def test_pytorch_ops_without_a_gpu_are_host_compute(tmp_path):
    from analyzers.ingest.chrome_trace import read_chrome_trace

    events, _ = read_chrome_trace(_torch_trace(tmp_path, gpu=False), "rank0")
    assert set(map(str, events.loc[events["name"].astype(str).str.startswith("aten::"),
                                   "kind"])) == {"host_op"}


def test_remedies_name_the_framework_of_the_trace(tmp_path):
    from analyzers.context import Context

    (tmp_path / "t").mkdir()
    assert Context.build(load_run(_torch_trace(tmp_path / "t"))).framework == "pytorch"
    b = XSpaceBuilder()
    b.plane("/host:CPU").line("python3", line_id=1).event("train", 0, MS, step_num=0, _r=1)
    b.write(tmp_path / "tf")
    assert Context.build(load_run(tmp_path / "tf")).framework == "tensorflow"


def test_pingpong_remedy_names_the_framework(tmp_path):
    """The same bounce (kernel, copy back, host op while the GPU idles) in a PyTorch trace and in
    a TF one: each remedy names its own framework's calls."""
    from analyzers.report import analyze
    from tests.analyzers.traces import gpu_trace

    ev = [_PROCESS]
    for i in range(2):
        t0 = i * 10_000
        ev += [_cpu("user_annotation", f"ProfilerStep#{i}", t0, 9_900),
               _gpu("kernel", "ampere_sgemm_128x64_nn", t0, 4_000),
               _gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", t0 + 4_000, 100),
               _cpu("cpu_op", "aten::nonzero", t0 + 4_200, 3_800)]
    _write_torch(tmp_path / "torch", ev)
    torch = {f.id: f for f in analyze(tmp_path / "torch").findings}["host_device_pingpong"]
    assert ".item()" in torch.remedy and "tf.debugging" not in torch.remedy
    tf = {f.id: f for f in analyze(gpu_trace(tmp_path / "tf", kernel_ms=50, pingpong_ms=25,
                                             devices=1)).findings}["host_device_pingpong"]
    assert "tf.debugging.set_log_device_placement" in tf.remedy and ".item()" not in tf.remedy


def _copy_trace(tmp_path, host_dur_us: int, device_copy: str | None, copy_at_us: int):
    """A ProfilerStep of 2 ms: aten::_local_scalar_dense > cudaMemcpyAsync (0.1 ms in, lasting
    `host_dur_us`) and, when `device_copy` names one, the device copy CUPTI correlates with it,
    starting `copy_at_us` into the step (5 µs long); a kernel 0-0.1 ms keeps the GPU plane."""
    ev = [_cpu("user_annotation", "ProfilerStep#0", 0, 2000),
          _cpu("cpu_op", "aten::_local_scalar_dense", 100, host_dur_us + 10),
          _cpu("cuda_runtime", "cudaMemcpyAsync", 105, host_dur_us, correlation=21),
          _gpu("kernel", "ampere_sgemm_128x64_nn", 0, 100, correlation=20)]
    if device_copy:
        ev.append(_gpu("gpu_memcpy", device_copy, copy_at_us, 5, correlation=21))
    return _write_torch(tmp_path, ev)


def _kinds(events) -> dict[str, str]:
    return {str(n): str(k) for n, k in zip(events["name"], events["kind"], strict=True)}


def test_copy_call_blocked_on_the_stream_is_a_device_sync(tmp_path):
    """`.item()`: the copy to pageable memory starts only when the stream reaches it, 1.5 ms
    into the 1.6 ms call; the host waited, and the op around the call is that wait."""
    from analyzers.ingest.chrome_trace import read_chrome_trace

    events, _ = read_chrome_trace(
        _copy_trace(tmp_path, 1600, "Memcpy DtoH (Device -> Pageable)", 1600), "rank0")
    kind = _kinds(events)
    assert kind["cudaMemcpyAsync"] == kind["aten::_local_scalar_dense"] == "sync"
    assert kind["Memcpy DtoH (Device -> Pageable)"] == "d2h"
    row = step_breakdown(events).table.iloc[0]
    assert row["copy_h2d"] == 5 * US  # the copy itself
    assert row["device_sync"] == (1710 - 100) * US - 5 * US  # the op's span less the copy
    assert row["launch"] == 0


def test_copy_call_takes_its_direction_from_the_device_copy(tmp_path):
    """An asynchronous device-to-device copy: enqueued in 5 µs, run later; the runtime call's
    name says no direction, the device copy's does."""
    from analyzers.ingest.chrome_trace import read_chrome_trace

    events, _ = read_chrome_trace(
        _copy_trace(tmp_path, 5, "Memcpy DtoD (Device -> Device)", 300), "rank0")
    kind = _kinds(events)
    assert kind["cudaMemcpyAsync"] == "d2d"
    assert kind["aten::_local_scalar_dense"] == "launch"  # it dispatched a copy


def test_copy_call_without_a_device_copy_keeps_its_name_kind(tmp_path):
    from analyzers.ingest.chrome_trace import read_chrome_trace

    events, _ = read_chrome_trace(_copy_trace(tmp_path, 1600, None, 0), "rank0")
    assert _kinds(events)["cudaMemcpyAsync"] == "h2d"
    assert step_breakdown(events).table.iloc[0]["device_sync"] == 0


def test_tf_driver_copy_call_blocked_on_the_stream(tmp_path):
    """The same on an xplane: a `/host:CUPTI` driver call `cuMemcpyDtoHAsync_v2` and the GPU
    stream's `MemcpyD2H`, linked by `correlation_id`; a second call whose copy ran at once."""
    b = XSpaceBuilder()
    main = b.plane("/host:CPU").line("python3", line_id=1)
    main.event("train", 0, 10 * MS, step_num=0, _r=1)
    cupti = b.plane("/host:CUPTI", plane_id=3).line("Host Threads/42", line_id=42)
    stream = b.plane("/device:GPU:0", plane_id=1).line("Stream #7(MemcpyD2H)", line_id=7)
    cupti.event("cuMemcpyDtoHAsync_v2", 1 * MS, 4 * MS, correlation_id=5)
    stream.event("MemcpyD2H", 4900 * US, 50 * US, correlation_id=5)
    cupti.event("cuMemcpyDtoHAsync_v2", 6 * MS, 100 * US, correlation_id=6)
    stream.event("MemcpyD2H", 6010 * US, 80 * US, correlation_id=6)
    b.write(tmp_path)
    events = load_run(tmp_path).events
    calls = events[events["name"] == "cuMemcpyDtoHAsync_v2"].sort_values("start_ns")
    assert list(map(str, calls["kind"])) == ["sync", "d2h"]


def _torch_gpu_steps(devices: list[int], nccl: bool = False) -> list[dict]:
    """3 PyTorch steps of 100 ms from one process: an input copy to each of `devices` in turn
    (10 ms each, 20 ms into the step at most), then 40 ms of kernels on each, then (`nccl`) a
    30 ms all-reduce; the 40 ms become 70 without it."""
    ev = [_PROCESS]
    for i in range(3):
        t0 = i * 100_000
        ev += [_cpu("user_annotation", f"ProfilerStep#{i}", t0, 99_000),
               _cpu("cpu_op", "aten::copy_", t0, 20_000)]
        for d in devices:
            ev += [_gpu("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", t0 + d * 10_000, 10_000,
                        device=d),
                   _gpu("kernel", "ampere_sgemm_128x64_nn", t0 + 20_000,
                        40_000 if nccl else 70_000, device=d)]
            if nccl:
                ev.append(_gpu("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", t0 + 60_000,
                               30_000, device=d))
    return ev


def test_gpu_copy_and_collective_remedies_name_the_framework(tmp_path):
    """DataParallel-style PyTorch steps on 2 GPUs (input scattered to one GPU after the other,
    an exposed NCCL all-reduce) against the same pattern in a TF trace: each remedy names its own
    framework's APIs."""
    from analyzers.report import analyze
    from tests.analyzers.traces import gpu_trace

    _write_torch(tmp_path / "torch", _torch_gpu_steps([0, 1], nccl=True))
    torch = {f.id: f for f in analyze(tmp_path / "torch").findings}
    tf = {f.id: f for f in analyze(gpu_trace(tmp_path / "tf", devices=2, h2d_ms=10,
                                             nccl_ms=30)).findings}
    for found in (torch, tf):
        assert {"serialized_h2d", "collective_overhead"} <= set(found), found
    assert "non_blocking=True" in torch["serialized_h2d"].remedy
    assert "bucket_cap_mb" in torch["collective_overhead"].remedy
    assert "strategy" not in torch["serialized_h2d"].remedy
    assert "distribute_dataset" in tf["serialized_h2d"].remedy
    assert "fuse gradients" in tf["collective_overhead"].remedy
    assert "DDP" not in tf["collective_overhead"].remedy


def test_op_that_launches_then_waits_is_the_wait(tmp_path):
    """aten::nonzero: a kernel launch (10 µs), then a blocking copy of the count (1.59 ms, its
    copy starting at the call's end). Most of the op is the wait: sync, not launch."""
    from analyzers.ingest.chrome_trace import read_chrome_trace

    path = _write_torch(tmp_path, [
        _cpu("user_annotation", "ProfilerStep#0", 0, 2000),
        _cpu("cpu_op", "aten::nonzero", 100, 1650),
        _cpu("cuda_runtime", "cudaLaunchKernel", 110, 10, correlation=30),
        _cpu("cuda_runtime", "cudaMemcpyAsync", 130, 1590, correlation=31),
        _gpu("kernel", "nonzero_kernel", 130, 100, correlation=30),
        _gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 1715, 5, correlation=31)])
    events, _ = read_chrome_trace(path, "rank0")
    kind = _kinds(events)
    assert kind["aten::nonzero"] == kind["cudaMemcpyAsync"] == "sync"
    assert kind["cudaLaunchKernel"] == "launch"
    row = step_breakdown(events).table.iloc[0]
    assert row["launch"] == 10 * US and row["device_compute"] == 100 * US
    assert row["device_sync"] == (1750 - 100 - 100 - 5) * US - 10 * US


def test_serial_copies_of_separate_processes_are_not_serialized_h2d(tmp_path):
    """Two DDP ranks, each its own trace file and GPU, copying at different times: nobody issued
    them one after another. The same copies from one process to both GPUs are."""
    from analyzers.report import analyze

    ddp, one = tmp_path / "ddp", tmp_path / "dp"
    for r in (0, 1):
        _write_torch(ddp, _torch_gpu_steps([r]), name=f"rank{r}.pt.trace.json")
    _write_torch(one, _torch_gpu_steps([0, 1]))
    assert "serialized_h2d" in {f.id for f in analyze(one).findings}
    report = analyze(ddp)
    assert report.ctx.n_devices == 2
    assert "serialized_h2d" not in {f.id for f in report.findings}


def test_sends_and_receives_holding_copies(tmp_path):
    """On a GPU trace (docs/trace-signals.md, "Input copies inside the step"), a `_Send` that is
    mostly a host-to-device copy call is that copy, and so is an iterator's transfer holding
    none; a `_Recv` mostly waiting for its peer, with a short copy at its end, stays a transfer
    between devices; so does any `_Send` on a trace without CUDA calls (logical CPU devices)."""
    def trace(tmp: Path, gpu: bool) -> Path:
        b = XSpaceBuilder()
        host = b.plane("/host:CPU")
        main, send = host.line("python3", line_id=1), host.line("tf_Compute/12", line_id=12)
        labels, recv = host.line("tf_Compute/13", line_id=13), host.line("tf_Compute/14", 14)
        copies = b.plane("/device:GPU:0", plane_id=1).line("Stream #14(MemcpyH2D)", 14)
        corr = {"correlation_id": 7} if gpu else {}
        main.event("train", 0, 100 * MS, step_num=0, _r=1)
        send.event("model/x/_3:_Send", MS, 30 * MS)
        send.event("MemcpyH2D", MS + 10 * US, 29 * MS, **corr)
        labels.event("IteratorGetNext/_1:_Send", MS, 30 * MS)
        labels.event("IteratorGetNextAsOptional_1/_2:_Recv", 32 * MS, MS)
        recv.event("remote/_9:_Recv", 40 * MS, 30 * MS)
        recv.event("MemcpyH2D", 68 * MS, MS, **({"correlation_id": 8} if gpu else {}))
        if gpu:
            copies.event("MemcpyH2D", MS + 20 * US, 29 * MS, correlation_id=7, device_id=0)
            copies.event("MemcpyH2D", 68 * MS + 10 * US, MS // 2, correlation_id=8, device_id=0)
        return b.write(tmp)

    def kinds(run: Path) -> dict[str, str]:
        ev = load_run(run).events
        ops = ev[ev["name"].astype(str).str.contains(":_")]
        return dict(zip(ops["name"].astype(str), ops["kind"].astype(str), strict=True))

    assert kinds(trace(tmp_path / "gpu", True)) == {
        "model/x/_3:_Send": "h2d", "IteratorGetNext/_1:_Send": "h2d", "remote/_9:_Recv": "d2d",
        "IteratorGetNextAsOptional_1/_2:_Recv": "h2d"}
    assert set(kinds(trace(tmp_path / "cpu", False)).values()) == {"d2d"}
