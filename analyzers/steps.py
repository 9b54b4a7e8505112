"""Step segmentation and the per-step time breakdown.

Steps come, in order of preference, from
1. step markers: host events carrying a `step_num` stat (`tf.profiler.experimental.Trace(name,
   step_num=..., _r=1)`, Keras' `train` trace, PyTorch's `ProfilerStep#N`);
2. xprof's derived `Steps` line on a device plane (older TF saved it; docs/trace-signals.md);
3. repeated calls of one compiled train function (`__inference_*` on the host), step i running from
   call i to call i+1;
4. Session.run calls (TF1 graph mode: `tf.compat.v1.Session`, Estimator,
   MonitoredTrainingSession): the `SessionRun` events on one host thread that ran optimizer
   updates, step i running from run i to run i+1 (a checkpoint or summary run between two belongs
   to the step); every run of that thread when none updates;
5. an eager loop's batch fetches: repeated eager `IteratorGetNext` executions on one host thread
   (a plain-Python step, or Keras with run_eagerly=True, pulls one batch per step), or a PyTorch
   loop's DataLoader fetches, step i running from fetch i to fetch i+1;
and a trace with none of these gets an explicit "no steps found".

A step spans from its marker's start to the next marker's start, so time between steps (Python,
input fetch outside the marker) belongs to a step. The breakdown gives each instant of a step to
the highest-priority category active then (CATEGORIES order): compute first, so input waits, copies
and collectives count only where they are exposed, not where they overlap compute. The step
thread's waits for the GIL as TensorFlow calls return (analyzers/gil_returns.py) are no event of
their own: they are the ends of framework spans, and take their category from there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyzers.events import (
    LOADER_FETCH,
    NEW_ITERATOR,
    OP_KINDS,
    RUN_GRAPH,
    SESSION_RUN,
    STEPS_LINE,
    TIMELINE_RUN,
    TRAINING_OP,
    EndTimes,
    Thread,
    cat_map,
    cat_mask,
    chunks,
    find_sorted,
    in_sorted,
    is_device_plane,
    line_class,
    on_thread,
    present_stat,
    thread_mask,
    with_end,
)
from analyzers.gil_returns import has_api_spans, return_waits

# Breakdown categories, highest priority first, with the event kinds feeding each. A launch (the
# host issuing device work, CUDA API calls and the ops around them) outranks a wait: an iterator
# fetching ahead on its own thread does not hold up a device that the launching thread is feeding
# (docs/trace-signals.md, "GPU traces"). CPU traces have no launch events.
CATEGORIES: dict[str, tuple[str, ...]] = {
    "device_compute": ("device_compute",),
    "host_compute": ("host_op",),
    "collective": ("collective",),
    "copy_d2d": ("d2d",),
    "copy_h2d": ("h2d", "d2h"),
    "launch": ("launch",),
    "input_wait": ("input_wait",),
    "convert": ("convert",),
    # No event has this kind: the step thread's waits to take the GIL back, the tail of a
    # framework span (_add_gil_waits).
    "gil_wait": ("gil_wait",),
    "framework": ("framework",),
    # The host blocked until the device catches up (a synchronize, a copy to pageable memory), or
    # a stream waiting on another, while nothing above ran: no device work, no host work.
    "device_sync": ("sync",),
}
IDLE = "python_other"  # step time no event covers: Python code, waits the tracer does not see
ALL_CATEGORIES = (*CATEGORIES, IDLE)

# A window's first or last step this many times the median step holds a one-time cost, not the
# steady state: the first call's tracing and compilation (17-112x on Keras fits profiled from
# their start), a new iterator filling its buffers (2.5-8.2x), the profiler's start or stop
# (2.05-5.8x) (docs/trace-signals.md, "Uneven steps"). Left out from EDGE_FREE_FROM steps on.
EDGE_OUTLIER = 2.0
EDGE_FREE_FROM = 5
# One-time work: graph building, XLA compilation (CPU/GPU compiler passes).
_WARMUP = re.compile(r"^tf\.function-graph_building$|Compiler::|XlaCompile|BuildXlaComputation|"
                     r"CompileGraph")
_COUNTER = re.compile(r"(#|\s)\d+$")
# A parameter server's `EagerLocalExecuteAsync: __inference_step_<id>_partitioned_<n>_1` runs
# its part of a worker's step: not a step of its own (docs/trace-signals.md, "Parameter servers").
_TRAIN_FN = re.compile(r"^(?!EagerLocalExecuteAsync: ).*__inference_(?!.*_partitioned_).*"
                       r"(?:train|step)", re.IGNORECASE)
_EAGER_FETCH = re.compile(r"^EagerLocalExecute: IteratorGetNext(?:AsOptional)?$")


def _batch_fetch(name: str) -> bool:
    # PyTorch's DataLoader fetch is the same signal in an eager loop traced without ProfilerStep
    # markers (the torch.autograd.profiler API; docs/trace-signals.md, "PyTorch DataLoader").
    return bool(_EAGER_FETCH.match(name) or LOADER_FETCH.match(name))


# The executor's unit of work for a Session.run, on an inter-op thread, nesting the ops it runs
# (docs/trace-signals.md, "TF1 sessions").
_PROCESS = "ExecutorState::Process"
# Optimizer updates (tf.compat.v1.train optimizers, Keras 2 optimizers in graph mode): the run
# that applies them is a training step; other runs (init, checkpoint, summary, eval) are not.
_APPLY_OP = re.compile(r"^(Resource)?(Sparse)?Apply[A-Z]\w*$")
# A backward pass runs the forward pass's ops again and more, then an update per variable:
# where no op name says which function trains (XLA names its kernels after HLO: `MatMul.20`,
# `divide_subtract_fusion.3`), the one with this many times the others' ops per call does (95
# against 23 in an XLA-compiled Keras 3 fit with validation; 237 against 6-37 without XLA).
TRAINING_OPS_RATIO = 1.5


@dataclass
class Steps:
    table: pd.DataFrame  # step, start_ns, end_ns, dur_ns, one column per ALL_CATEGORIES (ns)
    source: str  # "markers:<name>", "function:<name>", "iterator:<name>" or "none"
    line: str | None = None  # the thread that drives the steps (markers or calls live there)
    # That thread as (host, plane, line id): several threads can share a line name (`python`).
    thread: Thread | None = None
    # Window-edge steps left out of the table (_trim_edges): step, start_ns, end_ns, dur_ns,
    # x_median (their length over the median step), warmup (tracing or compilation in them).
    left_out: list[dict] = field(default_factory=list)
    # Rows of the table whose step holds an epoch's end (what runs between epochs, evaluation
    # and a new iterator, is in it), and the steps of an epoch when known: from the markers'
    # numbers (_by_epoch, _epoch_rows), else the steps in which Python made a new input iterator
    # (_iterator_epochs).
    epoch_ends: np.ndarray = field(default_factory=lambda: np.zeros(0, np.intp))
    epoch_rows: int | None = None
    # The step thread's GIL waits (analyzers/gil_returns.py), [start, end) ns: the gil_wait
    # column's source, kept for the signal that says who held the GIL.
    gil_waits: tuple[np.ndarray, np.ndarray] = field(
        default_factory=lambda: (np.zeros(0, np.int64), np.zeros(0, np.int64)))

    @property
    def found(self) -> bool:
        return len(self.table) > 0

    def fractions(self) -> dict[str, float]:
        total = float(self.table["dur_ns"].sum())
        if total <= 0:
            return dict.fromkeys(ALL_CATEGORIES, 0.0)
        return {c: float(self.table[c].sum()) / total for c in ALL_CATEGORIES}

    def median_step_ns(self) -> float:
        return float(self.table["dur_ns"].median()) if self.found else 0.0

    def row_at(self, t: np.ndarray) -> np.ndarray:
        """Per instant (ns), the table row of the step holding it; -1 outside every step."""
        return window_at(self.table["start_ns"].to_numpy(np.int64),
                         self.table["end_ns"].to_numpy(np.int64), t)

    def mean_step_ns(self) -> float:
        """The mean step, which sets throughput (stalls included, unlike the median)."""
        return float(self.table["dur_ns"].mean()) if self.found else 0.0


def _main_thread(events: pd.DataFrame) -> tuple[str | None, Thread | None]:
    """The (line name, (host, plane, line id)) most of `events` sit on."""
    if not len(events):
        return None, None
    line, host, plane, line_id = events.groupby(["line", "host", "plane", "line_id"],
                                                observed=True).size().idxmax()
    return str(line), (str(host), str(plane), line_id)


def marker_family(name: str) -> str:
    """A step marker's name with its step counter folded: PyTorch's ProfilerStep#3 ->
    ProfilerStep#N; xprof's JSON export of TF's `train` marker, `train 3` -> `train`."""
    return _COUNTER.sub(lambda m: "#N" if m.group(1) == "#" else "", name)


