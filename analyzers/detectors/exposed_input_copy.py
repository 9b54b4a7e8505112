"""`exposed_input_copy`: the batch crosses to the GPU inside the step while the GPU waits.

A dataset iterated on the host hands each batch to the step, which copies it to the GPU before
the first kernel can run (TF: the iterator output's `_Send` holds the `MemcpyH2D`; PyTorch: a
`.to(device)` in the loop). Large batches from pageable memory make that copy a large share of
the step: in real Keras 2.4 GPU traces of an image model (docs/trace-signals.md, "Input copies
inside the step") a 100 MB float32 batch took 29 ms of a 76 ms step at 3.5 GB/s, the GPU idle.
Prefetching to the device moves the copy under the previous step's kernels.

Signals (accelerator traces): host→device copies on the device planes started before the step's
first device→host copy (later ones carry a bounce's results: `host_device_pingpong`), their
time while no kernel runs. Host ops running beside those copies, also with no kernel, hold the
GPU up with them (fixing either alone would save only what the other does not cover), so they
are counted here too and named. Several GPUs fed one after another are `serialized_h2d`'s.

Estimate: that union, bounded by the kernels' time per step (what a prefetched copy can hide
under).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.detectors import claims, serialized_h2d
from analyzers.events import is_device_plane
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.copy_back import before_first_copy_back
from analyzers.signals.embedding_ops import embedding_host_ops
from analyzers.signals.preprocessing_ops import is_preprocessing_op
from analyzers.steps import merge_intervals

ID = "exposed_input_copy"
MIN_SHARE = 0.03
# Host→device copies from pinned memory run at 12-25 GB/s over PCIe 3-4 x16; pageable ones are
# staged through a pinned buffer by the driver and reach a fraction of that.
PAGEABLE_GBPS = 8.0
_SIZE = re.compile(r"size:(\d+)")
_REMEDY = {
    "tensorflow": (
        "Copy the next batch to the GPU while the current step runs: end the pipeline with "
        "dataset.apply(tf.data.experimental.prefetch_to_device(\"/gpu:0\")), or iterate a "
        "distributed dataset (strategy.experimental_distribute_dataset, which prefetches to "
        "the devices); send fewer bytes (uint8 images, int32 ids, float16 features, cast on "
        "the GPU)."),
    "pytorch": (
        "Copy the next batch while the current step runs: DataLoader(pin_memory=True) and "
        ".to(device, non_blocking=True) on a side CUDA stream one batch ahead (a prefetcher), "
        "and send fewer bytes (uint8 images, int32 ids, half-precision features, cast on the "
        "GPU)."),
}
_BESIDE = {
    "tensorflow": ("Move the ops that run on the host beside the copy ({ops}) into the input "
                   "pipeline (dataset.map before the prefetch) or onto the GPU."),
    "pytorch": ("Move the host work that runs beside the copy ({ops}) into the DataLoader's "
                "workers (the dataset's __getitem__ or collate_fn) or onto the GPU."),
}


def _bytes(copies: pd.DataFrame) -> float:
    """Bytes the copies moved, from the size in TF's `memcpy_details` text (`size:100663296
    dest:0 async:1`), read once per distinct text; copies without one count nothing."""
    if "memcpy_details" not in copies:
        return 0.0
    details = copies["memcpy_details"]
    sizes = details.cat.categories.to_series().str.extract(_SIZE, expand=False).astype(float)
    per_row = sizes.to_numpy()[details.array.codes]
    return float(np.nansum(np.where(details.array.codes >= 0, per_row, np.nan)))


def _beside(ops: pd.DataFrame, cs: np.ndarray, ce: np.ndarray) -> np.ndarray:
    """Per op, whether it overlaps some copy [cs, ce)."""
    ms, me = merge_intervals(cs, ce)
    k = np.searchsorted(ms, ops["end_ns"].to_numpy(), side="left") - 1
    return (k >= 0) & (me[np.maximum(k, 0)] > ops["start_ns"].to_numpy()) if len(ms) else (
        np.zeros(len(ops), dtype=bool))


def _counted_elsewhere(ctx: Context) -> Callable[[str], bool]:
    """Whether a host op is one other detectors count on their own: a preprocessing op
    (preprocessing_in_step) or an embedding lookup (embeddings_on_host)."""
    embedding = set(embedding_host_ops(ctx)["name"].astype(str))
    return lambda name: name in embedding or is_preprocessing_op(name)


def detect(ctx: Context) -> Finding | None:
    if not ctx.has_accelerator or claims(serialized_h2d, ctx):
        return None
    cols = ("host", "step_idx", "start_ns", "end_ns", "dur_ns",
            *(c for c in ("memcpy_details",) if c in ctx.events))
    h2d = ctx.in_steps(kinds=("h2d",), plane=is_device_plane, columns=cols)
    if h2d.empty or ctx.total_step_ns <= 0:
        return None
    h2d = h2d[before_first_copy_back(ctx, h2d)]
    copy_share = ctx.kernel_idle_share(h2d)
    if copy_share < MIN_SHARE:
        return None
    # Host ops overlapping the copies (other detectors' own ops aside), with no kernel either.
    cs, ce = h2d["start_ns"].to_numpy(), h2d["end_ns"].to_numpy()
    elsewhere = _counted_elsewhere(ctx)
    ops = ctx.in_steps(kinds=("host_op",), plane=lambda p: not is_device_plane(p),
                       name=lambda n: not elsewhere(n),
                       columns=("host", "name", "step_idx", "start_ns", "end_ns", "dur_ns"))
    ops = ops[before_first_copy_back(ctx, ops)]
    ops = ops[_beside(ops, cs, ce)]
    union = ctx.kernel_idle_share(h2d, ops)
    beside = ctx.kernel_idle_share(ops)
    kernel_share = ctx.kernel_idle_share(ctx.kernels, kernels=False)
    saved = min(union, kernel_share)
    if saved < MIN_SHARE:
        return None
    n = ctx.worker_steps(h2d["host"])
    step_ms = ctx.steps.median_step_ns() / 1e6
    nbytes = _bytes(h2d)
    busy_ns = float(h2d["dur_ns"].sum())
    gbps = nbytes / busy_ns if busy_ns and nbytes else 0.0
    evidence = [
        f"{len(h2d) / n:.0f} host→device copies per step before any result comes back"
        + (f", {nbytes / n / 1e6:,.1f} MB per step at {gbps:.1f} GB/s" if nbytes else "")
        + f": {copy_share:.1%} of the step with no kernel running "
        f"({copy_share * step_ms:.2f} ms of a {step_ms:.1f} ms step)"]
    if gbps and gbps < PAGEABLE_GBPS:
        evidence.append(f"{gbps:.1f} GB/s is a pageable copy's rate (pinned memory over PCIe: "
                        "12-25 GB/s)")
    top_events = heaviest_events(ops)
    names = [t["name"] for t in top_events[:3]]
    if names:
        evidence.append(f"beside the copies, {len(ops) / n:.0f} host op(s) per step run with no "
                        f"kernel either ({', '.join(names)}): {union - copy_share:.1%} more of "
                        "the step, counted here because the GPU waits for both")
    if saved < union:
        evidence.append(f"a prefetched copy hides under the previous step's kernels, "
                        f"{kernel_share:.1%} of the step: the estimate is capped there")
    remedy = _REMEDY[ctx.framework] + (" " + _BESIDE[ctx.framework].format(ops=", ".join(names))
                                       if names else "")
    return Finding(
        id=ID,
        title="The input batch is copied to the GPU inside the step while the GPU waits",
        step_fraction=union,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=remedy,
        numbers={"copy_fraction": round(copy_share, 4),
                 "host_fraction": round(beside, 4),
                 "copies_per_step": round(len(h2d) / n, 1),
                 "mb_per_step": round(nbytes / n / 1e6, 3),
                 "gb_per_s": round(gbps, 2)},
        top_events=top_events,
        # The reference trainer's serial copies are this on a single GPU.
        config_changes=({"input_copy": "distributed"}
                        if ctx.config and ctx.config.get("input_copy") == "serial" else {}),
    )
