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

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.detectors import claims, serialized_h2d
from analyzers.events import is_device_plane
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.copy_back import before_first_copy_back
from analyzers.steps import covered_ns, covered_outside

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
_BESIDE = ("Move the ops that run on the host beside the copy ({ops}) into the input pipeline "
           "(dataset.map before the prefetch) or onto the GPU.")


def _bytes(copies: pd.DataFrame) -> float:
    """Bytes the copies moved: the `bytes` stat where the trace has one (-1 where not), else the
    size in TF's `memcpy_details` text (`size:100663296 dest:0 async:1`)."""
    n = np.full(len(copies), -1.0)
    if "bytes" in copies:
        n = np.asarray(copies["bytes"], dtype=float)
    if "memcpy_details" in copies:
        sizes = (copies["memcpy_details"].astype(str).str.extract(_SIZE, expand=False)
                 .astype(float).to_numpy())
        n = np.where(n >= 0, n, sizes)
    return float(np.nansum(np.where(n >= 0, n, np.nan)))


def detect(ctx: Context) -> Finding | None:
    if not ctx.has_accelerator or claims(serialized_h2d, ctx):
        return None
    cols = ("host", "step_idx", "start_ns", "end_ns", "dur_ns",
            *(c for c in ("bytes", "memcpy_details") if c in ctx.events))
    h2d = ctx.in_steps(kinds=("h2d",), plane=is_device_plane, columns=cols)
    total = float(ctx.total_step_ns)
    if h2d.empty or total <= 0:
        return None
    h2d = h2d[before_first_copy_back(ctx, h2d)]
    kernels = ctx.kernel_spans
    cs, ce = h2d["start_ns"].to_numpy(), h2d["end_ns"].to_numpy()
    copy_ns = covered_outside(cs, ce, *kernels)
    if copy_ns / total < MIN_SHARE:
        return None
    # Host ops overlapping the copies, themselves uncovered by kernels.
    ops = ctx.in_steps(kinds=("host_op",), plane=lambda p: not is_device_plane(p),
                       columns=("host", "name", "step_idx", "start_ns", "end_ns", "dur_ns"))
    ops = ops[before_first_copy_back(ctx, ops)]
    order = np.argsort(cs)
    s_sorted, e_max = cs[order], np.maximum.accumulate(ce[order])
    k = np.searchsorted(s_sorted, ops["end_ns"].to_numpy(), side="left") - 1
    beside = (k >= 0) & (e_max[np.maximum(k, 0)] > ops["start_ns"].to_numpy())
    ops = ops[beside]
    os_, oe = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    union_ns = covered_outside(np.concatenate([cs, os_]), np.concatenate([ce, oe]), *kernels)
    host_ns = union_ns - copy_ns
    beside_ns = covered_outside(os_, oe, *kernels)
    kernel_ns = covered_ns(*kernels)
    saved = min(union_ns, kernel_ns) / total
    if saved < MIN_SHARE:
        return None
    n = ctx.worker_steps(h2d["host"])
    step_ms = ctx.steps.median_step_ns() / 1e6
    nbytes = _bytes(h2d)
    copy_busy = covered_ns(cs, ce)
    gbps = nbytes / copy_busy if copy_busy and nbytes else 0.0
    evidence = [
        f"{len(h2d) / n:.0f} host→device copies per step before any result comes back"
        + (f", {nbytes / n / 1e6:,.1f} MB per step at {gbps:.1f} GB/s" if nbytes else "")
        + f": {copy_ns / total:.1%} of the step with no kernel running "
        f"({copy_ns / total * step_ms:.2f} ms of a {step_ms:.1f} ms step)"]
    if gbps and gbps < PAGEABLE_GBPS:
        evidence.append(f"{gbps:.1f} GB/s is a pageable copy's rate (pinned memory over PCIe: "
                        "12-25 GB/s)")
    names: list[str] = []
    if host_ns > 0:
        top = ops.groupby("name", observed=True)["dur_ns"].sum().sort_values(ascending=False)
        names = [str(x) for x in top.index[:3]]
        evidence.append(f"beside the copies, {len(ops) / n:.0f} host op(s) per step run with no "
                        f"kernel either ({', '.join(names)}): {host_ns / total:.1%} more of the "
                        "step, counted here because the GPU waits for both")
    if saved * total < union_ns:
        evidence.append(f"a prefetched copy hides under the previous step's kernels, "
                        f"{kernel_ns / total:.1%} of the step: the estimate is capped there")
    remedy = _REMEDY[ctx.framework] + (" " + _BESIDE.format(ops=", ".join(names))
                                       if names else "")
    return Finding(
        id=ID,
        title="The input batch is copied to the GPU inside the step while the GPU waits",
        step_fraction=union_ns / total,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=remedy,
        numbers={"copy_fraction": round(copy_ns / total, 4),
                 "host_fraction": round(beside_ns / total, 4),
                 "copies_per_step": round(len(h2d) / n, 1),
                 "mb_per_step": round(nbytes / n / 1e6, 3),
                 "gb_per_s": round(gbps, 2)},
        top_events=heaviest_events(ops) if names else [],
        # The reference trainer's serial copies are this on a single GPU.
        config_changes=({"input_copy": "distributed"}
                        if ctx.config and ctx.config.get("input_copy") == "serial" else {}),
    )
