"""`input_preprocessing`: steps wait on (or share their CPUs with) a CPU-bound input pipeline.

Two ways it costs step time (docs/trace-signals.md, "Input pipeline"):
- exposed: the training thread waits in the iterator and the producers are busy, or the pipeline
  shape itself serializes work (no prefetch, one reader, per-example parsing);
- contention, on hosts without an accelerator: the producers' threads share the cores that run
  the model. The step may never wait, yet every op is slower; seen only with sampler data, as
  more runnable threads while the model's ops run than the model's own (analyzers/signals/
  os_sampler.py, `core_sharing`). Its fix also speeds those ops up, which the wait alone misses
  (per_example: 1/(1 - wait) said 5.8x, the fix measured 10.2x).
Evidence names the cause: decompression (run metadata, or the files the readers open), per-example
parsing, one example per record, one example per file (tf.io.read_file in the map), Python
functions (py_function, numpy_function, from_generator), integer ids hashed through strings, low
parallelism, no prefetch.
"""

from __future__ import annotations

from analyzers.context import Context
from analyzers.detectors import claims, dstate_threads, duplicated_input, io_stall
from analyzers.events import TIMELINE_RUN
from analyzers.findings import Finding, speedup_from_saving
from analyzers.gil_returns import MIN_WAIT_NS
from analyzers.signals.dataloader import WORKERS, LoaderFetches, loader_fetches
from analyzers.signals.gil import GilWaits, gil_waits, input_holds_gil
from analyzers.signals.input_pipeline import (
    MIN_INPUT_WAIT,
    RESHAPING_CAUSES,
    analyze_input_pipeline,
    input_cpu_bound,
    input_wait_ranges,
    pipeline_causes,
    step_before_fix,
)
from analyzers.signals.os_sampler import core_sharing, read_volume, summarize

ID = "input_preprocessing"
# Contention counts when map-function ops (or a named CPU cause) show the producers' CPU work and
# the sampler shows the model's ops slowed (by at least os_sampler.MIN_SLOWDOWN) for sharing the
# cores.
MIN_INPUT_OP_SHARE = 0.3
# ... or a wait of at least this share of the step on a CPU-bound pipeline: a prefetched pipeline
# reading and parsing prebatched records on the model's 2 cores (the clean preset, nothing left
# to take away) leaves 1.9-2.1%, on the MIN_INPUT_WAIT edge, and read `medium` in 2 of 4 CI runs
# on 2026-11-29 from its 1.18-1.27x contention alone.
MIN_PRODUCER_WAIT = 0.05
LOW_PARALLELISM_FIX = 4  # readers the remedy asks for, against the one a sequential pipeline has
# A Keras PyDataset (or Sequence) reaches tf.data through Dataset.from_generator; with workers > 1
# Keras fills its own queue and adds no tf.data prefetch. Worker threads ran 2.3-2.9x slower than
# one worker beside the training loop (the GIL), processes 1.08-1.35x faster on 2 cores
# (docs/trace-signals.md, "Keras PyDataset").
_KERAS_PYDATASET = ("a Keras PyDataset or Sequence: produce its batches in processes, "
                    "PyDataset(workers=N, use_multiprocessing=True) (Keras 2: fit(workers=N, "
                    "use_multiprocessing=True)), not threads, which hold the GIL against the "
                    "training loop (already in processes: more workers, or less Python per "
                    "batch, whole-batch NumPy instead of a loop over examples); with workers > "
                    "1 Keras prefetches into its own queue (max_queue_size) instead of a "
                    "tf.data prefetch")

