"""`parameter_server_wait`: the workers of a parameter-server job wait for the servers in each step.

Signal (docs/trace-signals.md, "Parameter servers"): under TF2's ParameterServerStrategy, or a
TF1 job with `replica_device_setter`, the variables live on the "ps" tasks, and each step a
worker runs is partitioned: the lookups, reads and updates of those variables run on the
servers, the rest on the worker, joined by `_Send`/`_Recv` pairs over RPC. The worker's call (a
TF2 function run; a TF1 Session.run through a server, `RunGraph` to `RunGraph`) ends only when
the servers' part has run, so inside it, the time none of the worker's own ops covers is its wait
for the servers: their ops and the transfers both ways (and the executor's own gaps between
ops, which a one-process step has too). The hosts' roles come from the sends' rendezvous keys
(`Context.host_tasks`).

Causes, read from what the servers do during this worker's calls:
- `dense_updates`: the servers spend most of their time on whole-variable work (anything but
  row lookups, scatters and sparse updates) beside the tables' row ops or a densified gradient
  (`UnsortedSegmentSum`, the op that turns an IndexedSlices into a tensor; TF1's sparse
  updates also run it, beside a `Unique`, to sum the batch's duplicate rows: a row op then,
  `dedup_sums`): each step updates every row of a table or of its optimizer slots. Keras 3's
  Adam on a table densifies the gradient and sends it whole; TF1's and tf.keras 2's Adam scale
  their whole moment slots; a gradient passed through tf.convert_to_tensor is dense.
- `unbalanced`: with several servers, the busiest runs ops UNBALANCED times as long as the least
  busy and fills at least IDLE_SERVERS of the wait: whole tables placed on one server each,
  without a variable partitioner.
- `transfer`: none of these, and the busiest server's ops fill less than IDLE_SERVERS of the
  wait: moving tensors.
- `servers_busy`: none of these, and the servers' own work fills the wait.

Estimate: with sparse updates the wait shrinks to the row ops' round trips, taken as
SPARSE_ROUND_TRIPS times the servers' row-op time in the calls (a gather, a scatter back, the
transfers; the row ops the servers run for other workers meanwhile count too, so this errs
towards what stays), and the worker's own `UnsortedSegmentSum`s go, where no other op of its
runs. The rest of the worker's arithmetic on the dense gradients is not attributed: nothing in
the trace says which ops consume the densified tensor, so the estimate is low when a worker
densifies by hand. Balanced servers would each be as busy as their mean: the busiest one's
excess is saved when the servers run on separate machines; processes sharing one machine's cores
gain nothing from it (measured). The last two causes are a sparse job's round trips, whose cost
depends on the cluster (more servers, a faster network): the finding reports the wait and
estimates no saving, so it stays `low` (the sparse jobs of tests/analyzers/foreign_jobs.py wait
45-56% of a step on one 2-core machine).

Numbers: `wait_fraction` and `worker_densify_fraction` are shares of step time; the servers'
`server_busy_in_calls` and `row_ops_in_calls` are shares of this worker's call time.
"""

from __future__ import annotations

import re

import numpy as np

from analyzers.context import Context
from analyzers.events import RUN_GRAPH, cat_mask
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.embedding_ops import OPTIMIZER_SCOPE, ROW_OPS, dedup_sums, densifying
from analyzers.signals.executions import executions
from analyzers.steps import covered_during, covered_ns, covered_outside

ID = "parameter_server_wait"
MIN_SHARE = 0.05
# What a worker does itself: anything but the framework's containers and its sends, which are
# the transfers to the servers.
_OWN_KINDS = ("host_op", "input_wait", "input_work", "convert", "h2d", "d2h", "collective",
              "launch", "sync", "device_compute")