def find_step_windows(events: pd.DataFrame
                      ) -> tuple[pd.DataFrame, str, tuple[str | None, Thread | None]]:
    """Return (DataFrame[step, start_ns, end_ns], source, (step-driving line name, its
    (host, plane, line id)))."""
    rows, step_num = present_stat(events, "step_num")
    host = cat_mask(events["plane"].iloc[rows], lambda p: not is_device_plane(p))
    rows, step_num = rows[host], step_num[host]
    marked = with_end(events[["name", "host", "line", "plane", "line_id", "start_ns",
                              "dur_ns"]].iloc[rows])
    if len(marked):
        root_rows, root = present_stat(events, "root")
        marked = marked.assign(step_num=step_num, root=in_sorted(rows, root_rows[root > 0]))
        if marked["root"].any():
            marked = marked[marked["root"]]
        # One marker family per name, with a step counter in the name folded: PyTorch's
        # ProfilerStep#3 -> ProfilerStep#N; xprof's JSON export of TF's `train` marker, `train 3`
        # -> `train`, as its xplane names it (docs/trace-signals.md, "Chrome trace JSON").
        marked = marked.assign(family=cat_map(marked["name"], marker_family))
        per_name = marked.groupby("family").agg(
            steps=("step_num", "nunique"), total=("dur_ns", "sum")
        )
        if len(per_name) > 1:
            # Keras 2 marks validation batches (`test`) as it marks training ones (`train`).
            trains = _training(events, [marked[marked["family"] == f] for f in per_name.index])
            if trains.any():
                per_name = per_name[trains]
        best = per_name.sort_values(["steps", "total"], ascending=False).index[0]
        m = marked[marked["family"] == best]
        if best == TIMELINE_RUN:
            # A timeline's runs are samples, steps apart: each is its own window.
            w = m.groupby("step_num").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
            w = w.reset_index().rename(columns={"step_num": "step"})
            return w.sort_values("start_ns", ignore_index=True), f"markers:{best}", _main_thread(m)
        w = _by_epoch(m)
        if len(w) >= 1:
            return _chain(w), f"markers:{best}", _main_thread(m)
    device_steps = _device_steps(events)
    if device_steps is not None:
        return device_steps
    host = cat_mask(events["plane"], lambda p: not is_device_plane(p))
    calls = events[host & cat_mask(events["name"], _TRAIN_FN.search)]
    if len(calls):
        per_name = calls.groupby("name", observed=True).agg(n=("dur_ns", "size"),
                                                             total=("dur_ns", "sum"))
        per_name = per_name[per_name["n"] >= 2]
        if len(per_name) > 1:
            # Keras 3 names its evaluation function as it names its training one
            # (multi_step_on_iterator): the validation batches outnumber the training ones.
            trains = _training(events, [calls[calls["name"] == f] for f in per_name.index])
            if trains.any():
                per_name = per_name[trains]
        if len(per_name):
            best = per_name.sort_values("total", ascending=False).index[0]
            c = calls[calls["name"] == best].sort_values("start_ns")
            # Calls carry no step number to line several workers' up: one host's are the steps.
            line, thread = _main_thread(c)
            c = c[(c["host"] == thread[0]).to_numpy()]
            # Nested duplicates of one call (EagerLocalExecute inside FunctionRun...) share a start.
            c = c.drop_duplicates("start_ns")
            w = pd.DataFrame({"step": np.arange(len(c)), "start_ns": c["start_ns"].to_numpy(),
                              "end_ns": EndTimes(c)[:]})
            return _chain(w), f"function:{best}", (line, thread)
    session = _session_steps(events, host)
    if session is not None:
        return session
    graph_runs = _run_graph_steps(events, host)
    if graph_runs is not None:
        return graph_runs
    fetches = events[host & cat_mask(events["name"], _batch_fetch)]
    if len(fetches) >= 3:
        line, thread = _main_thread(fetches)
        f = on_thread(fetches, thread).sort_values("start_ns")
        starts = f["start_ns"].to_numpy(np.int64)
        if len(starts) >= 3:
            return _between(starts), f"iterator:{f['name'].iloc[0]}", (line, thread)
    return (pd.DataFrame(columns=["step", "start_ns", "end_ns"], dtype=np.int64), "none",
            (None, None))


