"""`collective_overhead`: all-reduce / all-to-all / all-gather time is a large share of the step.

Signals: NCCL kernels on GPU planes (`ncclKernel_*`, `ncclDevKernel_*`), `Collective*` and
`Nccl*` ops, XLA `all-reduce`/`all-to-all` thunks, ops under `all_reduce/`, `all_to_all/` name
scopes, and `_Send`/`_Recv` between logical devices. Only exposed time counts (the breakdown
gives compute priority), so collectives hidden under compute cost nothing here.
On a CPU-only host the "devices" share the cores: fewer devices removes the exchange but not the
arithmetic, so the estimate takes the share a smaller device count would save. Several hosts (one
trace file each: multi-worker jobs) exchange over the network, which overlap or fewer hosts win
back whole (docs/trace-signals.md, "Jobs that are not ours", multi-worker). So does a trace
holding only some of a collective's participants (one worker or rank profiled alone: its group
size from `group_size` stats, or collectives on a single device): its collective time includes
any wait for the slowest peer, an upper bound (docs/trace-signals.md, "One worker's trace").
"""

from __future__ import annotations

import re

import numpy as np

from analyzers.context import Context
from analyzers.detectors import claims, run_detector, straggler_worker
from analyzers.events import GLOO_PREFIX
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.scaling import scaling_points
from analyzers.steps import covered_ns

ID = "collective_overhead"
MIN_SHARE = 0.03
MIN_LEFT = 0.005  # a straggler's wait left to straggler_worker, as a share of step time
_REMEDY = {
    "tensorflow": ("Use fewer devices for a model this small (seed 000: 4 GPUs beat 8), or a "
                   "larger per-device batch so compute hides the exchange; fuse gradients into "
                   "one all-reduce; keep the all-to-all payload small (column-wise split only "
                   "when tables are large)."),
    "pytorch": ("Use fewer GPUs for a model this small, or a larger per-GPU batch so compute "
                "hides the exchange; let DDP overlap the all-reduce with backward (tune "
                "bucket_cap_mb, gradient_as_bucket_view=True) or all-reduce less often "
                "(no_sync() over gradient-accumulation steps); compress what is sent "
                "(register_comm_hook with fp16_compress_hook / bf16_compress_hook) and keep "
                "embedding all-to-all payloads small."),
}
# PyTorch's CPU collectives (gloo) run in one process per rank, each rank a device here.
_TORCH_CPU_REMEDY = (
    "Use fewer ranks for a model this small, or a larger per-rank batch so backward hides the "
    "exchange: DDP all-reduces gloo buckets while backward runs (tune bucket_cap_mb), can "
    "all-reduce less often (no_sync() over gradient-accumulation steps) and compress what is "
    "sent (register_comm_hook with fp16_compress_hook). Ranks on one machine share its cores "
    "and memory: one process with more intra-op threads (torch.set_num_threads) does the same "
    "arithmetic without the exchange.")
_MULTI_HOST_REMEDY = (
    "Train on fewer hosts: one node with more devices beats several joined by the network "
    "(seed 000: two 4-GPU nodes were slower than one, as all-reduce and all-gather went over "
    "the network). Otherwise pack the gradients into fewer, larger all-reduces "
    "(tf.distribute.experimental.CommunicationOptions(bytes_per_pack=...), "
    "implementation=NCCL on GPUs), and use a larger per-worker batch so compute outweighs the "
    "exchange.")
_SAME_MACHINE_REMEDY = (
    "Run one process per machine: MirroredStrategy over that machine's devices does the same "
    "all-reduce in memory instead of over RPC between worker processes that share its cores; "
    "keep MultiWorkerMirroredStrategy for workers on separate machines.")
# Only the peers' traces tell the exchange from a wait for the slowest of them, which
# straggler_worker reads once they are in the same run folder.
_PEERS_REMEDY = {
    "tensorflow": (
        "First trace every worker in one run: tf.profiler.experimental.server.start(port) in "
        "each, then one tf.profiler.experimental.client.trace('grpc://host1:port,"
        "grpc://host2:port', logdir, duration_ms=2000) (or TensorBoard's Capture Profile with "
        "the addresses comma-separated) writes each worker's <host>_<port>.xplane.pb into one "
        "run folder, where straggler_worker tells a slow worker from the exchange. "),
    "pytorch": (
        "First profile every rank, not rank 0 alone: torch.profiler.tensorboard_trace_handler"
        "(dir) on each writes one trace file per rank into the same folder, where "
        "straggler_worker tells a slow rank from the exchange. "),
}
_HOROVOD_REMEDY = (
    "Horovod: fuse more gradients per exchange (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME, "
    "or horovodrun --autotune), compress them (hvd.DistributedOptimizer(opt, "
    "compression=hvd.Compression.fp16)) and exchange less often "
    "(backward_passes_per_step=N); embedding gradients (IndexedSlices) are all-gathered whole "
    "every step: sparse_as_dense=True for small tables, large ones split over the workers with "
    "hvd.alltoall (seed 001's hybrid parallelism). Fewer workers with more devices each beat "
    "several joined by the network (seed 000).")