SPARSE_ROUND_TRIPS = 3.0
UNBALANCED = 2.0
IDLE_SERVERS = 0.5  # the busiest server's ops fill less of the wait: transfers
TABLE_WORK = 0.5  # whole-variable work's share of the servers' busy time that says dense
# The worker's own densifying ops, where nothing else of its runs, as a share of the step: a
# table's gradient densified by hand (5-16 ms of a 180 ms step in the probe), not a ragged sum.
OWN_DENSIFY = 0.01
_UPDATE_SCOPE = re.compile(r"^(.*?/update_[^/:]+)/")
_REMEDY = {
    "dense_updates": (
        "Update only the rows each step touches, so a step sends and writes the batch's rows, "
        "not whole tables: keep the tables' gradients sparse (no tf.convert_to_tensor or dense "
        "arithmetic on an embedding gradient, an IndexedSlices), and use an optimizer whose "
        "sparse update touches only those rows: SGD, Adagrad, FTRL (ResourceSparseApply ops). "
        "Adam, Keras 3's, tf.keras 2's and tf.compat.v1's alike, updates its whole moment "
        "slots every step (Keras 3's also densifies the gradient): use a lazy Adam for the "
        "tables (TensorFlow Addons' LazyAdam, TensorFlow Recommenders-Addons), or update them "
        "with table.scatter_sub(tf.IndexedSlices(lr * g.values, g.indices)) and keep Adam for "
        "the dense layers."),
    "unbalanced": (
        "Spread every large table over all parameter servers: "
        "ParameterServerStrategy(cluster_resolver, variable_partitioner="
        "tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 << 10, "
        "max_shards={servers})), so no server serves more than its share of the lookups and "
        "updates."),
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


_ONE_MACHINE = (
    " Here all processes share one machine's cores: more servers or partitions move work "
    "between them and win nothing (measured 1.28x slower); the advice is for servers on "
    "machines of their own.")


def detect(ctx: Context) -> Finding | None:
    servers = ctx.ps_hosts
    worker = ctx.step_host
    if not servers or worker is None or worker in servers or ctx.n_steps == 0:
        return None
    rs, re_ = _calls(ctx)
    if not len(rs):
        return None
    runs_ns = covered_ns(rs, re_)
    own = ctx.in_steps(kinds=_OWN_KINDS, host=worker, columns=("name", "start_ns", "end_ns"))
    os_, oe = own["start_ns"].to_numpy(np.int64), own["end_ns"].to_numpy(np.int64)
    wait_ns = covered_outside(rs, re_, os_, oe)
    total = float(ctx.total_step_ns)
    wait = wait_ns / total if total > 0 else 0.0
    if wait < MIN_SHARE or runs_ns <= 0:
        return None
    srv = ctx.in_steps(kinds=("host_op",), columns=("host", "name", "start_ns", "end_ns",
                                                    "dur_ns"))
    srv = srv[srv["host"].isin(servers).to_numpy()]
    ss, se = srv["start_ns"].to_numpy(np.int64), srv["end_ns"].to_numpy(np.int64)
    host = srv["host"].astype(str).to_numpy()
    busy_ns = {h: covered_during(ss[host == h], se[host == h], rs, re_) for h in servers}
    busy = {h: ns / runs_ns for h, ns in busy_ns.items()}
    rows = _row_ops(srv["name"])
    row_ns = covered_during(ss[rows], se[rows], rs, re_)
    all_ns = covered_during(ss, se, rs, re_)
    table_ns = all_ns - row_ns  # while only whole-variable ops run
    densify_srv = int(densifying(srv["name"]).sum())
    own_densify = densifying(own["name"])
    lone_densify = covered_outside(os_[own_densify], oe[own_densify], os_[~own_densify],
                                   oe[~own_densify]) / total
    tasks = ctx.host_tasks
    label = {h: f"ps:{tasks[h][1]} ({h})" for h in servers}
    hi = max(busy, key=busy.__getitem__)
    lo = min(busy.values())
    evidence = [
        f"inside each step's call the worker ({worker}) sits idle "
        f"{wait_ns / ctx.n_steps / 1e6:.2f} ms per step, {wait:.0%} of step time, waiting for "
        f"the {len(servers)} parameter server(s): the call ends only when their part of the "
        "step (variable reads, lookups, updates) and the transfers both ways are done",
        "servers busy during the worker's calls: " + ", ".join(
            f"{label[h]} {busy[h]:.0%}" for h in sorted(busy, key=busy.__getitem__,
                                                        reverse=True)),
    ]
    densify_share = 0.0
    if (all_ns > 0 and table_ns >= TABLE_WORK * all_ns
            and (_tables_updated_whole(srv["name"], rows) or lone_densify >= OWN_DENSIFY
                 or _optimizer_densifies(own["name"]))):
        cause = "dense_updates"
        densify_share = lone_densify
        stays = min(SPARSE_ROUND_TRIPS * row_ns / total, wait)
        saved = wait - stays + densify_share
        evidence.append(
            f"whole-variable work is {table_ns / all_ns:.0%} of the servers' busy time: every "
            "step updates every row of the tables or of their optimizer slots "
            f"({int(own_densify.sum())} UnsortedSegmentSum on the worker and {densify_srv} on "
            "the servers in the window: gradients densified, or summed by row); the servers' "
            f"row ops take {row_ns / total:.1%} of the step, and a sparse step's wait is taken "
            f"as {SPARSE_ROUND_TRIPS:g} times that")
    elif (len(servers) > 1 and busy[hi] >= UNBALANCED * lo
          and busy_ns[hi] >= IDLE_SERVERS * wait_ns):
        cause = "unbalanced"
        excess = (busy_ns[hi] - float(np.mean(list(busy_ns.values())))) / total
        saved = min(excess, wait)
        than = (f"{busy[hi] / lo:.1f}x as long as the least busy server" if lo > 0
                else "while another runs none")
        evidence.append(f"{label[hi]} runs ops {than}: it serves more of the steps' lookups "
                        "and updates")
        if ctx.one_machine and not ctx.has_accelerator:
            # Measured: partitioning the hot table over 2 servers on one 2-core machine made
            # the step 1.28x slower (docs/trace-signals.md, "Parameter servers").
            saved = 0.0
            evidence.append(
                f"all {ctx.n_hosts} processes run on one machine ({ctx.one_machine}): "
                "balancing the servers moves work between processes that share its cores, so "
                "no saving is estimated; on separate machines the busiest server's excess over "
                f"the mean, {min(excess, wait):.0%} of the step, is what balancing wins")
    else:
        # Round trips of a sparse step, or servers short of cores: what a fix wins depends on
        # the cluster (more servers, a faster network), which one trace does not show.
        fill = busy_ns[hi] / max(wait_ns, 1)
        cause = "transfer" if fill < IDLE_SERVERS else "servers_busy"
        saved = 0.0
        evidence.append(
            (f"the busiest server runs ops for only {fill:.0%} as long as the worker waits: "
             "the rest is transfers and RPC" if cause == "transfer" else
             f"the busiest server runs ops for {min(fill, 1.0):.0%} as long as the worker waits")
            + "; no dense updates or unbalanced servers: no saving is estimated from this "
            "trace alone")
    return Finding(
        id=ID,
        title=f"The workers wait for the parameter servers {wait:.0%} of each step",
        step_fraction=wait,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=_REMEDY[cause].format(servers=len(servers)) + (
            _ONE_MACHINE if cause in ("unbalanced", "servers_busy") and ctx.one_machine
            and not ctx.has_accelerator else ""),
        numbers={"cause": cause, "wait_fraction": round(wait, 4),
                 "wait_ms_per_step": round(wait_ns / ctx.n_steps / 1e6, 3),
                 "server_busy_in_calls": {label[h]: round(b, 4) for h, b in busy.items()},
                 "row_ops_in_calls": round(row_ns / runs_ns, 4),
                 "worker_densify_fraction": round(densify_share, 4)},
        top_events=heaviest_events(srv),
    )


def _optimizer_densifies(names) -> bool:
    """An `UnsortedSegmentSum` under an optimizer's scope: Keras 3's Adam densifying a table's
    gradient (a model's own sums, a ragged reduction, are not an optimizer's)."""
    return bool((densifying(names) & cat_mask(names, OPTIMIZER_SCOPE.search)).any())


def _row_ops(names) -> np.ndarray:
    """`ROW_OPS`, and the duplicate-row sums beside them: they work over the batch's rows too,
    and counted as whole-variable work they would make a sparse update's scope look like one
    that scales its slots whole."""
    dedup = dedup_sums(str(n) for n in names.unique())
    return cat_mask(names, lambda n: bool(ROW_OPS.search(n)) or n in dedup)


def _tables_updated_whole(names, rows: np.ndarray) -> bool:
    """Whether the servers update a table whole: a densifying op under an optimizer's scope, or
    one optimizer update scope (TF1 and tf.keras 2 `Adam/update_<var>/`) holding both row ops
    (the variable is a table: its rows are scattered) and whole-variable ops (its moment slots
    scaled whole)."""
    if _optimizer_densifies(names):
        return True
    scopes = [m.group(1) if (m := _UPDATE_SCOPE.match(str(c))) else None
              for c in names.cat.categories]
    codes = names.array.codes

    def held(mask: np.ndarray) -> set[str]:
        return {scopes[c] for c in np.unique(codes[mask]).tolist()
                if c >= 0 and scopes[c] is not None}
    return bool(held(rows) & held(~rows))


def _calls(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """The worker's step calls, whose end waits for the servers: TF2's function runs; a TF1
    worker's Session.run through a server, whose `RunGraph` steps run from one call to the next
    (its own partition's `RunGraphDone` can come before the servers' part has run, and the
    run returns only after it)."""
    if ctx.steps.source == f"session:{RUN_GRAPH}":
        return ctx.windows
    ex = executions(ctx)
    fn = ex[ex["function"]]
    return fn["run_start_ns"].to_numpy(np.int64), fn["run_end_ns"].to_numpy(np.int64)
