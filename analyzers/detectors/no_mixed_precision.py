"""`no_mixed_precision`: the GPU's matrix multiplications and convolutions run in FP32 or TF32
on a GPU whose tensor cores run them faster in half precision.

Seed 001: mixed precision made the hybrid-parallel DLRM 23% faster than TF32 on an A100. The
signals (docs/trace-signals.md, "Kernel precision"): kernel names say what a kernel computes and
in what type (`volta_scudnn_*`, `implicit_convolve_sgemm<float, ...>`,
`cutlass_80_tensorop_s1688gemm_*` against `volta_fp16_s884gemm_fp16_*`, `Eigen::half`); the GPU's
compute capability comes from the trace (xplane device planes' `compute_cap_major`, Kineto's
`deviceProperties`) or from the kernels' architecture prefixes. Below 7.0 there are no tensor
cores for half precision and nothing to report.

What-if: the single-precision math kernels run HALF_SPEEDUP times faster, replayed on their
streams with every kernel still waiting for its launch (the host call that queued it, paired by
correlation id; or, unpaired, for the gap before it): a step shortens only where the GPU was the
critical path, so a launch-bound job gains little however long its GEMMs are. The memory-bound
kernels (elementwise, normalization) move half the bytes in half precision too: left out, so the
estimate leans low, as it does on Volta and Turing, whose tensor cores are 4-8x CUDA-core FP32
at peak against 2x for TF32 on Ampere and Hopper.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.events import EndTimes, cat_mask, is_device_plane, present_stat
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.quantiles import median
from analyzers.signals.kernel_precision import (
    HALF,
    SINGLE,
    TENSOR_CORES,
    UNKNOWN,
    arch_from_names,
    classify,
)

ID = "no_mixed_precision"
STREAM_KINDS = ("device_compute", "collective", "h2d", "d2h", "d2d")
# Half-precision tensor-core math against TF32's, at peak on A100 and H100 (312 against 156
# dense TFLOPS; 990 against 495): the speed the estimate gives the single-precision math kernels.
HALF_SPEEDUP = 2.0
# Single-precision math under this share of kernel time is not worth a precision change.
MIN_SINGLE_MATH_SHARE = 0.10
# Half-precision math at this share of the math or more: mixed precision is on (some GEMMs stay
# FP32 by design: the loss, softmax, the optimizer's master weights).
HALF_MATH_ON = 0.5
# Without a launch to pair, a kernel that starts within this of the previous one's end on its
# stream waited for it (back-to-back kernels on a queued stream start 1-2 µs apart: Kineto's
# ResNet-50 traces); a later one waited for the host.
QUEUED_GAP_NS = 5_000
# A kernel that waited beyond its launch and its own stream, starting within this of another
# stream's kernel end on its GPU, waited for that kernel (a stream waiting on an event: the
# gradients before their all-reduce, the all-reduce before the update).
DEP_NS = 20_000
# Replays that pass each such wait along (a chain compute -> all-reduce -> update is 2 deep).
PASSES = 4
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
        label = "" if name.startswith("/device:") else f"{name}, "
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
    ready, paired = _ready_times(ctx, k)
    shrink = _step_shrink(k, ready, np.where(single_math, dur / HALF_SPEEDUP, dur))
    saved = shrink / ctx.total_step_ns
    if saved <= 0:
        return None
    devices = max(int(k.groupby("host", observed=True)["plane"].nunique().sum()), 1)
    step_fraction = min(float(dur[single_math].sum()) / devices / ctx.total_step_ns, 1.0)
    single_other = float(dur[kernel & ~math & (precision == SINGLE)].sum()) / total
    n = ctx.n_steps
    queue = _queue_delay_us(k[kernel], ready[kernel], paired)
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


def _ready_times(ctx: Context, k: pd.DataFrame) -> tuple[np.ndarray, bool]:
    """When each kernel could have started: the end of its launch call, the host event of its
    host and correlation id that started last before it (the enclosing op carries the id too,
    and starts first; ids repeat across processes and sessions), or -1 where none pairs; and
    whether most kernels paired."""
    ready = np.full(len(k), -1, np.int64)
    if "correlation_id" not in k:
        return ready, False
    corr = np.asarray(k["correlation_id"], dtype=np.int64)
    if not (corr >= 0).any():
        return ready, False
    ev = ctx.events
    rows, ids = present_stat(ev, "correlation_id")
    on_host = ~cat_mask(ev["plane"], is_device_plane)[rows]
    rows, ids = rows[on_host], ids[on_host]
    if not len(rows):
        return ready, False
    starts = ev["start_ns"].to_numpy(np.int64)
    calls = pd.DataFrame({"host": ev["host"].array.codes[rows], "corr": ids,
                          "start": starts[rows], "end": EndTimes(ev)[rows]}
                         ).sort_values("start", kind="stable")
    kernels = pd.DataFrame({"host": k["host"].array.codes, "corr": corr,
                            "start": k["start_ns"].to_numpy(np.int64),
                            "row": np.arange(len(k))}).sort_values("start", kind="stable")
    paired = pd.merge_asof(kernels, calls, on="start", by=["host", "corr"],
                           direction="backward")
    ok = paired["end"].notna().to_numpy() & (paired["corr"].to_numpy() >= 0)
    ready[paired["row"].to_numpy()[ok]] = paired["end"].to_numpy()[ok].astype(np.int64)
    return ready, bool(ok.mean() >= 0.5)


def _segments(k: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Row order by (step, host, device plane, stream, start), and each row's segment id (one per
    step and stream) in that order."""
    keys = [k["step_idx"].to_numpy(), *(k[c].array.codes for c in ("host", "plane", "line"))]
    order = np.lexsort((k["start_ns"].to_numpy(), *reversed(keys)))
    sorted_keys = np.stack([np.asarray(x)[order] for x in keys])
    new = np.ones(len(order), bool)
    new[1:] = (sorted_keys[:, 1:] != sorted_keys[:, :-1]).any(axis=0)
    return order, np.cumsum(new) - 1