_FIXES = {
    "decompression": ({"compression": "none"}, "store records uncompressed (or decompress once "
                      "to local disk): GZIP inflation runs on the same cores as the model"),
    "per_example_parsing": ({"record_format": "prebatched", "parse": "batched"},
                            "batch before parsing (parse a whole batch per call) or write "
                            "prebatched records, one record per batch"),
    "per_example_records": ({"record_format": "prebatched"},
                            "write prebatched records, one record per batch with each feature "
                            "holding the whole batch's values, so the reader hands over one "
                            "record per step instead of one per example (seed 002: 7x faster "
                            "steps); failing that, batch right after reading and parse the batch "
                            "with one tf.io.parse_example call"),
    "per_example_files": ({}, "pack the small files into a few large files, TFRecord shards "
                          "with one record per batch (prebatched) parsed with one call per "
                          "batch, read by a parallel interleave; if the decoded dataset fits in "
                          "memory, .cache() it after the first pass"),
    "small_files": ({}, "write fewer, larger files (shards of 100 MB or more, at least as many "
                    "as the readers in parallel) so each open is amortized over many batches; "
                    "until then, raise the interleave's cycle_length and num_parallel_calls so "
                    "opens overlap reads"),
    "ints_as_strings": ({}, "hash integer ids with integer arithmetic in the map (a "
                        "multiplicative hash scaled into the table) instead of formatting them "
                        "as text first, as Keras' Hashing layer does, or store hashed ids"),
    "python_function": ({}, "replace the Python function with TensorFlow ops (tf.strings, "
                        "tf.io, tf.math) so tf.data runs it in parallel without the GIL, or "
                        "precompute the features offline; if it must stay in Python, batch first "
                        "so it runs once per batch on whole arrays, or spread it over processes "
                        "(tf.data service)"),
    "low_parallelism": ({"cycle_length": 4, "interleave_parallelism": 4, "map_parallelism": 4},
                        "read files with interleave(cycle_length>1, num_parallel_calls=AUTOTUNE) "
                        "and map with num_parallel_calls=AUTOTUNE"),
    "no_prefetch": ({"prefetch": 2}, "end the pipeline with .prefetch(AUTOTUNE)"),
}


# What tf.data.experimental.enable_debug_mode() makes of any pipeline: user functions run as
# py_functions, one element at a time, and the prefetch is gone (docs/trace-signals.md, "tf.data's
# debug mode"). A job that left it on reads as all three causes at once.
DEBUG_MODE_CAUSES = frozenset({"python_function", "low_parallelism", "no_prefetch"})
_DEBUG_MODE = ("if the job calls tf.data.experimental.enable_debug_mode(), remove that call "
               "first: it runs every dataset function as Python, one element at a time, and "
               "drops the prefetch, which is what all three causes here look like")

# Measured on 2 cores (docs/trace-signals.md, "GIL waits"): the fix that takes the Python away
# reaches the estimate, worker processes keep its CPU work beside the model's.
_GIL_BOUND = ("; an upper bound for worker processes on a host without an accelerator: their "
              "Python still runs on the model's cores (a PyDataset's batches built by 4 processes "
              "on 2 cores: 1.3x; whole-batch NumPy instead of a loop over examples: 2.8x)")

# Measured on foreign_jobs.py `generator` and `pyfunc` against `python_vectorized`, 3 runs each
# (docs/trace-signals.md, "GIL waits").
_PYTHON_BEATS = ("; TF ops in place of the Python can beat it: beside the pipeline's Python the "
                 "loop's own Python took 2.0x and the model's ops 1.4-1.6x as long as without it, "
                 "for hand-overs of the GIL too short to trace (per-example NumPy in a generator: "
                 "30x measured with TF ops, 17-20x estimated)")


def _gil_note(gil: GilWaits) -> str:
    holder = (f"the pipeline's Python ops (PyFunc) ran on tf.data threads during "
              f"{gil.during_python_ops:.0%} of it" if gil.during_python_ops >= 0.5 else
              "no traced Python op ran during most of it: Python threads the trace does not hold "
              "had the GIL, such as a Keras PyDataset's or Sequence's worker threads "
              "(workers > 1), which build the batches its generator hands over")
    return (f"{gil.share:.0%} of step time the training thread waits to take the GIL back as "
            f"TensorFlow calls return ({gil.ms_per_step:.1f} ms per step on average, "
            f"{gil.count} waits of {MIN_WAIT_NS / 1e6:g} ms or more): {holder}; neither the "
            "step's compute nor the loop's own Python, it reads as per-call overhead without "
            "this")


