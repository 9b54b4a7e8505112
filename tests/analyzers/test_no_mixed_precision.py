"""`no_mixed_precision` on code-built one-GPU TF traces (the CUPTI collector's layout: a
`/device:GPU:0` plane with its compute capability, a kernel stream, launches on `/host:CUPTI`
paired by correlation id) and on the recorded GPU traces of tests/analyzers/data: FP32 GEMMs
with the host ahead of the GPU, the same launch-bound, half-precision kernels, a GPU without
tensor cores, kernels without launches to pair, CPU-only traces."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analyzers.detectors.no_mixed_precision import ID
from analyzers.events import is_device_plane
from analyzers.ingest.kineto_header import kineto_header
from analyzers.report import analyze, render_text
from analyzers.signals.kernel_precision import (
    HALF,
    SINGLE,
    UNKNOWN,
    arch_from_names,
    is_math,
    precision_of,
)
from analyzers.signals.stream_replay import STREAM_KINDS, launches, replay
from tests.analyzers.traces import MS, host_trace
from tests.analyzers.xspace_builder import XSpaceBuilder

US = 1_000
DATA = Path(__file__).parent / "data"
SGEMM = "volta_sgemm_128x64_nn"
HGEMM = "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn"
ELEMENTWISE = ("void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<Eigen::"
               "TensorAssignOp<Eigen::TensorMap<Eigen::Tensor<float, 1, 1, long>, 16> > >, long>")


def precision_trace(tmp: Path, *, gemm: str = SGEMM, gemm_ms: float = 6.0, other_ms: float = 1.0,
                    pairs: int = 10, launch_every_ms: float | None = None,
                    cc: tuple[int, int] | None = (7, 0), correlated: bool = True,
                    ids_per_step: bool = False, allreduce_ms: float = 0.0,
                    sync_after: int | None = None, device_gap_us: int = 1, steps: int = 4,
                    step_ms: float = 75.0) -> Path:
    """Per step, `pairs` of a GEMM and an elementwise kernel on one stream. The host launches
    them all in the step's first half millisecond (the GPU then runs them back to back, 1 µs
    apart), or one every `launch_every_ms` (each kernel starts when its launch returns, or
    when the kernel before it ends). The step ends 4 ms after the last kernel. Correlation ids
    count on over the window, or start over each step (`ids_per_step`: ids that repeat, as in
    several processes' or sessions' traces merged). With `allreduce_ms`, an NCCL all-reduce on
    a stream of its own follows the last kernel (it waits for the gradients: a stream event),
    then a 1 ms update kernel on the first stream follows it; both launched with the rest. With
    `sync_after`, the host waits in a `cudaStreamSynchronize` for the GPU after launching that
    many pairs (a `.item()`), and launches the rest when it returns. Queued kernels start
    `device_gap_us` after the one before them."""
    b = XSpaceBuilder()
    main = b.plane("/host:CPU").line("python3", line_id=1)
    cupti = b.plane("/host:CUPTI").line("Host Threads/1", line_id=1)
    gpu = b.plane("/device:GPU:0", plane_id=1)
    if cc is not None:
        gpu.stat("compute_cap_major", cc[0])
        gpu.stat("compute_cap_minor", cc[1])
    stream = gpu.line("Stream #7(Kernel)", line_id=7)
    nccl = gpu.line("Stream #20(Kernel)", line_id=20)
    corr = 1
    for i in range(steps):
        t0 = int(i * step_ms * MS)
        main.event("train", t0, int(step_ms * MS) - 1000, step_num=i, _r=1)
        end = t0 + MS
        corr = 1 if ids_per_step else corr
        resumed = t0
        for k in range(2 * pairs):
            name, ms = (gemm, gemm_ms) if k % 2 == 0 else (ELEMENTWISE, other_ms)
            if sync_after is not None and k == 2 * sync_after:
                waited_from = t0 + k * 20 * US
                resumed = end + 5 * US
                cupti.event("cudaStreamSynchronize", waited_from, resumed - waited_from)
            launch = (max(t0 + k * 20 * US, resumed + (k - 2 * sync_after) * 20 * US)
                      if sync_after is not None and k >= 2 * sync_after
                      else t0 + k * 20 * US if launch_every_ms is None
                      else t0 + int((k // 2) * launch_every_ms * MS) + (k % 2) * 20 * US)
            returned = launch + 10 * US
            start = max(returned + 2 * US, end + device_gap_us * US)
            ids = {"correlation_id": corr} if correlated else {}
            cupti.event("cuLaunchKernel", launch, 10 * US, **ids)
            stream.event(name, start, int(ms * MS), **ids)
            end = start + int(ms * MS)
            corr += 1
        if allreduce_ms:
            for line, name, ms in ((nccl, "ncclKernel_AllReduce_RING_LL_Sum_float", allreduce_ms),
                                   (stream, ELEMENTWISE, 1.0)):
                launch = t0 + 500 * US + corr * 10 * US
                cupti.event("cuLaunchKernel", launch, 10 * US, correlation_id=corr)
                start = end + 3 * US
                line.event(name, start, int(ms * MS), correlation_id=corr)
                end = start + int(ms * MS)
                corr += 1
    return b.write(tmp)


def _finding(run: Path):
    return {f.id: f for f in analyze(run).findings}.get(ID)


def test_fp32_gemms_with_the_host_ahead_of_the_gpu(tmp_path):
    """60 of 75 ms in FP32 GEMMs on a V100, all queued: at 2x, 30 ms of each step goes."""
    f = _finding(precision_trace(tmp_path))
    assert f is not None and f.severity == "high"
    assert f.numbers["single_math_kernel_share"] == pytest.approx(60 / 70, abs=0.01)
    assert f.numbers["single_other_kernel_share"] == pytest.approx(10 / 70, abs=0.01)
    assert f.numbers["compute_capability"] == "7.0" and f.numbers["launches_paired"]
    assert f.numbers["saved_ms_per_step"] == pytest.approx(30.0, abs=0.1)
    assert f.speedup == pytest.approx(75 / 45, rel=0.02)
    assert f.step_fraction == pytest.approx(60 / 75, abs=0.02)
    assert f.top_events[0]["name"] == SGEMM
    assert "mixed_float16" in f.remedy and "bfloat16" not in f.remedy
    assert "save 30.00 ms of GPU time a step" in f.evidence[-1]
    assert "the step shortens by 30.00 ms of its 75.00 ms mean" in f.evidence[-1]


def test_the_reference_trainers_fix(tmp_path):
    """A reference-trainer run (its config in the run folder) gets the flag that turns mixed
    precision on; one with it on already has half-precision kernels and no finding."""
    run = precision_trace(tmp_path)
    (run / "recadvisor_run.json").write_text(json.dumps({"config": {"devices": 1}}))
    f = _finding(run)
    assert f.config_changes == {"mixed_precision": True}
    assert f.fix_command and "--mixed-precision true" in f.fix_command


def test_launch_bound_gemms_gain_little(tmp_path):
    """The same kernels, one pair launched every 7 ms: each GEMM ends before the next pair's
    launch returns, so a faster GEMM only leaves the GPU idle longer. What moves is the
    elementwise kernel queued behind each GEMM, and the step's end with the last one: 2.5 ms
    of a 75 ms step, against 25 ms were they all queued."""
    f = _finding(precision_trace(tmp_path, launch_every_ms=7.0, gemm_ms=5.0))
    assert f is not None and f.severity == "low"
    assert f.numbers["saved_ms_per_step"] == pytest.approx(2.5, abs=0.05)
    assert "save 25.00 ms of GPU time a step" in f.evidence[-1]
    assert "the step shortens by 2.50 ms" in f.evidence[-1]
    # Without the pairing (no correlation ids) the gaps before the kernels say the same.
    unpaired = _finding(precision_trace(tmp_path / "u", launch_every_ms=7.0, gemm_ms=5.0,
                                        correlated=False))
    assert unpaired.severity == "low" and not unpaired.numbers["launches_paired"]
    assert unpaired.numbers["saved_ms_per_step"] == pytest.approx(2.5, abs=0.05)
    # Ids that repeat each step: a kernel pairs with the launch of its id that started last
    # before it, not with the first step's (which would read every later kernel as queued).
    repeated = _finding(precision_trace(tmp_path / "r", launch_every_ms=7.0, gemm_ms=5.0,
                                        ids_per_step=True))
    assert repeated.numbers["saved_ms_per_step"] == pytest.approx(2.5, abs=0.05)


def test_kernels_that_wait_for_another_stream_move_with_it(tmp_path):
    """The all-reduce waits for the last gradient kernel and the update for the all-reduce, on
    two streams, though the host launched both early: the 30 ms the GEMMs lose move them up too.
    Replayed each stream alone, the all-reduce kept its place and the step its end (1 ms)."""
    f = _finding(precision_trace(tmp_path, allreduce_ms=5.0, step_ms=85.0))
    assert f is not None and f.severity == "high"
    assert f.numbers["saved_ms_per_step"] == pytest.approx(30.0, abs=0.1)
    # The all-reduce is not a kernel of the model's math: not in the FP32 shares.
    assert f.numbers["single_math_kernel_share"] == pytest.approx(60 / 71, abs=0.01)
    assert f.numbers["single_other_kernel_share"] == pytest.approx(11 / 71, abs=0.01)


def test_a_host_waiting_for_the_gpu_launches_sooner(tmp_path):
    """The host launches 5 pairs, waits for the GPU (a synchronize), then launches 5 more: with
    the first GEMMs twice as fast the wait ends 15 ms sooner, and the second half follows.
    With the launches kept where they were, only the second half's 15 ms would count."""
    f = _finding(precision_trace(tmp_path, sync_after=5))
    assert f is not None
    assert f.numbers["saved_ms_per_step"] == pytest.approx(30.0, abs=0.1)


