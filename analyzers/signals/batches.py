"""Batches each step reads: more than one where a call runs several (Keras' steps_per_execution,
a tf.range loop inside the tf.function, the reference trainer's --steps-per-call) or pulls from
several pipelines.

Signal (docs/trace-signals.md, "Several batches per call"): one consumer-side GetNext per batch,
in the function or outside it, on whatever thread runs it; counted per step of one worker.
Counts that say what a batch is made of (files opened, records read, parse ops) are per batch:
per step they grow with the batches a call reads.
"""

from __future__ import annotations

import re

from analyzers.context import Context

FETCH = re.compile(r"^(IteratorGetNextOp::DoCompute|IteratorGetNextAsOptionalOp::DoCompute)$")


def batches_per_step(ctx: Context) -> int:
    """Batches each step (train-function call) reads, at least one."""
    def count() -> int:
        if ctx.n_steps == 0:
            return 1
        fetches = ctx.in_steps(name=FETCH.match, columns=("host",))
        if fetches.empty:
            return 1
        return max(1, round(len(fetches) / ctx.worker_steps(fetches["host"])))
    return ctx.memo("batches_per_step", count)