# A wait whose pipeline left no event is reported from this share of the step: below it, it is as
# likely the get-next call's own cost under the tracer (a prefetched TF1 job's IteratorGetNext
# took 7% of its RunMetadata timeline steps; docs/trace-signals.md, "TF1 RunMetadata timelines").
MIN_UNSEEN_WAIT = 0.1
_UNSEEN_REMEDY = ("Make the pipeline visible before changing it: profile with the TF2 profiler "
                  "(tf.profiler.experimental.start/stop, or `recadvisor capture`), which records "
                  "tf.data's stages and map functions, then follow that report. The usual fixes: "
                  "parse a whole batch per call (batch before map, or prebatched records), map "
                  "and interleave with num_parallel_calls=AUTOTUNE, end with "
                  "prefetch(AUTOTUNE), store records uncompressed.")
# A PyTorch DataLoader's work runs in worker processes the trace does not hold.
_UNSEEN_REMEDY_TORCH = ("Load batches in parallel and ahead of the step: DataLoader(num_workers="
                        "one per spare core, persistent_workers=True, prefetch_factor=2 or "
                        "more, pin_memory=True), move per-example Python work into batched "
                        "tensor ops, and store preprocessed data; profile the workers "
                        "(py-spy) to see what they do.")


def detect(ctx: Context) -> Finding | None:
    wait = ctx.fractions.get("input_wait", 0.0)
    pipe = analyze_input_pipeline(ctx)
    if not pipe.present:
        return _unseen(ctx, wait)
    sampler = summarize(ctx)
    cpu_bound, cpu_note = input_cpu_bound(ctx, pipe, sampler)
    causes = pipeline_causes(ctx, pipe)
    # The pipeline's Python holding the GIL while the training thread needs it back: step time
    # that no wait in the iterator shows (docs/trace-signals.md, "GIL waits").
    gil = input_holds_gil(ctx)
    held = gil.share if gil is not None else 0.0
    if gil is not None:
        causes.setdefault("python_function", "Python in the input pipeline "
                                             "(Dataset.from_generator or py_function)")
    exposed = wait if wait >= MIN_INPUT_WAIT and (cpu_bound or causes) else 0.0
    n_cpus = ctx.n_cpus or (sampler.n_cpus if sampler else 1)
    step_ms = ctx.steps.median_step_ns() / 1e6
    op_share = pipe.input_op_ms_per_step / (n_cpus * step_ms) if step_ms else 0.0
    # A reshaping fix (more readers, a prefetch) keeps the producers' work. A CPU-bound pipeline
    # is better served by taking that work away, except on a host without an accelerator and
    # without sampler data: there no contention can be seen, and the work shares the cores
    # either way (the estimate below says what hiding the wait still costs).
    reshaping = (bool(exposed) and bool(causes) and set(causes) <= RESHAPING_CAUSES
                 and (not cpu_bound or (not ctx.has_accelerator and sampler is None)))
    # Contention, on hosts without an accelerator, needs two witnesses: producers doing CPU work
    # the fix takes away (a named CPU cause, map-function ops holding a large share of the
    # machine, or a wait on a CPU-bound pipeline), and the sampler's runnable threads showing the
    # model's ops slowed for sharing the cores (docs/trace-signals.md, "Input producers slow the
    # model's ops"). Reader stages alone are no witness: their time includes waiting on storage
    # (the dstate_io preset's 32 readers, before its reads went cold, filled 55% of the CPUs x
    # step time, mostly in I/O).
    named_work = bool(set(causes) - RESHAPING_CAUSES) or op_share >= MIN_INPUT_OP_SHARE
    producers = named_work or bool(exposed >= MIN_PRODUCER_WAIT and cpu_bound)
    # A busy CPU and no CPU cause in the map functions: when readers doing small cold reads fill
    # the cores with kernel work per request, the contention and the wait are dstate_threads'
    # (its estimate counts both; the fair-share slowdown here read 3.9x for I/O threads that run
    # in short bursts, against 1.4x measured: docs/trace-signals.md, "Threads in D state").
    if producers and not named_work and claims(dstate_threads, ctx):
        producers, exposed = False, 0.0
    # Producers with no cause of their own that read the same data several times: the copies are
    # the cause, and duplicated_input's estimate counts what removing them buys. (A reshaping
    # cause, one reader or no prefetch, has a fix of its own.)
    if producers and not causes and claims(duplicated_input, ctx):
        return None
    sharing = (core_sharing(ctx) if producers and sampler is not None
               and not ctx.has_accelerator and not reshaping else None)
    slowdown = sharing.counted_slowdown if sharing else 1.0
    if exposed == 0.0 and slowdown == 1.0 and not held:
        # Nothing below the stages: no parsing, no map-function ops, no reads.
        bare = (_only_wrappers(pipe.stage_paths) and not pipe.parse_ops_per_step
                and not pipe.input_op_ms_per_step and not pipe.reads_files)
        if (wait >= MIN_UNSEEN_WAIT and bare
                and not any(claims(m, ctx) for m in (io_stall, dstate_threads,
                                                     duplicated_input))):
            return _unexplained(ctx, wait, pipe.stage_paths)
        return None
    if reshaping:
        # As io_stall: k times the readers, batches k times faster, bounded by compute.
        saved = hidden = 1 - max(1 - exposed, 1 / LOW_PARALLELISM_FIX)
        step_fraction = exposed
        estimate = ""
        if not ctx.has_accelerator:
            # Hiding the wait moves the map functions' CPU work into the model's compute, on the
            # same cores, where the model's ops already use every core: it still costs its
            # share. On a prefetched 1.5 ms Session step the bare wait read 1.09x; parallel map
            # and AUTOTUNE prefetch measured 0.94x (docs/trace-signals.md, "TF1 sessions").
            moved = pipe.input_op_ms_per_step / (n_cpus * step_ms) if step_ms else 0.0
            saved = max(saved - moved, 0.0)
            if saved < MIN_INPUT_WAIT:
                return None
            unknown = "" if ctx.n_cpus or sampler else " (CPU count unknown: one assumed)"
            estimate = (f"estimate: more parallelism hides the wait, but on a host without an "
                        f"accelerator the map functions' {pipe.input_op_ms_per_step:.2f} ms of CPU "
                        f"work per step then runs beside the model's ops on the same {n_cpus} "
                        f"CPU(s){unknown}: {saved:.1%} of the step saved, not {hidden:.1%}")
    else:
        # The fix takes the producers' work away: a step becomes the model's compute alone, at
        # the speed it has with the cores to itself. The profiler's per-element cost sits in the
        # wait and in the contention both, and the fix removes both (step_before_fix).
        # Waits under MIN_SHARE are not named, but taking the pipeline's Python away ends them
        # too: 0.75 ms of a 46.8 ms from_generator step (docs/trace-signals.md, "GIL waits").
        waits = held or (gil_waits(ctx).share if "python_function" in causes else 0.0)
        compute = step_ms * (1 - exposed - waits)
        after = compute / slowdown
        before, inflated = step_before_fix(ctx, after, step_ms)
        saved = 1 - after / before if before else 0.0
        step_fraction = exposed + held + (1 - exposed - held) * (1 - 1 / slowdown)
        against = (f"the untraced median step ({before:.1f} ms, run metadata; the profiled one "
                   f"took {step_ms / before:.2f}x as long)" if inflated
                   else f"the {before:.1f} ms profiled step")
        what = ("the model's compute and the loop's own Python, without the GIL waits"
                if waits else "the model's compute")
        estimate = (f"estimate: after the fix a step is {what}, {compute:.1f} ms as "
                    f"traced{f' at {slowdown:.2f}x the speed' if slowdown > 1 else ''}: "
                    f"{after:.1f} ms against {against}")
        if held and not ctx.has_accelerator:
            estimate += _GIL_BOUND
        if "python_function" in causes:
            estimate += _PYTHON_BEATS
    evidence = []
    if exposed:
        evidence.append(f"{wait:.0%} of step time the training thread waits for the next batch "
                        f"({wait * step_ms:.1f} ms of a {step_ms:.1f} ms median step)")
    if gil is not None:
        evidence.append(_gil_note(gil))
    if slowdown > 1:
        waking = ("" if sharing.waking_threads is None else
                  f"; threads runnable then and not while the step waits: "
                  f"{sharing.waking_threads:.1f}")
        evidence.append(
            f"CPU contention: while the model's ops ran, {sharing.runnable:.1f} of the process's "
            f"threads were runnable on {n_cpus} CPUs, {sharing.model_threads:.1f} of them the "
            f"model's (compute lines busy in the trace + the Python thread: "
            f"{sharing.traced_threads:.1f}{waking}): its ops took {slowdown:.2f}x as long as "
            f"with the cores to themselves (sampler, {sharing.sweeps} sweeps)")
    evidence.append(estimate)
    evidence.extend(causes.values())
    evidence.append(cpu_note)
    volume = read_volume(ctx)
    if volume:
        evidence.append(volume.note())
    changes: dict = {}
    remedies = []
    for cause in causes:
        if cause in _FIXES:
            change, text = _FIXES[cause]
            changes.update(change)
            remedies.append(text)
    if pipe.generator and "python_function" in causes:
        remedies.append(_KERAS_PYDATASET)
    debug_mode = set(causes) >= DEBUG_MODE_CAUSES and not pipe.generator
    if debug_mode:
        remedies.insert(0, _DEBUG_MODE)
        evidence.append("Python functions in a sequential map, and no prefetch: how tf.data "
                        "runs any pipeline in its debug mode (enable_debug_mode), whatever "
                        "num_parallel_calls and prefetch the code sets")
    if not remedies:
        remedies.append("move per-batch CPU work out of the training job (preprocess offline, "
                        "store uncompressed prebatched records), parallelize map/interleave with "
                        "AUTOTUNE, and prefetch")
    if ctx.config is None:
        changes = {}
    which = ", ".join(c.replace("_", " ") for c in causes) or "CPU-bound producers"
    return Finding(
        id=ID,
        title=f"The input pipeline holds up training ({which})",
        step_fraction=step_fraction,
        speedup=speedup_from_saving(saved),
        evidence=[e for e in evidence if e],
        remedy="; ".join(remedies) + ".",
        numbers={"input_wait_fraction": round(wait, 4), "median_step_ms": round(step_ms, 3),
                 "contention_slowdown": round(slowdown, 3),
                 "gil_wait_fraction": round(held, 4),
                 "runnable_threads": round(sharing.runnable, 2) if sharing else None,
                 "model_threads": round(sharing.model_threads, 2) if sharing else None,
                 "causes": sorted(causes),
                 "parse_ops_per_step": round(pipe.parse_ops_per_step, 1),
                 "input_op_ms_per_step": round(pipe.input_op_ms_per_step, 3),
                 "reader_ms_per_step": round(pipe.reader_ms_per_step, 3),
                 "reader_concurrency": round(pipe.reader_concurrency, 2),
                 "has_prefetch": pipe.has_prefetch, "stage_paths": pipe.stage_paths[:6],
                 "debug_mode_pattern": debug_mode,
                 **(volume.numbers() if volume else {})},
        top_events=pipe.top_events,
        time_ranges_ms=input_wait_ranges(ctx, also=(gil.start_ns, gil.end_ns) if gil else None),
        config_changes=changes,
    )