def _training(events: pd.DataFrame, spans: list[pd.DataFrame]) -> np.ndarray:
    """Which of several step markers or step functions (each a set of spans: events with
    start_ns, dur_ns) train: those whose spans hold a backward-pass or optimizer op
    (TRAINING_OP), else the one that runs TRAINING_OPS_RATIO times every other's ops per span;
    none when neither tells. The step's thread waits in its call while executor threads run
    the ops, and no training runs beside an evaluation."""
    starts = events["start_ns"].to_numpy(np.int64)
    named = starts[cat_mask(events["name"], TRAINING_OP.search)]
    ops = starts[cat_mask(events["kind"], OP_KINDS.__contains__)]
    held, per_span = np.zeros(len(spans), dtype=bool), np.zeros(len(spans))
    for i, sp in enumerate(spans):
        s = sp["start_ns"].to_numpy(np.int64)
        merged = merge_intervals(s, s + sp["dur_ns"].to_numpy(np.int64))
        held[i] = inside_merged(named, *merged).any()
        per_span[i] = inside_merged(ops, *merged).sum() / max(len(s), 1)
    if held.any():
        return held
    top = int(per_span.argmax())
    held[top] = per_span[top] > 0 and bool(
        (np.delete(per_span, top) * TRAINING_OPS_RATIO <= per_span[top]).all())
    return held


def _by_epoch(m: pd.DataFrame) -> pd.DataFrame:
    """Step windows (step, start_ns, end_ns, epoch) of one marker family. A thread's step
    numbers that start over begin a new epoch (Keras numbers its batches from 0 in each epoch;
    Keras 2 also writes `epoch_num`): the same number in two epochs is two steps, and `step`
    counts on through the window from the first epoch's numbers (11, then 0 -> 12), as Keras's
    global batch count does."""
    m = m.sort_values("start_ns", kind="stable", ignore_index=True)
    keys = [m["host"], m["plane"], m["line_id"]]
    restart = m.groupby(keys, observed=True, sort=False)["step_num"].diff().lt(0)
    m["epoch"] = restart.groupby(keys, observed=True, sort=False).cumsum().astype(np.int64)
    per_thread = m.groupby(keys, observed=True).size()
    if len(per_thread) > 1 and m["epoch"].max() > 0:
        # Workers' windows start in different epochs and their clocks differ: each marker takes
        # the epoch of the busiest thread's marker of its number nearest in time.
        host, plane, line_id = per_thread.idxmax()
        main = m.loc[(m["host"] == host) & (m["plane"] == plane) & (m["line_id"] == line_id),
                     ["start_ns", "step_num", "epoch"]]
        near = pd.merge_asof(m[["start_ns", "step_num"]], main.rename(columns={"epoch": "e"}),
                             on="start_ns", by="step_num", direction="nearest")
        m["epoch"] = near["e"].fillna(m["epoch"]).astype(np.int64).to_numpy()
    w = m.groupby(["epoch", "step_num"]).agg(start_ns=("start_ns", "min"),
                                             end_ns=("end_ns", "max")).reset_index()
    if w["epoch"].iat[-1] > 0:
        num = w["step_num"].to_numpy(np.int64)
        last = w.groupby("epoch")["step_num"].max().to_numpy(np.int64)
        offset = np.concatenate(([0], np.cumsum(last[:-1] + _stride(num, w["epoch"].to_numpy()))))
        w["step_num"] = num + offset[w["epoch"].to_numpy()]
    return w.rename(columns={"step_num": "step"})[["step", "start_ns", "end_ns", "epoch"]]