def _segmented_cummax(x: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Running maximum of `x` within each segment (`seg` ids contiguous and ascending): each
    segment lifted above every earlier one."""
    if not len(x):
        return x
    lift = seg * (float(x.max() - x.min()) + 1.0)
    return np.maximum.accumulate(x + lift) - lift


def _replay_ends(ready: np.ndarray, dur: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Each kernel's end when it starts at max(its ready time, the previous kernel's end) on
    its stream (rows in stream order, `seg` ids contiguous): end_i = C_i + max over j <= i in
    the segment of (ready_j - C_(j-1)), C the running sum of durations."""
    c = np.cumsum(dur)
    return c + _segmented_cummax(ready - (c - dur), seg)


def _dependencies(k: pd.DataFrame, order: np.ndarray, start: np.ndarray, ends: np.ndarray,
                  waited: np.ndarray) -> np.ndarray:
    """Per kernel (in `order`), the kernel of another stream of its GPU and step that ended
    last, at most DEP_NS, before it started, for those that `waited`; -1 elsewhere."""
    step = k["step_idx"].to_numpy()[order]
    planes = len(k["plane"].cat.categories)
    device = (k["host"].array.codes.astype(np.int64) * planes + k["plane"].array.codes)[order]
    line = k["line"].array.codes[order]
    rows = np.arange(len(order))
    found = pd.merge_asof(
        pd.DataFrame({"t": start[waited].astype(np.int64), "step": step[waited],
                      "device": device[waited], "row": rows[waited], "line": line[waited]}
                     ).sort_values("t"),
        pd.DataFrame({"t": ends.astype(np.int64), "step": step, "device": device, "dep": rows,
                      "dep_line": line}).sort_values("t"),
        on="t", by=["step", "device"], direction="backward", tolerance=DEP_NS)
    ok = found["dep"].notna().to_numpy() & (found["dep_line"].to_numpy() != found["line"])
    dep = np.full(len(order), -1, np.int64)
    dep[found["row"].to_numpy()[ok]] = found["dep"].to_numpy()[ok].astype(np.int64)
    return dep


def replay(k: pd.DataFrame, ready: np.ndarray, new_dur: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """Each stream event's end (rows of `k`, in_steps rows of device planes) replayed with its
    recorded duration, and with `new_dur`. A kernel starts when its launch returned (`ready`,
    -1 unpaired), its stream's previous kernel ended (plus the gap the GPU left between them),
    and the kernel of another stream it waited for ended: with the recorded durations the
    replay gives back the recorded ends."""
    order, seg = _segments(k)
    start = k["start_ns"].to_numpy(np.int64)[order].astype(np.float64)
    dur = k["dur_ns"].to_numpy(np.int64)[order].astype(np.float64)
    r = ready[order].astype(np.float64)
    ends = start + dur
    first = np.ones(len(order), bool)
    first[1:] = seg[1:] != seg[:-1]
    # Earlier than any start or launch: "no bound".
    floor = float(min(start.min(), r.min())) - 1.0 if len(start) else 0.0
    prev_end = np.full(len(order), floor)
    prev_end[1:] = _segmented_cummax(ends, seg)[:-1]
    prev_end[first] = floor  # what came before a stream's first kernel is another step's
    paired = r >= 0
    launched = np.where(paired, np.minimum(r, start), floor)
    # A kernel that started later than its launch and its stream allowed waited for something
    # else: a kernel of another stream (an event wait: gradients before their all-reduce), or,
    # with no such kernel just before it, the host (an unpaired kernel after a gap).
    waited = start - np.maximum(launched, prev_end) > QUEUED_GAP_NS
    dep = _dependencies(k, order, start, ends, waited)
    has_dep = dep >= 0
    latency = np.where(has_dep, start - ends[np.maximum(dep, 0)], 0.0)
    # Ready times: a launch (paired), none beyond the queue (unpaired, queued), its own start
    # (waited for the host or for something unknown), or its dependency's end plus the same
    # latency (recomputed as the dependency moves).
    base = np.where(waited, start, np.where(paired, launched, floor))
    # The GPU's own 1-2 µs between queued kernels stays after the fix: each kernel keeps the
    # gap before it (replayed without it, the Kineto V100 steps ran 0.2 ms ahead of the trace).
    gap = np.where(waited | first, 0.0, np.clip(start - np.maximum(launched, prev_end), 0, None))
    old = _replay_ends(base, dur + gap, seg)
    new_dur = np.asarray(new_dur, np.float64)[order] + gap
    rd = base.copy()
    for _ in range(PASSES):
        new = _replay_ends(rd, new_dur, seg)
        moved = new[dep[has_dep]] + latency[has_dep]
        if np.allclose(moved, rd[has_dep], rtol=0.0, atol=1.0):
            break
        rd[has_dep] = moved
    new = _replay_ends(rd, new_dur, seg)
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    return old[back], new[back]


def _step_shrink(k: pd.DataFrame, ready: np.ndarray, new_dur: np.ndarray) -> float:
    """ns the steps shorten when the kernels take `new_dur`: per step, the latest end of all its
    streams, replayed with the old durations against the new."""
    old, new = replay(k, ready, new_dur)
    steps = k["step_idx"].to_numpy()
    last_old = pd.Series(old).groupby(steps).max()
    last_new = pd.Series(new).groupby(steps).max()
    return float((last_old - last_new).clip(lower=0).sum())


def _queue_delay_us(k: pd.DataFrame, ready: np.ndarray, paired: bool) -> float | None:
    if not paired:
        return None
    ok = ready >= 0
    delay = k["start_ns"].to_numpy(np.int64)[ok] - ready[ok]
    return median(np.clip(delay, 0, None)) / 1e3 if len(delay) else None
