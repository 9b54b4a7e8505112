"""`no_mixed_precision`: the GPU's matrix multiplications and convolutions run in FP32 or TF32
on a GPU whose tensor cores run them faster in half precision.

Seed 001: mixed precision made the hybrid-parallel DLRM 23% faster than TF32 on an A100. The
signals (docs/trace-signals.md, "Kernel precision"): kernel names say what a kernel computes and
in what type (`volta_scudnn_*`, `implicit_convolve_sgemm<float, ...>`,
`cutlass_80_tensorop_s1688gemm_*` against `volta_fp16_s884gemm_fp16_*`, `Eigen::half`); the GPU's
compute capability comes from the trace (xplane device planes' `compute_cap_major`, Kineto's
`deviceProperties`) or from the kernels' architecture prefixes. Below 7.0 there are no tensor
cores for half precision and nothing to report.

What-if: the single-precision math kernels run HALF_SPEEDUP times faster in a replay of the
GPU's streams (analyzers/signals/stream_replay.py) where every kernel still waits for its launch,
its stream and the other streams' events it waited for: a step shortens only where the GPU was
the critical path, so a launch-bound job gains little however long its GEMMs are. The memory-bound
kernels (elementwise, normalization) move half the bytes in half precision too: left out, so the
estimate leans low, as it does on Volta and Turing, whose tensor cores are 4-8x CUDA-core FP32
at peak against 2x for TF32 on Ampere and Hopper.
"""

from __future__ import annotations

import numpy as np

from analyzers.context import Context
from analyzers.events import is_device_plane
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.ingest.logdir import gpu_model
from analyzers.signals.kernel_precision import (
    HALF,
    SINGLE,
    TENSOR_CORES,
    UNKNOWN,
    arch_from_names,
    classify,
)
from analyzers.signals.stream_replay import STREAM_KINDS, launches, queue_delay_us, step_shrink

ID = "no_mixed_precision"
# Half-precision tensor-core math against TF32's, at peak on A100 and H100 (312 against 156
# dense TFLOPS; 990 against 495): the speed the estimate gives the single-precision math kernels.
HALF_SPEEDUP = 2.0
# Single-precision math under this share of kernel time is not worth a precision change.
MIN_SINGLE_MATH_SHARE = 0.10
# Half-precision math at this share of the math or more: mixed precision is on (some GEMMs stay
# FP32 by design: the loss, softmax, the optimizer's master weights).
HALF_MATH_ON = 0.5
_REMEDY = {
    # (framework, Volta/Turing: float16 with loss scaling; Ampere and newer: bfloat16)
    ("tensorflow", "float16"): (
        "tf.keras.mixed_precision.set_global_policy('mixed_float16') before building the model "
        "(Keras' compile() then scales the loss; a custom loop wraps its optimizer in "
        "tf.keras.mixed_precision.LossScaleOptimizer)"),
    ("tensorflow", "bfloat16"): (
        "tf.keras.mixed_precision.set_global_policy('mixed_bfloat16') before building the model "
        "(no loss scaling)"),
    ("pytorch", "float16"): (
        "run the forward pass and the loss under torch.autocast('cuda', dtype=torch.float16) "
        "and scale the loss with torch.amp.GradScaler('cuda')"),
    ("pytorch", "bfloat16"): (
        "run the forward pass and the loss under torch.autocast('cuda', dtype=torch.bfloat16) "
        "(no loss scaling)"),
}
_KEEP_FP32 = {
    "tensorflow": "keep the last layer's output in float32 (dtype='float32') so the loss is "
                  "computed in full precision",
    "pytorch": "with convolutions, the channels_last memory format keeps the tensor cores fed "
               "without layout transposes",
}


def _remedy(framework: str, cc: tuple[int, int] | None) -> str:
    """float16 where bfloat16 has no tensor cores (Volta, Turing), bfloat16 from Ampere on; both
    when the architecture is unknown."""
    if cc is None:
        text = (f"Train in mixed precision: on Ampere and newer, "
                f"{_REMEDY[framework, 'bfloat16']}; on Volta and Turing, "
                f"{_REMEDY[framework, 'float16']}")
    else:
        dtype = "bfloat16" if cc >= (8, 0) else "float16"
        text = f"Train in mixed precision: {_REMEDY[framework, dtype]}"
    return f"{text}; {_KEEP_FP32[framework]}"


def compute_capability(ctx: Context, kernel_names: list[str]) -> tuple[tuple[int, int] | None, str]:
    """The lowest compute capability of the run's GPUs and where it was read."""
    if ctx.run.gpus:
        name, cc = min(ctx.run.gpus.items(), key=lambda kv: kv[1])
        label = f"{gpu_model(name)}, " if gpu_model(name) else ""
        return cc, f"{label}compute capability {cc[0]}.{cc[1]} (recorded in the trace)"
    cc = arch_from_names(kernel_names)
    if cc is None:
        return None, "compute capability not recorded: tensor cores assumed"
    return cc, f"compute capability {cc[0]}.{cc[1]} (read from the library kernels' names)"


