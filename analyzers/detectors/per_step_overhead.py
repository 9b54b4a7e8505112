"""`per_step_overhead`: each step pays a fixed host cost around its train-function call.

Signal (TF 2.x, docs/trace-signals.md, "Per-step overhead"): on the step-driving thread, a compiled
step is one `EagerLocalExecute: __inference_<fn>_<id>` whose `EagerKernelExecute` is the run.
Whatever else the thread does in the step and no other detector explains (input waits,
conversions, host-to-device copies, eager ops) is per-call overhead: the Python loop, callbacks,
argument handling and function dispatch. It is fixed per call, so on small steps it is a large
share (seed 000: increase the batch size "to reduce the # of calls between the host and devices").

What-if: STEPS_PER_CALL times the batches per call (Keras steps_per_execution, or a loop inside the
tf.function) pays the overhead once for all of them, saving (1 - 1/STEPS_PER_CALL) of it. With
an accelerator, host overhead costs only what the device sits idle.
"""

from __future__ import annotations

import numpy as np

from analyzers.context import Context
from analyzers.findings import Finding, speedup_from_saving
from analyzers.gil_returns import MIN_WAIT_NS
from analyzers.signals.batches import batches_per_step
from analyzers.signals.conversion_bursts import conversion_bursts
from analyzers.signals.executions import PREFIX, eager_summary_spans, executions, graph_builds
from analyzers.signals.gil import gil_waits, input_holds_gil
from analyzers.steps import covered_during, covered_ns, covered_per_step

ID = "per_step_overhead"
MIN_OVERHEAD = 0.10
STEPS_PER_CALL = 4
# Parameter-server workers that run their steps together less than this share of the time
# take turns (measured: 0% when the coordinator fetches every step's result, 85-99% when it
# schedules ahead).
TAKING_TURNS = 0.2
# GIL waits no input pipeline explains are named in the evidence from this share of step time.
MIN_GIL_NOTE = 0.05
# Main-thread work other detectors already explain.
_EXPLAINED_KINDS = ("input_wait", "convert", "h2d", "d2h")
# A batch fetched from Python: the iterator's op run eagerly on the step thread (`for batch in
# dataset`, or next(iterator) outside the tf.function).
_EAGER_FETCH = ("IteratorGetNext", "IteratorGetNextAsOptional")
# A loop whose calls take a batch fetched from Python in at least this share of its steps is a
# custom loop fed from Python: its remedy is a loop over batches inside the function.
MIN_FETCHED_STEPS = 0.5