# Collectives that exchange with other participants, by op type or kernel name: TF's
# Collective* and Nccl* ops, Horovod's ops, NCCL kernels, PyTorch's process-group calls (and
# gloo's, by name), XLA's collective HLOs. On a trace of one device they mean peers in other
# processes: TF issues none for a group of one (a lone MultiWorkerMirroredStrategy worker). Not
# the all_reduce/ name scopes or _Send/_Recv, which one process's own devices show too.
_PEER_COLLECTIVE = re.compile(
    r"(?i)^(Collective(Reduce|Gather|AllToAll|Bcast|Permute|ReduceScatter)|Nccl|Horovod|"
    r"record_param_comms$|(all-reduce|all-gather|all-to-all|reduce-scatter|"
    r"collective-permute)(-start|-done)?(\.\d+)?$)")
_HOROVOD = re.compile(r"^Horovod(Allreduce|Allgather|Alltoall|Broadcast|Reducescatter)")


def _peers(ctx: Context) -> tuple[int | None, bool]:
    """(the collective group's size when the trace tells it, whether some of its members are
    outside this trace): a job profiled on one worker only (docs/trace-signals.md, "One
    worker's trace")."""
    size, n_dev = ctx.collective_group_size, ctx.n_devices
    if size is not None:
        return size, size > n_dev
    if n_dev >= 2:
        return None, False
    return None, (any(_PEER_COLLECTIVE.search(t) for t in ctx.present("op_type"))
                  or any(n.startswith(GLOO_PREFIX) for n in ctx.present("name")))


def _peer_wait(ctx: Context) -> float | None:
    """The share of the workers' collective time that passes while another worker still
    computes: waiting for a slower peer, not exchanging. The breakdown already leaves that time
    to compute (it is exposed nowhere); this says which of the two a worker's collectives are."""
    ev = ctx.in_steps(kinds=("collective", "host_op", "device_compute"),
                      columns=("host", "kind", "start_ns", "end_ns"))
    coll = (ev["kind"] == "collective").to_numpy()
    host = ev["host"].array.codes  # compared as codes: no string per row
    start, end = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    total = waiting = 0
    for h in np.unique(host[coll]):  # a host without collectives adds nothing
        mine, peers = coll & (host == h), ~coll & (host != h)
        # Masked copies are fresh: sorted in place.
        a = covered_ns(start[mine], end[mine], overwrite=True)
        b = covered_ns(start[peers], end[peers], overwrite=True)
        both = covered_ns(start[mine | peers], end[mine | peers], overwrite=True)
        total, waiting = total + a, waiting + a + b - both
    return waiting / total if total else None


