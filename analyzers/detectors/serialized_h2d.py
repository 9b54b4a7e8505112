"""`serialized_h2d`: per-device host→device input copies issued one after another.

GPU traces: `MemcpyH2D` events on each `/device:GPU:N` plane within a step; if the copies to
different devices never overlap (sum of their durations ≈ the time they cover), they were issued
serially. CPU logical devices: the copies run as `EagerCopyToDevice` / `_EagerConst` / `DeepCopy`
/ `tf.constant` calls on the training thread, one per device, outside the compiled step.
On a CPU-only host the copies and the model share the same cores, so overlapping them can save
only the serialized issuing, not the copy work: the estimate says so.
"""

from __future__ import annotations

import numpy as np

from analyzers.context import Context
from analyzers.events import is_device_plane
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.steps import covered_ns

ID = "serialized_h2d"
OVERLAP_SERIAL = 1.15  # sum/union of per-device copy time at or below this: no real overlap
_HOST_COPY_NAMES = ("EagerCopyToDevice", "EagerLocalExecute: _EagerConst",
                    "EagerLocalExecute: DeepCopy", "tf.constant")


_GPU_REMEDY = {
    "tensorflow": ("Feed devices from a distributed dataset (strategy."
                   "experimental_distribute_dataset or distribute_datasets_from_function) with "
                   "prefetch to device (tf.data.experimental.prefetch_to_device / "
                   "experimental_fetch_to_device), instead of copying per replica from a Python "
                   "loop; use pinned host memory."),
    "pytorch": ("Give each GPU its own process and DataLoader (DistributedDataParallel with a "
                "DistributedSampler) instead of scattering one batch from a single process "
                "(DataParallel); load with pin_memory=True and copy with .to(device, "
                "non_blocking=True), prefetching the next batch on a side CUDA stream so the "
                "copy overlaps compute."),
}


def _is_host_copy(name: str) -> bool:
    return name in _HOST_COPY_NAMES or name.startswith("_Send input")


def _gpu(ctx: Context) -> Finding | None:
    h2d = ctx.in_steps(kinds=("h2d",), plane=is_device_plane,
                       columns=("host", "plane", "name", "start_ns", "end_ns", "dur_ns"))
    if h2d.empty:
        return None
    # Serial issuing happens inside one process: copies of separate processes (DDP ranks, each
    # its own trace file and host) are not one after another by anyone's choice. The process
    # feeding the most devices is the one judged.
    per_host = h2d.groupby("host", observed=True)["plane"].nunique()
    if per_host.max() < 2:
        return None
    h2d = h2d[h2d["host"] == per_host.idxmax()]
    # In-step intervals never cross a step boundary: one union over all steps is their sum.
    total = float(h2d["dur_ns"].sum())
    union = covered_ns(h2d["start_ns"].to_numpy(), h2d["end_ns"].to_numpy())
    ratio = total / union if union else 1.0
    if ratio > OVERLAP_SERIAL:
        return None
    n_dev = int(per_host.max())
    exposed = ctx.fractions.get("copy_h2d", 0.0)
    saved = exposed * (1 - 1 / n_dev)
    return Finding(
        id=ID,
        title=f"Host→device input copies to {n_dev} GPUs run one after another",
        step_fraction=exposed,
        speedup=speedup_from_saving(saved),
        evidence=[f"{len(h2d) / ctx.n_steps:.0f} MemcpyH2D per step over {n_dev} devices; "
                  f"their durations sum to {ratio:.2f}x the time they cover (1.0 = fully serial)",
                  f"exposed H2D copy time: {exposed:.1%} of the step"],
        remedy=_GPU_REMEDY[ctx.framework],
        numbers={"copies_per_step": round(len(h2d) / ctx.n_steps, 1), "devices": n_dev,
                 "overlap_ratio": round(ratio, 3), "exposed_fraction": round(exposed, 4)},
        top_events=heaviest_events(h2d),
        config_changes={"input_copy": "distributed"} if ctx.config else {},
    )


def _host(ctx: Context) -> Finding | None:
    if ctx.main_line is None:
        return None
    copies = ctx.in_steps(line=ctx.main_line, name=_is_host_copy,
                          columns=("host", "name", "start_ns", "end_ns", "dur_ns"))
    n_dev = ctx.devices_per_host
    # Each worker copies to its own devices: counts and time are one worker's.
    worker_steps = ctx.worker_steps(copies["host"])
    per_step = len(copies) / worker_steps
    # Eager ops copy their inputs too; only a burst of explicit per-device copies counts.
    consts = copies[copies["name"].isin(_HOST_COPY_NAMES[1:])]
    if n_dev < 2 or len(consts) / worker_steps < n_dev:
        return None
    host = copies["host"].array.codes
    hosts = np.unique(host)
    s, e = copies["start_ns"].to_numpy(), copies["end_ns"].to_numpy()
    covered = sum(covered_ns(s[host == h], e[host == h]) for h in hosts) / len(hosts)
    share = covered / ctx.total_step_ns if ctx.total_step_ns else 0.0
    # CPU-only: the copy work stays; only the serial issuing overlaps away.
    saved = share * (1 - 1 / n_dev)
    return Finding(
        id=ID,
        title=f"Per-device input copies to {n_dev} devices issued one after another from Python",
        step_fraction=share,
        speedup=speedup_from_saving(saved),
        evidence=[f"{per_step:.0f} copy/constant calls per step on the training thread for "
                  f"{n_dev} devices, {share:.1%} of step time",
                  "CPU-only host: copies and compute share the same cores, so overlapping the "
                  "copies saves only their serialized issuing (estimate uses "
                  f"{1 - 1 / n_dev:.0%} of the copy time)"],
        remedy=("Distribute the dataset across replicas (tf.distribute "
                "experimental_distribute_dataset / distribute_datasets_from_function) with "
                "prefetch to device instead of per-replica tf.constant/identity copies in Python."),
        numbers={"copies_per_step": round(per_step, 1), "devices": n_dev,
                 "copy_fraction": round(share, 4)},
        top_events=heaviest_events(copies),
        config_changes={"input_copy": "distributed"} if ctx.config else {},
    )


def detect(ctx: Context) -> Finding | None:
    return _gpu(ctx) if ctx.has_accelerator else _host(ctx)
