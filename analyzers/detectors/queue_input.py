"""`queue_input`: a TF1 training step waits on a queue-runner input pipeline.

Signal (docs/trace-signals.md, "TF1 sessions"): the steps are Session.run calls, the graph holds
input queues (`FIFOQueueV2`, `RandomShuffleQueueV2`, `PaddingFIFOQueueV2`, `PriorityQueueV2`
ops), and the training run dequeues from them (`QueueDequeueManyV2`, an async kernel that writes
no event). While it waits, none of the training run's executor events (the ones consuming its
run id) is active, and nothing the breakdown ranks above framework covers the time: that idle
time inside the training runs is the wait. Without run ids (a trace that dropped them) the run's
own work cannot be told from the queue runners' and nothing is said; nor without another thread
calling Session.run during the steps (a queue that nothing fills from another thread).

What-if: a tf.data pipeline that prefetches produces the next batch while the step runs, so the
step loses the wait: 1 / (1 - wait). A lower bound: the queue runners' Python threads, one
Session.run per enqueue, also take the cores the step's ops run on.
"""

from __future__ import annotations

import re

import numpy as np

from analyzers.context import Context
from analyzers.events import EndTimes
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.input_pipeline import MIN_INPUT_WAIT
from analyzers.steps import covered_outside, runs_beside, runs_work, session_runs

ID = "queue_input"
_QUEUE_OPS = re.compile(r"^(FIFOQueue|PaddingFIFOQueue|RandomShuffleQueue|PriorityQueue)(V2)?$")
# Time the run's own work does not cover but that is not a queue wait: input waits on a tf.data
# iterator, copies, collectives, device kernels (a GPU run waits for its kernels after the
# executor has launched them).
_COVERING_KINDS = ("input_wait", "h2d", "d2h", "d2d", "collective", "device_compute")


def detect(ctx: Context) -> Finding | None:
    if not ctx.steps.source.startswith("session:") or ctx.n_steps == 0:
        return None
    queues = [n for n in ctx.present("op_type") if _QUEUE_OPS.match(n)]
    if not queues:
        return None
    ev = ctx.events
    rows, keys = session_runs(ev, ctx.steps.thread)
    if not (keys >= 0).any():
        return None
    t = ctx.steps.table
    first, last = int(t["start_ns"].iloc[0]), int(t["end_ns"].iloc[-1])
    fillers, fill_runs = _queue_runners(ctx, first, last)
    if not fillers:
        return None  # a queue nobody fills from another thread (a sync-replicas token queue)
    rs = np.clip(ev["start_ns"].to_numpy(np.int64)[rows], first, last)
    re_ = np.clip(EndTimes(ev)[rows], first, last)
    ws, we = runs_work(ev, keys)
    # The step thread's own process: another worker's work covers none of its waits.
    other = ctx.in_steps(kinds=_COVERING_KINDS, host=ctx.step_host,
                         columns=("start_ns", "end_ns"))
    cs = np.concatenate([ws, other["start_ns"].to_numpy(np.int64)])
    ce = np.concatenate([we, other["end_ns"].to_numpy(np.int64)])
    total = ctx.total_step_ns
    wait = covered_outside(rs, re_, cs, ce) / total if total > 0 else 0.0
    if wait < MIN_INPUT_WAIT:
        return None
    step_ms = ctx.steps.median_step_ns() / 1e6
    queue_ops = ctx.in_steps(name=lambda n: bool(_QUEUE_OPS.search(n.rsplit(":", 1)[-1])),
                             columns=("name", "dur_ns"))
    evidence = [
        f"{wait:.0%} of step time the training run has none of its own ops running "
        f"({wait * step_ms:.1f} ms of a {step_ms:.1f} ms median step): its dequeue waits "
        "for the input queue (QueueDequeueMany is an async kernel and writes no event; the "
        "step breakdown counts this time as framework)",
        f"input queues in the graph ({', '.join(sorted(queues))}), filled by {fillers} other "
        f"thread(s) making {fill_runs:.0f} Session.run calls per step: queue runners",
        "estimate: a prefetched tf.data pipeline produces the next batch while the step "
        "runs, 1 / (1 - wait); a lower bound, the queue runners' Python threads also take "
        "the cores",
    ]
    return Finding(
        id=ID,
        title="The training step waits on a queue-runner input pipeline",
        step_fraction=wait,
        speedup=speedup_from_saving(wait),
        evidence=evidence,
        remedy=("Replace the queue runners (tf.compat.v1.train.string_input_producer, "
                "TFRecordReader, tf.compat.v1.train.batch/shuffle_batch) with tf.data: "
                "tf.data.TFRecordDataset(files).batch(B).map(lambda r: tf.io.parse_example(r, "
                "spec), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE), read "
                "with tf.compat.v1.data.make_one_shot_iterator (or returned from an Estimator's "
                "input_fn): its producers are C++ threads, not one Python Session.run per "
                "enqueue under the GIL."),
        numbers={"wait_fraction": round(wait, 4), "queue_ops": sorted(queues),
                 "filling_threads": fillers, "filling_runs_per_step": round(fill_runs, 1)},
        top_events=heaviest_events(queue_ops) if len(queue_ops) else [],
    )


def _queue_runners(ctx: Context, first: int, last: int) -> tuple[int, float]:
    """Threads of the step-driving one's process, other than it, that call Session.run during
    the steps (from `first` to `last`), and their calls per step."""
    ev = ctx.events
    rows, _ = session_runs(ev, None)
    start = ev["start_ns"].to_numpy(np.int64)[rows]
    other = rows[(start >= first) & (start < last) & runs_beside(ev, rows, ctx.steps.thread)]
    return int(ev["line_id"].iloc[other].nunique()), len(other) / ctx.n_steps