def detect(ctx: Context) -> Finding | None:
    share = ctx.fractions.get("collective", 0.0)
    if not ctx.ps_hosts:
        # A parameter-server job's sends are its exchange with the servers, and
        # `parameter_server_wait` counts them in the workers' wait.
        share += ctx.fractions.get("copy_d2d", 0.0)
    # Workers waiting in the all-reduce for a straggler that is not computing (its input, its
    # Python) are in collectives while nobody computes: that time is the straggler's finding,
    # with the straggler's remedy, not the exchange's.
    exposed = share
    straggling = run_detector(straggler_worker, ctx)
    left_to_straggler = (straggling.numbers["collective_fraction"]
                         if claims(straggler_worker, ctx) else 0.0)
    if left_to_straggler < MIN_LEFT:  # gaps of a few µs between ops are no one's wait
        left_to_straggler = 0.0
    share = max(share - left_to_straggler, 0.0)
    n_dev = ctx.n_devices
    size, outside = _peers(ctx)
    if share < MIN_SHARE or (n_dev < 2 and not outside):
        return None
    hosts = ctx.n_hosts
    target = max(1, n_dev // 2)
    # GPU: exposed exchange time is what overlap or fewer devices win back. Several hosts, or
    # peers in other processes: the exchange is network (or RPC) time, won back the same way.
    # CPU-only, one host: the exchange becomes local gathers on the same cores; only the
    # reduction over the replicas' copies ((n-1)/n of it) is redundant, and halving the devices
    # removes half of that.
    whole = ctx.has_accelerator or hosts > 1 or outside
    saved = share if whole else share * (1 - target / n_dev) * (n_dev - 1) / n_dev
    coll = ctx.in_steps(kinds=("collective", "d2d"), columns=("name", "dur_ns"))
    step_ms = ctx.steps.median_step_ns() / 1e6
    changes = {}
    if ctx.config and hosts == 1 and not outside:
        changes = {"devices": target}
    # GPU processes on one machine exchange over NVLink/PCIe, not RPC: only CPU workers count.
    machine = None if ctx.has_accelerator else ctx.one_machine
    group = f"{size} participants" if size else "participants (at least 2)"
    if outside:
        hw = (f"this trace holds {n_dev} of the collective group's {group}: the others run in "
              "processes whose traces are not in this logdir")
    elif machine:
        hw = (f"{hosts} worker processes on one machine ({machine}), {ctx.devices_per_host} "
              "device(s) each: they share its cores and exchange over RPC")
    elif hosts > 1:
        hw = (f"{hosts} workers x {ctx.devices_per_host} device(s), a trace file each "
              f"({', '.join(ctx.hosts[:4])}{', ...' if hosts > 4 else ''}): the exchange runs "
              "between them, over the network when they are separate machines")
    elif ctx.has_accelerator:
        hw = "GPU collectives exposed (not overlapped with compute)"
    else:
        hw = (f"{n_dev} logical devices on one CPU host: the exchange is memory copying on the "
              "cores the model uses")
    evidence = [f"exposed collective/exchange time {exposed:.1%} of step "
                f"({exposed * step_ms:.1f} ms of {step_ms:.1f} ms)", hw]
    numbers: dict = {"exposed_fraction": round(exposed, 4), "devices": n_dev, "hosts": hosts}
    if size is not None:
        numbers["group_size"] = size
    if outside:
        evidence.append("the time includes any wait for the slowest of them, which only their "
                        "traces tell apart from the exchange: the estimate is an upper bound")
        numbers["peers_outside"] = True
    if left_to_straggler:
        straggler = straggling.numbers["straggler"]
        evidence.append(f"of which {left_to_straggler:.1%} of the step is the workers waiting in "
                        f"it for {straggler} while nobody computes (straggler_worker): "
                        f"{share:.1%} is the exchange's")
        numbers["left_to_straggler"] = round(left_to_straggler, 4)
    wait = _peer_wait(ctx) if hosts > 1 else None
    if wait is not None:
        numbers["peer_wait_fraction"] = round(wait, 4)
        rest = ("the exchange itself" if not left_to_straggler else
                f"the exchange itself and the wait for {straggler} above")
        evidence.append(f"{wait:.0%} of the workers' collective time passes while another worker "
                        f"still computes (waiting for a slower peer); the rest is {rest}")
    remedy = (_TORCH_CPU_REMEDY if ctx.framework == "pytorch" and not ctx.has_accelerator
              else _REMEDY[ctx.framework])
    if any(_HOROVOD.search(t) for t in ctx.present("op_type")):
        remedy = _HOROVOD_REMEDY
    elif (hosts > 1 or outside) and ctx.framework == "tensorflow":
        remedy = _SAME_MACHINE_REMEDY if machine else _MULTI_HOST_REMEDY
    if outside:
        remedy = _PEERS_REMEDY[ctx.framework] + remedy
    points = scaling_points(ctx.run.run_dir)
    if points:
        best = max(points, key=lambda p: p.samples_per_s)
        evidence.append("scaling over the runs beside this one: " + ", ".join(
            f"{p.devices} dev {p.samples_per_s:,.0f}/s ({p.efficiency:.0%})" for p in points)
            + f"; fastest with {best.devices} devices")
        numbers["scaling"] = [vars(p) for p in points]
        if ctx.config and best.devices < n_dev:
            changes = {"devices": best.devices}
    where = (f"on {n_dev} devices{f' of {hosts} workers' if hosts > 1 else ''}" if not outside
             else f"in a group of {size}, {n_dev} in this trace" if size
             else "with peers outside this trace")
    return Finding(
        id=ID,
        title=f"Collectives and cross-device exchange take {share:.0%} of the step {where}",
        step_fraction=share,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=remedy,
        numbers=numbers,
        top_events=heaviest_events(coll),
        config_changes=changes,
    )
