"""Code-built traces with and without each anti-pattern, shared by the detector tests.

Host traces mirror TF 2.21 CPU xplanes (docs/trace-signals.md); GPU traces mirror the CUPTI
collector's planes (`/device:GPU:N`, `Stream #<id>(<types>)` lines, `/host:CUPTI` launch calls).
Every step is `step_ms` long and starts with a `train` marker carrying `step_num` and `_r`.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from tests.analyzers.xspace_builder import DEFAULT_PROFILE_START_NS, Ref, XSpaceBuilder

MS = 1_000_000
PIPE = "Iterator::Root::Prefetch::ParallelMapV2::BatchV2::ParallelInterleaveV4"


def recorded_logdir(tmp: Path, xplane_gz: Path, run: str = "2026_11_29_00_00_00") -> Path:
    """A logdir in `tmp` whose one run holds a recorded xplane (`*.xplane.pb.gz`), unpacked."""
    folder = tmp / "plugins" / "profile" / run
    folder.mkdir(parents=True)
    (folder / "vm.xplane.pb").write_bytes(gzip.decompress(xplane_gz.read_bytes()))
    return tmp


def host_trace(
    tmp: Path,
    *,
    steps: int = 5,
    step_ms: float = 100.0,
    wait_ms: float = 0.0,
    compute_ms: float | None = None,
    pipeline: str = PIPE,
    readers: int = 4,
    parse_ops: int = 1,
    parse_op_ms: float = 1.0,
    per_step: Callable | None = None,
    host_name: str = "host",
    compute_line: int = 11,
    compute_op: str = "MatMul",
    clock_ns: int = 0,
    first_step: int = 0,
    fetch_in_call: bool = False,
) -> tuple[XSpaceBuilder, Path]:
    """A CPU-only training trace: each step waits `wait_ms` in the iterator on the Python thread,
    then runs 20 `compute_op` ops for `compute_ms` on a compute thread
    (`tf_Compute/<compute_line>`); tf.data readers (interleave elements, each with a short
    TFRecord read) run concurrently. `clock_ns`: the host's clock that far ahead of the others';
    `first_step`: the number its first step marker carries; `fetch_in_call`: the batch is
    fetched inside the train function (Keras' train function, a custom loop's next() in the
    tf.function): the wait runs on an executor thread, within the Python thread's call."""
    b = XSpaceBuilder(DEFAULT_PROFILE_START_NS + clock_ns)
    host = b.plane("/host:CPU")
    main = host.line("python3", line_id=1)
    comp = host.line(f"tf_Compute/{compute_line}", line_id=compute_line)
    reader_lines = [host.line(f"tf_data_private_threadpool/{20 + i}", line_id=20 + i)
                    for i in range(max(readers, 1))]
    parse_line = host.line("tf_data_iterator_resource/40", line_id=40)
    compute_ms = step_ms - wait_ms - 2 if compute_ms is None else compute_ms
    element = 0
    waiter = host.line("tf_Compute/15", line_id=15) if fetch_in_call else main
    for i in range(steps):
        t0 = int(i * step_ms * MS)
        main.event("train", t0, int(step_ms * MS) - 1000, step_num=first_step + i, _r=1)
        if wait_ms:
            waiter.event("IteratorGetNextOp::DoCompute", t0 + MS // 2, int(wait_ms * MS))
            waiter.event(pipeline.split("::BatchV2")[0], t0 + MS // 2, int(wait_ms * MS))
        c0 = t0 + MS // 2 + int(wait_ms * MS)
        call0 = t0 + MS // 2 if fetch_in_call else c0
        main.event("EagerLocalExecute: __inference_train_step_42", call0,
                   c0 + int(compute_ms * MS) - call0)
        n_ops = 20
        for k in range(n_ops):
            comp.event(f"dense_{k}/{compute_op}:{compute_op}",
                       c0 + int(k * compute_ms / n_ops * MS),
                       int(compute_ms / n_ops * MS) - 1000)
        # Readers: `readers` interleave elements open for the whole step.
        for line in reader_lines[:readers]:
            line.event(f"{pipeline}[{element}]::FlatMap", t0, int(step_ms * MS) - 2000)
            # The file read itself: a short reader stage below the element, as TF writes it.
            line.event(f"{pipeline}[{element}]::FlatMap[0]::TFRecord", t0 + 1000, MS // 5)
            element += 1
        for k in range(parse_ops):
            parse_line.event("ParseExample/ParseExampleV2:ParseExampleV2",
                             t0 + int(k * parse_op_ms * MS * 0.5), int(parse_op_ms * MS))
        if per_step:
            per_step(b, host, main, comp, t0, i)
    return b, b.write(tmp, host=host_name)


def allreduce(start_ms: float, end_ms: float = 92, group_size: int | None = 2):
    """`host_trace`'s `per_step`: a `CollectiveReduceV2` from `start_ms` to `end_ms` into each
    step on a `collective_ops` line. TF 2.21 writes the group's size on the
    `CollectiveExecutor::CompleteParams` event that opens it (`group_size` None: an older TF)."""
    def add(b, host, main, comp, t0, i):
        line = host.line("collective_ops/3", line_id=3)
        start = t0 + int(start_ms * MS)
        if group_size is not None:
            line.event("CollectiveExecutor::CompleteParams", start, 20_000, group_key=1,
                       group_size=group_size)
        line.event("sgd/CollectiveReduceV2:CollectiveReduceV2", start,
                   int((end_ms - start_ms) * MS))
    return add


def gpu_trace(
    tmp: Path,
    *,
    steps: int = 4,
    step_ms: float = 100.0,
    devices: int = 4,
    kernel_ms: float = 60.0,
    kernels: int = 20,
    h2d_ms: float = 0.0,
    h2d_serial: bool = True,
    nccl_ms: float = 0.0,
    nccl_overlapped: bool = False,
    pingpong_ms: float = 0.0,
    lookups: int = 0,
    tf_op: Callable[[int, int], str | None] | None = None,
    host_op: tuple[str, float, float] | None = None,
    host_name: str = "host",
) -> Path:
    """A multi-GPU trace: per step, H2D copies, `kernels` compute kernels per device, NCCL; the
    first `lookups` kernels of each device are embedding-table gathers (their `tf_op` stat), and
    `tf_op(device, k)`, when given, names the TF op of the others (None: no stat). `host_op`
    (name, start ms into the step, ms) is a TF op on a host thread every step."""
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main = host.line("python3", line_id=1)
    hostops = host.line("tf_Compute/11", line_id=11)
    cupti = b.plane("/host:CUPTI").line("Host Threads/1", line_id=1)
    gpus = [b.plane(f"/device:GPU:{d}", plane_id=d + 1) for d in range(devices)]
    streams = [(g.line("Stream #7(Kernel)", line_id=7), g.line("Stream #14(MemcpyH2D)", 14),
                g.line("Stream #20(Kernel)", line_id=20), g.line("Stream #15(MemcpyD2H)", 15))
               for g in gpus]
    corr = 1
    for i in range(steps):
        t0 = int(i * step_ms * MS)
        main.event("train", t0, int(step_ms * MS) - 1000, step_num=i, _r=1)
        t = t0 + MS // 10
        for d, (_, h2d, _, _) in enumerate(streams):
            if h2d_ms:
                start = t + (int(d * h2d_ms * MS) if h2d_serial else 0)
                h2d.event("MemcpyH2D", start, int(h2d_ms * MS), device_id=d,
                          memcpy_details=Ref("kind_src:pageable kind_dst:device size:4194304"))
        after_copy = t + int((devices if h2d_serial else 1) * h2d_ms * MS)
        k_dur = kernel_ms / kernels
        for d, (kern, _, nccl, d2h) in enumerate(streams):
            for k in range(kernels):
                ks = after_copy + int(k * k_dur * MS)
                op = (f"emb_{d}_{k}/embedding_lookup:ResourceGather" if k < lookups
                      else tf_op(d, k) if tf_op else None)
                stats = {"tf_op": Ref(op)} if op else {}
                kern.event(f"volta_sgemm_128x64_nn_{k % 3}", ks, max(int(k_dur * MS) - 500, 1),
                           correlation_id=corr, device_id=d, **stats)
                if d == 0:
                    cupti.event("cuLaunchKernel", ks - 3000, 2500, correlation_id=corr)
                corr += 1
            end_k = after_copy + int(kernel_ms * MS)
            if nccl_ms:
                ns = after_copy if nccl_overlapped else end_k
                nccl.event("ncclDevKernel_AllReduce_Sum_f32_RING_LL", ns, int(nccl_ms * MS))
            if pingpong_ms:
                d2h.event("MemcpyD2H", end_k, MS // 5)
        if pingpong_ms:
            ps = after_copy + int(kernel_ms * MS) + MS // 4
            hostops.event("postprocess/EagerPyFunc:EagerPyFunc", ps, int(pingpong_ms * MS))
        if host_op:
            name, at_ms, ms = host_op
            hostops.event(name, t0 + int(at_ms * MS), int(ms * MS))
    return b.write(tmp, host=host_name)


def embedding_trace(
    tmp: Path,
    *,
    where: str,
    steps: int = 4,
    step_ms: float = 100.0,
    lookup_ms: float = 10.0,
    update_ms: float = 8.0,
    kernel_ms: float = 50.0,
    copy_ms: float = 1.0,
) -> Path:
    """A one-GPU recommender step, in order: the ids' input copy, the forward lookup, the rows'
    copy to the GPU, `kernel_ms` of kernels, the gradients' copy back, the table's update. The
    lookup and update are host ops with the device idle (`where="host"`: ResourceGather,
    UnsortedSegmentSum + ResourceSparseApplyAdagradV2, a table pinned to host memory), only the
    sparse ops around a GPU gather on the host (`"sparse_ops"`: Unique + SparseSegmentMean, then
    SparseSegmentMeanGrad; TF before 2.7, seed 002), or kernels like the rest (`"device"`)."""
    host_ops = {
        "host": ([("emb/embedding_lookup:ResourceGather", 1.0)],
                 [("gradient_tape/emb/embedding_lookup/UnsortedSegmentSum:UnsortedSegmentSum",
                   0.25),
                  ("Adagrad/update_emb/ResourceSparseApplyAdagradV2:"
                   "ResourceSparseApplyAdagradV2", 0.75)]),
        "sparse_ops": ([("emb/embedding_lookup_sparse/Unique:Unique", 0.4),
                        ("emb/embedding_lookup_sparse:SparseSegmentMean", 0.6)],
                       [("gradient_tape/emb/embedding_lookup_sparse/SparseSegmentMeanGrad:"
                         "SparseSegmentMeanGrad", 1.0)]),
        "device": ([], []),
    }[where]
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main = host.line("python3", line_id=1)
    compute = host.line("tf_Compute/11", line_id=11)
    # TF 2.5+: CUDA calls on their own plane, on a line keyed by the calling thread's id.
    cupti = b.plane("/host:CUPTI").line("Host Threads/11", line_id=11)
    gpu = b.plane("/device:GPU:0", plane_id=1)
    kern = gpu.line("Stream #7(Kernel)", line_id=7)
    h2d = gpu.line("Stream #14(MemcpyH2D)", line_id=14)
    d2h = gpu.line("Stream #15(MemcpyD2H)", line_id=15)
    corr = 1

    def kernel(t: int, ms: float, tf_op: str) -> None:
        """The op's host event on the executor thread holds its launch call; the kernel runs
        10 µs after the op starts."""
        nonlocal corr
        compute.event(tf_op, t, 8000)
        cupti.event("cuLaunchKernel", t + 2000, 4000, correlation_id=corr)
        kern.event("void tensorflow::functor::GatherOpKernel<float, int, true>"
                   if "Gather" in tf_op else f"volta_sgemm_128x64_nn_{corr % 3}",
                   t + 10_000, int(ms * MS) - 10_000, correlation_id=corr, device_id=0,
                   tf_op=Ref(tf_op))
        corr += 1

    def on_host(t: int, ops: list[tuple[str, float]], ms: float) -> int:
        for name, part in ops:
            compute.event(name, t, int(ms * part * MS))
            t += int(ms * part * MS)
        return t

    copy = int(copy_ms * MS)
    details = Ref("kind_src:pageable kind_dst:device size:1048576")
    for i in range(steps):
        t0 = int(i * step_ms * MS)
        main.event("train", t0, int(step_ms * MS) - 1000, step_num=i, _r=1)
        t = t0 + MS // 10
        h2d.event("MemcpyH2D", t, copy, device_id=0, memcpy_details=details)
        t += copy
        forward, backward = host_ops
        if where == "device":
            kernel(t, lookup_ms / 10, "emb/embedding_lookup:ResourceGather")
            t += int(lookup_ms / 10 * MS)
        else:
            if where == "sparse_ops":
                # The ids come back from the GPU for Unique, its result goes back for the gather.
                d2h.event("MemcpyD2H", t, copy // 4, device_id=0)
                t += copy // 4
            t = on_host(t, forward, lookup_ms)
            if where == "sparse_ops":
                h2d.event("MemcpyH2D", t, copy, device_id=0, memcpy_details=details)
                t += copy
                kernel(t, lookup_ms / 10,
                       "emb/embedding_lookup_sparse/embedding_lookup:ResourceGather")
                t += int(lookup_ms / 10 * MS)
            h2d.event("MemcpyH2D", t, copy, device_id=0, memcpy_details=details)
            t += copy
        for k in range(20):
            kernel(t, kernel_ms / 20 - 0.01, f"dense_{k}/MatMul:MatMul")
            t += int(kernel_ms / 20 * MS)
        if where == "device":
            kernel(t, update_ms / 10,
                   "Adagrad/update_emb/ResourceSparseApplyAdagradV2:ResourceSparseApplyAdagradV2")
        else:
            d2h.event("MemcpyD2H", t, copy, device_id=0)
            on_host(t + copy, backward, update_ms)
    return b.write(tmp)


def input_copy_trace(
    tmp: Path,
    *,
    copy_ms: float = 30.0,
    kernel_ms: float = 50.0,
    prefetched: bool = False,
    beside: tuple[str, float] | None = None,
    size: int = 100_663_296,
    steps: int = 4,
    step_ms: float = 100.0,
    labels_send: bool = False,
) -> Path:
    """One GPU fed a batch per step, as Keras 2.4 fit on host arrays does it (real traces:
    docs/trace-signals.md, "Input copies inside the step"): the iterator's `_Send` on a host
    thread holds the CUDA call of a `MemcpyH2D` of `size` bytes, which takes `copy_ms` on the
    copy stream, then `kernel_ms` of kernels, then the loss read back (a 4-byte MemcpyD2H).
    `prefetched`: the copy of the next batch runs during this step's kernels instead. `beside`
    (name, ms): a host op starting with the copy. `labels_send`: a second iterator `_Send` on
    another thread, holding no copy call, waits as long as the batch's copy (seen in 3 of the
    real semi-supervised traces)."""
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main = host.line("python3", line_id=1)
    send = host.line("tf_Compute/12", line_id=12)
    compute = host.line("tf_Compute/11", line_id=11)
    labels = host.line("tf_Compute/13", line_id=13) if labels_send else None
    gpu = b.plane("/device:GPU:0", plane_id=1)
    kern = gpu.line("Stream #13(Compute)", line_id=13)
    h2d = gpu.line("Stream #14(MemcpyH2D)", line_id=14)
    d2h = gpu.line("Stream #15(MemcpyD2H)", line_id=15)
    details = Ref(f"size:{size} dest:0 async:1")
    for i in range(steps):
        t0 = int(i * step_ms * MS)
        main.event("train", t0, int(step_ms * MS) - 1000, step_num=i, _r=1)
        start = t0 + MS // 10
        at = start + (MS if prefetched else 0)
        send.event("IteratorGetNext/_3:_Send", at - 5000, int(copy_ms * MS) + 10_000)
        # The CUDA call inside the _Send, linked to the stream's copy by its correlation id.
        send.event("MemcpyH2D", at - 4000, int(copy_ms * MS) + 8000, correlation_id=100 + i,
                   memcpy_details=details)
        h2d.event("MemcpyH2D", at, int(copy_ms * MS), device_id=0, memcpy_details=details,
                  correlation_id=100 + i)
        if beside:
            compute.event(beside[0], at, int(beside[1] * MS))
        if labels:
            labels.event("IteratorGetNext/_1:_Send", at - 6000, int(copy_ms * MS) + 12_000)
        k0 = start if prefetched else at + int(max(copy_ms, beside[1] if beside else 0) * MS)
        for k in range(10):
            kern.event(f"volta_sgemm_128x64_nn_{k % 3}", k0 + int(k * kernel_ms / 10 * MS),
                       int(kernel_ms / 10 * MS) - 1000, device_id=0)
        d2h.event("MemcpyD2H", k0 + int(kernel_ms * MS), 2000, device_id=0,
                  memcpy_details=Ref("size:4 dest:0 async:1"))
    return b.write(tmp)


def write_sampler(run_dir: Path, threads: pd.DataFrame, n_cpus: int = 2,
                  cpu_percent: float = 100.0, read_mb_per_s: float = 0.0,
                  rchar_mb_per_s: float | None = None, host: str = "host",
                  machine_percent: float | None = None, affinity_cpus: int | None = None,
                  cpu_quota: float | None = None, throttled: float = 0.0,
                  process_columns: dict | None = None,
                  others: list[tuple[int, int, str, float]] | None = None) -> None:
    """Sampler files of `host` in the layout of recadvisor/capture/layout.py; `threads` has
    t_ms, tid, name, state, user_s, system_s; the process reads `read_mb_per_s` from the device,
    and `rchar_mb_per_s` through read calls (no `rchar_bytes` column when None, as before
    2026-11-24). The machine is busy `machine_percent` (100 = every core; the process's own
    `cpu_percent` alone when None). `affinity_cpus` and `cpu_quota` (cores) are the process's
    limits (no columns when both are None, as before 2026-11-29); with a quota, the group is
    throttled in `throttled` of its 100 ms periods, stopped for half of each on every CPU.
    `process_columns` replaces process-table columns with values per sweep (in time order).
    `others`: the machine's other processes as (pid, ppid, command, cores), each using that many
    cores from the first sweep on, scanned every second and at the last sweep (the sampler's own
    process, pid 999, at 0.1 core: 1% of a 10-core machine); no others file when None."""
    t0 = DEFAULT_PROFILE_START_NS
    th = threads.copy()
    th["ts_ns"] = (t0 + th.pop("t_ms") * MS).astype("int64")
    th["pid"] = 100
    th["blkio_ticks"] = 0
    th.to_parquet(run_dir / f"{host}.threads.parquet")
    ts = sorted(th["ts_ns"].unique())
    secs = (np.asarray(ts) - t0) / 1e9
    process = pd.DataFrame({"ts_ns": ts, "pid": 100, "cpu_percent": cpu_percent, "rss_bytes": 1,
                            "read_bytes": (secs * read_mb_per_s * 1e6).astype("int64"),
                            "write_bytes": 0, "num_threads": th["tid"].nunique(),
                            "system_cpu_percent": (cpu_percent / n_cpus if machine_percent is None
                                                   else machine_percent),
                            "iowait_s": 0.0, "n_cpus": n_cpus})
    if affinity_cpus is not None or cpu_quota is not None:
        process["affinity_cpus"] = affinity_cpus or n_cpus
        process["cpu_quota"] = float(cpu_quota or -1.0)
        periods = (secs * 10).astype("int64")
        stopped = (periods * throttled).astype("int64")
        process["cpu_periods"] = periods if cpu_quota else -1
        process["cpu_throttled_periods"] = stopped if cpu_quota else -1
        process["cpu_throttled_s"] = (secs * throttled * 0.5 * n_cpus) if cpu_quota else -1.0
    if rchar_mb_per_s is not None:
        process["rchar_bytes"] = (secs * rchar_mb_per_s * 1e6).astype("int64")
    for col, values in (process_columns or {}).items():
        process[col] = values
    process.to_parquet(run_dir / f"{host}.process.parquet")
    if others is not None:
        # Every second and at the last sweep, as the sampler scans.
        scans = np.append(np.arange(ts[0], ts[-1], 10**9), ts[-1])
        rows = [{"ts_ns": int(t), "pid": pid, "ppid": ppid, "name": cmd.split()[0],
                 "cmd": cmd, "cpu_s": cores * (t - ts[0]) / 1e9, "start_ticks": 7,
                 "sampled_pid": 100, "sampler_pid": 999}
                for t in scans for pid, ppid, cmd, cores in [*others, (999, 1, "sampler", 0.1)]]
        pd.DataFrame(rows).to_parquet(run_dir / f"{host}.others.parquet")


def sweeps(step_ms: float, wait_ms: float, input_running: int, *, model_running: bool = True,
            intra_op: int = 0, hz: float = 200.0, steps: int = 5) -> pd.DataFrame:
    """Sampler sweeps of a process (pid 100): the main thread (tid 100) sleeps in the step, the
    model's thread (1001) runs while host_trace's ops do (after the wait, until 1.5 ms before
    the step's end), and `input_running` of three tf.data threads (1002-1004) run all the time;
    `intra_op` more threads (1010...), which write no trace events (Eigen's intra-op pool on
    CPU), run with the model's. Sweeps start 2.5 ms into the profile so that none falls on an
    edge."""
    rows = []
    for k in range(int(steps * step_ms / 1000 * hz)):
        t = 2.5 + k * 1000 / hz
        ops_run = wait_ms + 0.5 <= t % step_ms < step_ms - 1.5
        states = {100: "S", 1001: "R" if model_running and ops_run else "S"}
        states |= {1002 + j: "R" if j < input_running else "S" for j in range(3)}
        states |= {1010 + j: states[1001] for j in range(intra_op)}
        for tid, state in states.items():
            rows.append({"t_ms": t, "tid": tid, "name": "python3", "state": state,
                         "user_s": t / 1000 * (state == "R"), "system_s": 0.0})
    return pd.DataFrame(rows)


def thread_samples(duration_ms: float, hz: float,
                   threads: dict[str, tuple[str, float] | tuple[str, float, float]]
                   ) -> pd.DataFrame:
    """Samples for named threads: name → (state letter, CPU cores it uses[, cores of that in
    the kernel])."""
    rows = []
    n = int(duration_ms / 1000 * hz)
    for k in range(n):
        t = k * 1000 / hz
        for tid, (name, (state, cores, *kernel)) in enumerate(threads.items(), start=1000):
            sys_cores = kernel[0] if kernel else 0.0
            rows.append({"t_ms": t, "tid": tid, "name": name.split("#")[0], "state": state,
                         "user_s": (cores - sys_cores) * t / 1000,
                         "system_s": sys_cores * t / 1000})
    return pd.DataFrame(rows)