def detect(ctx: Context) -> Finding | None:
    if not ctx.has_accelerator or ctx.n_steps == 0 or ctx.total_step_ns <= 0:
        return None
    # Copies and collectives hold their streams too, and kernels wait for them: replayed with
    # the kernels, at their own durations.
    columns = ("host", "plane", "line", "name", "kind", "step_idx", "start_ns", "end_ns",
               "dur_ns", *(("correlation_id",) if "correlation_id" in ctx.events else ()))
    k = ctx.in_steps(kinds=STREAM_KINDS, plane=is_device_plane, columns=columns)
    kernel = (k["kind"] == "device_compute").to_numpy()
    if not kernel.any():
        return None
    math, precision, names = classify(k["name"])
    math &= kernel
    precision = np.where(kernel, precision, UNKNOWN)
    dur = k["dur_ns"].to_numpy(np.int64)
    total = float(dur[kernel].sum())
    single_math = math & (precision == SINGLE)
    half_math = math & (precision == HALF)
    single_share = float(dur[single_math].sum()) / total if total else 0.0
    math_ns = float(dur[math].sum())
    if single_share < MIN_SINGLE_MATH_SHARE or (
            math_ns and float(dur[half_math].sum()) / math_ns >= HALF_MATH_ON):
        return None
    cc, gpu = compute_capability(ctx, names)
    if cc is not None and cc < TENSOR_CORES:
        return None
    launched_by = launches(ctx, k)
    waits = ctx.in_steps(kinds=("sync",), plane=lambda p: not is_device_plane(p),
                         columns=("host", "step_idx", "start_ns", "end_ns"))
    shrink = step_shrink(k, launched_by, np.where(single_math, dur / HALF_SPEEDUP, dur),
                         waits)
    saved = shrink / ctx.total_step_ns
    if saved <= 0:
        return None
    devices = max(ctx.n_devices, 1)
    step_fraction = min(float(dur[single_math].sum()) / devices / ctx.total_step_ns, 1.0)
    single_other = float(dur[~math & (precision == SINGLE)].sum()) / total  # kernels only
    n = ctx.n_steps
    queue = queue_delay_us(k[kernel], launched_by.select(kernel))
    paired = launched_by.paired
    evidence = [
        f"{single_share:.0%} of GPU kernel time is FP32/TF32 matrix multiplications and "
        f"convolutions ({float(dur[single_math].sum()) / devices / n / 1e6:.2f} ms a step on each "
        f"GPU, {step_fraction:.0%} of the step); half-precision math: "
        f"{float(dur[half_math].sum()) / total:.0%}",
        f"GPU: {gpu}; tensor cores run half-precision matrix math at 2x TF32's peak (Ampere, "
        f"Hopper) and 4-8x CUDA-core FP32's (Volta, Turing)",
    ]
    potential = float(dur[single_math].sum()) * (1 - 1 / HALF_SPEEDUP) / devices / n
    how = (f"paired by correlation id; kernels started a median {queue:.0f} µs after their "
           f"launch returned" if queue is not None else "unpaired: the gaps before kernels kept")
    evidence.append(
        f"estimate: those kernels {HALF_SPEEDUP:g}x faster save {potential / 1e6:.2f} ms of GPU "
        f"time a step; replayed on each stream with every kernel still waiting for its launch "
        f"({how}), the step shortens by {shrink / n / 1e6:.2f} ms of its "
        f"{ctx.total_step_ns / n / 1e6:.2f} ms mean: the rest only leaves the GPU waiting longer "
        f"for the host. The FP32 elementwise and normalization kernels ({single_other:.0%} of "
        f"kernel time) would move half the bytes too, not counted: a lower bound")
    remedy = _remedy(ctx.framework, cc)
    changes = {}
    if ctx.config and not ctx.config.get("mixed_precision"):  # the trainer's default: off
        changes = {"mixed_precision": True}
    return Finding(
        id=ID,
        title=f"GPU math in single precision ({single_share:.0%} of kernel time): no mixed "
              f"precision",
        step_fraction=step_fraction,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=remedy + ".",
        numbers={"single_math_kernel_share": round(single_share, 4),
                 "half_math_kernel_share": round(float(dur[half_math].sum()) / total, 4),
                 "single_other_kernel_share": round(single_other, 4),
                 "compute_capability": None if cc is None else f"{cc[0]}.{cc[1]}",
                 "saved_ms_per_step": round(shrink / n / 1e6, 3),
                 "median_queue_delay_us": None if queue is None else round(queue, 1),
                 "launches_paired": paired},
        top_events=heaviest_events(k, where=single_math),
        config_changes=changes,
    )