def detect(ctx: Context) -> Finding | None:
    if ctx.main_line is None or ctx.n_steps == 0:
        return None
    ex = executions(ctx)
    fn = ex[ex["function"]]
    if fn.empty:
        return None  # no compiled step: an eager loop is `eager_execution`
    # Runs: the kernel execution inside each call (a function's first call also instantiates
    # it; that part is `function_retracing`'s, and stays out of the runs). A call without one
    # (traces that do not write it) counts whole as its run: nothing of it is called overhead.
    rs, re_ = fn["run_start_ns"].to_numpy(), fn["run_end_ns"].to_numpy()
    other = ctx.in_steps(kinds=_EXPLAINED_KINDS, line=ctx.main_line, thread=ctx.steps.thread,
                         columns=("start_ns", "end_ns"))
    primitive = ex[~ex["function"]]
    # The Python between a burst's conversions is the code that makes them (a casting layer's,
    # a copy loop's): theirs, not the call's.
    bursts = conversion_bursts(ctx)
    s = np.concatenate([rs, primitive["start_ns"].to_numpy(), other["start_ns"].to_numpy(),
                        bursts.start_ns])
    e = np.concatenate([re_, primitive["end_ns"].to_numpy(), other["end_ns"].to_numpy(),
                        bursts.end_ns])
    # Summaries written eagerly between calls are `debug_ops_in_step`'s.
    summary_s, summary_e = eager_summary_spans(ctx)
    s, e = np.concatenate([s, summary_s]), np.concatenate([e, summary_e])
    # Waits for the GIL held by the input pipeline's Python are `input_preprocessing`'s.
    held = input_holds_gil(ctx)
    if held is not None:
        s, e = np.concatenate([s, held.start_ns]), np.concatenate([e, held.end_ns])
    total_ns = ctx.total_step_ns
    # Retracing (graph building, then instantiation inside the new function's first execution)
    # is `function_retracing`'s: with it present, whole function spans count as explained.
    build = graph_builds(ctx)
    if len(build):
        s = np.concatenate([s, build["start_ns"].to_numpy(), fn["start_ns"].to_numpy()])
        e = np.concatenate([e, build["end_ns"].to_numpy(), fn["end_ns"].to_numpy()])
    # A fixed cost per call shows in every step: the median step's uncovered time is it, and
    # a few stalled steps (a checkpoint, a garbage collection: `step_stalls`) do not move it.
    t = ctx.steps.table
    dur = t["dur_ns"].to_numpy(np.int64)
    uncovered = dur - covered_per_step(s, e, t["start_ns"].to_numpy(np.int64),
                                       t["end_ns"].to_numpy(np.int64))
    per_call_ns = float(np.median(uncovered))
    # Never more than the steps left uncovered (when most steps are long and empty, the median's
    # uncovered time is not what the short ones pay).
    paid = min(len(dur) * per_call_ns, float(uncovered.sum()))
    overhead = paid / total_ns if total_ns > 0 else 0.0
    if overhead < MIN_OVERHEAD:
        return None
    saved = overhead * (1 - 1 / STEPS_PER_CALL)
    if ctx.has_accelerator:
        saved = min(saved, 1.0 - ctx.fractions.get("device_compute", 0.0))
    run_share = covered_ns(rs, re_) / total_ns
    per_call = batches_per_step(ctx)
    suggest = per_call * STEPS_PER_CALL
    step_ms = ctx.steps.median_step_ns() / 1e6
    together = _workers_together(ctx, set(fn["op"]), rs, re_)
    # A parameter-server worker's calls come from the coordinator over RPC: the time between
    # them is the coordinator's (docs/trace-signals.md, "Parameter servers").
    around = ("the Python loop, callbacks and function dispatch around each call take"
              if not ctx.ps_hosts else
              "waiting for the coordinator to send the next call (its Python loop, RPC) takes")
    evidence = [
        f"the compiled step runs {run_share:.0%} of step time; {around} {overhead:.0%} "
        f"({per_call_ns / 1e6:.2f} ms per call, median, in a {step_ms:.2f} ms median step; "
        f"input waits{', GIL waits on the input pipeline' if held is not None else ''}, "
        "conversions and copies left out: other findings cover them)",
        f"{per_call} batch(es) fetched per call now; estimate: {STEPS_PER_CALL}x as many "
        f"per call pay it once for all ({1 - 1 / STEPS_PER_CALL:.0%} of it saved)",
    ]
    fetched, fetch = _eager_fetch_python(ctx, ex, fn, s, e)
    from_python = fetched >= MIN_FETCHED_STEPS
    if from_python:
        evidence.append(
            f"in {fetched:.0%} of the steps the call takes a batch fetched from Python (the "
            "iterator's IteratorGetNext run eagerly on the training thread: `for batch in "
            "dataset`, or next(iterator) outside the tf.function), with "
            f"{fetch:.1%} of step time between that fetch and the call; moving only the fetch "
            "into the function trades that for the function's handling of the iterator "
            "(no gain measured): fewer calls are the fix (docs/trace-signals.md, \"A batch "
            "fetched in Python\")")
    gil = gil_waits(ctx)
    if held is None and gil.share >= MIN_GIL_NOTE:
        evidence.append(
            f"{gil.share:.0%} of step time of it the training thread waits to take the GIL back "
            f"as TensorFlow calls return ({gil.count} waits of {MIN_WAIT_NS / 1e6:g} ms or "
            "more): another thread of the process runs Python beside the loop (a callback's "
            "or logger's thread, a data thread outside tf.data); fewer calls wait fewer times, "
            "and that thread is worth a look (docs/trace-signals.md, \"GIL waits\")")
        numbers_gil = round(gil.share, 4)
    else:
        numbers_gil = None
    remedy = (f"Run more steps per call: Keras compile(steps_per_execution={suggest}), or "
              "loop over batches inside the tf.function (tf.range); or use a larger batch so "
              "each call does more work (seed 000).")
    if from_python:
        remedy = (f"Run {suggest} steps per call: pass the iterator (iter(dataset)) to the "
                  f"tf.function and loop over {suggest} batches inside it (for _ in "
                  f"tf.range({suggest}): step(next(iterator))), as Keras' steps_per_execution "
                  "does; or use a larger batch so each call does more work (seed 000).")
    numbers = {"overhead_fraction": round(overhead, 4), "run_fraction": round(run_share, 4),
               "batches_per_call": per_call, "suggested_steps_per_call": suggest,
               "gil_wait_fraction": numbers_gil,
               "fetched_from_python": round(fetched, 4),
               "eager_fetch_fraction": round(fetch, 4) if from_python else None}
    if together is not None:
        numbers["workers_running_together"] = round(together, 4)
        if together < TAKING_TURNS:
            evidence.append(
                f"the other workers run their step function during only {together:.0%} of this "
                "worker's: the workers take turns, so the coordinator waits for each step's "
                "result before it schedules the next")
    if ctx.ps_hosts:
        remedy = (
            "Keep every worker busy: schedule steps ahead and fetch results rarely "
            "(ClusterCoordinator.schedule returns at once; a RemoteValue.fetch() or "
            "coordinator.join() after each schedule makes the workers take turns), and run "
            f"several steps per scheduled function (a tf.range loop of {suggest} batches "
            f"inside it, or Model.fit(steps_per_execution={suggest})).")
    return Finding(
        id=ID,
        title=f"{overhead:.0%} of each step is host overhead around the train-function call",
        step_fraction=overhead,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=remedy,
        numbers=numbers,
        config_changes=_trainer_changes(ctx, suggest),
    )