# Stages that only hand elements on (the iterator's root, tf.data's own wrappers, a prefetch):
# a pipeline traced as these alone shows where the step waits, not what it waits for.
_WRAPPERS = frozenset({"Iterator", "Root", "Model", "MaxIntraOpParallelism", "Prefetch",
                       "PrivateThreadPool", "Options", "FiniteTake", "Take", "Repeat"})


def _only_wrappers(paths: list[str]) -> bool:
    return bool(paths) and all(set(p.split("::")) <= _WRAPPERS for p in paths)


def _unexplained(ctx: Context, wait: float, paths: list[str]) -> Finding:
    """The training thread waits on a traced pipeline whose producers left nothing to explain
    it: no map-function op, reader or named cause below the stages it waits in (real Keras 2.4
    GPU traces: one 8-62 s step waiting in a `Prefetch` with nothing under it, the callback's
    default window at batch 2; docs/trace-signals.md, "Input copies inside the step")."""
    notes = ["the stages it waits in are traced (" + "; ".join(paths[:3]) + "), but no reader, "
             "map-function op or parsing below them: the producers' work ran untraced (a Python "
             "generator, a source outside tf.data) or before the window (a shuffle buffer "
             "filling, a cache being written)"]
    if ctx.n_steps <= 2:
        notes.append(
            f"the window holds {ctx.n_steps} step(s): one this short and early in training (Keras' "
            "TensorBoard callback profiled batch 2 by default) can hold the pipeline's start-up "
            "rather than its steady state")
    return _cause_unknown(
        ctx, wait, "its producers left no events", notes,
        remedy=("Profile a window of 10 or more steps later in training (TensorBoard("
                "profile_batch=(100, 110)), or tf.profiler.experimental.start/stop around "
                "them) to see whether the wait lasts; if it does, feed the step ahead of time: "
                "map and interleave with num_parallel_calls=AUTOTUNE, prefetch(AUTOTUNE) last, "
                "cache() after the expensive stages, a smaller shuffle buffer when it fills "
                "slowly."),
        numbers={"pipeline_traced": True, "stage_paths": paths[:6]})


