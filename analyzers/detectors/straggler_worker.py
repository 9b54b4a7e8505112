"""`straggler_worker`: one worker of a multi-worker job holds the others up in most steps.

Signals (several hosts, a trace file each: docs/trace-signals.md, "Several hosts"): a
synchronous all-reduce finishes when the last worker joins it, so a worker's collective time
that passes while another worker still computes is a wait for that peer (`collective_overhead`
reports its share). Per step, the worker the others wait for is the one that waits least
itself. When one worker is that in most steps, it is the straggler; its own step, set against
the others', says why: longer compute (a slower or busier machine, or a larger share of the
work), a longer input wait (its pipeline or storage), or time no event covers (Python, garbage
collection, the OS).

Estimate: with the straggler as fast as the next-slowest worker, a step loses the wait of the
worker that waits least among the others, in the steps the straggler held up. While the
straggler computes, the breakdown counts that time as compute; while it waits for its input or
runs untraced code, nobody computes and it counts as collective time, which
`collective_overhead` leaves to this finding when it claims it (`collective_fraction`).
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.findings import Finding, speedup_from_saving
from analyzers.signals.step_waits import step_input_waits
from analyzers.steps import covered_per_step

ID = "straggler_worker"
MIN_SHARE = 0.03  # the others' wait, as a share of step time, worth a finding
# The same worker holds the others up in this share of the steps: on a balanced job the worker
# last to join changes from step to step.
CONSISTENT = 2 / 3
# In a step, the straggler waits at most this share of what the next-least-waiting worker does.
SEPARATE = 0.5
# A part of the straggler's step names the cause when it exceeds the others' by this share of
# the wait it causes.
CAUSE_SHARE = 0.5
_COMPUTE = ("host_op", "device_compute")
_SAME_WORK = (
    "The workers run the same model on equal batches, so one that computes longer is on a "
    "slower or busier machine (other processes on it, fewer or throttled cores, a slower GPU) "
    "or gets more of the work (a larger batch, heavier embedding shards). Move it to a machine "
    "like the others' or rebalance its share; ")
_ALONE = "here its wait hides under the other workers' time, so no input finding names it."
_UNTRACED = (
    "Its extra time is covered by no traced op: Python work in its loop, garbage collection, or "
    "the OS. Capture that worker with `recadvisor capture` (the sampler shows its main thread's "
    "states) and look for per-worker code paths (logging, checkpoints, evaluation on the "
    "chief).")
# cause → framework → remedy: a PyTorch job's ranks are fed and split by its own APIs.
_REMEDY = {
    "compute": {
        "tensorflow": _SAME_WORK + "with tf.distribute, keep the per-replica batch equal on "
                                   "every worker.",
        "pytorch": _SAME_WORK + "keep every rank's batch size equal, and its data split even "
                                "(DistributedSampler, drop_last=True) so no rank gets more.",
    },
    "input": {
        "tensorflow": (
            "Its input pipeline keeps it waiting: slower storage, a larger or compressed shard, "
            "or fewer parallel reads than the others. Give every worker the same shard sizes "
            "and storage class, and parallel interleave and prefetch in its pipeline. To see "
            "which, analyze its .xplane.pb alone, copied into a run folder of its own: "
            + _ALONE),
        "pytorch": (
            "Its DataLoader keeps it waiting: slower storage, larger samples, or fewer loader "
            "workers than the others. Give every rank the same storage class and "
            "DataLoader(num_workers=N, pin_memory=True, persistent_workers=True). To see which, "
            "analyze its trace file alone: " + _ALONE),
    },
    "untraced": {"tensorflow": _UNTRACED, "pytorch": _UNTRACED},
}
_WHAT = {"compute": "computes", "input": "waits for its input"}
_TITLE = {"compute": "it computes longer", "input": "it waits longer for its input",
          "untraced": "its extra time is in no traced op"}


def _per_host_step(ctx: Context, df: pd.DataFrame, hosts: np.ndarray) -> np.ndarray:
    """cover[h, k]: the time events of `df` on host `hosts[h]` cover in step k."""
    w_start, w_end = ctx.windows
    codes = df["host"].array.codes
    s, e = df["start_ns"].to_numpy(np.int64), df["end_ns"].to_numpy(np.int64)
    return np.array([covered_per_step(s[codes == h], e[codes == h], w_start, w_end)
                     for h in hosts], dtype=np.float64).reshape(len(hosts), len(w_start))


def _peer_waits(ctx: Context, coll: pd.DataFrame,
                hosts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(wait[h, k], joined[h, k]): the time in step k that host h spends in collectives while a
    peer is not in one yet (computing, waiting for its input, or in untraced Python alike), the
    longest such time over its peers, the one that joined last; and the time h spends in
    collectives. A peer with no collective in a step (a worker the profiler caught for fewer
    steps, a chief that does not train) held nobody up in it."""
    w_start, w_end = ctx.windows
    codes = coll["host"].array.codes
    s, e = coll["start_ns"].to_numpy(np.int64), coll["end_ns"].to_numpy(np.int64)
    spans = [(s[codes == h], e[codes == h]) for h in hosts]
    alone = _per_host_step(ctx, coll, hosts)
    out = np.zeros_like(alone)
    for i, j in itertools.permutations(range(len(hosts)), 2):
        union = covered_per_step(np.concatenate([spans[i][0], spans[j][0]]),
                                 np.concatenate([spans[i][1], spans[j][1]]), w_start, w_end)
        # In a collective while j is not: i's time less the time both are in one.
        out[i] = np.maximum(out[i], np.where(alone[j] > 0, union - alone[j], 0))
    return out, alone