def test_queued_kernels_some_microseconds_apart_are_still_queued(tmp_path):
    """TF's GPU traces start queued kernels 3-5 µs, at times 10 µs and more, after the kernel
    before them, tens of milliseconds after their launch: the delay moves with the stream.
    Pinned to their starts, kernels 12 µs apart saved nothing."""
    f = _finding(precision_trace(tmp_path, device_gap_us=12))
    assert f is not None and f.numbers["saved_ms_per_step"] == pytest.approx(30.0, abs=0.1)


def test_unpaired_back_to_back_kernels_are_queued(tmp_path):
    f = _finding(precision_trace(tmp_path, correlated=False))
    assert f is not None and not f.numbers["launches_paired"]
    assert f.numbers["saved_ms_per_step"] == pytest.approx(30.0, abs=0.1)


def test_half_precision_or_no_tensor_cores_or_little_math_is_no_finding(tmp_path):
    assert _finding(precision_trace(tmp_path / "half", gemm=HGEMM)) is None
    # A P100 (6.0) has no tensor cores for half-precision math.
    assert _finding(precision_trace(tmp_path / "p100", cc=(6, 0))) is None
    assert _finding(precision_trace(tmp_path / "small", gemm_ms=0.05)) is None
    # No compute capability recorded: the kernels' `volta_` prefix says 7.0.
    f = _finding(precision_trace(tmp_path / "nocc", cc=None))
    assert f is not None and f.numbers["compute_capability"] == "7.0"
    assert any("read from the library kernels' names" in e for e in f.evidence)
    # Neither recorded nor named: tensor cores assumed, both precisions offered.
    unknown = _finding(precision_trace(tmp_path / "unknown", cc=None, gemm="my_gemm_kernel<float>"))
    assert unknown is not None and unknown.numbers["compute_capability"] is None
    assert "mixed_bfloat16" in unknown.remedy and "mixed_float16" in unknown.remedy