def _stride(num: np.ndarray, epoch: np.ndarray) -> int:
    """The gap between consecutive step numbers within an epoch (Keras: steps_per_execution)."""
    gaps = np.diff(num)[np.diff(epoch) == 0]
    return max(int(np.median(gaps)), 1) if len(gaps) else 1


def _session_steps(events: pd.DataFrame, host: np.ndarray) -> tuple[
        pd.DataFrame, str, tuple[str | None, Thread | None]] | None:
    """Steps from Session.run calls: the thread whose runs that applied optimizer updates last
    longest in all (or, with no update anywhere, whose runs do), and of its runs those that
    updated. By time in runs, not by count: a queue runner makes thousands of short runs."""
    is_run = host & cat_mask(events["name"], SESSION_RUN.__eq__)
    if is_run.sum() < 2:
        return None
    runs = with_end(events.loc[is_run, ["line", "host", "plane", "line_id", "start_ns",
                                        "dur_ns"]])
    runs["updates"] = _runs_updating(events, host, np.flatnonzero(is_run), runs)
    runs["updating_ns"] = np.where(runs["updates"], runs["dur_ns"], 0)
    per_thread = runs.groupby(["line", "host", "plane", "line_id"], observed=True).agg(
        updating=("updating_ns", "sum"), in_runs=("dur_ns", "sum"))
    line, host_name, plane, line_id = per_thread.sort_values(["updating", "in_runs"],
                                                             ascending=False).index[0]
    thread = (str(host_name), str(plane), line_id)
    r = on_thread(runs, thread).sort_values("start_ns")
    if r["updates"].sum() >= 2:
        r = r[r["updates"]]
    if len(r) < 2:
        return None
    w = pd.DataFrame({"step": np.arange(len(r)), "start_ns": r["start_ns"].to_numpy(),
                      "end_ns": r["end_ns"].to_numpy()})
    return _chain(w), f"session:{SESSION_RUN}", (str(line), thread)


def _run_graph_steps(events: pd.DataFrame, host: np.ndarray) -> tuple[
        pd.DataFrame, str, tuple[str | None, Thread | None]] | None:
    """Steps from a TF1 worker's Session.run calls through a server (`Session(server.target)`,
    between-graph replication): no `SessionRun`, but a short `RunGraph` on the calling thread
    per run, its partition ending in a `RunGraphDone` (docs/trace-signals.md, "Parameter
    servers"). A server's `RunGraph`s serve other processes' runs on TF's thread pools: only a
    caller's threads count. One process's runs come from more than one Python thread id (a
    one-thread loop's 245 runs sat on two), so all of the host's count. Steps run from one
    `RunGraph` to the next."""
    calls = events[host & cat_mask(events["name"], RUN_GRAPH.__eq__)
                   & cat_mask(events["line"], lambda line: line_class(line) == "other")]
    if len(calls) < 3:
        return None
    line, thread = _main_thread(calls)
    starts = np.sort(calls.loc[(calls["host"] == thread[0]).to_numpy(), "start_ns"]
                     .to_numpy(np.int64))
    if len(starts) < 3:
        return None
    return _between(starts), f"session:{RUN_GRAPH}", (line, thread)


def _runs_updating(events: pd.DataFrame, host: np.ndarray, run_rows: np.ndarray,
                   runs: pd.DataFrame) -> np.ndarray:
    """Per Session.run (rows `run_rows`, spans in `runs`), whether an optimizer update ran in it.
    A run's ops execute on the inter-op threads inside `ExecutorState::Process` events that
    consume the run's context id, while the calling thread waits in the run: an update op
    belongs to the run its enclosing Process event works for. That holds when several threads
    call Session.run at once (queue runners: their short runs overlap the training run's
    updates, 54 of 2,653 such runs in a TF 2.21 trace); without the ids (a JSON trace that
    dropped them) the run whose span holds the op's start is taken, right for one calling
    thread."""
    update_rows = np.flatnonzero(host & cat_mask(events["op_type"], _APPLY_OP.match))
    starts = events["start_ns"].to_numpy(np.int64)
    run_keys = _run_keys(events, "producer", run_rows)
    if (run_keys >= 0).any():
        c_rows, c_keys = _process_keys(events)
        # Each update op's enclosing Process event: the last one to start before it on its
        # thread, if it has not ended yet. One sort by (thread, start) for all threads.
        c_thread, u_thread = _thread_codes(events, c_rows), _thread_codes(events, update_rows)
        order = np.lexsort((starts[c_rows], c_thread))
        c_rows, c_keys, c_thread = c_rows[order], c_keys[order], c_thread[order]
        # Per update, the Process events of its thread are c_rows[lo:hi].
        lo = np.searchsorted(c_thread, u_thread, side="left")
        hi = np.searchsorted(c_thread, u_thread, side="right")
        u_start = starts[update_rows]
        at = np.empty(len(update_rows), dtype=np.intp)
        for t in np.unique(u_thread).tolist():  # one searchsorted per executor thread
            mine = u_thread == t
            a, b = lo[mine][0], hi[mine][0]
            at[mine] = a + np.searchsorted(starts[c_rows[a:b]], u_start[mine], side="right") - 1
        held = (at >= lo) & (at < hi)
        held[held] = EndTimes(events)[c_rows[at[held]]] > u_start[held]
        return in_sorted(run_keys, np.unique(c_keys[at[held]])) & (run_keys >= 0)
    updates = np.sort(starts[update_rows])
    return (np.searchsorted(updates, runs["end_ns"].to_numpy(np.int64))
            - np.searchsorted(updates, runs["start_ns"].to_numpy(np.int64))) > 0


