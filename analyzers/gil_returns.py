"""Where a Python thread waits to take the GIL back as a call into TensorFlow returns.

TensorFlow's Python bindings drop the GIL around each call into the runtime
(`TFE_Py_ExecuteCancelable` for a tf.function call, `TFE_Py_FastPathExecute_C` for an eager op)
and take it back before returning. Their children (`EagerExecute` and below) end when the
runtime's work ends; what is left of the binding's span after its last child is the return to
Python. Alone that takes 4-110 us; while another thread runs Python it is a wait for the GIL of
1-24 ms (docs/trace-signals.md, "GIL waits"). Read on event tables, before any Context exists:
the step breakdown gives these waits a category of their own.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.events import EndTimes, cat_mask

# The bindings' spans that return into Python (pywrap_tfe).
API_PREFIX = "TFE_Py_"
# A return this long is a wait: alone it took at most 0.11 ms over eight TF 2.21 jobs.
MIN_WAIT_NS = 200_000


def has_api_spans(events: pd.DataFrame) -> bool:
    """Whether any binding span is in the table (none in PyTorch or TF1 timeline traces): a
    look at the name column's categories, so a trace without them costs no per-row mask."""
    return any(str(c).startswith(API_PREFIX) for c in events["name"].cat.categories)


def return_waits(events: pd.DataFrame, on_thread: np.ndarray, lo: int, hi: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The waits ([start, end) ns, disjoint, in start order) of the bindings' spans on the rows
    `on_thread` (a mask of one thread's events, or of several threads that take turns) that
    overlap [lo, hi)."""
    none = np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows = np.flatnonzero(on_thread)
    if not len(rows):
        return none
    starts = events["start_ns"].to_numpy(np.int64)[rows]
    ends = EndTimes(events)[rows]
    is_api = cat_mask(events["name"], lambda n: n.startswith(API_PREFIX))[rows]
    near = (ends > lo) & (starts < hi)
    if not (is_api & near).any():
        return none
    # Sorted by start (the longer first on a tie), a span's descendants follow it up to the first
    # event starting at or after its end (events on one thread nest); the last of them to end
    # is its last child.
    order = np.lexsort((-ends, starts))
    starts, ends = starts[order], ends[order]
    api = np.flatnonzero((is_api & near)[order])
    first, stop = api + 1, np.searchsorted(starts, ends[api], side="left")
    # max(ends[first:stop]) for every span at once: reduceat over (first, stop) pairs, read at
    # the pairs' first index (a sentinel closes the last slice).
    bounds = np.empty(2 * len(api), np.intp)
    bounds[0::2], bounds[1::2] = first, stop
    most = np.maximum.reduceat(np.append(ends, 0), bounds)[0::2]
    wait_s, wait_e = most, ends[api]
    # A span without children says nothing of when the runtime's work ended: its time may be
    # its own.
    long = (stop > first) & (wait_e - wait_s >= MIN_WAIT_NS)
    # An outer span's wait comes after those of the spans nested in it.
    by_start = np.argsort(wait_s[long], kind="stable")
    return wait_s[long][by_start], wait_e[long][by_start]