def _trainer_changes(ctx: Context, steps_per_call: int) -> dict[str, int]:
    """For a reference-trainer run whose step function fetches its own batches: that many per
    call (--steps-per-call loops inside the function, which needs the fetch there; the runs that
    fetch in Python have findings of their own that move the fetch)."""
    if not ctx.config or ctx.ps_hosts:
        return {}
    from reference_model.config import TrainConfig

    try:
        cfg = TrainConfig.from_dict(ctx.config)
    except (TypeError, ValueError):
        return {}
    return {"steps_per_call": steps_per_call} if cfg.fetches_in_step else {}


def _eager_fetch_python(ctx: Context, ex, fn, s: np.ndarray, e: np.ndarray
                        ) -> tuple[float, float]:
    """The share of steps with a call whose batch the step thread fetched eagerly since the
    previous call, and the share of step time the thread spends, uncovered by anything
    explained, between each such fetch and its call: from the fetch's end to the first span
    that encloses the call (the tf.function's own Python span, whose argument handling a fetch
    inside the function still pays)."""
    fetch_end = np.sort(ex.loc[ex["op"].isin(_EAGER_FETCH).to_numpy(), "end_ns"].to_numpy())
    if not len(fetch_end) or not len(fn) or ctx.total_step_ns <= 0:
        return 0.0, 0.0
    c_start, c_end = fn["start_ns"].to_numpy(np.int64), fn["end_ns"].to_numpy(np.int64)
    prev_end = np.concatenate(([np.iinfo(np.int64).min], c_end[:-1]))
    k = np.searchsorted(fetch_end, c_start, side="right") - 1
    ok = k >= 0
    ok[ok] = fetch_end[k[ok]] > prev_end[ok]  # fetched since the previous call: the last such
    if not ok.any():
        return 0.0, 0.0
    fetched = min(1.0, ok.sum() / max(ctx.n_steps, 1))  # steps, whatever else they call
    w_start, c_start, c_end = fetch_end[k[ok]], c_start[ok], c_end[ok]
    line, thread = ctx.call_threads[0] if ctx.call_threads else (ctx.main_line, None)
    spans = ctx.in_steps(line=line, thread=thread, columns=("start_ns", "end_ns")
                         ).sort_values("start_ns")
    sp_start, sp_end = spans["start_ns"].to_numpy(np.int64), spans["end_ns"].to_numpy(np.int64)
    w_end = c_start.copy()
    lo = np.searchsorted(sp_start, w_start, side="left")
    hi = np.searchsorted(sp_start, c_start, side="right")
    for i in np.flatnonzero(hi > lo):
        encloses = np.flatnonzero(sp_end[lo[i]:hi[i]] >= c_end[i])
        if len(encloses):
            w_end[i] = sp_start[lo[i] + encloses[0]]
    gap = (w_end - w_start) - covered_per_step(s, e, w_start, w_end)
    return fetched, float(np.clip(gap, 0, None).sum()) / ctx.total_step_ns


def _workers_together(ctx: Context, functions: set[str], rs: np.ndarray, re_: np.ndarray
                      ) -> float | None:
    """On a parameter-server job, the share of this worker's step runs during which another
    worker (a host of the same job: not a chief or evaluator) runs the same step function;
    None on other jobs."""
    tasks = ctx.host_tasks
    if not ctx.ps_hosts or ctx.step_host not in tasks:
        return None
    job = tasks[ctx.step_host][0]
    others = [h for h, (j, _) in tasks.items() if j == job and h != ctx.step_host]
    runs_ns = covered_ns(rs, re_)
    if not others or runs_ns <= 0:
        return None
    calls = {PREFIX + f for f in functions}
    ev = ctx.in_steps(name=calls.__contains__, columns=("host", "start_ns", "end_ns"))
    ev = ev[ev["host"].isin(others).to_numpy()]
    s, e = ev["start_ns"].to_numpy(np.int64), ev["end_ns"].to_numpy(np.int64)
    return covered_during(rs, re_, s, e) / runs_ns
