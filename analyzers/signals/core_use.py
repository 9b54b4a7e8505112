"""How many cores the process kept busy while the model's large host ops ran (OS sampler).

On CPU a TF op runs on one inter-op thread and splits its work over the intra-op (Eigen)
threads, which write no trace events (docs/trace-signals.md, "Threads"); only the sampler sees
how many cores the work really used. Pools capped below the usable CPUs
(`intra_op_parallelism_threads=1`, `TF_NUM_INTRAOP_THREADS`, `torch.set_num_threads`) leave the
rest idle: a 64-1024-1024-1 Keras MLP ran its 10 ms matmuls on one thread of two usable CPUs,
the process at 1.0 core and the machine half idle (docs/trace-signals.md, "Idle cores").

Large ops only: dispatching many small ops is serial by nature (per_step_overhead,
kernel_launch_overhead, eager_execution name that), and their time says nothing of the pools.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.events import cat_mask, is_device_plane
from analyzers.signals.os_sampler import (
    INPUT_PREFIXES,
    step_thread_roles,
    sweep_intervals,
    threads_in_steps,
)
from analyzers.steps import inside_merged, merge_intervals

# A host op this long has work Eigen splits over the intra-op pool (its cost model shards
# anything above a few microseconds of work); below it, dispatch dominates.
LARGE_OP_NS = 100_000
# Sampler intervals inside large ops needed to say how many cores they used.
MIN_INTERVALS = 8
# A thread running in at least this share of the sweeps inside large ops is one of the ops'
# workers, unless it is an input producer (tf.data's threads run beside the ops whatever the
# pools: 11-13% each in the capped_pools preset). Capped pools show as few workers (intra_op=1:
# one thread at 96-100%, the main thread at 4%); a full pool shows a worker per usable core even
# where its ops split unevenly.
WORKER_SHARE = 0.1
# ... and a worker runs at least this fraction of the busiest thread's share: a tf.data thread
# that thread_roles could not place (13% beside a capped worker's 100%) is not one.
TOP_FRACTION = 0.25
# A thread the large ops wake: running in this share of their sweeps at least, and this many
# times as often as in the step's other sweeps. A pool's threads rotate through its ops, so a
# full pool has about as many as the process has CPUs even where each runs a small share (an
# op split 7 ways on 64 cores); a capped pool's one worker runs the small ops too (woken: no).
WOKEN_SHARE = 0.05
WOKEN_RATIO = 2.0
# Below this many usable CPUs the busy cut alone decides: a healthy pool's few threads are all
# busy (73-97% each on 2 CPUs), while a short window's unplaced tf.data threads, seen in 2-4 of
# ~45 sweeps and never outside the ops, would pass for woken ones (one of three `capped_pools`
# runs of 20 steps counted 5).
WOKEN_MIN_CPUS = 4
# TF runs each op on a thread of its inter-op pool ("Compute": threads named `tf_Compute`), which
# splits the op's work over the intra-op (Eigen) pool, whose threads keep the name of the thread
# that made them (`python`, or the process's own). With an intra-op pool of one thread the work
# runs inline on the `tf_Compute` thread: one intra-op and two inter-op threads on 2 CPUs kept
# two `tf_Compute` threads busy at 1.41-1.50 cores (1.12-1.24x slower than TF's pools), where
# TF's own pools ran two `python` threads at 1.74-1.78 (docs/trace-signals.md, "Idle cores").
INTER_OP_THREAD = "tf_Compute"
# Op types TF and PyTorch split over their intra-op pools whenever they are large: matrix
# products and convolutions (Eigen, oneDNN, XLA's dots, aten's mm/addmm/linear). Large ops of
# other types may be serial by nature (a scatter, a sort, a string op): one thread running them
# says nothing of the pools.
PARALLEL_OP = re.compile(r"(?i)matmul|conv|einsum|dot|\bmm\b|addmm|bmm|linear")
# The pools are judged when at least this share of the large ops' time is in those types (the
# reference trainer's XLA step: 40-51% dots, the rest scatters, gathers and copy fusions).
MIN_PARALLEL_SHARE = 0.25


@dataclass
class CoreUse:
    intervals: int  # sampler intervals (sweep to sweep) ending inside a large host op
    op_share: float  # step time in which some large host op ran, as a share of step time
    process_cores: float  # mean cores the process used over those intervals
    machine_cores: float  # mean cores busy on the whole machine over them (every process)
    usable_cpus: float  # affinity capped by cgroup quota (the machine's count when unknown)
    n_cpus: int
    runnable_mean: float  # the process's threads in R per sweep inside large ops
    workers: list[tuple[int, str, float]]  # (tid, /proc name, share of those sweeps running) of
    # the busy threads (WORKER_SHARE, TOP_FRACTION) other than input producers, busiest first
    woken: int  # threads the large ops wake (WOKEN_SHARE, WOKEN_RATIO), input producers aside
    parallel_share: float  # of the large ops' time, in op types an intra-op pool splits

    @property
    def inline(self) -> bool:
        """Only TF's inter-op threads did the large ops' work: no intra-op thread helped, so the
        ops ran inline (an intra-op pool of one thread)."""
        return (self.usable_cpus >= 2 and bool(self.workers)
                and all(name == INTER_OP_THREAD for _, name, _ in self.workers))

    @property
    def idle_cores(self) -> float:
        """Cores the process could have used and nobody did: what its quota or affinity left
        unused, and no more than the machine had idle (other processes' load counts)."""
        return max(0.0, min(self.usable_cpus - self.process_cores,
                            self.n_cpus - self.machine_cores))

    @property
    def capped(self) -> bool:
        """Fewer threads did the large ops' work than the process may use cores, by one at least:
        its pools hold fewer threads than it has CPUs. (With no thread busy enough to count, the
        work hopped between threads: not a pool's size.) On a larger machine, a pool that spreads
        its ops thinly over many threads, each below the busy cut, still wakes at least half as
        many as the CPUs: not capped. Only TF's inter-op threads at work (`inline`) is an
        intra-op pool of one, however many they are. Neither is judged where the large ops are
        mostly of kinds no pool splits (`parallel_share`)."""
        if self.parallel_share < MIN_PARALLEL_SHARE:
            return False
        few = (1 <= len(self.workers) <= self.usable_cpus - 1
               and (self.usable_cpus < WOKEN_MIN_CPUS or self.woken <= self.usable_cpus / 2))
        return few or self.inline


def core_use(ctx: Context) -> CoreUse | None:
    return ctx.memo("core_use", lambda: _core_use(ctx))


def _core_use(ctx: Context) -> CoreUse | None:
    """None without sampler data of one process with its CPU counters, without steps, or with
    too few sampler intervals inside the large ops."""
    th, proc, n_cpus = ctx.sampler_threads, ctx.sampler_process, ctx.n_cpus
    if (th is None or th.empty or proc is None or len(proc) < 2 or not n_cpus
            or ctx.steps.table.empty or "pid" not in th or th["pid"].nunique() > 1
            or not {"cpu_percent", "system_cpu_percent"} <= set(proc.columns)):
        return None
    host = ctx.sampler_host if ctx.n_hosts > 1 else None
    if ctx.n_hosts > 1 and host is None:
        return None
    ops = ctx.in_steps(kinds=("host_op",), host=host,
                       line=lambda line: not str(line).startswith(INPUT_PREFIXES),
                       plane=lambda plane: not is_device_plane(plane),
                       columns=("start_ns", "end_ns", "dur_ns", "op_type"))
    large = ops["dur_ns"].to_numpy() >= LARGE_OP_NS
    if not large.any() or not ctx.total_step_ns:
        return None
    big = ops[large]
    parallel = cat_mask(big["op_type"], lambda t: PARALLEL_OP.search(str(t)) is not None)
    dur = big["dur_ns"].to_numpy(np.int64)
    parallel_share = float(dur[parallel].sum()) / float(dur.sum())
    ms, me = merge_intervals(ops["start_ns"].to_numpy(np.int64)[large],
                             ops["end_ns"].to_numpy(np.int64)[large], overwrite=True)
    op_share = float((me - ms).sum()) / ctx.total_step_ns

    # An interval counts when its middle falls in a large op.
    p, mid, ok = sweep_intervals(proc)
    use = ok & inside_merged(mid, ms, me)
    if use.sum() < MIN_INTERVALS:
        return None
    process_cores = float(p["cpu_percent"].to_numpy()[1:][use].mean()) / 100
    machine_cores = float(p["system_cpu_percent"].to_numpy()[1:][use].mean()) / 100 * n_cpus

    shares = _thread_shares(ctx, ms, me)
    if shares is None:
        return None
    counts, table = shares
    roles = step_thread_roles(ctx)
    table = table[[roles.get(int(tid)) != "input" for tid in table.index]]
    top = float(table["inside"].max()) if len(table) else 0.0
    busy = table[table["inside"] >= max(WORKER_SHARE, top * TOP_FRACTION)]
    workers = [(int(tid), str(row["name"]), float(row["inside"])) for tid, row in busy.iterrows()]
    woken = int(((table["inside"] >= WOKEN_SHARE)
                 & (table["inside"] >= WOKEN_RATIO * table["outside"])).sum())
    return CoreUse(
        intervals=int(use.sum()), op_share=min(1.0, op_share), process_cores=process_cores,
        machine_cores=machine_cores, usable_cpus=float(ctx.usable_cpus or n_cpus),
        n_cpus=int(n_cpus),
        runnable_mean=float(counts.mean()) if len(counts) else 0.0, workers=workers,
        woken=woken, parallel_share=parallel_share)


def _thread_shares(ctx: Context, ms: np.ndarray, me: np.ndarray
                   ) -> tuple[np.ndarray, pd.DataFrame] | None:
    """The process's runnable threads per sweep inside the large ops (`ms`, `me`), and per thread
    its running share of those sweeps (`inside`) and of the other sweeps within the steps
    (`outside`), busiest first, with its /proc name. None without a sweep inside the ops."""
    th = threads_in_steps(ctx)
    t = th["t_ns"].to_numpy(np.int64)
    sweeps = np.unique(t)
    in_ops = inside_merged(sweeps, ms, me)
    if not in_ops.any():
        return None
    running = (th["state"].astype(str) == "R").to_numpy()
    row_in = inside_merged(t, ms, me)
    counts = np.bincount(np.searchsorted(sweeps, t[running & row_in]), minlength=len(sweeps))
    frame = pd.DataFrame({"tid": th["tid"].to_numpy(), "inside": running & row_in,
                          "outside": running & ~row_in})
    table = frame.groupby("tid")[["inside", "outside"]].sum()
    table["inside"] /= int(in_ops.sum())
    table["outside"] /= max(1, int((~in_ops).sum()))
    table["name"] = th.drop_duplicates("tid").set_index("tid")["name"].astype(str)
    return counts[in_ops], table.sort_values("inside", ascending=False)