def test_cpu_only_traces_have_no_finding(tmp_path):
    _, run = host_trace(tmp_path, compute_ms=80.0)
    assert _finding(run) is None


def test_kernel_names_say_math_and_precision():
    single = ["volta_sgemm_64x64_nt", "volta_scudnn_128x128_stridedB_splitK_medium_nn_v1",
              "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int)",
              "void implicit_convolve_sgemm<float, float, 1024, 6, 7>(int)",
              "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(P)",
              "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4"]
    half = ["volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", "volta_h884gemm_64x128_ldg8_nn",
            "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_32x3_nn",
            "void cutlass::Kernel<cutlass_80_tensorop_h16816gemm_128x128_32x3_nn>(P)"]
    for name in single:
        assert is_math(name) and precision_of(name) == SINGLE, name
    for name in half:
        assert is_math(name) and precision_of(name) == HALF, name
    assert not is_math("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>()")
    assert not is_math("void cudnn::ops::nchwToNhwcKernel<float, float, float, false>()")
    assert not is_math("void convert_kernel<float>()")
    assert precision_of("Memset (Device)") == UNKNOWN
    assert arch_from_names(["volta_sgemm_64x64_nt", "void at::native::add<float>()"]) == (7, 0)
    assert arch_from_names(["void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64>()"]) == (8, 0)
    assert arch_from_names(["sm90_xmma_gemm_bf16bf16_bf16f32"]) == (9, 0)
    assert arch_from_names(["void at::native::add<float>()"]) is None


