"""What the trace says about a tf.data pipeline (docs/trace-signals.md, "tf.data").

tf.data writes one event per iterator stage call, named by the stage path
(`Iterator::Root::Prefetch::ParallelMapV2::BatchV2::ParallelInterleaveV4[3]::FlatMap...`), on its
own threads (`tf_data_*` lines); the ops of map functions run there too (`ParseExampleV2`,
`Cast`...). From the stage paths we read the pipeline's shape (prefetch or not, parallel stages,
map before batch) without the user's code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.events import cat_codes_map, cat_mask, present_values
from analyzers.findings import heaviest_events
from analyzers.signals.batches import batches_per_step
from analyzers.signals.preprocessing_ops import CAUSE_IDS, cause_codes
from analyzers.signals.step_waits import step_input_waits
from analyzers.steps import covered_ns, merge_intervals

_PARSE_OPS = re.compile(r"^(ParseExample|ParseExampleV2|ParseSingleExample|ParseSequenceExample\w*|"
                        r"DecodeCSV|DecodeJSONExample|DecodeRaw|DecodeProtoV2|ParseTensor)$")
# Ops that call back into Python: tf.numpy_function / from_generator (`PyFunc`,
# `PyFuncStateless`) and tf.py_function (`EagerPyFunc`) (docs/trace-signals.md, "tf.data").
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
_FILE_OPS = frozenset({"ReadFile"})  # tf.io.read_file in a map
# File-reading stages, by the dataset type TF names their iterators with (TFRecordDataset ->
# `TFRecord`, CsvDataset -> `CSV`, Dataset.load -> `Load`, snapshot -> `Snapshot`).
READERS = ("TFRecord", "FixedLengthRecord", "TextLine", "CSV", "SSTable", "Parquet",
            "ArrayRecord", "Snapshot", "Load", "LMDB", "Sql")
_BRACKETS = re.compile(r"\[\d+\]")
# A direct child of an interleave element (`...ParallelInterleaveV4[37]::FlatMap`): one per open
# input; group 1 names the element.
_INTERLEAVE_CHILD = re.compile(r"(Interleave\w*\[\d+\])::[A-Za-z0-9]+$")
# Readers that say which file they open: `TFRecordDatasetOp::Iterator::SetupStreamsLocked` carries
# a `filename` stat (docs/trace-signals.md, "Jobs that are not ours": TFRecord files).
_OPENS_FILE = re.compile(r"DatasetOp::Iterator::")
# Extensions of the codecs TFRecordDataset inflates (compression_type GZIP / ZLIB).
_COMPRESSED = re.compile(r"(?i)\.(gz|gzip|zz|zlib|deflate)$")
# Readers of serialized records, one per reader call: a batch's worth of calls means one example
# per record. Line and column readers (TextLine, CSV) read one row per call whatever the format.
_RECORD_READERS = frozenset({"TFRecord", "ArrayRecord"})
# A reader's iterator made: one per input file (`MakeIterator::TFRecordDataset`, the dataset op's
# name without its version), whether an interleave, a flat_map or the reader's own file list
# opens it (docs/trace-signals.md, "Jobs that are not ours": over-sharded files).
_READER_ITERATOR = re.compile(rf"^MakeIterator::({'|'.join(READERS)})Dataset(V\d+)?$")


@dataclass
class InputPipeline:
    present: bool
    stage_paths: list[str]
    has_prefetch: bool
    parallel_stages: list[str]
    sequential_stages: list[str]  # Map / Interleave without num_parallel_calls
    map_before_batch: bool
    parse_ops_per_step: float
    parse_ms_per_step: float
    input_op_ms_per_step: float  # CPU work of map functions on tf.data threads
    reader_ms_per_step: float  # time inside reader stages (reads + decompression)
    reader_concurrency: float  # mean number of open inputs (or reader calls) while any is
    max_open_inputs: int  # most interleave inputs open at once
    ints_as_strings_ms_per_step: float  # integer ids formatted as text to be hashed, in the map
    python_calls_per_step: float  # Python-function ops run by the pipeline
    python_ms_per_step: float
    generator: bool  # a Dataset.from_generator stage
    reads_files: bool  # a file-reader stage (TFRecord, TextLine, ...) ran or is in the paths
    records_per_step: float  # record-reader calls per step and host: records read one by one
    file_reads_per_step: float  # whole files read by map functions (tf.io.read_file), per host
    file_read_ms_per_step: float
    files_opened_per_step: float  # reader iterators made in the median step, per host: files opened
    batches_per_step: int  # the counts above are per step; per batch they say what a batch is
    records_per_file: float | None  # record-reader calls per file opened (record readers)
    files: list[str]  # the files readers opened during the profile, where the trace names them
    top_events: list[dict]  # the heaviest map-function ops and reader stages, by name


def _mean_concurrency(s: np.ndarray, e: np.ndarray) -> float:
    union = covered_ns(s, e) if len(s) else 0
    return float((e - s).sum() / union) if union > 0 else 0.0


def _max_concurrency(s: np.ndarray, e: np.ndarray) -> int:
    if not len(s):
        return 0
    t = np.concatenate([s, e])
    delta = np.concatenate([np.ones(len(s)), -np.ones(len(e))])
    order = np.lexsort((delta, t))  # at equal times, closes before opens
    return int(np.cumsum(delta[order]).max())


def _is_stage_or_prefetch(name: str) -> bool:
    return name.startswith("Iterator::") or name == "PrefetchConsume"


def analyze_input_pipeline(ctx: Context) -> InputPipeline:
    return ctx.memo("input_pipeline", lambda: _analyze(ctx))


def _analyze(ctx: Context) -> InputPipeline:
    named = ctx.in_steps(name=_is_stage_or_prefetch, columns=("name",))["name"]
    paths = sorted({_BRACKETS.sub("", n) for n in present_values(named)
                    if n.startswith("Iterator::")})
    work = ctx.in_steps(kinds=("input_work",),
                        columns=("host", "name", "op_type", "start_ns", "end_ns", "dur_ns"))
    # Masks and masked sums over the clipped rows, no row subsets: on a per-example pipeline
    # most events are input work, and each boolean-indexed copy of `work` cost tens of MB.
    wname = work["name"]
    dur = work["dur_ns"].to_numpy()
    is_stage = cat_mask(wname, lambda n: n.startswith("Iterator::"))
    # Map-function ops are `scope/op:Type` events; `ExecutorState::Process` and other `A::B`
    # wrappers enclose them and would count the same time twice.
    is_op = ~is_stage & cat_mask(wname, lambda n: ":" in n and "::" not in n)
    is_parse = is_op & cat_mask(work["op_type"], _PARSE_OPS.match)
    is_python = is_op & cat_mask(work["op_type"], PYTHON_OPS.__contains__)
    # `from_tensor_slices(paths).map(tf.io.read_file)` reads files with no reader stage.
    is_file_op = is_op & cat_mask(work["op_type"], _FILE_OPS.__contains__)
    is_string_hash = is_op & (cause_codes(wname) == CAUSE_IDS.index("ints_as_strings"))
    is_reader = is_stage & cat_mask(wname, lambda x: x.rsplit("::", 1)[-1] in READERS)
    is_record = is_reader & cat_mask(wname, lambda x: x.rsplit("::", 1)[-1] in _RECORD_READERS)
    n = max(ctx.n_steps, 1)
    host = work["host"]

    def per_step(where: np.ndarray, total: float) -> float:
        """`total` over the rows `where`, per step of one worker (Context.worker_steps)."""
        return total / ctx.worker_steps(host, where)

    reader_ms = per_step(is_reader, float(dur.sum(where=is_reader)) / 1e6)
    opens = ctx.in_steps(name=_READER_ITERATOR.match, columns=("host", "step_idx"))
    # The median step's opens: a new iterator (each Keras fit makes one) opens cycle_length and
    # its prefetched elements at once, a burst in one step that is no file size.
    opened = float(np.median(np.bincount(opens["step_idx"].to_numpy(), minlength=n))) / max(
        opens["host"].nunique(), 1) if len(opens) else 0.0
    records = int(is_record.sum())
    # Concurrency of reads: the direct children of interleave elements (one per open input),
    # or the reader stages themselves when there is no interleave.
    element = cat_codes_map(wname, lambda n: (m := _INTERLEAVE_CHILD.search(n)) and m.group(1))
    is_input = element >= 0
    starts, ends = work["start_ns"].to_numpy(), work["end_ns"].to_numpy()
    if is_input.any():
        # One span per interleave element (an open input file) of each host, first to last
        # event: hosts number their elements alike.
        spans = pd.DataFrame({"host": host.array.codes[is_input], "element": element[is_input],
                              "start_ns": starts[is_input], "end_ns": ends[is_input]}).groupby(
            ["host", "element"]).agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
        conc_host = spans.index.get_level_values("host").to_numpy()
        conc_s, conc_e = spans["start_ns"].to_numpy(), spans["end_ns"].to_numpy()
    else:
        conc_host = host.array.codes[is_reader]
        conc_s, conc_e = starts[is_reader], ends[is_reader]
    # Each host's reads overlap each other's: concurrency is a worker's (the mean over hosts,
    # the most any host had open).
    conc_hosts = np.unique(conc_host)
    concurrency = float(np.mean([_mean_concurrency(conc_s[conc_host == h], conc_e[conc_host == h])
                                 for h in conc_hosts])) if len(conc_hosts) else 0.0
    max_open = max((_max_concurrency(conc_s[conc_host == h], conc_e[conc_host == h])
                    for h in conc_hosts), default=0)
    path_text = " ".join(paths)
    stages = {x for p in paths for x in p.split("::")}
    parallel = sorted(s for s in stages if s.startswith("Parallel") or s == "MapAndBatch")
    sequential = sorted(stages & {"Map", "Interleave"})
    map_before = "MapAndBatch" in path_text or any(
        re.search(r"::(BatchV2|Batch|PaddedBatchV2)::(ParallelMapV2|Map)(::|$)", p) for p in paths
    )
    leaves = is_op | is_reader
    return InputPipeline(
        present=bool(paths) or len(work) > 0,
        stage_paths=paths,
        has_prefetch="Prefetch" in path_text or bool((named == "PrefetchConsume").any()),
        parallel_stages=parallel,
        sequential_stages=sequential,
        map_before_batch=bool(map_before),
        parse_ops_per_step=per_step(is_parse, int(is_parse.sum())),
        parse_ms_per_step=per_step(is_parse, float(dur.sum(where=is_parse)) / 1e6),
        input_op_ms_per_step=per_step(is_op, float(dur.sum(where=is_op)) / 1e6),
        reader_ms_per_step=reader_ms,
        reader_concurrency=concurrency,
        max_open_inputs=max_open,
        ints_as_strings_ms_per_step=per_step(is_string_hash,
                                             float(dur.sum(where=is_string_hash)) / 1e6),
        python_calls_per_step=per_step(is_python, int(is_python.sum())),
        python_ms_per_step=per_step(is_python, float(dur.sum(where=is_python)) / 1e6),
        generator=any(p.endswith("::Generator") or "::Generator::" in p for p in paths),
        reads_files=bool(stages & set(READERS)) or reader_ms > 0 or bool(is_file_op.any()),
        # Each host reads its own share of the batch: calls per step and host.
        records_per_step=per_step(is_record, records),
        file_reads_per_step=per_step(is_file_op, int(is_file_op.sum())),
        file_read_ms_per_step=per_step(is_file_op, float(dur.sum(where=is_file_op)) / 1e6),
        files_opened_per_step=opened,
        batches_per_step=batches_per_step(ctx),
        # Each file's last reader call finds its end: one call per record, plus one.
        records_per_file=max(records / len(opens) - 1, 0.0) if len(opens) and records else None,
        files=_files_opened(ctx),
        # Stage events nest (Iterator::Root holds every stage below it, *Produce wraps a
        # stage), so their totals count the same time over and over: the work itself is in the
        # map-function ops and the reader stages, the leaves.
        # Interleave elements are numbered (`ParallelInterleaveV4[37]`): one name per stage.
        top_events=heaviest_events(work, where=leaves if leaves.any() else None,
                                   fold=lambda x: _BRACKETS.sub("", x)),
    )


def _files_opened(ctx: Context) -> list[str]:
    """Every file a reader opened in the profile window, steps or not (a reader opens its next
    file whenever the last one ends, rarely inside the few steps profiled)."""
    return sorted(set(file_opens(ctx)["filename"]))


def file_open_starts(ctx: Context) -> np.ndarray:
    """When readers opened a file (ns), in event order: the reads that name their file."""
    return file_opens(ctx)["start_ns"].to_numpy(np.int64)


def file_opens(ctx: Context) -> pd.DataFrame:
    """The reads that name the file they open (host, start_ns, filename), in event order, steps
    or not."""
    def build() -> pd.DataFrame:
        ev = ctx.events
        if "filename" not in ev or not len(ev["filename"].cat.categories):
            return pd.DataFrame({"host": pd.Series(dtype=str), "start_ns": np.zeros(0, np.int64),
                                 "filename": pd.Series(dtype=str)})
        opens = cat_mask(ev["name"], _OPENS_FILE.search) & (ev["filename"].array.codes >= 0)
        rows = ev.loc[opens, ["host", "start_ns", "filename"]]
        return rows.assign(host=rows["host"].astype(str), filename=rows["filename"].astype(str))
    return ctx.memo("file_opens", build)


def input_wait_ranges(ctx: Context, top: int = 5, also: tuple[np.ndarray, np.ndarray] | None = None
                      ) -> list[tuple[float, float]]:
    """The longest input waits (with the intervals `also`, [start, end) ns, among them), as
    (start, end) in ms from the trace start."""
    w = step_input_waits(ctx, ("start_ns", "end_ns"))
    s, e = w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)
    if also is not None:
        s, e = np.concatenate([s, also[0]]), np.concatenate([e, also[1]])
    # Waits nest (the GetNext op, Iterator::Root, its first stage): one range per covered span.
    ms, me = merge_intervals(s, e)
    longest = np.argsort(ms - me, kind="stable")[:top]
    return [(round(a / 1e6, 3), round(b / 1e6, 3)) for a, b in zip(ms[longest].tolist(),
                                                                    me[longest].tolist(),
                                                                    strict=True)]


# The input wait a detector counts: below it, within the step's own jitter.
MIN_INPUT_WAIT = 0.02


def step_before_fix(ctx: Context, after_ms: float, step_ms: float) -> tuple[float, bool]:
    """The step a fix of the input side is measured against, and whether it is the untraced
    one. A profiled step longer than the untraced median carries the profiler's per-element cost
    on the input side (docs/trace-signals.md, "The profiler's own cost"), which the fix removes
    with the input work: the untraced step is the step before, unless the step after the fix
    outlasts it (the profiler slowed the model too: only proportions hold then)."""
    untraced = ctx.untraced_step_ms
    inflated = untraced is not None and after_ms <= untraced < step_ms
    return (untraced if inflated else step_ms), inflated


# Causes whose fix only reshapes the pipeline (more readers, a prefetch): the producers' CPU work
# stays, so the model's ops keep sharing the cores with it.
RESHAPING_CAUSES = frozenset({"low_parallelism", "no_prefetch"})
# An input pipeline whose producers keep this share of the CPU busy counts as CPU-bound.
CPU_BOUND_UTILIZATION = 0.6
# ... provided the input threads hold this share of the process's CPU time: the io_stall preset's
# process used 64% of 2 CPUs on a 2026-11-28 machine, 2% of it on input threads (the rest the
# model's ops on 2 devices), and read as CPU-bound input; gzip 36%, per_example 12%.
MIN_INPUT_CPU_SHARE = 0.05
CPU_BOUND_OP_SHARE = 0.5
# Reads are effectively sequential when fewer inputs than this are open on average AND at most
# MAX_OPEN_SEQUENTIAL at once. A parallel interleave with cycle_length 1 still opens the next
# input early: TF 2.21 traces show mean 1.7-2.8, max 3; cycle_length 4 shows mean 5.0-7.8, max 8-12
# over 17-36 step windows (6-step windows read lower: cycle_length 4 gave 2.4-4.8, max 4-7)
# (docs/trace-signals.md, "tf.data").
# cycle_length 2 sits between: mean 2.0, max 3 or 4 from run to run (the foreign TFRecord jobs),
# so it is called sequential in some windows.
MIN_READER_CONCURRENCY = 3.5
MAX_OPEN_SEQUENTIAL = 3
# Python functions are a cause when they take this share of the input wait.
MIN_PYTHON_SHARE_OF_WAIT = 0.2
# Records read one by one per step beyond which the records hold one example each: prebatched
# records give one per batch and replica (4-5 per step in the trainer's prebatched presets), one
# example per record gives the batch size (1,024-4,096 in the `example` presets and a Keras job
# reading tf.train.Example files; docs/trace-signals.md, "Jobs that are not ours").
MIN_RECORDS_PER_BATCH = 64
# Whole files read per batch beyond which each holds an example (or a few): a Keras job over 8,192
# 260-byte files read 259 a step at batch 256 (docs/trace-signals.md, "Jobs that are not ours").
# A file per batch, or a handful of shards, stays far below.
MIN_FILES_PER_BATCH = 16
# Input files opened per batch beyond which each holds less than half a batch: every open makes a
# reader iterator (and its interleave element) on the input threads and reaches storage before
# the first record. A Keras job over 1,024 one-record files opened 7-8 a step (1.7x the untraced
# step of the same data in 8 files); the reference trainer's 16 shards none (mean 0.4-0.5), and 2
# a step with 4 batches per call (docs/trace-signals.md, "Jobs that are not ours").
MIN_OPENS_PER_BATCH = 2.0
# Parse ops per batch beyond which records are parsed one example at a time.
MIN_PARSE_OPS_PER_BATCH = 16
# Share of the map-function ops' time (and of the input wait) in formatting integer ids as text
# to hash them beyond which it is named: an integer hash does the same for a fraction
# (docs/trace-signals.md, "Preprocessing ops in the step").
MIN_STRING_HASH_SHARE = 0.2


def input_cpu_bound(ctx: Context, pipe: InputPipeline, sampler) -> tuple[bool, str]:
    """Is the input pipeline CPU-bound? With sampler data: the process keeps most CPUs busy while
    steps wait; without: map-function op time per step is a large share of the wait."""
    wait_ms = ctx.fractions.get("input_wait", 0.0) * ctx.steps.median_step_ns() / 1e6
    if sampler is not None:
        busy = (sampler.cpu_utilization >= CPU_BOUND_UTILIZATION
                and sampler.input_cpu_share >= MIN_INPUT_CPU_SHARE)
        return busy, (f"sampler: the process used {sampler.cpu_utilization:.0%} of "
                      f"{sampler.n_cpus} CPUs during the steps; input threads "
                      f"{sampler.input_cpu_share:.0%} of its CPU time")
    share = pipe.input_op_ms_per_step / wait_ms if wait_ms > 0 else 0.0
    # Ops that outlast the wait ran while the step computed (prefetched, or Python the step
    # waited on for the GIL instead: signals/gil.py).
    of_wait = f"{share:.0%} of the wait" if share <= 1 else f"{share:.1f}x the wait"
    return share >= CPU_BOUND_OP_SHARE, (
        f"no sampler data: map-function ops take {pipe.input_op_ms_per_step:.1f} ms per step, "
        f"{of_wait} (storage waits and in-reader decompression look alike "
        f"without it; capture with `recadvisor capture` to tell them apart)")


def pipeline_causes(ctx: Context, pipe: InputPipeline) -> dict[str, str]:
    """Why the pipeline is slow, as far as the trace (and run metadata) show: no prefetch, low
    parallelism, per-example parsing, one example per record or per file, Python functions,
    decompression (run metadata, else the names of the files the readers open); cause →
    evidence."""
    causes: dict[str, str] = {}
    if not pipe.present:
        return causes
    if not pipe.has_prefetch:
        causes["no_prefetch"] = ("no Prefetch stage at the end of the pipeline: batches are "
                                 "produced only when the step asks for them")
    if (pipe.reader_concurrency and pipe.reader_concurrency < MIN_READER_CONCURRENCY
            and pipe.max_open_inputs <= MAX_OPEN_SEQUENTIAL):
        causes["low_parallelism"] = (
            f"only {pipe.reader_concurrency:.1f} input files open on average (at most "
            f"{pipe.max_open_inputs}): files are read one after another")
    if pipe.sequential_stages:
        causes.setdefault("low_parallelism", f"sequential stages "
                                             f"{', '.join(pipe.sequential_stages)} "
                                             "(no num_parallel_calls)")
    wait_ms = ctx.fractions.get("input_wait", 0.0) * ctx.steps.median_step_ns() / 1e6
    python = pipe.python_calls_per_step > 0 and (
        pipe.python_ms_per_step >= MIN_PYTHON_SHARE_OF_WAIT * wait_ms)
    if python:
        source = ("Dataset.from_generator (a Keras PyDataset or Sequence is one)" if pipe.generator
                  else "tf.py_function/numpy_function")
        per = " (once per example: map before batch)" if pipe.map_before_batch else ""
        causes["python_function"] = (
            f"{pipe.python_calls_per_step:.0f} Python function calls per step "
            f"({pipe.python_ms_per_step:.1f} ms) from {source}{per}: they run under the GIL, "
            "so num_parallel_calls barely parallelizes them")
    parsing = ""
    k = pipe.batches_per_step
    # Counts that say what a batch is made of are judged per batch (signals/batches.py).
    batches = f"; {k} batches a step" if k > 1 else ""
    if pipe.parse_ops_per_step / k >= MIN_PARSE_OPS_PER_BATCH:
        parsing = (f"{pipe.parse_ops_per_step:.0f} parse ops per step "
                   f"({pipe.parse_ms_per_step:.1f} ms{batches}): records are parsed one example "
                   "at a time")
    elif pipe.map_before_batch and not python:
        parsing = ("the map function runs once per example (map before batch), "
                   f"{pipe.input_op_ms_per_step:.1f} ms of map ops per step")
    if pipe.file_reads_per_step / k >= MIN_FILES_PER_BATCH:
        # Per-example parsing follows from per-example files: packing them fixes both.
        causes["per_example_files"] = (
            f"{pipe.file_reads_per_step:.0f} files read per step by tf.io.read_file "
            f"({pipe.file_read_ms_per_step:.1f} ms in ReadFile ops{batches}): one file per "
            "example, each "
            "opened, read and closed on its own and carried through the map function alone"
            + (f"; {pipe.parse_ops_per_step:.0f} parse ops per step, one per file "
               f"({pipe.parse_ms_per_step:.1f} ms)"
               if pipe.parse_ops_per_step / k >= MIN_PARSE_OPS_PER_BATCH else ""))
    elif parsing:
        causes["per_example_parsing"] = parsing
    hashing = pipe.ints_as_strings_ms_per_step
    # Against the wait as well: a millisecond of hashing in a pipeline that waits on storage is
    # no reason to call the wait preprocessing.
    if hashing and hashing >= MIN_STRING_HASH_SHARE * max(pipe.input_op_ms_per_step, wait_ms):
        causes["ints_as_strings"] = (
            f"integer ids formatted as strings to be hashed in the map functions (AsString + "
            f"StringToHashBucketFast, fused or not): {hashing:.1f} ms per step, "
            f"{hashing / pipe.input_op_ms_per_step:.0%} of the map-function ops' time")
    if pipe.files_opened_per_step / k >= MIN_OPENS_PER_BATCH:
        held = ("" if pipe.records_per_file is None else
                f", {pipe.records_per_file:.1f} record(s) in each")
        causes["small_files"] = (
            f"{pipe.files_opened_per_step:g} input files opened per step (median{batches})"
            f"{held}: small files, each a new reader iterator set up on the input threads and a "
            "new open and first read from storage before its records flow")
    if pipe.records_per_step / k >= MIN_RECORDS_PER_BATCH:
        records = (f"{pipe.records_per_step:.0f} records read per step{batches}, each passed one "
                   "at a time "
                   "through every stage up to the batch: one example per record")
        if "per_example_parsing" in causes:
            causes["per_example_parsing"] += f"; {records}"
        else:
            causes["per_example_records"] = records
    compression = str((ctx.config or {}).get("compression") or "").lower()
    compressed = [f for f in pipe.files if _COMPRESSED.search(f)]
    if compression in ("gzip", "zlib"):
        causes["decompression"] = (f"run metadata: records are {compression.upper()}-compressed; "
                                   f"reader stages take {pipe.reader_ms_per_step:.1f} ms per step")
    elif compressed and not compression:
        causes["decompression"] = (
            f"{len(compressed)} of the {len(pipe.files)} files the readers opened are named as "
            f"compressed ({some_paths(compressed)}): they are inflated inside the reader stages, "
            f"{pipe.reader_ms_per_step:.1f} ms per step")
    return causes


def some_paths(paths: list[str], shown: int = 2) -> str:
    """The first `shown` file names (no folders) and how many more."""
    names = ", ".join(p.replace("\\", "/").rsplit("/", 1)[-1] for p in paths[:shown])
    return names + (f" and {len(paths) - shown} more" if len(paths) > shown else "")