def session_runs(events: pd.DataFrame, thread: Thread | None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The `SessionRun` rows on `thread` (every thread when None) and their run keys: the id
    each produces, with its host (ids are counters per process: two workers' traces reuse
    them), -1 where absent."""
    runs = np.flatnonzero(cat_mask(events["name"], SESSION_RUN.__eq__))
    if thread is not None:
        runs = runs[runs_on(events, runs, thread)]
    return runs, _run_keys(events, "producer", runs)


def runs_on(events: pd.DataFrame, rows: np.ndarray, thread: Thread) -> np.ndarray:
    """Per row of `rows` (SessionRun rows), whether it is on `thread`."""
    return thread_mask(events.iloc[rows], thread)  # a few rows: no column copied whole


def runs_beside(events: pd.DataFrame, rows: np.ndarray, thread: Thread) -> np.ndarray:
    """Per row of `rows` (SessionRun rows), whether another thread of `thread`'s process made
    it: a queue runner or a second session. Other hosts' runs are other workers' steps."""
    on_host = (events["host"].iloc[rows] == thread[0]).to_numpy()
    return on_host & ~runs_on(events, rows, thread)


def runs_work(events: pd.DataFrame, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the executor work (`ExecutorState::Process`, `ExecutorDoneCallback` and
    the other events consuming a run's context id) of the runs `keys` (session_runs')."""
    rows, used = present_stat(events, "consumer")
    rows = rows[in_sorted(_host_keyed(events, rows, used), np.unique(keys[keys >= 0]))]
    return events["start_ns"].to_numpy(np.int64)[rows], EndTimes(events)[rows]


def other_runs_work(events: pd.DataFrame, thread: Thread | None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The executor work of Session.run calls made from threads other than `thread`, the
    step-driving one, in its process: queue runners filling an input queue, a second session."""
    if thread is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows, keys = session_runs(events, None)
    return runs_work(events, keys[runs_beside(events, rows, thread)])


def _process_keys(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The `ExecutorState::Process` rows carrying a run id, and their run keys."""
    rows, ids = present_stat(events, "consumer")
    process = cat_mask(events["name"].iloc[rows], _PROCESS.__eq__)
    rows, ids = rows[process], ids[process]
    return rows, _host_keyed(events, rows, ids)


def _run_keys(events: pd.DataFrame, col: str, rows: np.ndarray) -> np.ndarray:
    """The context id `col` of `rows` with their host (-1 where absent)."""
    have, ids = present_stat(events, col)
    pos, hit = find_sorted(have, rows)
    out = np.full(len(rows), -1, dtype=np.int64)
    out[hit] = _host_keyed(events, rows[hit], ids[pos[hit]])
    return out


def _host_keyed(events: pd.DataFrame, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Run ids made unique across hosts: the host's code above the id's 48 bits (step ids count
    the runs of one process)."""
    host = events["host"].array.codes[rows].astype(np.int64)
    return (host << 48) | (ids & ((1 << 48) - 1))


def _thread_codes(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """One integer per row of `rows` naming its thread (host, plane, line id)."""
    host = events["host"].array.codes[rows].astype(np.int64)
    plane = events["plane"].array.codes[rows].astype(np.int64)
    line_id = events["line_id"].array.codes[rows].astype(np.int64)
    return (host << 40) | (plane << 20) | line_id


def _device_steps(events: pd.DataFrame
                  ) -> tuple[pd.DataFrame, str, tuple[None, None]] | None:
    """Steps from xprof's derived `Steps` line of a device plane (TF 2.2-2.4 saved it into the
    xplane; xprof's JSON export has it): one event per step the device ran. Devices run the same
    steps side by side, so one device's line gives the windows: the one with the most steps."""
    on_line = cat_mask(events["line"], STEPS_LINE.__eq__) & cat_mask(events["plane"],
                                                                      is_device_plane)
    if not on_line.any():
        return None
    marked = with_end(events.loc[on_line, ["plane", "start_ns", "dur_ns"]])
    per_plane = marked.groupby("plane", observed=True).size()
    plane = min(map(str, per_plane[per_plane == per_plane.max()].index))
    m = marked[marked["plane"] == plane].sort_values("start_ns")
    w = pd.DataFrame({"step": np.arange(len(m)), "start_ns": m["start_ns"].to_numpy(),
                      "end_ns": m["end_ns"].to_numpy()})
    # The step-driving host thread is not named by a device line.
    return _chain(w), f"device:{STEPS_LINE} ({plane})", (None, None)


def _between(starts: np.ndarray) -> pd.DataFrame:
    """Steps from one call (a batch fetch, a RunGraph) to the next, `starts` sorted: the last
    call opens a step the trace does not finish, so n calls make n - 1 steps."""
    w = pd.DataFrame({"step": np.arange(len(starts) - 1), "start_ns": starts[:-1],
                      "end_ns": starts[1:]})
    return _chain(w)


def _chain(w: pd.DataFrame) -> pd.DataFrame:
    w = w.sort_values("start_ns", ignore_index=True)
    nxt = w["start_ns"].shift(-1)
    w["end_ns"] = np.where(nxt.notna(), nxt.fillna(0), w["end_ns"]).astype(np.int64)
    return w[w["end_ns"] > w["start_ns"]].reset_index(drop=True)


def clip_to_steps(starts: np.ndarray, ends: np.ndarray, w_start: np.ndarray,
                  w_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split intervals at step boundaries: (interval index, step index, clipped start, end).
    Intervals outside every step are dropped; one spanning k steps appears k times."""
    if not len(w_start):
        none = np.zeros(0, dtype=np.int64)
        return none, none, none, none
    first = np.maximum(np.searchsorted(w_start, starts, side="right") - 1, 0)
    next_start = np.append(w_start[1:], np.iinfo(np.int64).max)
    if not (ends > next_start[first]).any():
        # Nothing reaches into a later step (the common case): one part per interval at most,
        # and those outside every step come out empty below.
        idx, step = np.arange(len(starts)), first
    else:
        last = np.searchsorted(w_start, ends, side="left") - 1
        n = np.maximum(last - first + 1, 0)  # 0 <= first <= step <= last < len(w_start)
        idx = np.repeat(np.arange(len(starts)), n)
        step = np.repeat(first, n) + (np.arange(len(idx)) - np.repeat(np.cumsum(n) - n, n))
    s = np.maximum(starts[idx], w_start[step])
    e = np.minimum(ends[idx], w_end[step])
    keep = e > s
    return idx[keep], step[keep], s[keep], e[keep]


def _sorted_apart(s: np.ndarray, e: np.ndarray,
                  overwrite: bool) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends, each sorted on its own (see merge_intervals); `overwrite`: sort the
    caller's arrays in place when they are writable."""
    if (e < s).any():  # an empty interval covers nothing; as [s, s] it joins what touches s
        e = np.maximum(e, s)
        overwrite_e = True
    else:
        overwrite_e = overwrite
    if not (s[1:] < s[:-1]).any():
        pass  # one thread's events, in order: nothing to sort
    elif overwrite and s.flags.writeable:
        s.sort(kind="stable")  # timsort: the events come as a few sorted runs, one per thread
    else:
        s = np.sort(s, kind="stable")
    if overwrite_e and e.flags.writeable:
        e.sort(kind="stable")
    else:
        e = np.sort(e, kind="stable")
    return s, e


def merge_intervals(s: np.ndarray, e: np.ndarray, *,
                    overwrite: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted union of the intervals [s, e]; intervals that touch are joined.

    Starts and ends are sorted apart, not as pairs: every interval ends at or after its own start,
    so the k + 1 first intervals by start all end before the next start iff the k + 1 smallest
    ends do. A span of the union therefore closes at k where ends[k] < starts[k + 1], and ends at
    ends[k]. Two sorts instead of an argsort and two gathers halve the temporaries (millions of
    host ops on a large trace). `overwrite`: sort the caller's fresh arrays in place.
    An interval that ends before it starts counts as empty, [s, s] (the argsort version this
    replaced let it shorten the union: only corrupt traces have them)."""
    if not len(s):
        return s, e
    s, e = _sorted_apart(s, e, overwrite)
    last = np.flatnonzero(e[:-1] < s[1:])
    return s[np.concatenate(([0], last + 1))], e[np.append(last, len(e) - 1)]


def inside(points: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per point, whether some interval [s, e) holds it."""
    return inside_merged(points, *merge_intervals(np.asarray(s), np.asarray(e)))


def inside_merged(points: np.ndarray, ms: np.ndarray, me: np.ndarray) -> np.ndarray:
    """`inside` for spans merge_intervals already made disjoint and sorted (kept by callers
    that test several sets of points against the same spans)."""
    i = np.searchsorted(ms, points, side="right") - 1
    return (i >= 0) & (points < me[np.maximum(i, 0)]) if len(ms) else np.zeros(len(points), bool)


def covered_ns(s: np.ndarray, e: np.ndarray, *, overwrite: bool = False) -> int:
    """Time covered by at least one of the intervals (integer ns): from the first start to the
    last end, less the gaps between spans of the union (merge_intervals), summed a block at a
    time so nothing the size of the input is built beside the sorted copies (none with
    `overwrite`)."""
    s, e = np.asarray(s), np.asarray(e)
    if not len(s):
        return 0
    s, e = _sorted_apart(s, e, overwrite)
    total = int(e[-1]) - int(s[0])
    nxt, end = s[1:], e[:-1]
    for block in chunks(len(end)):
        gap = nxt[block] - end[block]
        total -= int(gap[gap > 0].sum())
    return total


def covered_outside(s: np.ndarray, e: np.ndarray, other_s: np.ndarray,
                    other_e: np.ndarray) -> int:
    """Time the intervals [s, e) cover while none of the `other` intervals does (integer ns): the
    union of both, less what the others cover."""
    if not len(other_s):
        return covered_ns(s, e)
    return (covered_ns(np.concatenate([s, other_s]), np.concatenate([e, other_e]), overwrite=True)
            - covered_ns(other_s, other_e))


def covered_during(s: np.ndarray, e: np.ndarray, other_s: np.ndarray,
                   other_e: np.ndarray) -> int:
    """Time the intervals [s, e) cover while one of the `other` intervals does (integer ns)."""
    if not len(s) or not len(other_s):
        return 0
    return covered_ns(s, e) - covered_outside(s, e, other_s, other_e)


def covered_per_step(s: np.ndarray, e: np.ndarray, w_start: np.ndarray,
                     w_end: np.ndarray) -> np.ndarray:
    """Per step window, the time (integer ns) some interval [s, e) covers inside it."""
    cover = np.zeros(len(w_start))  # float sums of whole ns: exact below 2**53
    if len(s):
        _add_cover(cover, *merge_intervals(np.asarray(s), np.asarray(e)), w_start, w_end)
    return cover.astype(np.int64)


def _category_codes(kind: pd.Series) -> np.ndarray:
    """Per event, the index of the breakdown category its kind feeds (-1: none)."""
    of_kind = [next((i for i, feeding in enumerate(CATEGORIES.values()) if k in feeding), -1)
               for k in kind.cat.categories]
    return np.array([*of_kind, -1], dtype=np.int8)[kind.array.codes]  # code -1 reads the last


def _cumulative_cover(events: pd.DataFrame, w_start: np.ndarray,
                      w_end: np.ndarray) -> np.ndarray:
    """cover[i, k]: the time of step k covered by events feeding categories 0..i.

    Each event is clipped to the span of all steps; the union of those intervals is built per
    category set and each span of it adds to every step it overlaps the part inside that step
    (_add_cover), so cover[i, k] never exceeds step k's length and never falls below cover[i-1, k].
    (Counting a whole span in the step where it starts broke both: a long event merged into a
    span that began a step earlier moved its time there, which left some steps' lower categories
    negative.) The events are swept in start order, one block of rows at a time: every span of a
    union but its last is final once the block is merged, so no temporary grows with the trace.
    """
    n_cat = len(CATEGORIES)
    starts = events["start_ns"].to_numpy(np.int64)
    ends = EndTimes(events)
    category = _category_codes(events["kind"])
    present = np.flatnonzero(np.bincount(category[category >= 0], minlength=n_cat))
    cover = np.zeros((n_cat, len(w_start)))  # float sums of whole ns: exact below 2**53
    lo, hi = w_start[0], w_end[-1]
    # The last span of each category's union: later events may still extend it. It starts empty
    # at the first step's start, where an empty span adds nothing.
    open_s = np.full(n_cat, lo)
    open_e = np.full(n_cat, lo)
    order = np.argsort(starts, kind="stable")
    for block in chunks(len(order)):
        rows = order[block]
        s = np.maximum(starts[rows], lo)
        e = np.minimum(ends[rows], hi)
        c = category[rows]
        keep = (e > s) & (c >= 0)  # as clipping does: empty intervals cover nothing
        s, e, c = s[keep], e[keep], c[keep]
        for i in present:
            sel = c <= i
            ms, me = merge_intervals(np.append(open_s[i], s[sel]), np.append(open_e[i], e[sel]))
            _add_cover(cover[i], ms[:-1], me[:-1], w_start, w_end)
            open_s[i], open_e[i] = ms[-1], me[-1]
    for i in present:
        _add_cover(cover[i], open_s[i:i + 1], open_e[i:i + 1], w_start, w_end)
    # A category without events covers what the ones before it do.
    for i in range(1, n_cat):
        if i not in present:
            cover[i] = cover[i - 1]
    return cover


def _add_cover(cover: np.ndarray, s: np.ndarray, e: np.ndarray, w_start: np.ndarray,
               w_end: np.ndarray) -> None:
    """Add to each step [w_start, w_end) its overlap with the disjoint, sorted spans [s, e)."""
    if not len(s):
        return
    covered = np.concatenate(([0], np.cumsum(e - s)))

    def before(t: np.ndarray) -> np.ndarray:
        # Span time before each instant t: the spans ended by t, and the part of the next one.
        j = np.searchsorted(e, t, side="right")
        part = np.where(j < len(s), t - s[np.minimum(j, len(s) - 1)], 0)
        return covered[j] + np.maximum(part, 0)

    cover += before(w_end) - before(w_start)


def step_breakdown(events: pd.DataFrame) -> Steps:
    """Step windows and each category's exposed time per step: what it covers beyond the
    categories before it."""
    windows, source, (line, thread) = find_step_windows(events)
    cols = ["step", "start_ns", "end_ns", "dur_ns", *ALL_CATEGORIES]
    if windows.empty:
        return Steps(pd.DataFrame(columns=cols, dtype=np.int64), source)
    epoch_rows = _epoch_rows(windows)
    windows, left_out = _trim_edges(events, windows)
    w_start = windows["start_ns"].to_numpy(np.int64)
    w_end = windows["end_ns"].to_numpy(np.int64)
    if epoch_rows:
        epoch_ends = np.flatnonzero(np.diff(windows["epoch"].to_numpy()) > 0)
    else:
        epoch_ends, epoch_rows = _iterator_epochs(events, w_start, w_end)
    out = windows.copy()
    out["dur_ns"] = w_end - w_start
    cover = _cumulative_cover(events, w_start, w_end).astype(np.int64)
    waits = (return_waits(events, thread_mask(events, thread), int(w_start[0]), int(w_end[-1]))
             if thread is not None and has_api_spans(events)
             else (np.zeros(0, np.int64), np.zeros(0, np.int64)))
    _add_gil_waits(cover, events, *waits, w_start, w_end)
    prev = np.zeros(len(windows), dtype=np.int64)
    for cat, c in zip(CATEGORIES, cover, strict=True):
        out[cat] = c - prev
        prev = c
    out[IDLE] = out["dur_ns"] - prev
    return Steps(out[cols].astype(np.int64), source, line, thread, left_out, epoch_ends,
                 epoch_rows, waits)


_GIL = list(CATEGORIES).index("gil_wait")
_ABOVE_GIL = frozenset(k for c in list(CATEGORIES)[:_GIL] for k in CATEGORIES[c])


def _add_gil_waits(cover: np.ndarray, events: pd.DataFrame, ws: np.ndarray, we: np.ndarray,
                   w_start: np.ndarray, w_end: np.ndarray) -> None:
    """Give the step thread's GIL waits [ws, we) the part of each step that no category above
    them covers. Each lies inside its binding's span, framework time, so the categories from
    framework on cover it already: only the gil_wait row grows, and framework shrinks by as
    much."""
    if not len(ws):
        return
    rows = np.flatnonzero(cat_mask(events["kind"], _ABOVE_GIL.__contains__))
    s = events["start_ns"].to_numpy(np.int64)[rows]
    e = EndTimes(events)[rows]
    # Only events that overlap a wait change what it adds (waits are sorted and disjoint).
    k = np.searchsorted(ws, e, side="left") - 1
    near = (k >= 0) & (we[np.maximum(k, 0)] > s)
    s, e = s[near], e[near]
    above = covered_per_step(s, e, w_start, w_end)
    with_waits = covered_per_step(np.concatenate([ws, s]), np.concatenate([we, e]), w_start,
                                  w_end)
    cover[_GIL] += with_waits - above
    # A guard: a wait outside every framework span would otherwise leave framework negative.
    for i in range(_GIL + 1, len(cover)):
        np.maximum(cover[i], cover[_GIL], out=cover[i])


def window_at(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per instant, the index of the sorted, disjoint window [start, end) holding it; -1
    outside every window."""
    if not len(start):
        return np.full(len(t), -1)
    i = np.searchsorted(start, t, side="right") - 1
    return np.where((i >= 0) & (t < end[np.maximum(i, 0)]), i, -1)


def _iterator_epochs(events: pd.DataFrame, w_start: np.ndarray, w_end: np.ndarray
                     ) -> tuple[np.ndarray, int | None]:
    """Without step numbers that start over: the windows in which Python made a new input
    iterator (an epoch's or a fit() call's start), an epoch as long as the constant gap
    between them."""
    at = events["start_ns"].to_numpy(np.int64)[cat_mask(events["name"], NEW_ITERATOR.match)]
    rows = np.unique(window_at(w_start, w_end, at))
    rows = rows[rows >= 0]
    gaps = np.diff(rows)
    return rows, (int(gaps[0]) if len(gaps) and (gaps == gaps[0]).all() and gaps[0] >= 2
                  else None)


def _epoch_rows(windows: pd.DataFrame) -> int | None:
    """Steps per epoch, when the window shows an epoch's end: a whole epoch's count, or, from
    the first epoch's last step number (Keras numbers from 0), that number over the numbers'
    stride (steps_per_execution) plus one."""
    if "epoch" not in windows or windows["epoch"].iat[-1] == 0:
        return None
    epoch = windows["epoch"].to_numpy()
    per_epoch = np.bincount(epoch)
    if len(per_epoch) > 2:
        return int(np.median(per_epoch[1:-1]))
    step = windows["step"].to_numpy(np.int64)
    return int(step[epoch == 0].max() // _stride(step, epoch) + 1)


def _trim_edges(events: pd.DataFrame, windows: pd.DataFrame
                ) -> tuple[pd.DataFrame, list[dict]]:
    """The windows without a first or last step of EDGE_OUTLIER times the median step or more,
    and those steps: every share, median and estimate describes the steady state."""
    if len(windows) < EDGE_FREE_FROM:
        return windows, []
    start = windows["start_ns"].to_numpy(np.int64)
    end = windows["end_ns"].to_numpy(np.int64)
    dur = end - start
    # Against the interior's median: what the edges are judged by must not include them.
    median = float(np.median(dur[1:-1]))
    edges = [i for i in (0, len(windows) - 1) if dur[i] >= EDGE_OUTLIER * median]
    if not edges:
        return windows, []
    warm = cat_mask(events["name"], _WARMUP.search)
    at = events["start_ns"].to_numpy(np.int64)[warm]
    left_out = [{"step": int(windows["step"].iloc[i]), "start_ns": int(start[i]),
                 "end_ns": int(end[i]), "dur_ns": int(dur[i]),
                 "x_median": round(float(dur[i]) / median, 2),
                 "warmup": bool(((at >= start[i]) & (at < end[i])).any())} for i in edges]
    return windows.drop(index=windows.index[edges]).reset_index(drop=True), left_out