def _kineto(tmp_path: Path, name: str) -> Path:
    shutil.copy(DATA / name, tmp_path / "rank0.pt.trace.json.gz")
    return tmp_path


def test_recorded_fp32_resnet50_on_a_v100(tmp_path):
    """Kineto's 2021 ResNet-50 samples (FP32 on a V100, DataLoader with no workers): 67% of
    kernel time in FP32 convolutions and GEMMs, but the host runs only ~10 ms ahead of a 175 ms
    step and launches into its last milliseconds: twice as fast math saves ~17 ms a step."""
    report = analyze(_kineto(tmp_path, "kineto-2021/resnet50_num_workers_0.json.gz"))
    assert report.to_dict()["hardware"]["gpus"] == {"Tesla V100-DGXS-32GB": "7.0"}
    assert render_text(report).splitlines()[1].startswith(
        "hardware: accelerator /device:GPU:0 (Tesla V100-DGXS-32GB, compute capability 7.0)")
    f = {f.id: f for f in report.findings}[ID]
    assert f.severity == "medium"
    assert f.numbers["compute_capability"] == "7.0"
    assert f.numbers["single_math_kernel_share"] == pytest.approx(0.67, abs=0.01)
    assert f.numbers["half_math_kernel_share"] == 0.0
    assert 1.08 < f.speedup < 1.15
    assert "Tesla V100-DGXS-32GB" in " ".join(f.evidence)
    assert "GradScaler" in f.remedy and "bfloat16" not in f.remedy


def test_recorded_launch_bound_ddp_and_fp16_bert_have_no_finding(tmp_path):
    """The A100 DDP rank runs TF32 GEMMs, but its GPU runs each kernel as the host launches it
    (a median 1.8 µs later); TF's BERT demo trains in float16 already."""
    ddp = analyze(_kineto(tmp_path, "pytorch-gpu/ddp_cnn_rank0.json.gz"))
    assert ddp.ctx.run.gpus["NVIDIA A100-PG509-200"] == (8, 0)
    assert ID not in {f.id for f in ddp.findings}
    run = tmp_path / "bert" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    (run / "host.xplane.pb").write_bytes(
        gzip.decompress((DATA / "tf2.4-gpu" / "bert_multiworker.xplane.pb.gz").read_bytes()))
    bert = analyze(tmp_path / "bert")
    assert bert.ctx.run.gpus["/device:GPU:0"] == (7, 0)
    assert ID not in {f.id for f in bert.findings}


@pytest.mark.parametrize("name", ["kineto-2021/resnet50_num_workers_0.json.gz",
                                  "kineto-2021/resnet50_num_workers_4.json.gz",
                                  "pytorch-gpu/ddp_cnn_rank0.json.gz"])
def test_the_replay_gives_back_the_recorded_timeline(tmp_path, name):
    """Replayed with their recorded durations, every kernel, copy and collective ends where
    the trace has it: launches, stream order, the GPU's gaps between queued kernels and the
    waits on other streams are all in the model (without the gaps, the V100 kernels ended a
    median 0.2 ms early)."""
    ctx = analyze(_kineto(tmp_path, name)).ctx
    k = ctx.in_steps(kinds=STREAM_KINDS, plane=is_device_plane,
                     columns=("host", "plane", "line", "name", "kind", "step_idx", "start_ns",
                              "end_ns", "dur_ns", "correlation_id"))
    launched_by = launches(ctx, k)
    assert launched_by.paired
    dur = k["dur_ns"].to_numpy().astype(float)
    waits = ctx.in_steps(kinds=("sync",), plane=lambda p: not is_device_plane(p),
                         columns=("host", "step_idx", "start_ns", "end_ns"))
    old, new = replay(k, launched_by, dur, waits)
    off = np.abs(old - k["end_ns"].to_numpy())
    assert np.percentile(off, 99) <= 1_000, np.percentile(off, [50, 99, 100])
    assert np.array_equal(old, new)


def test_kineto_header_reads_the_gpus():
    header = kineto_header(DATA / "kineto-2021" / "resnet50_num_workers_4.json.gz")
    assert header is not None and header.gpus[0] == ("Tesla V100-DGXS-32GB", 7, 0)
