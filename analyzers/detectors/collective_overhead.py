"""`collective_overhead`: all-reduce / all-to-all / all-gather time is a large share of the step.

Signals: NCCL kernels on GPU planes (`ncclKernel_*`, `ncclDevKernel_*`), `Collective*` and
`Nccl*` ops, XLA `all-reduce`/`all-to-all` thunks, ops under `all_reduce/`, `all_to_all/` name
scopes, and `_Send`/`_Recv` between logical devices. Only exposed time counts (the breakdown
gives compute priority), so collectives hidden under compute cost nothing here.
On a CPU-only host the "devices" share the cores: fewer devices removes the exchange but not the
arithmetic, so the estimate takes the share a smaller device count would save.
"""

from __future__ import annotations

from analyzers.context import Context
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.scaling import scaling_points

ID = "collective_overhead"
MIN_SHARE = 0.03
_REMEDY = {
    "tensorflow": ("Use fewer devices for a model this small (seed 000: 4 GPUs beat 8), or a "
                   "larger per-device batch so compute hides the exchange; fuse gradients into "
                   "one all-reduce; keep the all-to-all payload small (column-wise split only "
                   "when tables are large)."),
    # PyTorch's CPU collectives (gloo) run in one process per rank, so a PyTorch trace with two
    # or more devices here is a GPU one.
    "pytorch": ("Use fewer GPUs for a model this small, or a larger per-GPU batch so compute "
                "hides the exchange; let DDP overlap the all-reduce with backward (tune "
                "bucket_cap_mb, gradient_as_bucket_view=True) or all-reduce less often "
                "(no_sync() over gradient-accumulation steps); compress what is sent "
                "(register_comm_hook with fp16_compress_hook / bf16_compress_hook) and keep "
                "embedding all-to-all payloads small."),
}


def detect(ctx: Context) -> Finding | None:
    share = ctx.fractions.get("collective", 0.0) + ctx.fractions.get("copy_d2d", 0.0)
    n_dev = ctx.n_devices
    if share < MIN_SHARE or n_dev < 2:
        return None
    target = max(1, n_dev // 2)
    # GPU: exposed exchange time is what overlap or fewer devices win back. CPU-only: the
    # exchange becomes local gathers on the same cores; only the reduction over the replicas'
    # copies ((n-1)/n of it) is redundant, and halving the devices removes half of that.
    saved = share if ctx.has_accelerator else share * (1 - target / n_dev) * (n_dev - 1) / n_dev
    coll = ctx.in_steps(kinds=("collective", "d2d"), columns=("name", "dur_ns"))
    step_ms = ctx.steps.median_step_ns() / 1e6
    changes = {}
    if ctx.config:
        changes = {"devices": target}
    hw = ("GPU collectives exposed (not overlapped with compute)" if ctx.has_accelerator else
          f"{n_dev} logical devices on one CPU host: the exchange is memory copying on the "
          "cores the model uses")
    evidence = [f"exposed collective/exchange time {share:.1%} of step "
                f"({share * step_ms:.1f} ms of {step_ms:.1f} ms)", hw]
    points = scaling_points(ctx.run.run_dir)
    numbers = {"exposed_fraction": round(share, 4), "devices": n_dev}
    if points:
        best = max(points, key=lambda p: p.samples_per_s)
        evidence.append("scaling over the runs beside this one: " + ", ".join(
            f"{p.devices} dev {p.samples_per_s:,.0f}/s ({p.efficiency:.0%})" for p in points)
            + f"; fastest with {best.devices} devices")
        numbers["scaling"] = [vars(p) for p in points]
        if ctx.config and best.devices < n_dev:
            changes = {"devices": best.devices}
    return Finding(
        id=ID,
        title=f"Collectives and cross-device exchange take {share:.0%} of the step on {n_dev} "
              "devices",
        step_fraction=share,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=_REMEDY[ctx.framework],
        numbers=numbers,
        top_events=heaviest_events(coll),
        config_changes=changes,
    )