def _idle_wait(ctx: Context, coll: pd.DataFrame, compute: pd.DataFrame, straggler: int,
               others: np.ndarray) -> np.ndarray:
    """Per step, the part of the others' wait in which nobody computes: the others are in
    collectives and the straggler neither in one nor computing. The breakdown counts that time
    as collective, which collective_overhead leaves to this finding when it claims it."""
    w_start, w_end = ctx.windows
    mine = coll["host"].array.codes == straggler
    cs, ce = coll["start_ns"].to_numpy(np.int64), coll["end_ns"].to_numpy(np.int64)
    ps, pe = compute["start_ns"].to_numpy(np.int64), compute["end_ns"].to_numpy(np.int64)
    everything = covered_per_step(np.concatenate([cs, ps]), np.concatenate([ce, pe]),
                                  w_start, w_end)
    but_others = covered_per_step(np.concatenate([cs[mine], ps]), np.concatenate([ce[mine], pe]),
                                  w_start, w_end)
    return np.minimum(everything - but_others, others)


def _parts(ctx: Context, compute: pd.DataFrame, hosts: np.ndarray, top: int,
           steps: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
    """The straggler's compute and input wait in the steps it held up, and the others' (ns,
    medians). The step's own waits for a batch are on its Python thread, or on the thread
    running the get-next op inside a tf.function (a custom loop's `next(it)`); a
    MultiDeviceIterator's own thread pulls ahead of the step, a producer
    (docs/trace-signals.md, "Several hosts")."""
    waits = step_input_waits(ctx, ("host", "start_ns", "end_ns"))
    parts = {"compute": _per_host_step(ctx, compute, hosts),
             "input": _per_host_step(ctx, waits, hosts)}
    rest = np.arange(len(hosts)) != top
    return ({k: float(np.median(v[top, steps])) for k, v in parts.items()},
            {k: float(np.median(v[rest][:, steps])) for k, v in parts.items()})


def detect(ctx: Context) -> Finding | None:
    if ctx.n_hosts < 2 or ctx.n_steps < 3:
        return None
    cols = ("host", "start_ns", "end_ns")
    coll = ctx.in_steps(kinds=("collective",), columns=cols)
    hosts = np.unique(coll["host"].array.codes)
    hosts = hosts[hosts >= 0]
    if len(hosts) < 2:
        return None
    wait, joined = _peer_waits(ctx, coll, hosts)
    # Per step, the worker the others wait for waits least itself; the step would shrink by
    # what the least-waiting of the others waits. Only workers in a collective in that step
    # take part: one that never joined waits for nobody and held nobody up.
    taking_part = joined > 0
    wait = np.where(taking_part, wait, np.inf)
    held_up = np.argmin(wait, axis=0)
    ranked = np.sort(wait, axis=0)
    others = np.where(np.isfinite(ranked[1]), ranked[1], 0.0)
    # Workers that wait alike hold nobody up: in-step ties (copies of one program, each
    # overlapping its own devices' compute) are no straggler.
    held_up[~(ranked[0] <= SEPARATE * others) | (others <= 0)
            | (taking_part.sum(axis=0) < 2)] = -1
    top, count = Counter(held_up.tolist()).most_common(1)[0]
    steps = held_up == top
    if top < 0 or count < CONSISTENT * ctx.n_steps:
        return None
    dur = ctx.steps.table["dur_ns"].to_numpy(np.float64)
    saved = float(others[steps].sum() / dur.sum()) if dur.sum() > 0 else 0.0
    if saved < MIN_SHARE:
        return None
    compute = ctx.in_steps(kinds=_COMPUTE, columns=cols)
    in_collective = float(_idle_wait(ctx, coll, compute, hosts[top], others)[steps].sum()
                          / dur.sum())
    straggler = str(ctx.events["host"].cat.categories[hosts[top]])
    mine, theirs = _parts(ctx, compute, hosts, top, steps)
    waited_ms = float(np.median(others[steps])) / 1e6
    # The part that is longer by half the wait it causes or more; else the time is in none of
    # them (the markers and the train-function call span the whole step, so "untraced" is what
    # is left, not a measured cover).
    extra = {k: mine[k] - theirs[k] for k in mine}
    cause = max(extra, key=extra.get)
    if extra[cause] < CAUSE_SHARE * waited_ms * 1e6:
        cause = "untraced"
    step_ms = ctx.steps.median_step_ns() / 1e6
    evidence = [
        f"{straggler} holds the other {len(hosts) - 1} worker(s) up in {count} of "
        f"{ctx.n_steps} steps: "
        + ("the other waits" if len(hosts) == 2 else "the least delayed of them waits")
        + f" for it {waited_ms:.1f} ms a step (median) in its collectives, {saved:.1%} of step "
        f"time ({step_ms:.1f} ms median step)",
        "in those steps it " + " and ".join(
            f"{_WHAT[k]} {mine[k] / 1e6:.1f} ms against {theirs[k] / 1e6:.1f} ms on the others"
            for k in mine) + " (medians)"
        + ("" if cause != "untraced" else
           ": neither accounts for the wait, so the time is in no traced op"),
    ]
    return Finding(
        id=ID,
        title=f"Worker {straggler} is the straggler: the others wait for it in most steps "
              f"({_TITLE[cause]})",
        step_fraction=saved,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=_REMEDY[cause][ctx.framework],
        numbers={"straggler": straggler, "steps_held_up": count, "cause": cause,
                 "others_wait_ms": round(waited_ms, 3), "wait_fraction": round(saved, 4),
                 "collective_fraction": round(in_collective, 4),
                 **{f"{k}_ms": round(mine[k] / 1e6, 3) for k in mine},
                 **{f"others_{k}_ms": round(theirs[k] / 1e6, 3) for k in mine}},
    )
