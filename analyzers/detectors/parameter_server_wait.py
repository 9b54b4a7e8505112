"""`parameter_server_wait`: the workers of a parameter-server job wait for the servers in each step.

Signal (docs/trace-signals.md, "Parameter servers"): under ParameterServerStrategy (TF2) or a TF1
job with `replica_device_setter`, the variables live on the "ps" tasks, and each step function a
worker runs is partitioned: the lookups, reads and updates of those variables run on the servers,
the rest on the worker, joined by `_Send`/`_Recv` pairs over RPC. The worker's call ends only when
the servers' part has run, so inside the call, the time none of the worker's own ops covers is
its wait for the servers: their ops and the transfers both ways. The hosts' roles come from the
sends' rendezvous keys (`Context.host_tasks`).

Causes, read from what the servers do during the steps:
- `dense_updates`: the tables' gradients reach the servers dense (`UnsortedSegmentSum`, the op
  that turns an IndexedSlices into a tensor, on a worker or a server), so each step updates every
  row of every table and sends table-sized tensors: a Keras 3 Adam on the tables, or a gradient
  passed through tf.convert_to_tensor.
- `unbalanced`: with several servers, one is busy UNBALANCED times as long as the least busy:
  whole tables placed on one server each, without a variable partitioner.
- `transfer`: neither, and the servers are idle for most of the wait: moving tensors.
- `servers_busy`: neither, and the servers' own work fills the wait.

Estimate: with sparse updates the wait shrinks to the lookups' round trips, taken as
SPARSE_ROUND_TRIPS times the servers' row ops (a gather, a scatter back, the transfers); the
worker's own dense work on the gradients goes too (its `UnsortedSegmentSum`s and the ops whose
outputs it sends to the servers). Balanced servers would each be as busy as their mean: the
busiest one's excess is saved when the servers run on separate machines; processes sharing one
machine's cores gain nothing from it. The last two causes are a sparse job's round trips, whose
cost depends on the cluster (more servers, a faster network): the finding reports the wait and
estimates no saving, so it stays `low` (the sparse jobs of tests/analyzers/foreign_jobs.py wait
27-39% of a step on one 2-core machine).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzers.context import PS_JOB, Context
from analyzers.events import cat_mask
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.executions import executions
from analyzers.steps import covered_ns, covered_outside

ID = "parameter_server_wait"
MIN_SHARE = 0.05
# What a worker does itself: anything but the framework's containers and its remote transfers.
_OWN_KINDS = ("host_op", "input_wait", "input_work", "convert", "h2d", "d2h", "collective",
              "launch", "sync", "device_compute")
_SERVER_KINDS = ("host_op", "d2d")
_DENSIFY = re.compile(r"(?:^|[/:])UnsortedSegmentSum$")
# Row-wise variable access: what a server does for a sparse step.
_ROW_OPS = re.compile(r":(?:ResourceGather\w*|ResourceScatter\w*|ResourceSparseApply\w*|"
                      r"GatherV2|Unique\w*)$")
SPARSE_ROUND_TRIPS = 3.0
UNBALANCED = 2.0
IDLE_SERVERS = 0.5  # the busiest server's ops fill less of the wait: transfers
_REMEDY = {
    "dense_updates": (
        "Keep the tables' gradients sparse all the way to the servers, so a step sends and "
        "updates only the rows its batch touched: no tf.convert_to_tensor or dense arithmetic "
        "on an embedding gradient (an IndexedSlices), and an optimizer that applies "
        "IndexedSlices row by row (SGD, Adagrad and Adam of tf.keras 2 / tf.compat.v1 use "
        "ResourceSparseApply ops; Keras 3's Adam densifies the table: update the tables with "
        "table.scatter_sub(tf.IndexedSlices(lr * g.values, g.indices)) and keep Adam for the "
        "dense layers)."),
    "unbalanced": (
        "Spread every large table over all parameter servers: "
        "ParameterServerStrategy(cluster_resolver, variable_partitioner="
        "tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 << 10, "
        "max_shards={servers})) (TF1: tf.compat.v1.fixed_size_partitioner), so no server "
        "serves more than its share of the lookups and updates."),
    "transfer": (
        "The servers are mostly idle while the workers wait: the time goes to moving tensors. "
        "Send fewer bytes per step (sparse gradients, no dense reads of large variables in the "
        "step), put the servers on machines with a faster network to the workers, and read "
        "each variable once per step."),
    "servers_busy": (
        "The servers' own work is the wait: add parameter servers and partition the large "
        "variables over them (variable_partitioner), and keep dense layers' variables small "
        "or on the workers (replicated with MirroredStrategy or MultiWorkerMirroredStrategy)."),
}


def _during(s: np.ndarray, e: np.ndarray, rs: np.ndarray, re_: np.ndarray) -> int:
    """Time the intervals (s, e) cover while one of (rs, re_) runs."""
    return covered_ns(s, e) - covered_outside(s, e, rs, re_) if len(s) else 0


def detect(ctx: Context) -> Finding | None:
    servers = ctx.ps_hosts
    worker = ctx.step_host
    if not servers or worker is None or worker in servers or ctx.n_steps == 0:
        return None
    ex = executions(ctx)
    fn = ex[ex["function"]]
    if fn.empty:
        return None
    rs, re_ = fn["run_start_ns"].to_numpy(np.int64), fn["run_end_ns"].to_numpy(np.int64)
    runs_ns = covered_ns(rs, re_)
    own = ctx.in_steps(kinds=_OWN_KINDS, host=worker, columns=("name", "start_ns", "end_ns"))
    os_, oe = own["start_ns"].to_numpy(np.int64), own["end_ns"].to_numpy(np.int64)
    wait_ns = covered_outside(rs, re_, os_, oe)
    total = float(ctx.total_step_ns)
    wait = wait_ns / total if total > 0 else 0.0
    if wait < MIN_SHARE:
        return None
    ops = ctx.in_steps(kinds=_SERVER_KINDS, columns=("host", "name", "kind", "start_ns",
                                                     "end_ns"))
    # The servers' own ops: their sends are the transfers, part of the wait but not their work.
    srv = ops[ops["host"].isin(servers).to_numpy() & (ops["kind"] == "host_op").to_numpy()]
    busy: dict[str, float] = {}
    for h in servers:
        mine = (srv["host"] == h).to_numpy()
        busy[h] = _during(srv["start_ns"].to_numpy(np.int64)[mine],
                           srv["end_ns"].to_numpy(np.int64)[mine], rs, re_) / max(runs_ns, 1)
    densify_all = cat_mask(ops["name"], _DENSIFY.search)
    rows = cat_mask(srv["name"], _ROW_OPS.search)
    row_ns = _during(srv["start_ns"].to_numpy(np.int64)[rows],
                      srv["end_ns"].to_numpy(np.int64)[rows], rs, re_)
    tasks = ctx.host_tasks
    label = {h: f"ps:{tasks[h][1]} ({h})" for h in servers}
    hi = max(busy, key=busy.__getitem__)
    lo = min(busy.values())
    mean_busy = float(np.mean(list(busy.values())))
    evidence = [
        f"inside each step's function call the worker ({worker}) sits idle "
        f"{wait_ns / ctx.n_steps / 1e6:.2f} ms per step, {wait:.0%} of step time, waiting for "
        f"the {len(servers)} parameter server(s): the call ends only when their part of the "
        "step (variable reads, lookups, updates) and the transfers both ways are done",
        "servers busy during the worker's calls: " + ", ".join(
            f"{label[h]} {busy[h]:.0%}" for h in sorted(busy, key=busy.__getitem__,
                                                        reverse=True)),
    ]
    densify_on_worker = densify_all & (ops["host"] == worker).to_numpy()
    # The worker's dense work on the gradients: the densifying ops, and the ops whose outputs
    # it sends to the servers (`lr * g` on a table-sized g); a sparse step keeps neither.
    producers = _sent_to_servers(ctx, worker)
    mine = own[cat_mask(own["name"], lambda n: _DENSIFY.search(n)
                        or n.split(":")[0] in producers)]
    densify_share = covered_ns(mine["start_ns"].to_numpy(np.int64),
                               mine["end_ns"].to_numpy(np.int64)) / total
    if densify_all.any():
        cause = "dense_updates"
        stays = min(SPARSE_ROUND_TRIPS * row_ns / max(runs_ns, 1), 1.0) * wait
        saved = wait - stays + densify_share
        n_dense = int(densify_all.sum())
        evidence.append(
            f"the tables' gradients are densified ({n_dense} UnsortedSegmentSum in the "
            f"window: {int(densify_on_worker.sum())} on the worker, "
            f"{n_dense - int(densify_on_worker.sum())} on the servers), so every step sends "
            "and updates every row; the servers' row lookups take "
            f"{row_ns / max(runs_ns, 1):.0%} of the worker's calls, and a sparse step's wait "
            f"is taken as {SPARSE_ROUND_TRIPS:g} of them")
        if densify_share >= 0.01:
            evidence.append(
                f"the worker's own work on the dense gradients (its UnsortedSegmentSum and the "
                f"ops whose outputs it sends to the servers) covers {densify_share:.1%} of the "
                "step, and goes too")
    elif len(servers) > 1 and busy[hi] >= UNBALANCED * max(lo, 1e-9):
        cause = "unbalanced"
        saved = wait * (busy[hi] - mean_busy) / max(busy[hi], 1e-9)
        evidence.append(f"{label[hi]} is busy {busy[hi] / max(lo, 1e-9):.1f}x as long as the "
                        "least busy server: it serves more of the steps' lookups and updates")
        if ctx.one_machine and not ctx.has_accelerator:
            # Measured: partitioning the hot table over 2 servers on one 2-core machine made
            # the step 1.28x slower (docs/trace-signals.md, "Parameter servers").
            saved = 0.0
            evidence.append(
                f"all {ctx.n_hosts} processes run on one machine ({ctx.one_machine}): "
                "balancing the servers moves work between processes that share its cores, so "
                "no saving is estimated; on separate machines the busiest server's excess over "
                f"the mean, {wait * (busy[hi] - mean_busy) / max(busy[hi], 1e-9):.0%} of the "
                "step, is what balancing wins")
    else:
        # Round trips of a sparse step, or servers short of cores: what a fix wins depends on
        # the cluster (more servers, a faster network), which one trace does not show.
        fill = busy[hi] * runs_ns / max(wait_ns, 1)  # the busiest server's ops, per ns waited
        cause = "transfer" if fill < IDLE_SERVERS else "servers_busy"
        saved = 0.0
        evidence.append(
            (f"the busiest server runs ops for only {fill:.0%} as long as the worker waits: "
             "the rest is transfers and RPC" if cause == "transfer" else
             f"the busiest server runs ops for {min(fill, 1.0):.0%} as long as the worker waits")
            + "; no dense updates or unbalanced servers: no saving is estimated from this "
            "trace alone")
    saved = max(min(saved, wait + densify_share), 0.0)
    return Finding(
        id=ID,
        title=f"The workers wait for the parameter servers {wait:.0%} of each step",
        step_fraction=wait,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=_REMEDY[cause].format(servers=len(servers)),
        numbers={"cause": cause, "wait_fraction": round(wait, 4),
                 "wait_ms_per_step": round(wait_ns / ctx.n_steps / 1e6, 3),
                 "server_busy": {label[h]: round(b, 4) for h, b in busy.items()},
                 "row_lookup_fraction": round(row_ns / max(runs_ns, 1), 4),
                 "worker_densify_fraction": round(densify_share, 4)},
        top_events=heaviest_events(_with_dur(srv)),
    )


def _sent_to_servers(ctx: Context, worker: str) -> set[str]:
    """The ops whose outputs the worker's sends carry to a server: the `from` of each send
    whose rendezvous key ends on a "ps" device (docs/trace-signals.md, "Parameter servers")."""
    if "sent_from" not in ctx.events or "rendezvous" not in ctx.events:
        return set()
    sends = ctx.in_steps(kinds=("d2d",), host=worker, columns=("sent_from", "rendezvous"))
    to_server = cat_mask(sends["rendezvous"], lambda k: f";/job:{PS_JOB}/" in k)
    return {str(n) for n in sends["sent_from"][to_server].dropna().unique()}


def _with_dur(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(dur_ns=df["end_ns"] - df["start_ns"])