def _unseen(ctx: Context, wait: float) -> Finding | None:
    """The training thread waits on its input, but no event of the pipeline is in the trace (a
    TF1 RunMetadata timeline holds the graph's own ops only)."""
    # Readers seen waiting in D state explain the wait: dstate_threads' estimate counts it.
    if wait < MIN_UNSEEN_WAIT or claims(dstate_threads, ctx):
        return None
    timeline = ctx.steps.source == f"markers:{TIMELINE_RUN}"
    torch = ctx.framework == "pytorch"
    loader = loader_fetches(ctx) if torch else None
    if loader is not None and loader.in_process:
        return _in_process_loader(ctx, wait, loader)
    workers = loader is not None and loader.iterator == WORKERS
    note = (("the DataLoader's worker processes (`_MultiProcessingDataLoaderIter`) do not keep "
             "up, and their work is not in the trace" if workers else
             "the DataLoader's workers are not in the trace") if torch else
            "no tf.data stage, map-function op or reader event in the trace"
            + (": a RunMetadata timeline records the Session's graph ops only, not what "
               "tf.data's threads do" if timeline else ""))
    return _cause_unknown(ctx, wait, "its work is not in the trace", [note],
                          remedy=_UNSEEN_REMEDY_TORCH if torch else _UNSEEN_REMEDY,
                          numbers={"pipeline_traced": False})


