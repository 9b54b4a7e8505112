"""The step-driving thread's op executions, each with the kernel execution inside it
(docs/trace-signals.md, "Eager execution"): what the eager, retracing and per-call detectors all
read. On that thread every op or tf.function run from Python is an `EagerLocalExecute: <op>` span;
its `EagerKernelExecute` child is the run itself (for a function's first call, the rest of the
span is instantiation). Read once per analysis and shared."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.events import GRAPH_BUILDING
from analyzers.steps import inside

PREFIX = "EagerLocalExecute: "
KERNEL = "EagerKernelExecute"
_FUNCTIONS = ("__inference_", "__forward_", "__backward_")
# Eager executions per step that make a loop eager (eager_dispatch.MIN_OPS_PER_STEP).
EAGER_LOOP_OPS = 20
# An eager summary write, and the writer's flush.
_EAGER_WRITE = re.compile(r"^Write\w*Summary$")
_EAGER_FLUSH = "FlushSummaryWriter"


def executions(ctx: Context) -> pd.DataFrame:
    """One row per execution on the step thread, in start order: `op` (the name after the
    prefix), `function` (a tf.function call), `kind`, `start_ns`, `end_ns`, `dur_ns`, and its
    kernel execution: `run_ns` (0 when the trace has none inside), `run_start_ns`, `run_end_ns`
    (the execution's own span when none)."""
    return ctx.memo("executions", lambda: _executions(ctx))


def eager_summaries(ctx: Context) -> np.ndarray:
    """Per execution (`executions` row), whether it is a summary written eagerly from Python in
    a step that calls a tf.function: each `Write*Summary` with the ops run since the step's
    last function call, fetch or write (a histogram's ReadVariableOp, Min, Max, OneHot, Sum),
    and the writer's flushes. With the model compiled, eager ops right before a write are the
    summary's; in an eager loop they could be the model's, and none are marked
    (docs/trace-signals.md, "Debugging and summary ops in the step")."""
    return _eager_summary_work(ctx)[0]


def eager_summary_spans(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """The time each eagerly written summary takes on the step thread: from the end of the
    function call, fetch or write before it (the step's start when none) to the end of its
    write; conversions and Python inside are the summary's too."""
    return _eager_summary_work(ctx)[1]


def _eager_summary_work(ctx: Context) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    return ctx.memo("eager_summaries", lambda: _eager_summaries(ctx))


def _eager_summaries(ctx: Context) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    ex = executions(ctx)
    marked = np.zeros(len(ex), dtype=bool)
    spans: tuple[list[int], list[int]] = ([], [])
    ops = ex["op"].to_numpy()
    # Tested once per distinct op: an eager loop's trace has a million executions.
    write_ops = [op for op in pd.unique(ops) if _EAGER_WRITE.match(op)]
    writes = np.flatnonzero(np.isin(ops, write_ops)) if write_ops else np.zeros(0, np.int64)
    if not len(writes):
        return marked, (np.zeros(0, np.int64), np.zeros(0, np.int64))
    start, end = ex["start_ns"].to_numpy(np.int64), ex["end_ns"].to_numpy(np.int64)
    row = ctx.steps.row_at(start)
    step_start = ctx.steps.table["start_ns"].to_numpy(np.int64)
    function = ex["function"].to_numpy(bool)
    barrier = function | (ex["kind"].to_numpy() == "input_wait")
    calling = np.unique(row[function & (row >= 0)])
    for w in writes:
        if row[w] < 0 or row[w] not in calling:
            continue
        marked[w] = True
        k = w - 1
        while k >= 0 and row[k] == row[w] and not barrier[k] and not marked[k]:
            marked[k] = True
            k -= 1
        spans[0].append(int(end[k]) if k >= 0 and row[k] == row[w] else int(step_start[row[w]]))
        spans[1].append(int(end[w]))
    marked |= (ops == _EAGER_FLUSH) & np.isin(row, calling)
    # Beside a loop that is eager itself (a compiled loss amid eager ops), what precedes a
    # write may be the model's: nothing is marked then.
    rest = ~function & ~np.isin(ex["kind"].to_numpy(), ("input_wait", "convert")) & ~marked
    if rest.sum() >= EAGER_LOOP_OPS * max(ctx.n_steps, 1):
        return np.zeros(len(ex), dtype=bool), (np.zeros(0, np.int64), np.zeros(0, np.int64))
    return marked, (np.array(spans[0], np.int64), np.array(spans[1], np.int64))


def graph_builds(ctx: Context) -> pd.DataFrame:
    """`tf.function-graph_building` spans in the steps (any thread of the step thread's host:
    another worker's tracing is its own): step_idx, start_ns, end_ns."""
    return ctx.memo("graph_builds", lambda: ctx.in_steps(
        name=GRAPH_BUILDING.__eq__, host=ctx.step_host,
        columns=("step_idx", "start_ns", "end_ns")))


def while_tracing(ctx: Context, start_ns: np.ndarray) -> np.ndarray:
    """Which of these times fall in graph building (tf.function tracing): conversions made there
    are graph construction, not per-step tensor creation."""
    builds = graph_builds(ctx)
    if not len(builds) or not len(start_ns):
        return np.zeros(len(start_ns), bool)
    return inside(start_ns, builds["start_ns"].to_numpy(), builds["end_ns"].to_numpy())


def _executions(ctx: Context) -> pd.DataFrame:
    columns = ("name", "kind", "start_ns", "end_ns", "dur_ns")
    # Every Python thread's line is named `python`: keep to the calling threads' (plane, id).
    # Their calls do not overlap (a worker's RPC threads take turns), so one list holds them.
    parts = [ctx.in_steps(line=line, thread=thread, columns=columns,
                          name=lambda n: n.startswith(PREFIX) or n == KERNEL)
             for line, thread in ctx.call_threads]
    ev = (pd.concat(parts, ignore_index=True) if parts
          else pd.DataFrame({c: [] for c in columns}))
    names = ev["name"].astype(str)
    is_exec = names.str.startswith(PREFIX).to_numpy()
    ex = ev[is_exec].sort_values("start_ns", kind="stable")
    start, end = ex["start_ns"].to_numpy(np.int64), ex["end_ns"].to_numpy(np.int64)
    k_start = ev["start_ns"].to_numpy(np.int64)[~is_exec]
    k_end = ev["end_ns"].to_numpy(np.int64)[~is_exec]
    # A kernel execution belongs to the latest execution started at or before it and still open
    # (executions do not nest on one thread: a function's ops run on executor threads).
    pos = np.searchsorted(start, k_start, side="right") - 1
    inside = (pos >= 0) & (k_start < end[np.maximum(pos, 0)])
    owner = pos[inside]
    run_ns = np.bincount(owner, weights=(k_end - k_start)[inside], minlength=len(ex))
    run_start, run_end = start.copy(), end.copy()
    has_run = np.zeros(len(ex), bool)
    has_run[owner] = True
    run_start[has_run] = np.iinfo(np.int64).max
    run_end[has_run] = np.iinfo(np.int64).min
    np.minimum.at(run_start, owner, k_start[inside])
    np.maximum.at(run_end, owner, k_end[inside])
    op = names[is_exec].loc[ex.index].str.removeprefix(PREFIX)
    return pd.DataFrame({
        "op": op.to_numpy(), "function": op.str.startswith(_FUNCTIONS).to_numpy(bool),
        "kind": ex["kind"].astype(str).to_numpy(), "start_ns": start, "end_ns": end,
        "dur_ns": ex["dur_ns"].to_numpy(np.int64), "run_ns": run_ns.astype(np.int64),
        "run_start_ns": run_start, "run_end_ns": run_end})
