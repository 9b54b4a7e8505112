"""`step_stalls`: a few steps take far longer than the rest.

Seed 000's job stalled "periodically as a new file was pulled" and hung "while the garbage
collector catches up"; checkpoints, summaries and evaluation every N steps do the same. The mean
step, which sets the run's length, then sits well above the typical step every other estimate
starts from, and xprof shows the spikes in its step-time graph without a cause.

Signals (docs/trace-signals.md, "Uneven steps"): the per-step breakdown. A step stalls when it
lasts STALL_RATIO times the median step. The window's first and last steps at that length are
already left out of the steps (steps.EDGE_OUTLIER: the profiler's start and stop, a new
iterator's warm-up and the first call's compilation land there). What the stall is, in order:
1. events that say what they are grew in the stalled steps against as many typical steps:
   checkpoint, summary (with the eager ops new in those steps when a summary is written
   eagerly there: a histogram's bucketing ops carry no scope), graph-building, XLA-compiler
   and evaluation ops by name, calls of a
   tf.function with no backward pass (evaluation: Keras 3 names its test function like its
   train function), a new input iterator made from Python and the old one's teardown (an
   epoch's end, counted only when the stalls sit there; docs/trace-signals.md, "Epochs and
   validation"); the one that adds most is the cause, others of MIN_ALSO_SHARE are listed
   with their remedies;
2. the breakdown's input wait grew (the pipeline ran dry: with the files readers opened then),
   or time no event covers grew (garbage collection and other Python work are not traced; with
   sampler data the main thread's states tell CPU work from a wait or file I/O);
3. events typical steps do not have at all ran there (other periodic work, named);
4. otherwise the same events ran longer: the trace cannot say why. With sampler data, other
   processes taking the machine's cores (not the job's own children: exited ones by its
   cutime, live ones as the sampler read them at every sweep, or in older data unless its
   scans found other processes using CPU), or the cgroup's CPU quota running out, in the
   stalled steps and not in the typical ones, is the cause (signals/cpu_competition.py), here
   and for untraced time (2), where a thread waiting for a core looks like Python work; without
   either the finding stays `low`.
A stall whose time another finding already estimates (an input wait: io_stall or
input_preprocessing; tracing: function_retracing; compiling: xla_recompilation) is shown `low`
for its pattern, at 1.0x. A single stall whose work no event names (cause 2) is shown `low`
too: one OS hiccup leaves the same thing.

What-if: every stalled step as long as the median step. When the stalls come every p steps
through the whole window (at least 3 of them, p >= 2, at most one missing at either end), per
cycle:
e / (p x median + e), e the mean excess of a stall, which does not depend on where the window
cuts the cycle. Stalls at epochs' ends (or in the step after one) come once an epoch: the same
with p the epoch's steps and e the excess per epoch's end. Otherwise the window's share: all
the excess / the window's step time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.detectors import (
    cpu_throttling,
    dstate_threads,
    duplicated_input,
    function_retracing,
    input_preprocessing,
    io_stall,
    run_detector,
    xla_recompilation,
)
from analyzers.events import GRAPH_BUILDING, NEW_ITERATOR, OP_KINDS, TRAINING_OP
from analyzers.findings import Finding, speedup_from_saving
from analyzers.signals.cpu_competition import (
    CpuShare,
    children_placed,
    cpu_share,
    other_processes,
)
from analyzers.signals.executions import PREFIX as EAGER_PREFIX
from analyzers.signals.input_pipeline import file_open_starts
from analyzers.signals.os_sampler import main_thread_states
from analyzers.steps import (
    ALL_CATEGORIES,
    IDLE,
    TRAINING_OPS_RATIO,
    covered_ns,
    marker_family,
)

ID = "step_stalls"
# A step this many times the median is a stall: steady windows keep their interior steps within
# 1.6x (48 real TF 2.21/2.15 CPU logdirs, 2 cores); the periodic stalls seen reach 4-46x.
STALL_RATIO = 2.0
# Stalls worth less than this share of the step time are noise on a shared machine.
MIN_EXCESS_SHARE = 0.03
MIN_STEPS = 5
MAX_RANGES = 20  # stalled steps' time ranges listed in the evidence
# Events whose names say what periodic work they are, checked in this order.
_CAUSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("checkpoint", re.compile(r"(?i)(SaveV2|RestoreV2|MergeV2Checkpoints|SaveSlices|"
                              r"checkpoint|ShardedFilename)")),
    ("summary", re.compile(r"(?i)(Summary|FlushSummaryWriter|CreateSummaryFileWriter)")),
    ("graph_building", re.compile(rf"^{re.escape(GRAPH_BUILDING)}$")),
    ("xla_compilation", xla_recompilation.COMPILE),
    ("evaluation", re.compile(r"(?i)(test_function|test_step|evaluate|predict_function)")),
    # A new input iterator made from Python: the data started over (an epoch). Its
    # predecessor's teardown is counted with it (_TEARDOWN).
    ("new_iterator", NEW_ITERATOR),
)
# An iterator stops its threads and frees its buffers when its last handle goes: in eager mode a
# TFE_DeleteTensorHandle on the Python thread (62.6 ms at a Keras 3 epoch's end, where typical
# steps' take microseconds; docs/trace-signals.md, "Epochs and validation").
_TEARDOWN = re.compile(r"^(TFE_DeleteTensorHandle|EagerLocalExecute: DeleteIterator)$")
# A distributed dataset's new iterator (tf.distribute's MultiDeviceIterator, Keras fit under
# MirroredStrategy) makes a generator dataset per device and traces its functions each time:
# that tracing is the iterator's, not a retraced step (5 graph buildings an epoch's end beside
# MultiDeviceIteratorInit; docs/trace-signals.md, "Epochs and validation").
_DISTRIBUTED = re.compile(r"^EagerLocalExecute: (MultiDeviceIteratorInit|"
                          r"AnonymousMultiDeviceIterator\w*)$")
_DISTRIBUTED_MAKING = re.compile(rf"^(EagerLocalExecute: GeneratorDataset|"
                                 rf"{re.escape(GRAPH_BUILDING)})$")
# A tf.function's call: one that runs ops but no backward pass or update (TRAINING_OP) evaluates
# or predicts (Keras 3 names its test function multi_step_on_iterator, like its train function).
_FUNCTION_CALL = re.compile(r"^(EagerLocalExecute: )?__inference_")
_UNNAMED = frozenset({"input_wait", IDLE})
# Causes the sampler names: a lone stall of theirs is a neighbour's burst as likely as a pattern.
_TAKEN = frozenset({"contention", "throttled"})
# Stalls at epochs' ends holding this share of the excess or more (most of it) are epoch-end
# stalls.
AT_ENDS_SHARE = 0.5
# Growth of this share of the excess explains a stall; other named work of MIN_ALSO_SHARE is
# listed beside it, with its remedy.
MIN_CAUSE_SHARE = 0.3
MIN_ALSO_SHARE = 0.15
# Events are new work when typical steps hold fewer than this share of their stalled-step
# occurrences: counted, not timed, since an op of every step that a hiccup stretched 14x (a
# ResourceGather of a plain loop in a CI run, 2.8 ms against 0.2) is the same work running
# longer, not work only those steps do.
NEW_WORK_SHARE = 0.2
# A Session.run job checkpoints through a Saver (or Estimator's CheckpointSaverHook).
_SESSION_CHECKPOINT = (" TF1 Session jobs: call Saver.save less often (Estimator: "
                       "RunConfig(save_checkpoints_steps=...) or save_checkpoints_secs; "
                       "MonitoredTrainingSession: save_checkpoint_steps).")
_REMEDIES = {
    "checkpoint": "Checkpoint less often, or asynchronously (tf.train.CheckpointOptions("
                  "experimental_enable_async_checkpoint=True); Keras ModelCheckpoint with a "
                  "larger save_freq), to fast local storage.",
    "summary": "Write summaries less often (tf.summary.record_if, a larger update_freq) and "
               "flush the writer less often (flush_millis). A histogram buckets every value "
               "of its tensor, so one of an embedding table costs in proportion to the table: "
               "write those rarest, or of a sample of rows (Keras' TensorBoard callback: "
               "histogram_freq=0, or epochs far apart).",
    "graph_building": "A tf.function is traced inside the window: keep its signature stable "
                      "(see function_retracing) and run warm-up steps before timing.",
    "xla_compilation": "XLA compiles a program again in those steps, for a new input shape: "
                       "keep the shapes static (see xla_recompilation) and run warm-up steps "
                       "before timing.",
    "evaluation": "Evaluate less often (validation_freq), on fewer steps (validation_steps), or "
                  "in a separate job.",
    "new_iterator": "The input iterator starts over at every epoch (or fit() call): the old "
                    "one's threads are stopped and the new one refills its prefetch and shuffle "
                    "buffers before its first batch. Repeat the training dataset and give the "
                    "epoch's length (model.fit(ds.repeat(), steps_per_epoch=N)), one fit() for "
                    "all epochs; in a custom loop make one iterator (it = iter(ds.repeat())) and "
                    "take N batches an epoch from it. Keras makes a new iterator for "
                    "validation_data at every evaluation: validation_freq makes fewer.",
    "input_wait": "The input pipeline runs dry in bursts: prefetch deeper (prefetch(AUTOTUNE) at "
                  "the end, a larger buffer), open the next file before the current one ends "
                  "(interleave with cycle_length >= 2 and num_parallel_calls, a larger "
                  "block_length, larger files), and keep shuffle buffers refilled continuously; "
                  "stage the files on faster storage if the reads wait on it.",
    IDLE: "The step's thread did work the profiler does not trace: garbage collection (call "
          "gc.freeze() once the model and data are built, raise gc.set_threshold, never call "
          "gc.collect() inside the loop; create fewer Python objects per step, e.g. no "
          "Python-side casting layers), logging or metrics gathered in Python, callbacks that "
          "save or log every few batches (Keras ModelCheckpoint's save_freq writes through "
          "h5py, untraced), or files written from Python. Do such work less often or on a "
          "background thread.",
    "extra_work": "Some steps run work the others do not (the events below): do it less often, "
                  "asynchronously, or outside the training loop.",
    "contention": "Other processes on the machine took the job's cores in those steps: run it "
                  "where nothing else competes for them (a node or cpuset of its own; Kubernetes: "
                  "a Guaranteed pod, CPU requests equal to limits, with the static CPU manager), "
                  "or find what runs then (top or pidstat during training: other jobs, data "
                  "loaders of another process, monitoring agents) and move or renice it.",
    "throttled": "The cgroup's CPU quota (a container's CPU limit) ran out in those steps and "
                 "stopped every thread of the job until the next 100 ms period: raise the limit "
                 "(Kubernetes resources.limits.cpu, docker --cpus), or keep the job's bursts "
                 "under it: TF's pools sized to the quota (TF_NUM_INTRAOP_THREADS, "
                 "tf.config.threading) and fewer parallel calls in the input pipeline.",
}
# Other processes took this many more cores in the stalled steps than in the typical ones, the
# machine full (CpuShare.full): they competed for the job's cores. The quota ran
# out in at least MIN_THROTTLED of the stalled steps' periods, MIN_MORE_THROTTLED more than in
# the typical steps': it stopped the job (docs/trace-signals.md, "Stalls the sampler explains").
MIN_TAKEN_CORES = 0.5
# Beside the job's own children, other processes must have used this many cores over the
# scans' span for the counters' "others" to be theirs (idle machines' agents: 0.01-0.03).
SCANNED_OTHERS_CORES = 0.1
MIN_THROTTLED = 0.5
MIN_MORE_THROTTLED = 0.3
# The main thread's sampler states in the stalled steps: this many samples say something, and
# a state this common names what it did (periodic gc.collect(): R in 99% of 87 samples against
# 22% in typical steps; time.sleep: S in 100%; docs/trace-signals.md, "Uneven steps").
MIN_STATE_SAMPLES = 5
MIN_STATE_SHARE = 0.7
MIN_D_SHARE = 0.3
_IDLE_REMEDIES = {
    "sleep": "The step's thread waits on something the profiler does not trace (a time.sleep, a "
             "lock held by another thread, a remote call, a queue): find that wait in the "
             "loop's Python and move it off the step path or make it asynchronous.",
    "storage": "The step's thread writes or reads files from Python (checkpoints or logs "
               "written by hand, numpy.save, pickle): do it less often, on a background "
               "thread, or to faster local storage.",
}
# input_preprocessing yields the wait to duplicated_input when copies of the pipeline explain it.
_OWNERS = {"input_wait": (io_stall, input_preprocessing, duplicated_input, dstate_threads),
           "graph_building": (function_retracing, xla_recompilation),
           "xla_compilation": (xla_recompilation,)}
_IDLE_LABELS = {"cpu": "untraced Python work on the CPU", "sleep": "an untraced wait",
                "storage": "untraced file I/O", "mixed": "untraced Python work"}
_NO_CAUSE = "cause not in the trace"
_LABELS = {"checkpoint": "checkpoints", "summary": "summary writes",
           "graph_building": "tf.function tracing", "xla_compilation": "XLA compilation",
           "evaluation": "evaluation",
           "new_iterator": "the input iterator started over",
           "input_wait": "the input pipeline ran dry", IDLE: "untraced Python work",
           "extra_work": "work only those steps do",
           "contention": "other processes took the cores",
           "throttled": "the CPU quota ran out"}
# Runtime spans that enclose the events of what they run.
_ENCLOSING = re.compile(
    r"^(EagerExecute|EagerKernelExecute|KernelAndDeviceFunc::Run(Async)?|TFE_Py_\w+|FunctionRun|"
    r"ExecutorState::.*|ExecutorDoneCallback|ExecutorPropagateOutputs|ParallelFor|"
    r"ThunkExecutor::Execute|CpuExecutable::\w+|BlockUntilReady|TraceContext|SessionRun|"
    r"RunGraph(Done)?|EagerLocalExecute(Async)?: __inference_.*|EagerService:\w+|"
    r"InstantiatedCapturedFunction::\w+|RemoteCallOp(Done)?)$")
_WHAT = {"extra_work": "work that typical steps do not have",
         "new_iterator": "a new input iterator made from Python, and the old one's teardown",
         "evaluation": "evaluation (test functions, or tf.functions that run no backward pass "
                       "or update)"}
_UNEXPLAINED = ("Nothing the trace holds explains the slow steps: look for what else used the "
                "cores then (other processes or jobs on the host; `recadvisor capture` records "
                "thread states) and whether some batches carry more work than others.")


def detect(ctx: Context) -> Finding | None:
    t = ctx.steps.table
    n = len(t)
    if n < MIN_STEPS:
        return None
    dur = t["dur_ns"].to_numpy(np.float64)
    median = float(np.median(dur))
    if median <= 0:
        return None
    stalled = dur >= STALL_RATIO * median
    typical = ~stalled
    if not stalled.any() or not typical.any():
        return None
    k = int(stalled.sum())
    excess = float((dur[stalled] - median).sum())
    step_numbers = t["step"].to_numpy()[stalled].tolist()
    ends, epoch_rows = ctx.steps.epoch_ends, ctx.steps.epoch_rows
    # Stalls at epochs' ends (or in the first step after one, a new iterator's warm-up) come
    # once an epoch, however the window cuts the epochs; a small stall elsewhere (a CI run's
    # 15 ms beside two of 230) does not make them something else.
    at_end = stalled & np.isin(np.arange(n), np.concatenate((ends, ends + 1)))
    end_excess = float((dur[at_end] - median).sum())
    at_ends = bool(at_end.any()) and end_excess >= AT_ENDS_SHARE * excess
    rest = 0.0
    if at_ends and epoch_rows:
        period, per_cycle = epoch_rows, end_excess / len(ends)
        # The other stalls: their share of the window.
        rest = (excess - end_excess) / float(dur.sum())
    else:
        period, cycle = _cycle(np.flatnonzero(stalled), dur, n)
        # Per cycle: where the window cuts the cycle does not matter then.
        per_cycle = float((dur[cycle] - median).sum()) / len(cycle) if period else 0.0
    saved = (per_cycle / (period * median + per_cycle) + rest if period
             else excess / float(dur.sum()))
    if saved < MIN_EXCESS_SHARE:
        return None
    grew = {c: float(t[c].to_numpy()[stalled].sum() - k * np.median(t[c].to_numpy()[typical]))
            for c in ALL_CATEGORIES}
    by_category = max(grew, key=grew.__getitem__)
    top, named, behind = _events_that_grew(ctx, stalled, typical)
    if not at_ends:
        # Iterators made beside stalls elsewhere (a new fit() call in a window of steady steps)
        # are not what stalls.
        named.pop("new_iterator", None)
    cause = _cause(named, by_category, excess)
    # Untraced time grows too when the step's Python thread waits for a core: the sampler's
    # machine figures tell that from a garbage collection.
    taken = _taken(ctx, stalled, typical) if cause in (None, IDLE) else None
    if taken is not None:
        cause = taken[0]
    states = _main_states(ctx, stalled, typical) if cause == IDLE else None
    ratios = dur[stalled] / median
    evidence = [
        f"{k} of {n} profiled steps took {STALL_RATIO:g}x the median step or more "
        f"({_list(f'{r:.1f}x' for r in ratios)}; median {median / 1e6:.1f} ms): "
        f"{excess / 1e6:.1f} ms beyond the median, {excess / float(dur.sum()):.0%} of the "
        "window's step time",
        f"steps {_list(str(s) for s in step_numbers)}" + _period_words(
            period, saved, median, end_excess / max(len(ends), 1) if at_ends else None,
            int(at_end.sum()) < k),
        "in those steps, beyond as many typical steps: " + ", ".join(
            f"{c} +{ms / 1e6:.1f} ms" for i, (c, ms) in enumerate(
                sorted(grew.items(), key=lambda x: -x[1])) if i == 0 or ms >= 0.1 * excess),
        taken[1] if taken else _cause_line(ctx, cause, named, stalled, typical, states),
    ]
    # Beside a named cause only: without one, the remedy is that nothing explains the stalls.
    also = [c for c, _ in _CAUSES if cause in _REMEDIES and c != cause
            and named.get(c, 0.0) >= MIN_ALSO_SHARE * excess / 1e6]
    if also:
        evidence.append("also in those steps: " + ", ".join(
            f"{_LABELS[c]} +{named[c]:.1f} ms ({named[c] * 1e6 / excess:.0%} of the excess)"
            for c in also))
    meta = (ctx.run.metadata or {}).get("step_time_ms") or {}
    if meta.get("mean") and meta.get("p50"):
        evidence.append(f"whole run, outside the profiler: mean step {meta['mean']:.1f} ms, "
                        f"median {meta['p50']:.1f} ms")
    owner = _owner(ctx, cause)
    if cause == "throttled" and isinstance(run_detector(cpu_throttling, ctx), Finding):
        evidence.append("cpu_throttling reports the quota over the whole window: its estimate "
                        "(raising the limit) and this one (the stalls down to the median step) "
                        "count some of the same time")
    # One stall whose work no event names (untraced time, an input wait) is what one OS hiccup
    # leaves too (a CI run's `session_batched`: a step of 1.5 ms stretched to several): shown,
    # not ranked on one sample. New events (extra_work) are work a hiccup does not make.
    lone = k == 1 and cause in _UNNAMED | _TAKEN and not owner
    if lone:
        evidence.append(f"one stall in {n} steps, and no event names its work: a recurring cost "
                        "and a one-off hiccup look the same in one sample; profile a longer "
                        "window to see whether it recurs")
    if owner:
        evidence.append(f"this time is part of `{owner}`'s estimate, whose remedy addresses it: "
                        "shown for its pattern, not counted again")
    return Finding(
        id=ID,
        title=f"{k} of {n} steps stall, up to {ratios.max():.1f}x the median step "
              f"({_IDLE_LABELS[states[0]] if states else _LABELS.get(cause or '', _NO_CAUSE)})",
        step_fraction=0.0 if owner else saved,
        speedup=1.0 if owner else speedup_from_saving(saved),
        evidence=evidence,
        remedy=(_UNEXPLAINED if cause is None else
                _IDLE_REMEDIES.get(states[0] if states else "", _REMEDIES[cause])
                + (_SESSION_CHECKPOINT if cause == "checkpoint"
                   and ctx.steps.source.startswith("session:") else "")
                + "".join(f" Also ({_LABELS[c]}): {_REMEDIES[c]}" for c in also)),
        # Without a cause there is nothing concrete to change, an owner's finding already
        # counts the time, and a lone stall may not recur: shown, never ranked above low.
        severity="low" if cause is None or owner or lone else "",
        numbers={"stalled_steps": step_numbers, "ratios": [round(float(r), 2) for r in ratios],
                 "median_step_ms": round(median / 1e6, 3),
                 "excess_ms": round(excess / 1e6, 3), "period_steps": period,
                 "cause": cause,
                 "named_ms": {c: round(float(named[c]), 3) for c, _ in _CAUSES if c in named},
                 "main_thread_states": ({st: round(v, 3) for st, v in states[2].items()}
                                        if states else None),
                 "growth_ms": {c: round(ms / 1e6, 3) for c, ms in grew.items() if ms > 0}},
        top_events=behind.get(cause or "", [] if cause == IDLE else top),
        time_ranges_ms=[(round(a / 1e6, 3), round(b / 1e6, 3)) for a, b in zip(
            t["start_ns"].to_numpy()[stalled].tolist()[:MAX_RANGES],
            t["end_ns"].to_numpy()[stalled].tolist()[:MAX_RANGES], strict=True)],
    )


def _period_words(period: int | None, saved: float, median: float,
                  per_epoch: float | None, others: bool = False) -> str:
    if per_epoch is None:
        return (f": every {period} steps, so {saved:.0%} of the time of each {period}-step cycle"
                if period else "")
    which = "the longest " if others else ""
    if period:
        return (f": {which or 'each '}at an epoch's end ({period} steps an epoch), so "
                f"{saved:.0%} of each epoch's time")
    # One epoch's end and no epoch length: the window's share stands in for it.
    return (f": {which}where the input started over (a new iterator: an epoch's or a fit() "
            "call's start); the window does not show an epoch's length, so the estimate "
            f"is the window's share (with E steps an epoch: e / (E x m + e), e = "
            f"{per_epoch / 1e6:.1f} ms, m = {median / 1e6:.1f} ms)")


def _owner(ctx: Context, cause: str | None) -> str | None:
    """The detector whose finding already counts this stall's time, if one reports it: the
    input detectors (and dstate_threads, when its small reads claim the wait) an input wait,
    function_retracing the tracing."""
    for module in _OWNERS.get(cause or "", ()):
        found = run_detector(module, ctx)
        # dstate_threads counts the input wait only when its readers' reads are small.
        if isinstance(found, Finding) and found.numbers.get("input_wait_claimed", 1.0) > 0:
            return module.ID
    return None


def _main_states(ctx: Context, stalled: np.ndarray, typical: np.ndarray
                 ) -> tuple[str, str, dict[str, float]] | None:
    """What the main thread did in the stalled steps by the sampler: ("cpu" | "sleep" |
    "storage" | "mixed", the evidence line, share per state), or None without sampler data
    there."""
    got, base = main_thread_states(ctx, stalled), main_thread_states(ctx, typical)
    if got is None or got[1] < MIN_STATE_SAMPLES:
        return None
    share, n = got
    usual = f" (typical steps: {base[0].get('R', 0.0):.0%})" if base else ""
    running = (f"the sampler saw the main thread running in {share.get('R', 0.0):.0%} of its "
               f"{n} samples in the stalled steps{usual}")
    if share.get("D", 0.0) >= MIN_D_SHARE:
        return "storage", (running + f" and in D state in {share['D']:.0%}: blocked on storage, "
                           "as files written from Python are"), share
    if share.get("R", 0.0) >= MIN_STATE_SHARE:
        return "cpu", running + ": CPU work in Python, as a garbage collection is", share
    if share.get("S", 0.0) >= MIN_STATE_SHARE:
        return "sleep", (running + f", sleeping in {share['S']:.0%}: a wait (a sleep, a lock, "
                         "a remote call), not a garbage collection"), share
    return "mixed", running, share


def _taken(ctx: Context, stalled: np.ndarray, typical: np.ndarray) -> tuple[str, str] | None:
    """("throttled" | "contention", the evidence line) when the sampler shows the quota running
    out, or other processes taking the cores, in the stalled steps and not in the typical ones;
    None otherwise or without sampler data there."""
    got, base = cpu_share(ctx, stalled), cpu_share(ctx, typical)
    if got is None or base is None or got.intervals < MIN_STATE_SAMPLES:
        return None
    usual = _cores_line(base)
    line = (f"the sampler over the stalled steps ({got.intervals} intervals): "
            f"{_cores_line(got)}; in typical steps {usual}")
    if (got.throttled_share is not None and got.throttled_share >= MIN_THROTTLED
            and got.throttled_share - (base.throttled_share or 0.0) >= MIN_MORE_THROTTLED):
        return "throttled", (
            f"{line}: the cgroup's CPU quota ran out in {got.throttled_share:.0%} of its periods "
            f"then, against {base.throttled_share or 0.0:.0%} in typical steps")
    # The job's own children count interval by interval: exited ones from its cutime, live
    # ones as the sampler read them at every sweep (since 2026-11-30).
    more = got.neighbour_cores - base.neighbour_cores
    if more >= MIN_TAKEN_CORES and got.full and (
            children_placed(got, other_processes(ctx)) or _neighbours_seen(ctx)):
        return "contention", (f"{line}: other processes took {more:.1f} more cores then, "
                              "with the machine full")
    return None


def _neighbours_seen(ctx: Context) -> bool:
    """Where the job's live children's work is not placed interval by interval (data before
    2026-11-30, or workers the sweeps did not read: cpu_competition.children_placed), whether
    the cores the machine's counters give to other processes can be theirs: beside the job's own
    live
    children (data loader workers, which work while its steps wait for them) only when the
    scans found other processes using CPU (SCANNED_OTHERS_CORES); true where the scans were
    not taken."""
    named = other_processes(ctx)
    if named is None or named.own_cores <= 0:
        return True
    return named.scanned_others_cores >= SCANNED_OTHERS_CORES


def _cores_line(x: CpuShare) -> str:
    return (f"the process {x.process_cores:.2f} cores, other processes {x.others_cores:.2f}, "
            f"{x.idle_cores:.2f} idle")


def _cause(named: dict[str, float], by_category: str, excess: float) -> str | None:
    enough = MIN_CAUSE_SHARE * excess / 1e6
    # The named work that adds the most: a Keras 3 epoch's end holds both an evaluation and
    # iterator teardowns, either of which can be the larger.
    cause = max((c for c, _ in _CAUSES), key=lambda c: named.get(c, 0.0))
    if named.get(cause, 0.0) >= enough:
        return cause
    if by_category in _UNNAMED:
        return by_category
    return "extra_work" if named.get("extra_work", 0.0) >= enough else None


def _cause_line(ctx: Context, cause: str | None, named: dict[str, float], stalled: np.ndarray,
                typical: np.ndarray, states: tuple[str, str, dict] | None) -> str:
    if cause is None:
        return ("the same events ran longer and nothing new ran: the trace does not say why "
                "(another process or thread on the cores, data-dependent work)")
    if cause == IDLE:
        line = ("no traced event covers that time: Python work on the step's thread (garbage "
                "collection, logging, metrics) or a wait the tracer does not see")
        return line + ("; " + states[1] if states else "")
    if cause == "input_wait":
        opens = file_open_starts(ctx)
        if not len(opens):
            return "the training thread waited for its next batch"
        row = ctx.steps.row_at(opens)
        row = row[row >= 0]
        per_stalled = stalled[row].sum() / stalled.sum()
        per_typical = typical[row].sum() / typical.sum()
        return (f"the training thread waited for its next batch; readers opened "
                f"{per_stalled:.2g} file(s) per stalled step, {per_typical:.2g} per typical step")
    what = _WHAT.get(cause, f"{cause.replace('_', ' ')} events")
    k = int(stalled.sum())
    return (f"{what}: {named[cause]:.1f} ms more in the {k} stalled steps "
            f"({named[cause] / k:.1f} ms each; the events below)")


def _events_that_grew(ctx: Context, stalled: np.ndarray, typical: np.ndarray
                      ) -> tuple[list[dict], dict[str, float], dict[str, list[dict]]]:
    """Per name, its time in the stalled steps beyond its time in as many typical steps; then
    the time (ms) each named cause, and the work typical steps do not have, add to the stalled
    steps (their events' union: SaveV2 then MergeV2Checkpoints both count, a wrapper and the op
    inside it once), with the events behind each."""
    ev = ctx.in_steps(columns=("name", "kind", "step_idx", "start_ns", "end_ns", "dur_ns"))
    name = ev["name"]
    codes = name.array.codes
    step = ev["step_idx"].to_numpy()
    dur = ev["dur_ns"].to_numpy(np.float64)
    m = len(name.cat.categories)
    scale = stalled.sum() / typical.sum()
    in_stalled = np.bincount(codes[stalled[step]], weights=dur[stalled[step]], minlength=m)
    n_stalled = np.bincount(codes[stalled[step]], minlength=m)
    in_typical = np.bincount(codes[typical[step]], weights=dur[typical[step]], minlength=m)
    grew = in_stalled - in_typical * scale
    names = [str(c) for c in name.cat.categories]
    # The step markers (or step-function or Session.run calls) enclose whole steps: they grow
    # with any stall.
    if ctx.steps.source.startswith(("markers:", "function:", "iterator:", "session:")):
        marker = ctx.steps.source.split(":", 1)[1]
        grew[np.array([marker_family(x) == marker or x == marker for x in names], bool)] = 0.0
    # Runtime spans around other events are not what ran: an eager op's `EagerLocalExecute:
    # <op>` names it, with only these below it on a CPU run (docs/trace-signals.md, "Eager
    # execution"), and a teardown's `TFE_DeleteTensorHandle` is work of its own.
    wrapper = np.zeros(m, dtype=bool)
    wrapper[np.unique(codes[(ev["kind"] == "framework").to_numpy()])] = True
    wrapper &= np.array([bool(_ENCLOSING.match(x)) for x in names], dtype=bool)
    eager = np.array([x.startswith(EAGER_PREFIX) and "__inference_" not in x for x in names],
                     dtype=bool)
    starts, ends = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()

    def top_of(sel: np.ndarray) -> list[dict]:
        order = [i for i in np.argsort(-grew, kind="stable").tolist() if sel[i] and grew[i] > 0]
        leaves = [i for i in order if not wrapper[i]]
        # total_ms and count: in the stalled steps; extra_ms: beyond as many typical steps.
        return [{"name": names[i], "total_ms": round(in_stalled[i] / 1e6, 3),
                 "count": int(n_stalled[i]), "extra_ms": round(grew[i] / 1e6, 3)}
                for i in (leaves or order)[:5]]

    def added_ms(sel: np.ndarray) -> float:
        rows = sel[codes] & (codes >= 0)
        s_rows, t_rows = rows & stalled[step], rows & typical[step]
        return (covered_ns(starts[s_rows], ends[s_rows])
                - covered_ns(starts[t_rows], ends[t_rows]) * scale) / 1e6

    named: dict[str, float] = {}
    behind: dict[str, list[dict]] = {}
    groups = {cause: np.array([bool(p.search(x)) for x in names], dtype=bool)
              for cause, p in _CAUSES}
    n_typical = np.bincount(codes[typical[step]], minlength=m)
    new = n_typical * scale < NEW_WORK_SHARE * n_stalled
    in_stalled_rows = stalled[step]
    other_work = np.logical_or.reduce([sel for c, sel in groups.items() if c != "evaluation"])
    groups["evaluation"] |= _forward_only(ev, names, new & (grew > 0), in_stalled_rows,
                                          typical[step], int(typical.sum()),
                                          np.append(n_typical > 0, False),
                                          np.append(other_work, False))
    if (groups["new_iterator"] & (n_stalled > 0)).any():
        groups["new_iterator"] |= np.array([bool(_TEARDOWN.match(x)) for x in names], dtype=bool)
        if any(n_stalled[i] and _DISTRIBUTED.match(x) for i, x in enumerate(names)):
            making = np.array([bool(_DISTRIBUTED_MAKING.match(x)) for x in names], dtype=bool)
            groups["new_iterator"] |= making
            groups["graph_building"] &= ~making
    # Summaries written eagerly (Keras' TensorBoard callback at an epoch's end, a custom loop's
    # tf.summary outside its tf.function) run their ops one by one on the Python thread, and
    # only the write says whose they are: a histogram's Min, Max, OneHot and Sum come first
    # (docs/trace-signals.md, "Uneven steps", histograms written eagerly).
    if (groups["summary"] & eager & (n_stalled > 0)).any():
        groups["summary"] |= new & eager & ~other_work
    groups["extra_work"] = new
    for cause, sel in groups.items():
        sel &= grew > 0
        if sel.any():
            named[cause] = added_ms(sel)
            behind[cause] = top_of(sel)
    return top_of(np.ones(m, dtype=bool)), named, behind


def _forward_only(ev: pd.DataFrame, names: list[str], candidates: np.ndarray,
                  stalled_rows: np.ndarray, typical_rows: np.ndarray, n_typical: int,
                  in_typical: np.ndarray, other_work: np.ndarray) -> np.ndarray:
    """Per name, whether it is a tf.function call among `candidates` whose calls in the stalled
    steps (`stalled_rows` of the in-step events `ev`) run the model's ops (names typical steps
    run too: `in_typical`) but no backward-pass or optimizer op and no other named work
    (`other_work`: a function that writes summaries is summary work): an evaluation or
    prediction function. Where no op in the trace has a backward name (XLA names kernels after
    HLO), a call that runs under 1/TRAINING_OPS_RATIO of a typical step's ops. The step's
    thread waits in its call while executor threads run the ops, one call after another."""
    out = np.zeros(len(names), dtype=bool)
    codes = ev["name"].array.codes
    is_call = np.zeros(len(names) + 1, dtype=bool)
    is_call[[i for i in np.flatnonzero(candidates).tolist()
             if _FUNCTION_CALL.match(names[i])]] = True
    calls = np.flatnonzero(stalled_rows & is_call[codes])
    if not len(calls):
        return out
    starts, ends = ev["start_ns"].to_numpy(np.int64), ev["end_ns"].to_numpy(np.int64)
    calls = calls[np.argsort(starts[calls], kind="stable")]
    is_op = ev["kind"].isin(OP_KINDS).to_numpy()
    ops = np.flatnonzero(stalled_rows & is_op)
    at = np.searchsorted(starts[calls], starts[ops], side="right") - 1
    held = at >= 0
    held[held] = starts[ops[held]] < ends[calls[at[held]]]
    ops, owner = ops[held], codes[calls[at[held]]]
    training = np.array([bool(TRAINING_OP.search(x)) for x in names] + [False])
    m = len(names)
    n_ops = np.bincount(owner, minlength=m)
    n_calls = np.bincount(codes[calls], minlength=m)
    trains = np.bincount(owner, weights=training[codes[ops]], minlength=m) > 0
    model = np.bincount(owner, weights=in_typical[codes[ops]], minlength=m) > 0
    other = np.bincount(owner, weights=other_work[codes[ops]], minlength=m) > 0
    if training[codes[is_op]].any():
        out = (n_ops > 0) & model & ~trains & ~other
    else:
        per_step = (is_op & typical_rows).sum() / max(n_typical, 1)
        out = (n_ops > 0) & ~other & (n_ops * TRAINING_OPS_RATIO <= per_step * n_calls)
    return out & is_call[:m]


# Stalls this share of the longest one or more make the cycle when all of them do not.
MAJOR_STALL_SHARE = 0.5


def _cycle(rows: np.ndarray, dur: np.ndarray, n: int) -> tuple[int | None, np.ndarray]:
    """The period of the stalled rows and the rows that make the cycle. A stray stall of 2-3x
    beside a cycle of 50x ones (a CI run's gc.collect() job: steps 4, 7, 9, 14, 19, 24, step 7
    at 2.3x) hides the cycle: then it is the major stalls' (MAJOR_STALL_SHARE)."""
    period = _period(rows, n)
    if period is None:
        major = rows[dur[rows] >= MAJOR_STALL_SHARE * dur[rows].max()]
        if (period := _period(major, n)) is not None:
            return period, major
    return period, rows


def _period(rows: np.ndarray, n: int) -> int | None:
    """The constant gap, in steps of the table (Keras numbers its markers by
    steps_per_execution), between at least three stalled rows that repeat through the whole
    window: a burst, or stalls that stop, is not a cycle to extrapolate (two stalls are as
    likely a coincidence)."""
    if len(rows) < 3:
        return None
    gaps = set(np.diff(rows).tolist())
    if len(gaps) != 1:
        return None
    p = int(gaps.pop())
    # A cycle's stall may sit just past either end (or have been left out there as an edge).
    return p if p >= 2 and rows[0] <= p and n - 1 - rows[-1] <= p else None


def _list(items: Iterable[str]) -> str:
    items = list(items)
    return ", ".join(items[:8]) + (f", … ({len(items)} in all)" if len(items) > 8 else "")
