"""The training thread waiting to take the GIL back from another Python thread, and who holds it.

Signal (TF 2.x, docs/trace-signals.md, "GIL waits"; the waits: analyzers/gil_returns.py): the
tail of a binding's span (`TFE_Py_*`) after its last child. In Keras fits fed by a PyDataset they
ended as the generator's `PyFunc` returned (99-100% of the wait under one, one worker) or while
Keras' worker threads, which the trace does not hold, built batches. That wait is step time the
loop spends neither running the step nor in its own Python: without this signal it read as
per-call overhead (a 17 ms Keras step read 74% overhead, of which 11 ms was this).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.context import Context
from analyzers.events import cat_mask, thread_mask
from analyzers.gil_returns import return_waits
from analyzers.signals.input_pipeline import PYTHON_OPS, analyze_input_pipeline
from analyzers.steps import covered_during

# Below this share of step time the waits are left inside per-call overhead.
MIN_SHARE = 0.05


@dataclass(frozen=True)
class GilWaits:
    start_ns: np.ndarray  # the waits on the call threads, in or around the steps
    end_ns: np.ndarray
    per_step_ns: np.ndarray  # their time in each step of ctx.steps.table (its gil_wait column)
    count: int
    share: float  # of all step time
    during_python_ops: float  # share of the wait while a traced Python op ran on another thread

    @property
    def ms_per_step(self) -> float:
        """Mean: the waits come and go (a step waits as a generator call happens to span its
        return), so the median step often has none."""
        return float(self.per_step_ns.mean()) / 1e6 if len(self.per_step_ns) else 0.0

    @property
    def found(self) -> bool:
        return self.count > 0


def gil_waits(ctx: Context) -> GilWaits:
    """The call threads' waits to re-enter Python, per step; read once per analysis."""
    return ctx.memo("gil_waits", lambda: _gil_waits(ctx))


def input_holds_gil(ctx: Context) -> GilWaits | None:
    """The waits, when the input pipeline runs Python (from_generator, py_function) and they
    hold MIN_SHARE of step time: its Python is then the likeliest holder, traced (its ops span
    the waits) or not (a Keras PyDataset's worker threads feed its generator)."""
    gil = gil_waits(ctx)
    if gil.share < MIN_SHARE:
        return None
    pipe = analyze_input_pipeline(ctx)
    return gil if pipe.present and (pipe.python_calls_per_step > 0 or pipe.generator) else None


def _gil_waits(ctx: Context) -> GilWaits:
    t = ctx.steps.table
    w_start = t["start_ns"].to_numpy(np.int64)
    w_end = t["end_ns"].to_numpy(np.int64)
    none = GilWaits(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(len(t), np.int64), 0,
                    0.0, 0.0)
    if not len(t) or not ctx.call_threads:
        return none
    ev = ctx.events
    if len(ctx.call_threads) == 1:  # the step thread: the breakdown read its waits
        wait_s, wait_e = ctx.steps.gil_waits
    else:
        on_calls = np.zeros(len(ev), bool)
        for _, thread in ctx.call_threads:
            on_calls |= thread_mask(ev, thread)
        wait_s, wait_e = return_waits(ev, on_calls, int(w_start[0]), int(w_end[-1]))
    if not len(wait_s):
        return none
    # The step breakdown's share (the waits on the step thread that no op or copy overlaps), so
    # the finding and the breakdown agree.
    per_step = t["gil_wait"].to_numpy(np.int64)
    total = int(t["dur_ns"].sum())
    waited = int(per_step.sum())
    py = ev[cat_mask(ev["op_type"], PYTHON_OPS.__contains__)]
    ps = py["start_ns"].to_numpy(np.int64)
    during = covered_during(wait_s, wait_e, ps, ps + py["dur_ns"].to_numpy(np.int64))
    whole = int((wait_e - wait_s).sum())  # one thread's tails never overlap
    return GilWaits(wait_s, wait_e, per_step, len(wait_s),
                    waited / total if total else 0.0,
                    during / whole if whole else 0.0)