def _in_process_loader(ctx: Context, wait: float, loader: LoaderFetches) -> Finding:
    """PyTorch's DataLoader(num_workers=0) loads each batch on the training thread: the wait is
    the loading, and worker processes would do it while the step runs (docs/trace-signals.md,
    "PyTorch DataLoader": Kineto's ResNet-50 samples, 1.39x and 1.22x measured with 4 workers)."""
    step_ms = ctx.steps.median_step_ns() / 1e6
    wait_ms = wait * step_ms
    rest_ms = step_ms - wait_ms
    k = loader.workers_to_keep_up(rest_ms, step_ms)
    speedup = speedup_from_saving(wait)
    inside = (f"torch ops take {loader.op_ms_per_step:.1f} ms of the "
              f"{loader.fetch_ms_per_step:.1f} ms it spends per step ({loader.ops_per_fetch:.0f}"
              " per fetch, the heaviest in top events), the rest is Python: the dataset's "
              "__getitem__, decoding and transforms" if loader.top_ops else
              "no torch op inside it: it is Python, the dataset's __getitem__, decoding and "
              "transforms")
    which = (f"{loader.fetches} of the {loader.all_fetches} DataLoader fetches are"
             if loader.all_fetches > loader.fetches else "every fetch is")
    per_batch = (f"~{loader.ms_per_fetch:.0f} ms"
                 + (f" ({loader.fetches_per_step:.1f} batches a step)"
                    if round(loader.fetches_per_step, 1) != 1 else ""))
    # Without an accelerator the workers take cores from the model (docs/trace-signals.md,
    # "Input producers slow the model's ops").
    cores = ("" if ctx.has_accelerator else "; on a host without an accelerator they run on the "
             "model's cores, so this is an upper bound")
    if k is None:
        estimate = (f"estimate: the wait hidden, {speedup:.2f}x, is an upper bound: the step has "
                    "no other work for worker processes to load the next batch under")
        workers = "num_workers=one per spare core"
    else:
        estimate = (f"estimate: {k} worker processes, each loading a batch in {per_batch} while "
                    f"the rest of the step takes {rest_ms:.0f} ms, have the next batch ready: the"
                    f" wait hidden, {speedup:.2f}x, if the host has {k} cores to spare{cores}")
        workers = f"num_workers={k} or more, up to one per spare core"
    pinned = ", pin_memory=True" if ctx.has_accelerator else ""
    return Finding(
        id=ID,
        title="The input pipeline holds up training (the DataLoader loads each batch in the "
              "training process: num_workers=0)",
        step_fraction=wait,
        speedup=speedup,
        evidence=[
            f"{wait:.0%} of step time the training thread waits for the next batch "
            f"({wait_ms:.1f} ms of a {step_ms:.1f} ms median step)",
            f"{which} `_SingleProcessDataLoaderIter.__next__`: that DataLoader has no worker "
            "processes and reads, transforms and collates each batch on the training thread "
            f"while the step waits; {inside}",
            estimate,
        ],
        remedy=(f"Load batches in worker processes ahead of the step: DataLoader({workers}, "
                f"persistent_workers=True{pinned}); if the step still waits then, the workers "
                "are too slow: move per-example Python into batched tensor ops, or store "
                "preprocessed data."),
        numbers={"input_wait_fraction": round(wait, 4), "median_step_ms": round(step_ms, 3),
                 "causes": ["in_process_loading"], "pipeline_traced": True,
                 "loader_ms_per_fetch": round(loader.ms_per_fetch, 3),
                 "loader_op_ms_per_step": round(loader.op_ms_per_step, 3),
                 "suggested_num_workers": k},
        top_events=loader.top_ops,
        time_ranges_ms=input_wait_ranges(ctx),
    )


def _cause_unknown(ctx: Context, wait: float, why: str, notes: list[str], *, remedy: str,
                   numbers: dict) -> Finding:
    """The wait is measured, its cause is not: removing it entirely bounds what a fix gains."""
    step_ms = ctx.steps.median_step_ns() / 1e6
    return Finding(
        id=ID,
        title=f"The input pipeline holds up training ({why})",
        step_fraction=wait,
        speedup=speedup_from_saving(wait),
        evidence=[
            f"{wait:.0%} of step time the training thread waits for the next batch "
            f"({wait * step_ms:.1f} ms of a {step_ms:.1f} ms median step)",
            notes[0],
            f"estimate: the wait hidden entirely, {speedup_from_saving(wait):.2f}x: an upper "
            "bound, since the trace cannot say which fix would hide how much of it",
            *notes[1:]],
        remedy=remedy,
        numbers={"input_wait_fraction": round(wait, 4), "median_step_ms": round(step_ms, 3),
                 "causes": [], **numbers},
        time_ranges_ms=input_wait_ranges(ctx),
    )
