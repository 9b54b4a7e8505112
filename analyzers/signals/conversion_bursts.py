"""Host-side conversions come in bursts, and the Python between them is theirs.

A casting layer or a per-step preprocessing function on the training thread converts and casts
tensor after tensor (`convert_to_tensor`, eager `Cast`), with its own Python between the events:
that Python is what the conversions cost too, and it goes with them when the work moves into
tf.data. On the reference `casting` preset 82 conversions a step covered 1.16 ms of a 4.49 ms
burst (gaps 19 µs median, up to 1.1 ms), and the 3.3 ms between them read as `per_step_overhead`,
medium, in one diagnosis run (docs/trace-signals.md, "Conversion bursts").

A burst is a run of consecutive conversions on the step thread, in one step, each within
MAX_GAP_NS of the previous one, with no other work of that thread (a function call, an op, an
input wait, a copy back) starting between them. A burst that copies to a device (`DeepCopy`: the
per-device input copies of a Python loop) is `serialized_h2d`'s, not a casting layer's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.context import Context
from analyzers.signals.executions import eager_summary_spans, executions, while_tracing
from analyzers.steps import inside

# Longer than the casting layer's longest gap (1.1 ms), far shorter than a step worth profiling.
MAX_GAP_NS = 2_000_000
# The step thread's own work that ends a burst.
_BREAKS = ("input_wait", "host_op", "collective", "d2h", "launch", "sync")
# A conversion that copies an input to a device: the burst is a per-device copy loop.
_COPY = "EagerLocalExecute: DeepCopy"


@dataclass(frozen=True)
class Bursts:
    start_ns: np.ndarray
    end_ns: np.ndarray
    copies: np.ndarray  # the burst copies inputs to devices
    glue_ns: np.ndarray  # per burst: the time between its conversions that none covers


def conversion_bursts(ctx: Context) -> Bursts:
    """The training thread's conversion bursts outside graph building (function tracing)."""
    return ctx.memo("conversion_bursts", lambda: _bursts(ctx))


def _bursts(ctx: Context) -> Bursts:
    empty = Bursts(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool),
                   np.zeros(0))
    if ctx.main_line is None:
        return empty
    conv = ctx.in_steps(kinds=("convert",), line=ctx.main_line, host=ctx.step_host,
                        columns=("name", "start_ns", "end_ns", "step_idx")
                        ).sort_values("start_ns")
    conv = conv[~while_tracing(ctx, conv["start_ns"].to_numpy())]
    # A summary written eagerly converts its arguments too: `debug_ops_in_step`'s.
    summary_s, summary_e = eager_summary_spans(ctx)
    if len(summary_s):
        conv = conv[~inside(conv["start_ns"].to_numpy(np.int64), summary_s, summary_e)]
    if len(conv) < 2:
        return empty
    s = conv["start_ns"].to_numpy(np.int64)
    e = np.maximum.accumulate(conv["end_ns"].to_numpy(np.int64))
    step = conv["step_idx"].to_numpy()
    ex = executions(ctx)
    breaks = np.sort(np.concatenate([
        ex.loc[ex["function"].to_numpy(), "start_ns"].to_numpy(np.int64),
        ctx.in_steps(kinds=_BREAKS, line=ctx.main_line, host=ctx.step_host,
                     columns=("start_ns",))["start_ns"].to_numpy(np.int64)]))
    gap_start, gap_end = e[:-1], s[1:]
    # Work of the thread starting inside a gap (between the previous conversion's end and the
    # next one's start) splits the burst there.
    blocked = (np.searchsorted(breaks, gap_end, side="left")
               > np.searchsorted(breaks, gap_start, side="left"))
    joined = ((gap_end - gap_start < MAX_GAP_NS) & (step[1:] == step[:-1]) & ~blocked)
    first = np.concatenate([[True], ~joined])
    last = np.concatenate([~joined, [True]])
    burst = np.cumsum(first) - 1
    n = int(burst[-1]) + 1
    # A conversion that starts inside the previous one (Keras' `convert_to_tensor` around a
    # `tf.constant`) leaves no gap: a negative one would take time off the burst.
    glue = np.bincount(burst[1:], weights=np.where(joined, np.maximum(gap_end - gap_start, 0), 0),
                       minlength=n)
    copies = np.bincount(burst, weights=(conv["name"] == _COPY).to_numpy(), minlength=n) > 0
    return Bursts(s[first], e[last], copies, glue)
