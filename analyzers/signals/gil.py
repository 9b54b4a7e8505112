"""The training thread waiting to take the GIL back from another Python thread.

Signal (TF 2.x, docs/trace-signals.md, "GIL waits"): TensorFlow's Python bindings drop the GIL
around each call into the runtime (`TFE_Py_ExecuteCancelable` for a tf.function call,
`TFE_Py_FastPathExecute_C` for an eager op) and take it back before returning. Their children
(`EagerExecute` and below) end when the runtime's work ends; what is left of the binding's span
after its last child is the return to Python. Alone that takes 4-110 us (p50 4-9 us over eight
TF 2.21 jobs); while another thread runs Python it waits for the GIL: 1-24 ms per call in Keras
fits fed by a PyDataset, ending as the generator's `PyFunc` returned (99-100% of the wait under
one, one worker) or while Keras' worker threads, which the trace does not hold, built batches.

That wait is step time the loop spends neither running the step nor in its own Python: without
this signal it reads as per-call overhead (a 17 ms Keras step read 74% overhead, of which 11 ms
was this).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.context import Context
from analyzers.events import EndTimes, cat_mask, thread_mask
from analyzers.signals.input_pipeline import PYTHON_OPS, analyze_input_pipeline
from analyzers.steps import covered_during, covered_per_step

# The bindings' spans that return into Python (pywrap_tfe).
API_PREFIX = "TFE_Py_"
# A return this long is a wait: alone it took at most 0.11 ms in the jobs above.
MIN_WAIT_NS = 200_000
# Below this share of step time the waits are left inside per-call overhead.
MIN_SHARE = 0.05


@dataclass(frozen=True)
class GilWaits:
    start_ns: np.ndarray  # the waits on the call threads, in or around the steps
    end_ns: np.ndarray
    per_step_ns: np.ndarray  # their time inside each step of ctx.steps.table
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
    on_calls = np.zeros(len(ev), bool)
    for _, thread in ctx.call_threads:
        on_calls |= thread_mask(ev, thread)
    rows = np.flatnonzero(on_calls)
    starts = ev["start_ns"].to_numpy(np.int64)[rows]
    ends = EndTimes(ev)[rows]
    is_api = cat_mask(ev["name"], lambda n: n.startswith(API_PREFIX))[rows]
    inside = (ends > w_start[0]) & (starts < w_end[-1])
    if not (is_api & inside).any():
        return none
    # Sorted by start, a span's descendants follow it up to the first event starting at or after
    # its end (events on one thread nest); the last of them to end is its last child.
    order = np.lexsort((-ends, starts))
    starts, ends, is_api = starts[order], ends[order], is_api[order]
    api = np.flatnonzero(is_api & inside[order])
    stop = np.searchsorted(starts, ends[api], side="left")
    last = np.array([ends[i + 1:j].max(initial=starts[i]) for i, j in zip(api, stop, strict=True)],
                    dtype=np.int64)
    wait_s, wait_e = last, ends[api]
    long = wait_e - wait_s >= MIN_WAIT_NS
    wait_s, wait_e = wait_s[long], wait_e[long]
    per_step = covered_per_step(wait_s, wait_e, w_start, w_end)
    total = int(t["dur_ns"].sum())
    waited = int(per_step.sum())
    py = ev[cat_mask(ev["op_type"], PYTHON_OPS.__contains__)]
    ps = py["start_ns"].to_numpy(np.int64)
    during = covered_during(wait_s, wait_e, ps, ps + py["dur_ns"].to_numpy(np.int64))
    whole = int((wait_e - wait_s).sum())  # one thread's tails never overlap
    return GilWaits(wait_s, wait_e, per_step, int(long.sum()),
                    waited / total if total else 0.0,
                    during / whole if whole else 0.0)
