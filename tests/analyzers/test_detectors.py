"""Each detector on code-built traces that have its problem and on traces that do not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzers.context import one_machine
from analyzers.findings import Finding, Skipped
from analyzers.report import analyze
from tests.analyzers.traces import (
    MS,
    PIPE,
    allreduce,
    gpu_trace,
    host_trace,
    sweeps,
    thread_samples,
    write_sampler,
)
from tests.analyzers.xspace_builder import XSpaceBuilder


def by_id(report) -> dict[str, Finding]:
    return {f.id: f for f in report.findings}


def skipped(report) -> dict[str, Skipped]:
    return {s.id: s for s in report.skipped}


def medium_or_high(report) -> set[str]:
    return {f.id for f in report.findings if f.severity in ("medium", "high")}


# ---- input: io_stall vs input_preprocessing -------------------------------------------------

def test_clean_host_trace_has_no_medium_or_high_finding(tmp_path):
    _, run = host_trace(tmp_path, wait_ms=1)
    report = analyze(run)
    assert report.steps_found and report.ctx.n_steps == 5
    assert medium_or_high(report) == set()
    assert "io_stall" not in by_id(report) and "input_preprocessing" not in by_id(report)


def test_io_stall_when_parallel_prefetched_readers_wait_and_cpu_idles(tmp_path):
    _, run = host_trace(tmp_path, wait_ms=60)
    f = by_id(analyze(run))
    assert "io_stall" in f and "input_preprocessing" not in f
    assert f["io_stall"].numbers["files_opened"] == 0  # no reader named its files
    assert not any("file(s) in the profile" in e for e in f["io_stall"].evidence)
    assert f["io_stall"].severity == "high"
    assert f["io_stall"].step_fraction == pytest.approx(0.6, abs=0.02)
    # What-if: twice the reads in flight make batches twice as fast: the step falls to
    # max(compute 40%, 50%) -> 2x; no wait at all would be 2.5x.
    assert f["io_stall"].speedup == pytest.approx(2.0, rel=0.04)
    assert f["io_stall"].numbers["speedup_if_wait_removed"] == pytest.approx(2.5, rel=0.06)
    # The wait's nested events (GetNext op, Iterator::Root) make one range per step, not two.
    ranges = f["io_stall"].time_ranges_ms
    assert ranges[:2] == [(0.5, 60.5), (100.5, 160.5)]
    assert len({a for a, _ in ranges}) == len(ranges)


def _in_memory_source(b, host, main, comp, t0, i):
    host.line("tf_data_iterator_resource/70", line_id=70).event(
        "Iterator::Root::Prefetch::BatchV2::TensorSlice", t0 + 1000, 2 * MS)


def test_wait_on_an_in_memory_pipeline_is_not_io_stall(tmp_path):
    """No file-reader stage anywhere in the pipeline (from_tensor_slices, cache): not storage."""
    _, run = host_trace(tmp_path, wait_ms=60, readers=0, parse_ops=0,
                        pipeline="Iterator::Root::Prefetch::BatchV2",
                        per_step=_in_memory_source)
    report = analyze(run)
    assert report.ctx.fractions["input_wait"] > 0.5
    assert "io_stall" not in by_id(report)


def test_read_file_ops_make_an_in_memory_list_of_paths_a_file_reader(tmp_path):
    """`from_tensor_slices(paths).map(tf.io.read_file)`: no reader stage, but files are read."""
    def add(b, host, main, comp, t0, i):
        _in_memory_source(b, host, main, comp, t0, i)
        line = host.line("tf_data_private_threadpool/71", line_id=71)
        for k in range(10):
            line.event("ReadFile:ReadFile", t0 + k * 5 * MS, MS // 10)
    _, run = host_trace(tmp_path, wait_ms=60, readers=0, parse_ops=0,
                        pipeline="Iterator::Root::Prefetch::BatchV2", per_step=add)
    assert "io_stall" in by_id(analyze(run))


def _files_read(per_step: int, read_us: int = 20):
    """`from_tensor_slices(paths).map(load).batch(256)`: `per_step` tf.io.read_file calls per
    step on a tf.data thread, each followed by its DecodeRaw (TF fuses map and batch into
    MapAndBatch, so the stage names do not say whether the map is parallel)."""
    def add(b, host, main, comp, t0, i):
        host.line("tf_data_iterator_resource/70", line_id=70).event(
            "Iterator::Root::Prefetch::MapAndBatch::TensorSlice", t0 + 1000, 2 * MS)
        line = host.line("tf_data_private_threadpool/71", line_id=71)
        gap = 60 * MS // max(per_step, 1)
        for k in range(per_step):
            t = t0 + 1000 + k * gap
            line.event("ReadFile:ReadFile", t, read_us * 1000)
            line.event("DecodeRaw:DecodeRaw", t + read_us * 1000 + 500, 2000)
    return add


def test_a_file_per_example_is_named_with_its_remedy(tmp_path):
    _, run = host_trace(tmp_path, wait_ms=60, readers=0, parse_ops=0,
                        pipeline="Iterator::Root::Prefetch::MapAndBatch",
                        per_step=_files_read(256))
    f = by_id(analyze(run))["input_preprocessing"]
    assert f.numbers["causes"] == ["per_example_files"]  # the parse ops are folded into it
    assert "256 files read per step" in " ".join(f.evidence)
    assert "pack the small files" in f.remedy
    assert f.severity == "high"


def test_a_file_per_batch_is_not_a_file_per_example(tmp_path):
    _, run = host_trace(tmp_path, wait_ms=60, readers=0, parse_ops=0,
                        pipeline="Iterator::Root::Prefetch::MapAndBatch",
                        per_step=_files_read(2, read_us=2000))
    f = by_id(analyze(run)).get("input_preprocessing")
    assert f is None or "per_example_files" not in f.numbers["causes"]


def _files_opened(per_step: int):
    """`per_step` input files opened a step: each open makes the reader's iterator (and its
    interleave element's) and reads the file's one record."""
    def add(b, host, main, comp, t0, i):
        line = host.line("tf_data_parallel_interleave_worker_pool/60", line_id=60)
        gap = 60 * MS // max(per_step, 1)
        for k in range(per_step):
            t = t0 + 1000 + k * gap
            line.event("MakeIterator::FlatMapDataset", t, 50_000)
            line.event("MakeIterator::TFRecordDataset", t + 10_000, 5_000)
            line.event(f"{PIPE}[{100 + i * per_step + k}]::FlatMap::TFRecord", t + 60_000, 20_000)
            line.event(f"{PIPE}[{100 + i * per_step + k}]::FlatMap::TFRecord", t + 90_000, 5_000)
    return add


def test_small_files_are_named_with_fewer_larger_files_as_the_remedy(tmp_path):
    """Readers waiting on storage, 8 files opened a step of one record each: the cause is the
    files' size, and the finding input_preprocessing's, not a plain io_stall."""
    _, run = host_trace(tmp_path, wait_ms=60, per_step=_files_opened(8))
    f = by_id(analyze(run))
    assert "io_stall" not in f
    g = f["input_preprocessing"]
    assert g.numbers["causes"] == ["small_files"], g.evidence
    assert "8 input files opened per step (median)" in " ".join(g.evidence)
    assert "fewer, larger files" in g.remedy
    assert g.severity == "high"


@pytest.mark.parametrize("opens", [
    [1] * 5,  # a file a step: each holds a step's data or more
    [12, 0, 0, 0, 0],  # a new iterator opening cycle_length files and its prefetched ones
])
def test_files_opened_now_and_then_are_not_small_files(tmp_path, opens):
    """Storage waits with few opens in the median step stay io_stall's."""
    def add(b, host, main, comp, t0, i):
        _files_opened(opens[i])(b, host, main, comp, t0, i)
    _, run = host_trace(tmp_path, wait_ms=60, per_step=add)
    f = by_id(analyze(run))
    assert "io_stall" in f and "input_preprocessing" not in f


def test_per_example_parsing_is_input_preprocessing_not_io(tmp_path):
    _, run = host_trace(tmp_path, wait_ms=60, parse_ops=120, parse_op_ms=0.5)
    f = by_id(analyze(run))
    assert "input_preprocessing" in f and "io_stall" not in f
    assert "per_example_parsing" in f["input_preprocessing"].numbers["causes"]
    assert f["input_preprocessing"].severity == "high"


def _records(per_step: int, file_suffix: str | None = None, reader: str = "TFRecord"):
    """`per_step` reader calls per step on one tf.data thread, one record each, as a TFRecord
    reader of one-example records writes them; with `file_suffix`, the reader opens a file of
    that name once per step (`SetupStreamsLocked` with its `filename` stat)."""
    def add(b, host, main, comp, t0, i):
        line = host.line("tf_data_private_threadpool/80", line_id=80)
        for k in range(per_step):
            line.event(f"{PIPE}[{i}]::FlatMap[0]::{reader}", t0 + 2000 + k * 20_000, 10_000)
        if file_suffix is not None:
            line.event("TFRecordDatasetOp::Iterator::SetupStreamsLocked", t0 + 1000, 500,
                       filename=f"/data/train/part-{i:05d}{file_suffix}")
    return add


def test_one_example_per_record_is_input_preprocessing_not_io(tmp_path):
    """A batch read record by record (one tf.train.Example per record) is CPU work per example,
    not storage: prebatched records are the fix (seed 002)."""
    _, run = host_trace(tmp_path, wait_ms=60, per_step=_records(1024))
    f = by_id(analyze(run))
    assert "io_stall" not in f
    causes = f["input_preprocessing"].numbers["causes"]
    assert set(causes) == {"per_example_records"}, causes
    # 1,024 records and the 4 interleave readers' own read each step.
    assert "1028 records read per step" in " ".join(f["input_preprocessing"].evidence)
    assert "prebatched" in f["input_preprocessing"].remedy


def test_lines_read_one_by_one_are_not_records(tmp_path):
    """A TextLine or CSV reader returns one row per call whatever the data: not the TFRecord
    one-example-per-record pattern (its remedy would be wrong)."""
    _, run = host_trace(tmp_path, wait_ms=60, per_step=_records(1024, reader="TextLine"))
    f = by_id(analyze(run))
    assert "per_example_records" not in f.get("input_preprocessing",
                                               f.get("io_stall")).numbers.get("causes", [])


def test_records_per_step_count_per_host(tmp_path):
    """Two hosts, each reading 40 one-example records of its share of the batch per step: 40
    per host, below the threshold; one host reading all 80 is above it."""
    b, run = host_trace(tmp_path / "two", wait_ms=60, per_step=_records(40))
    b.write(tmp_path / "two", host="worker1")
    _, one = host_trace(tmp_path / "one", wait_ms=60, per_step=_records(80))
    assert "per_example_records" in by_id(analyze(one))["input_preprocessing"].numbers["causes"]
    found = by_id(analyze(run))
    assert "input_preprocessing" not in found and "io_stall" in found


def test_few_records_per_step_are_prebatched(tmp_path):
    """Prebatched records: a few reader calls per step, no per-record cause; storage it is."""
    _, run = host_trace(tmp_path, wait_ms=60, per_step=_records(8))
    f = by_id(analyze(run))
    assert "io_stall" in f and "input_preprocessing" not in f


def _batches(k: int, inner):
    """`k` batches a step (a loop inside the train function, Keras' steps_per_execution): the
    main thread's fetch and `k - 1` more on an executor thread, then `inner`'s events."""
    def add(b, host, main, comp, t0, i):
        line = host.line("tf_inter_op/90", line_id=90)
        for j in range(1, k):
            line.event("IteratorGetNextOp::DoCompute", t0 + 61 * MS + j * 100_000, 50_000)
        inner(b, host, main, comp, t0, i)
    return add


@pytest.mark.parametrize("per_step, cause", [
    (_files_opened(8), "small_files"),  # a file a batch
    (_records(80), "per_example_records"),  # 10 prebatched records a batch
], ids=["files", "records"])
def test_what_a_batch_is_made_of_is_counted_per_batch(tmp_path, per_step, cause):
    """The same opens or records per step, read by one batch a step or by 8: per batch they
    say the files are small or the records hold an example; over 8 batches they do not."""
    _, one = host_trace(tmp_path / "one", wait_ms=60, per_step=per_step)
    assert cause in by_id(analyze(one))["input_preprocessing"].numbers["causes"]
    _, eight = host_trace(tmp_path / "eight", wait_ms=60, per_step=_batches(8, per_step))
    found = by_id(analyze(eight))
    assert "input_preprocessing" not in found and "io_stall" in found, found


def test_per_example_records_fold_into_per_example_parsing(tmp_path):
    """Parsed one example at a time as well: one cause, its evidence counting the records."""
    _, run = host_trace(tmp_path, wait_ms=60, parse_ops=120, parse_op_ms=0.5,
                        per_step=_records(512))
    f = by_id(analyze(run))["input_preprocessing"]
    assert set(f.numbers["causes"]) == {"per_example_parsing"}, f.numbers["causes"]
    assert any("parse ops per step" in e and "; 516 records read per step" in e
               for e in f.evidence), f.evidence


@pytest.mark.parametrize("suffix", [".tfrecord.gz", ".tfrecord.GZIP", ".zlib"])
def test_compressed_file_names_are_decompression(tmp_path, suffix):
    _, run = host_trace(tmp_path, wait_ms=60, per_step=_records(8, suffix))
    f = by_id(analyze(run))
    causes = f["input_preprocessing"].numbers["causes"]
    assert set(causes) == {"decompression"}, causes
    assert f"5 of the 5 files the readers opened are named as compressed (part-00000{suffix}, " \
           f"part-00001{suffix} and 3 more)" in " ".join(f["input_preprocessing"].evidence)
    assert "uncompressed" in f["input_preprocessing"].remedy
    assert "io_stall" not in f


@pytest.mark.parametrize("suffix", [".tfrecord", ".gz.tfrecord", "-gz"])
def test_uncompressed_file_names_are_not_decompression(tmp_path, suffix):
    _, run = host_trace(tmp_path, wait_ms=60, per_step=_records(8, suffix))
    f = by_id(analyze(run))
    assert "input_preprocessing" not in f and "io_stall" in f
    # The files read are evidence of the stall all the same.
    assert f["io_stall"].numbers["files_opened"] == 5
    assert f"the readers opened 5 file(s) in the profile: part-00000{suffix}, " \
           f"part-00001{suffix} and 3 more" in f["io_stall"].evidence


def test_file_names_outside_tf_data_readers_are_not_read_files(tmp_path):
    """A `filename` stat on another event (a checkpoint write, say) is not the pipeline's."""
    def add(b, host, main, comp, t0, i):
        _records(8)(b, host, main, comp, t0, i)
        main.event("SaveV2", t0 + 99 * MS, 1000, filename="/ckpt/model.ckpt.gz")
    _, run = host_trace(tmp_path, wait_ms=60, per_step=add)
    assert "io_stall" in by_id(analyze(run))


def _python_map(calls: int, each_ms: float, generator: bool = False):
    """`calls` Python-function ops per step on two tf.data threads, as tf.py_function
    (`EagerPyFunc`) or, from a generator stage, `PyFunc` (docs/trace-signals.md, "tf.data")."""
    def add(b, host, main, comp, t0, i):
        for k in range(calls):
            line = host.line(f"tf_data_private_threadpool/{60 + k % 2}", line_id=60 + k % 2)
            s = t0 + int((k // 2) * each_ms * MS)
            if generator:
                line.event("Iterator::Root::Prefetch::BatchV2::FlatMap[0]::Generator", s,
                           int(each_ms * MS) - 1000)
                line.event("PyFunc:PyFunc", s + 500, int(each_ms * MS) - 2000)
            else:
                line.event("EagerPyFunc:EagerPyFunc", s, int(each_ms * MS) - 1000)
    return add


@pytest.mark.parametrize("generator", [False, True])
def test_python_functions_in_the_pipeline_are_named(tmp_path, generator):
    _, run = host_trace(tmp_path, wait_ms=60, parse_ops=0,
                        per_step=_python_map(100, 1.0, generator))
    f = by_id(analyze(run))["input_preprocessing"]
    assert f.severity == "high"
    assert "python_function" in f.numbers["causes"]
    text = " ".join(f.evidence)
    assert "100 Python function calls per step" in text
    assert ("from_generator" in text) == generator
    assert "GIL" in f.remedy
    # A generator is what a Keras PyDataset becomes: worker processes, not threads.
    assert ("use_multiprocessing=True" in f.remedy) == generator


def test_python_in_a_sequential_map_without_prefetch_names_tf_data_debug_mode(tmp_path):
    """tf.data.experimental.enable_debug_mode() runs every dataset function as a py_function,
    sequentially, and drops the prefetch (docs/trace-signals.md, "tf.data's debug mode"): all
    three causes at once point there first. With a prefetch they do not."""
    def found(pipeline):
        _, run = host_trace(tmp_path / pipeline[:20], wait_ms=60, parse_ops=0, readers=1,
                            pipeline=pipeline, per_step=_python_map(100, 1.0))
        return by_id(analyze(run))["input_preprocessing"]
    debug = found("Iterator::Root::ForeverRepeat[0]::Map::BatchV2")
    assert set(debug.numbers["causes"]) >= {"python_function", "low_parallelism", "no_prefetch"}
    assert debug.numbers["debug_mode_pattern"]
    assert debug.remedy.startswith("if the job calls tf.data.experimental.enable_debug_mode()")
    prefetched = found("Iterator::Root::Prefetch::ForeverRepeat[0]::Map::BatchV2")
    assert not prefetched.numbers["debug_mode_pattern"]
    assert "enable_debug_mode" not in prefetched.remedy


def test_cheap_python_function_is_not_a_cause(tmp_path):
    """One short py_function per batch is not why a per-example parsing pipeline waits."""
    _, run = host_trace(tmp_path, wait_ms=60, parse_ops=120, parse_op_ms=0.5,
                        per_step=_python_map(1, 0.5))
    causes = by_id(analyze(run))["input_preprocessing"].numbers["causes"]
    assert "per_example_parsing" in causes and "python_function" not in causes


def test_no_prefetch_and_one_reader_are_named(tmp_path):
    pipe = "Iterator::Root::ParallelMapV2::BatchV2::ParallelInterleaveV4"
    _, run = host_trace(tmp_path, wait_ms=40, pipeline=pipe, readers=1)
    f = by_id(analyze(run))
    causes = f["input_preprocessing"].numbers["causes"]
    assert "no_prefetch" in causes and "low_parallelism" in causes
    assert "io_stall" not in f


def test_hiding_a_wait_on_a_cpu_host_still_costs_the_map_functions_cpu(tmp_path):
    """A prefetched pipeline with one reader waits 10 ms of a 100 ms step while its map ops take
    4 ms a step: more readers hide the wait, but those 4 ms of CPU work then run beside the
    model's ops on the same cores (one CPU assumed without sampler data): 6% saved, not 10%."""
    pipe = "Iterator::Root::Prefetch::BatchV2::ParallelInterleaveV4"
    _, run = host_trace(tmp_path / "small", steps=8, wait_ms=10, pipeline=pipe, readers=1,
                        parse_op_ms=4.0)
    f = by_id(analyze(run))["input_preprocessing"]
    assert f.numbers["causes"] == ["low_parallelism"]
    assert f.speedup == pytest.approx(1 / 0.94, rel=0.02) and f.severity == "low"
    assert any("CPU count unknown: one assumed" in e and "not 10.0%" in e
               for e in f.evidence), f.evidence
    # A 3.5 ms wait and 1.7 ms of map ops (just under half the wait: from half on the producers
    # count as CPU-bound): 1.8% left, below what counts as a wait at all.
    _, run = host_trace(tmp_path / "none", steps=8, wait_ms=3.5, pipeline=pipe, readers=1,
                        parse_op_ms=1.7)
    assert "input_preprocessing" not in by_id(analyze(run))
    # A long wait keeps nearly all of its estimate.
    _, run = host_trace(tmp_path / "long", steps=8, wait_ms=40, pipeline=pipe, readers=1,
                        parse_op_ms=4.0)
    assert by_id(analyze(run))["input_preprocessing"].speedup == pytest.approx(1 / 0.64,
                                                                                 rel=0.02)
    # Map ops of 6 ms in a 10 ms wait make the producers CPU-bound; without sampler data no
    # contention shows, and more readers still only move that work: 4% saved, not all 10%.
    _, run = host_trace(tmp_path / "bound", steps=8, wait_ms=10, pipeline=pipe, readers=1,
                        parse_op_ms=6.0)
    f = by_id(analyze(run))["input_preprocessing"]
    assert f.numbers["causes"] == ["low_parallelism"]
    assert f.speedup == pytest.approx(1 / 0.96, rel=0.02) and f.severity == "low"


def _busy_readers(b, host, main, comp, t0, i):
    """Reader stages (record reading + decompression, or waiting on storage) busy 40 ms per step
    on 4 threads."""
    for r in range(4):
        host.line(f"tf_data_private_threadpool/{20 + r}", line_id=20 + r).event(
            f"{PIPE}[{i * 4 + r}]::FlatMap::TFRecord", t0 + 1000, 40 * MS)


def test_contention_from_input_threads_needs_sampler_data(tmp_path):
    """Map ops on tf.data threads take 35% of 2 CPUs x step; the step never waits. Only the
    sampler shows that the model's thread shared the 2 cores with 2 more runnable threads."""
    _, run = host_trace(tmp_path, wait_ms=0, parse_op_ms=70)
    assert "input_preprocessing" not in by_id(analyze(run))  # no sampler: cannot claim it
    write_sampler(run, sweeps(100, 0, input_running=2), n_cpus=2)
    f = by_id(analyze(run))["input_preprocessing"]
    # 3 runnable threads on 2 cores, ~1 of them the model's (its line is busy 98% of the time):
    # alone it would have a core; shared it had 2/3 of one.
    assert f.numbers["runnable_threads"] == pytest.approx(3.0)
    assert f.numbers["model_threads"] == pytest.approx(0.98, abs=0.03)
    assert f.numbers["contention_slowdown"] == pytest.approx(1.5, rel=0.02)
    assert f.speedup == pytest.approx(1.5, rel=0.03)
    assert f.severity == "high"
    assert any("3.0 of the process's threads were runnable on 2 CPUs" in e for e in f.evidence)

    # Sweeps of two processes (a second worker's sampler) cannot be set against one trace.
    threads = pd.read_parquet(run / "host.threads.parquet")
    threads.loc[threads["tid"] > 1002, "pid"] = 101
    threads.to_parquet(run / "host.threads.parquet")
    assert "input_preprocessing" not in by_id(analyze(run))


@pytest.mark.parametrize(("rchar", "device", "said"), [
    (50.0, 0.0, "almost none of it from block devices"),
    (50.0, 40.0, "4.00 MB of it from block devices (40 MB/s)"),
    (50.0, 80.0, "block devices delivered more, 8.00 MB per step (80 MB/s): readahead"),
    (None, 40.0, None),  # sampled before rchar_bytes existed: nothing said
])
def test_storage_waits_say_how_much_was_read_and_from_where(tmp_path, rchar, device, said):
    """Readers waiting with the CPU idle: the sampler's read counters give the bytes a step
    brings in (100 ms steps) and the share block devices served."""
    _, run = host_trace(tmp_path, wait_ms=60)
    write_sampler(run, sweeps(100, 60, input_running=0), n_cpus=2, cpu_percent=30,
                  read_mb_per_s=device, rchar_mb_per_s=rchar)
    f = by_id(analyze(run))["io_stall"]
    notes = [e for e in f.evidence if "through read calls" in e]
    if said is None:
        assert notes == [] and "read_mb_per_step" not in f.numbers
        return
    assert f.numbers["read_mb_per_s"] == pytest.approx(rchar, rel=0.02)
    assert f.numbers["read_mb_per_step"] == pytest.approx(rchar * 0.1, rel=0.05)
    assert f.numbers["device_read_mb_per_step"] == pytest.approx(device * 0.1, rel=0.05, abs=1e-6)
    assert len(notes) == 1 and "read 5.00 MB per step" in notes[0] and said in notes[0], notes


@pytest.mark.parametrize("case", ["model alone runs", "producers only read", "no producers"])
def test_runnable_threads_without_cpu_bound_producers_are_not_contention(tmp_path, case):
    if case == "model alone runs":  # the map ops are there, but their threads sleep
        _, run = host_trace(tmp_path, wait_ms=0, parse_op_ms=70)
        write_sampler(run, sweeps(100, 0, input_running=0), n_cpus=2)
    else:
        # Runnable threads beside the model, but the trace shows no CPU work that a fix would
        # take away: reader stages (which may be waiting on storage), or nothing at all.
        per_step = _busy_readers if case == "producers only read" else None
        _, run = host_trace(tmp_path, wait_ms=0, per_step=per_step)
        write_sampler(run, sweeps(100, 0, input_running=2), n_cpus=2)
    assert "input_preprocessing" not in by_id(analyze(run))


@pytest.mark.parametrize(("untraced_ms", "used"), [(None, False), (80.0, True), (15.0, True),
                                                   (10.0, False)])
def test_exposed_wait_estimate_counts_the_models_ops_freed_from_the_producers(tmp_path,
                                                                               untraced_ms, used):
    """Per-example parsing: 80% of the step waits, and while the model's ~19 ms of ops run the
    producers keep 2 of 2 cores' worth of threads runnable. After the fix a step is those ops
    at 1.5x the speed (~13 ms); profiled steps longer than the untraced ones (run metadata) lose
    their excess, which is the profiler's cost on the input side (in the wait and in the
    contention: 15 ms untraced is shorter than the traced compute but longer than the fixed
    step), unless the untraced step is shorter than even the fixed step (10 ms): then only the
    trace's proportions hold."""
    import json

    _, run = host_trace(tmp_path, wait_ms=80, compute_ms=18, parse_ops=40)
    write_sampler(run, sweeps(100, 80, input_running=2), n_cpus=2)
    if untraced_ms:
        (run / "recadvisor_run.json").write_text(json.dumps(
            {"tool": "recadvisor.reference_model", "step_time_ms": {"p50": untraced_ms}}))
    f = by_id(analyze(run))["input_preprocessing"]
    assert "per_example_parsing" in f.numbers["causes"]
    slowdown = f.numbers["contention_slowdown"]
    assert slowdown == pytest.approx(1.5, rel=0.03)
    step_ms = f.numbers["median_step_ms"]
    after = step_ms * (1 - f.numbers["input_wait_fraction"]) / slowdown
    assert 12 < after < 14
    before = untraced_ms if used else step_ms
    assert f.speedup == pytest.approx(before / after, rel=0.02)
    assert any(("untraced median step" in e) == used for e in f.evidence
               if e.startswith("estimate:"))


def test_contention_phases_follow_a_wait_inside_the_train_function(tmp_path):
    """The batch fetched inside the train function: the wait runs on an executor thread while
    the Python thread sits in the call. The sweeps during it are still the wait's, not the
    model's (they were: 2 of 6 runnable threads read as the model's, a 1.0x slowdown instead of
    1.5x, and the reference `per_example` preset's estimate fell from ~9x to 6.6x)."""
    from analyzers.context import Context
    from analyzers.ingest.logdir import load_run
    from analyzers.signals.os_sampler import core_sharing

    for where, fetch_in_call in (("python", False), ("call", True)):
        _, run = host_trace(tmp_path / where, wait_ms=80, compute_ms=18, parse_ops=40,
                            fetch_in_call=fetch_in_call)
        write_sampler(run, sweeps(100, 80, input_running=2, intra_op=3), n_cpus=2)
        sharing = core_sharing(Context.build(load_run(run)))
        assert sharing.sweeps < 30, where  # the model's ~20 of 100 sweeps
        assert sharing.waking_threads == pytest.approx(4.0, abs=0.05), where
        assert sharing.slowdown == pytest.approx(1.5, rel=0.03), where


def test_model_threads_the_trace_does_not_show_are_counted_from_the_sampler(tmp_path):
    """Three intra-op threads run with the model's ops but write no trace events: the trace
    alone sees one model thread among 6 runnable (a 3x slowdown); the threads that run only
    while the model does, not while the step waits, are 4, so 6 runnable on 2 cores cost
    them 1.5x."""
    from analyzers.context import Context
    from analyzers.ingest.logdir import load_run
    from analyzers.signals.os_sampler import core_sharing

    _, run = host_trace(tmp_path, wait_ms=80, compute_ms=18, parse_ops=40)
    write_sampler(run, sweeps(100, 80, input_running=2, intra_op=3), n_cpus=2)
    sharing = core_sharing(Context.build(load_run(run)))
    assert sharing.runnable == pytest.approx(6.0)
    assert sharing.traced_threads == pytest.approx(1.0, abs=0.05)
    assert sharing.waking_threads == pytest.approx(4.0, abs=0.05)
    assert sharing.slowdown == pytest.approx(1.5, rel=0.03)

    # With no waits there is no idle-model baseline: the trace's count stands alone.
    _, busy = host_trace(tmp_path / "nowait", wait_ms=0, parse_op_ms=70)
    write_sampler(busy, sweeps(100, 0, input_running=2, intra_op=3), n_cpus=2)
    sharing = core_sharing(Context.build(load_run(busy)))
    assert sharing.waking_threads is None
    assert sharing.slowdown == pytest.approx(3.0, rel=0.03)


def test_a_thread_waiting_for_its_xla_cluster_is_a_model_thread(tmp_path):
    """XLA:CPU runs a cluster's thunks on an Eigen thread while the executor thread that
    launched it sits in `BlockUntilReady`; that thread is runnable throughout (every sampler
    sweep of the reference presets), so it counts among the model's threads: 3 of them beside
    2 runnable producers, 5 runnable on 2 cores, a 5/3 slowdown. Counted as asleep, 2 threads
    would read 2.5x."""
    from analyzers.context import Context
    from analyzers.ingest.logdir import load_run
    from analyzers.signals.os_sampler import core_sharing

    def cluster(b, host, main, comp, t0, i):
        start, dur = t0 + MS // 2, 97 * MS
        host.line("tf_Compute/12", line_id=12).event("BlockUntilReady", start, dur)
        eigen = host.line("tf_numa_-1_Eigen/13", line_id=13)
        for k in range(10):
            eigen.event(f"MatMul_{k}.16", start + k * dur // 10, dur // 10 - 1000)

    _, run = host_trace(tmp_path, wait_ms=0, parse_op_ms=70, per_step=cluster)
    write_sampler(run, sweeps(100, 0, input_running=2, intra_op=2), n_cpus=2)
    sharing = core_sharing(Context.build(load_run(run)))
    assert sharing.runnable == pytest.approx(5.0)
    assert sharing.traced_threads == pytest.approx(3.0, abs=0.1)
    assert sharing.slowdown == pytest.approx(5 / 3, rel=0.04)


def test_no_contention_on_a_clean_trace_with_sampler_data(tmp_path):
    # The model's ops on its thread and one intra-op worker: both CPUs busy, nothing else runs.
    _, run = host_trace(tmp_path, wait_ms=1)
    write_sampler(run, sweeps(100, 1, input_running=0, intra_op=1), n_cpus=2, cpu_percent=200)
    report = analyze(run)
    assert medium_or_high(report) == set()
    # The same ops on one thread of the two: the idle core is the one finding.
    write_sampler(run, sweeps(100, 1, input_running=0), n_cpus=2)
    assert medium_or_high(analyze(run)) == {"idle_cores"}


@pytest.mark.parametrize(("pipeline", "parse_ops"), [
    ("Iterator::Model::MaxIntraOpParallelism::Prefetch", 0),
    ("Iterator::Model::MaxIntraOpParallelism::Prefetch", 3),
    ("Iterator::Model::MaxIntraOpParallelism::Prefetch::Map", 0)])
def test_a_wait_in_a_prefetch_with_nothing_below_it(tmp_path, pipeline, parse_ops):
    """The step waits 60% in a traced pipeline whose producers left no event (real Keras 2.4
    GPU traces: one step waiting 8-62 s in a Prefetch): the wait is reported with its cause
    unknown and a longer, later window asked for. Parsing ops on tf.data's threads, or a stage
    below it that does the work (a sequential Map), are no unexplained wait."""
    _, run = host_trace(tmp_path, wait_ms=60, pipeline=pipeline, readers=0,
                        parse_ops=parse_ops)
    found = by_id(analyze(run))
    f = found.get("input_preprocessing")
    if parse_ops:
        assert f is None or "producers left no events" not in f.title
    elif pipeline.endswith("Prefetch"):
        assert "producers left no events" in f.title
        assert f.step_fraction == pytest.approx(0.6, abs=0.01)
        assert f.numbers["pipeline_traced"] is True and "profile_batch" in f.remedy
    else:
        assert "producers left no events" not in f.title
        assert f.numbers["causes"] == ["low_parallelism"]
    assert "io_stall" not in found


# ---- convert_to_tensor_gaps -------------------------------------------------------------------

def _casts(n: int, each_ms: float):
    def add(b, host, main, comp, t0, i):
        for k in range(n):
            s = t0 + int(72 * MS) + int(k * each_ms * MS)
            main.event("convert_to_tensor", s, int(each_ms * MS * 0.3))
            main.event("EagerLocalExecute: Cast", s + int(each_ms * MS * 0.3),
                       int(each_ms * MS * 0.6))
    return add


def test_convert_gaps_found_when_casts_take_step_time(tmp_path):
    _, run = host_trace(tmp_path, compute_ms=70, per_step=_casts(20, 1.0))
    f = by_id(analyze(run))["convert_to_tensor_gaps"]
    assert f.numbers["eager_casts_per_step"] == 20
    assert f.severity in ("medium", "high")


def test_convert_gaps_absent_with_few_conversions(tmp_path):
    _, run = host_trace(tmp_path, per_step=_casts(1, 0.5))
    assert "convert_to_tensor_gaps" not in by_id(analyze(run))


def _casting_layer(n: int, event_ms: float, python_ms: float, op: str = "Cast",
                   start_ms: float = 87.0, call_after: int | None = None):
    """A casting layer from `start_ms` into the step (after its call): `n` eager `op`
    executions of `event_ms`, each after `python_ms` of its own Python; with `call_after`, a
    tf.function call starts after that many of them."""
    def add(b, host, main, comp, t0, i):
        t = t0 + int(start_ms * MS)
        for k in range(n):
            if k == call_after:
                main.event("EagerLocalExecute: __inference_eval_9", t, MS // 10)
                t += MS // 5
            t += int(python_ms * MS)
            main.event(f"EagerLocalExecute: {op}", t, int(event_ms * MS))
            t += int(event_ms * MS)
    return add


def test_the_python_between_a_bursts_conversions_is_theirs(tmp_path):
    """After an 86 ms call, 20 casts of 0.1 ms, each after 0.45 ms of the casting layer's
    Python, in 100 ms steps: 2% of the step in the casts and 8.55% between them (19 gaps) is
    convert_to_tensor_gaps', not per-call overhead (which it was: 11.5%, medium)."""
    _, run = host_trace(tmp_path, compute_ms=86, per_step=_casting_layer(20, 0.1, 0.45))
    found = by_id(analyze(run))
    f = found["convert_to_tensor_gaps"]
    assert f.numbers["between_fraction"] == pytest.approx(0.0855, abs=0.002)
    assert f.step_fraction == pytest.approx(0.1055, abs=0.004)
    assert "per_step_overhead" not in found
    # A call between them splits the burst: the Python around the call is not the casts'.
    _, run = host_trace(tmp_path / "call", compute_ms=86,
                        per_step=_casting_layer(20, 0.1, 0.45, call_after=10))
    split = by_id(analyze(run))["convert_to_tensor_gaps"]
    assert split.numbers["between_fraction"] == pytest.approx(0.081, abs=0.002)
    # Gaps longer than a casting layer's are no burst.
    _, run = host_trace(tmp_path / "far", compute_ms=60,
                        per_step=_casting_layer(10, 0.1, 2.5, start_ms=61))
    assert by_id(analyze(run))["convert_to_tensor_gaps"].numbers["between_fraction"] == 0
    # A loop of per-device copies (DeepCopy) is serialized_h2d's, its Python too.
    _, run = host_trace(tmp_path / "copies", compute_ms=86,
                        per_step=_casting_layer(20, 0.1, 0.45, op="DeepCopy"))
    assert by_id(analyze(run))["convert_to_tensor_gaps"].numbers["between_fraction"] == 0


def test_conversions_inside_conversions_leave_no_negative_gap(tmp_path):
    """Keras' data adapter converts each input with `convert_to_tensor` around a `tf.constant`
    around an `EagerLocalExecute: _EagerConst`: a conversion that starts inside the previous
    one is no gap. Those read as negative gaps and took time off the burst (a Keras fit: 2.8% in
    the conversions, -2.4% between them, 0.4% claimed)."""
    def nested(b, host, main, comp, t0, i):
        t = t0 + 87 * MS
        for _ in range(6):
            main.event("convert_to_tensor", t, 400_000)
            main.event("tf.constant", t + 50_000, 300_000)
            main.event("EagerLocalExecute: _EagerConst", t + 100_000, 200_000)
            t += 500_000  # 0.1 ms of Python to the next one
    _, run = host_trace(tmp_path, compute_ms=86, per_step=nested)
    f = by_id(analyze(run))["convert_to_tensor_gaps"]
    # 6 x 0.4 ms of conversions, 5 gaps of 0.1 ms between them, in 100 ms steps.
    assert f.numbers["between_fraction"] == pytest.approx(0.005, abs=0.0005)
    assert f.step_fraction == pytest.approx(0.024 + 0.005, abs=0.001)


# ---- kernel_launch_overhead on CPU ---------------------------------------------------------------

def _tiny_ops(on_main: bool):
    """200 ops of 5 µs per step, each in a 100 µs executor span (ExecutorState::Process) on an
    executor thread, or the same spans on the step-driving thread (dispatch, not executor)."""
    def add(b, host, main, comp, t0, i):
        line = main if on_main else host.line("tf_Compute/12", line_id=12)
        for k in range(200):
            s = t0 + 20 * MS + k * 100_000
            line.event("ExecutorState::Process", s, 100_000)
            host.line("tf_Compute/13", line_id=13).event(f"add_{k}:AddV2", s + 1000, 5000)
    return add


def test_executor_time_between_tiny_ops_is_launch_overhead_on_cpu(tmp_path):
    _, run = host_trace(tmp_path, compute_ms=10, per_step=_tiny_ops(on_main=False))
    f = by_id(analyze(run))["kernel_launch_overhead"]
    # 200 x 95 µs of executor time no op covers, per 100 ms step; fusion saves half of it.
    assert f.step_fraction == pytest.approx(0.19, abs=0.01)
    assert f.speedup == pytest.approx(1 / (1 - 0.095), rel=0.02) and f.severity == "medium"


def test_dispatch_on_the_step_thread_is_not_launch_overhead(tmp_path):
    _, run = host_trace(tmp_path, compute_ms=10, per_step=_tiny_ops(on_main=True))
    f = by_id(analyze(run)).get("kernel_launch_overhead")
    assert f is None or f.step_fraction < 0.01


def _xla_step(tf_ops: int):
    """XLA:CPU running a compiled cluster of 200 thunks a step (HLO names, no `:Type`, each
    with the `end: <op>` marker its completion writes) in `ThunkExecutor::Execute` spans of
    100 µs on an Eigen thread, under `CpuExecutable::ExecuteAsyncOnStream`; and `tf_ops` TF
    ops outside it, as _tiny_ops runs them (before the cluster)."""
    tiny = _tiny_ops(on_main=False)

    def add(b, host, main, comp, t0, i):
        if tf_ops:
            tiny(b, host, main, comp, t0, i)
        eigen = host.line("tf_numa_-1_Eigen/21", line_id=21)
        host.line("tf_Compute/14", line_id=14).event(
            "CpuExecutable::ExecuteAsyncOnStream", t0 + 45 * MS, 200 * 100_000)
        for k in range(200):
            s = t0 + 45 * MS + k * 100_000
            eigen.event("ThunkExecutor::Execute", s, 100_000)
            eigen.event(f"multiply_add_fusion.{k}", s + 1000, 5000)
            eigen.event(f"end: multiply_add_fusion.{k}", s + 6000, 300)
    return add


def test_xla_thunks_are_compiled_already(tmp_path):
    """200 small XLA thunks a step, with XLA's runtime between them: nothing for XLA to fuse
    (the reference trainer's clean step read "377 small TF ops", 360 of them XLA's)."""
    _, run = host_trace(tmp_path, compute_ms=10, per_step=_xla_step(tf_ops=0))
    report = analyze(run)
    assert "kernel_launch_overhead" not in by_id(report)
    kinds = report.ctx.events.groupby("name", observed=True)["kind"].first()
    assert kinds["end: multiply_add_fusion.3"] == "framework"
    assert kinds["multiply_add_fusion.3"] == "host_op"
    # TF ops outside the compiled cluster are counted; the remedy compiles the rest.
    _, run = host_trace(tmp_path / "both", compute_ms=10, per_step=_xla_step(tf_ops=200))
    f = by_id(analyze(run))["kernel_launch_overhead"]
    _, alone = host_trace(tmp_path / "alone", compute_ms=10, per_step=_tiny_ops(on_main=False))
    without = by_id(analyze(alone))["kernel_launch_overhead"]
    assert f.numbers["ops_per_step"] == without.numbers["ops_per_step"]
    assert f.numbers["xla_thunks_per_step"] == 200
    assert f.step_fraction == pytest.approx(without.step_fraction, abs=0.005)
    assert "Compile the rest of the step" in f.remedy


def _tiny_ops_and_lookups(tables: int, replicas: int = 1):
    """As _tiny_ops, with `tables` embedding lookups (ResourceGather) among the ops, on each of
    `replicas` MirroredStrategy replicas (`replica_<r>/` ops, none for replica 0)."""
    tiny = _tiny_ops(on_main=False)

    def add(b, host, main, comp, t0, i):
        tiny(b, host, main, comp, t0, i)
        for r in range(replicas):
            for k in range(tables):
                host.line("tf_Compute/13", line_id=13).event(
                    f"{f'replica_{r}/' if r else ''}emb_{k}/embedding_lookup:ResourceGather",
                    t0 + 90 * MS + (r * tables + k) * 10_000, 4000)
    return add


@pytest.mark.parametrize("tables,replicas,fuse", [(26, 1, True), (2, 1, False), (1, 4, False),
                                                  (8, 4, True)])
def test_launch_remedy_fuses_tables_only_with_many_lookups_per_device(tmp_path, tables, replicas,
                                                                      fuse):
    _, run = host_trace(tmp_path, compute_ms=10,
                        per_step=_tiny_ops_and_lookups(tables, replicas))
    f = by_id(analyze(run))["kernel_launch_overhead"]
    # One lookup op per replica of a fused table is not a reason to fuse (4 devices, 4 ops).
    assert f.numbers["lookup_ops_per_device"] == tables
    assert "jit_compile=True" in f.remedy
    assert ("embedding tables" in f.remedy) is fuse
    assert any("ResourceGather" in e for e in f.evidence) is fuse


@pytest.mark.parametrize("lookups,fuse", [(8, True), (0, False)])
def test_gpu_lookup_kernels_are_counted_by_their_tf_op(tmp_path, lookups, fuse):
    f = by_id(analyze(gpu_trace(tmp_path, kernels=400, kernel_ms=4, devices=2, lookups=lookups,
                                host_op=("ExecutorState::Process", 0.1, 20.0))
                      ))["kernel_launch_overhead"]
    assert f.numbers["lookup_ops_per_device"] == lookups
    assert ("embedding tables" in f.remedy) is fuse


# ---- eager_execution ---------------------------------------------------------------------------

def _eager_ops(n: int, each_ms: float, kernel_ms: float, start_ms: float = 3.0):
    """`n` eagerly executed ops per step on the Python thread, each with its kernel inside."""
    def add(b, host, main, comp, t0, i):
        for k in range(n):
            s = t0 + int((start_ms + k * each_ms) * MS)
            main.event("EagerLocalExecute: MatMul" if k % 2 else "EagerLocalExecute: Relu", s,
                       int(each_ms * MS * 0.9))
            main.event("EagerKernelExecute", s + int(each_ms * MS * 0.2), int(kernel_ms * MS))
    return add


def test_eager_loop_is_found_with_a_kernel_time_bound(tmp_path):
    # 40 ops x 2 ms per 100 ms step, 0.5 ms of kernel each; a 1 ms function call per step.
    _, run = host_trace(tmp_path, compute_ms=1, per_step=_eager_ops(40, 2.0, 0.5))
    f = by_id(analyze(run))["eager_execution"]
    assert f.numbers["eager_ops_per_step"] == 40 and f.numbers["op_types"] == 2
    assert f.numbers["kernel_fraction"] == pytest.approx(0.20, abs=0.01)
    assert f.numbers["function_fraction"] == pytest.approx(0.01, abs=0.005)
    # The step keeps its kernels and function time: 1 / (0.20 + 0.01). Every run is a 0.5 ms
    # kernel, so there is no cheap run to read an eager run's fixed cost from: at most 5 us of
    # each is taken.
    assert f.numbers["run_floor_us"] == 5.0
    assert f.speedup == pytest.approx(1 / (0.20 * 0.99 + 0.01), rel=0.01)
    assert f.severity == "high" and "tf.function" in f.remedy
    # A tf.function under run_functions_eagerly(True) leaves the same trace.
    assert "run_functions_eagerly(True)" in f.remedy
    assert [e["name"] for e in f.top_events][:2] == ["MatMul", "Relu"]


def test_an_eager_runs_fixed_cost_is_read_from_its_cheapest_runs(tmp_path):
    """Beside 40 kernels of 0.5 ms, 200 variable reads whose runs take 4 us each: what every
    eager run pays beside its op's work (a ReadVariableOp's run took 3.7-4.6 us eagerly and
    0.1 us in a graph), which tf.function saves too. Keeping whole runs read 1 / (0.208 + 0.01)
    = 4.6x; without the 240 runs' 4 us, 1 / (0.199 + 0.01) = 4.8x."""
    def reads(b, host, main, comp, t0, i):
        for k in range(200):
            s = t0 + 85 * MS + k * 50_000
            main.event("EagerLocalExecute: ReadVariableOp", s, 40_000)
            main.event("EagerKernelExecute", s + 10_000, 4_000)
    ops = _eager_ops(40, 2.0, 0.5)

    def both(*args):
        ops(*args)
        reads(*args)
    _, run = host_trace(tmp_path, compute_ms=1, per_step=both)
    f = by_id(analyze(run))["eager_execution"]
    assert f.numbers["run_floor_us"] == pytest.approx(4.0)
    assert f.numbers["kernel_fraction"] == pytest.approx(0.208, abs=0.002)
    assert f.speedup == pytest.approx(1 / (0.208 - 240 * 0.004 / 100 + 0.01), rel=0.01)


def test_eager_ops_on_another_thread_named_like_the_step_thread(tmp_path):
    """Python threads are all named `python`: a background thread's eager ops are not the
    step's, and neither line order nor interleaved times may pair one thread's kernels with the
    other's executions."""
    for order in ("main_first", "bg_first"):
        b = XSpaceBuilder()
        host = b.plane("/host:CPU")
        lines = {"main": 1, "bg": 2} if order == "main_first" else {"bg": 2, "main": 1}
        made = {k: host.line("python", line_id=v) for k, v in lines.items()}
        main, bg = made["main"], made["bg"]
        for i in range(10):
            t0 = i * 10 * MS
            main.event("train", t0, 10 * MS - 1000, step_num=i, _r=1)
            main.event("EagerLocalExecute: __inference_train_step_5", t0 + MS // 2, 3 * MS)
            main.event("EagerKernelExecute", t0 + MS // 2 + 10_000, 3 * MS - 20_000)
            for k in range(30):
                q = t0 + 100_000 + k * 300_000
                bg.event("EagerLocalExecute: Mul", q, 200_000)
                bg.event("EagerKernelExecute", q + 50_000, 50_000)
        report = analyze(b.write(tmp_path / order))
        assert report.ctx.steps.thread == ("host", "/host:CPU", 1)
        assert "eager_execution" not in by_id(report), order


def test_conversions_of_an_eager_step_are_claimed_once(tmp_path):
    """tf.function removes an eager step's conversions with the rest: eager_execution counts
    them, and convert_to_tensor_gaps does not claim the same time again."""
    def add(b, host, main, comp, t0, i):
        _eager_ops(40, 2.0, 0.5)(b, host, main, comp, t0, i)
        for k in range(10):
            main.event("convert_to_tensor", t0 + 85 * MS + k * MS, MS // 2)
    _, run = host_trace(tmp_path, compute_ms=1, per_step=add)
    found = by_id(analyze(run))
    assert "convert_to_tensor_gaps" not in found
    # As the eager loop without conversions: the step keeps kernels and function time only.
    assert found["eager_execution"].speedup == pytest.approx(1 / 0.21, rel=0.05)


def test_compiled_step_with_a_few_eager_ops_is_not_eager(tmp_path):
    # Same 40 eager ops, but the step's time is mostly one tf.function call.
    _, run = host_trace(tmp_path, step_ms=400, compute_ms=300,
                        per_step=_eager_ops(40, 2.0, 0.5, start_ms=310))
    assert "eager_execution" not in by_id(analyze(run))
    # And few eager ops without a function are not a loop of them.
    _, run = host_trace(tmp_path / "few", compute_ms=1, per_step=_eager_ops(5, 2.0, 0.5))
    assert "eager_execution" not in by_id(analyze(run))


def test_eager_loop_without_markers_is_split_at_its_batch_fetches(tmp_path):
    b = XSpaceBuilder()
    main = b.plane("/host:CPU").line("python3", line_id=1)
    for i in range(6):
        t0 = i * 20 * MS
        main.event("EagerLocalExecute: IteratorGetNext", t0, MS)
        for k in range(30):
            s = t0 + 2 * MS + k * MS // 2
            main.event("EagerLocalExecute: MatMul", s, MS // 3)
            main.event("EagerKernelExecute", s + MS // 10, MS // 10)
    report = analyze(b.write(tmp_path))
    assert report.ctx.steps.source == "iterator:EagerLocalExecute: IteratorGetNext"
    assert report.ctx.n_steps == 5 and report.ctx.steps.median_step_ns() == 20 * MS
    f = by_id(report)["eager_execution"]
    assert f.numbers["eager_ops_per_step"] == 30
    # Per step: 1 ms fetch (input wait), 3 ms of kernels; the other 16 ms go.
    assert f.speedup == pytest.approx(20 / 4, rel=0.05)


# ---- function_retracing -----------------------------------------------------------------------

def _calls(retrace_steps: set[int], build_ms: float = 40.0, conversions: int = 0):
    """Per step: the train function called from Python; in `retrace_steps` it is traced first
    (graph building, with `conversions` symbolic convert_to_tensor calls inside) and runs as a
    new concrete function whose first execution spends 20 ms instantiating before its 5 ms run."""
    def add(b, host, main, comp, t0, i):
        s = t0 + 2 * MS
        if i in retrace_steps:
            main.event("tf.function-graph_building", s, int(build_ms * MS))
            for k in range(conversions):
                main.event("convert_to_tensor", s + MS + k * MS // 4, MS // 8)
            s += int(build_ms * MS) + MS
            main.event(f"EagerLocalExecute: __inference_train_step_{100 + i}", s, 25 * MS)
            main.event("EagerKernelExecute", s + 20 * MS, 5 * MS)
        else:
            main.event("EagerLocalExecute: __inference_train_step_99", s, 5 * MS + 1000)
            main.event("EagerKernelExecute", s + 500, 5 * MS)
    return add


def test_retracing_every_step_is_found(tmp_path):
    _, run = host_trace(tmp_path, steps=8, compute_ms=0.5, per_step=_calls(set(range(8))))
    f = by_id(analyze(run))["function_retracing"]
    assert f.numbers["traced_steps"] == 8 and f.numbers["graph_builds"] == 8
    assert f.numbers["build_fraction"] == pytest.approx(0.40, abs=0.01)
    assert f.numbers["instantiate_fraction"] == pytest.approx(0.20, abs=0.01)
    # 8 traced variants, plus host_trace's own `__inference_train_step_42` in every step.
    assert f.numbers["concrete_functions"] == {"train_step": 9}
    assert f.speedup == pytest.approx(1 / (1 - 0.60), rel=0.05) and f.severity == "high"
    assert "input_signature" in f.remedy


@pytest.mark.parametrize("traced", [{0}, {0, 7}])
def test_tracing_in_warm_up_is_not_retracing(tmp_path, traced):
    """The first call, and a last partial batch or a validation function, trace once each."""
    _, run = host_trace(tmp_path, steps=8, compute_ms=0.5, per_step=_calls(traced))
    assert "function_retracing" not in by_id(analyze(run))


def test_retracing_without_kernel_events_claims_no_instantiation(tmp_path):
    """A trace without EagerKernelExecute cannot split a call into instantiation and run."""
    def add(b, host, main, comp, t0, i):
        main.event("tf.function-graph_building", t0 + 2 * MS, 40 * MS)
        main.event(f"EagerLocalExecute: __inference_train_step_{100 + i}", t0 + 43 * MS, 50 * MS)
    _, run = host_trace(tmp_path, steps=8, compute_ms=0.5, per_step=add)
    f = by_id(analyze(run))["function_retracing"]
    assert f.numbers["instantiate_fraction"] == 0
    assert f.speedup == pytest.approx(1 / (1 - 0.40), rel=0.05)


def test_conversions_while_tracing_are_not_convert_gaps(tmp_path):
    _, run = host_trace(tmp_path, steps=8, compute_ms=0.5,
                        per_step=_calls(set(range(8)), conversions=40))
    assert "convert_to_tensor_gaps" not in by_id(analyze(run))
    # The same conversions outside any graph building are.
    _, run = host_trace(tmp_path / "b", steps=8, compute_ms=0.5,
                        per_step=_casts(20, 1.0))
    assert "convert_to_tensor_gaps" in by_id(analyze(run))


# ---- per_step_overhead ------------------------------------------------------------------------

def _small_calls(run_ms: float, fetches: int = 1, casts_ms: float = 0.0):
    """Per 1 ms step: `fetches` batch reads, then one train-function call running `run_ms` (its
    kernel execution inside), and optionally conversions filling `casts_ms` before it."""
    def add(b, host, main, comp, t0, i):
        data = host.line("tf_data_iterator_get_next/80", line_id=80)
        for k in range(fetches):
            data.event("IteratorGetNextOp::DoCompute", t0 + 1000 + k * 2000, 1000)
        s = t0 + 100_000
        if casts_ms:
            main.event("convert_to_tensor", s, int(casts_ms * MS))
            s += int(casts_ms * MS)
        main.event("EagerLocalExecute: __inference_train_step_7", s, int(run_ms * MS) + 2000)
        main.event("EagerKernelExecute", s + 1000, int(run_ms * MS))
    return add


def test_small_steps_pay_per_call_overhead(tmp_path):
    _, run = host_trace(tmp_path, steps=20, step_ms=1.0, compute_ms=0.0,
                        per_step=_small_calls(0.5), readers=0, parse_ops=0)
    f = by_id(analyze(run))["per_step_overhead"]
    assert f.numbers["overhead_fraction"] == pytest.approx(0.5, abs=0.02)
    assert f.numbers["batches_per_call"] == 1 and f.numbers["suggested_steps_per_call"] == 4
    assert f.speedup == pytest.approx(1 / (1 - 0.75 * 0.5), rel=0.04)
    assert "steps_per_execution=4" in f.remedy
    # Eight batches per call already: suggest more than that.
    _, run = host_trace(tmp_path / "spe", steps=20, step_ms=1.0, compute_ms=0.0,
                        per_step=_small_calls(0.5, fetches=8), readers=0, parse_ops=0)
    assert by_id(analyze(run))["per_step_overhead"].numbers["suggested_steps_per_call"] == 32


@pytest.mark.parametrize("config, changes", [
    ({"steps_per_call": 2}, {"steps_per_call": 8}),  # 2 batches a call now: 4x as many
    # Host casting fetches in Python (no loop inside the function): its own finding moves it.
    ({"steps_per_call": 1, "cast": "host"}, {}),
])
def test_the_reference_trainers_steps_per_call(tmp_path, config, changes):
    import json

    _, run = host_trace(tmp_path, steps=20, step_ms=1.0, compute_ms=0.0,
                        per_step=_small_calls(0.5, fetches=config["steps_per_call"]),
                        readers=0, parse_ops=0)
    (run / "recadvisor_run.json").write_text(json.dumps({"config": config}))
    f = by_id(analyze(run))["per_step_overhead"]
    assert f.config_changes == changes
    assert (f.fix_command is not None) == bool(changes)
    if changes:
        assert "--steps-per-call 8" in f.fix_command


def test_no_per_call_overhead_when_the_call_fills_the_step(tmp_path):
    _, run = host_trace(tmp_path, steps=20, step_ms=1.0, compute_ms=0.0,
                        per_step=_small_calls(0.95), readers=0, parse_ops=0)
    assert "per_step_overhead" not in by_id(analyze(run))
    # Time explained by another finding (conversions) is not overhead.
    _, run = host_trace(tmp_path / "casts", steps=20, step_ms=1.0, compute_ms=0.0,
                        per_step=_small_calls(0.5, casts_ms=0.45), readers=0, parse_ops=0)
    assert "per_step_overhead" not in by_id(analyze(run))


def _eager_fetch_calls(gap_us: float, casts: bool = False):
    """_small_calls' 0.5 ms call with its batch fetched from Python first: an eager
    IteratorGetNext, `gap_us` of Python (or of conversions, `casts`), then the function's own
    span enclosing the call."""
    def add(b, host, main, comp, t0, i):
        s = t0 + 400_000
        span = s - 10_000
        fetched = span - int(gap_us * 1000)
        main.event("EagerLocalExecute: IteratorGetNext", fetched - 30_000, 30_000)
        main.event("EagerKernelExecute", fetched - 25_000, 20_000)
        if casts and gap_us:
            main.event("convert_to_tensor", fetched, int(gap_us * 1000))
        main.event("step_fn", span, MS // 2 + 13_000)
        main.event("EagerLocalExecute: __inference_train_step_7", s, MS // 2 + 2000)
        main.event("EagerKernelExecute", s + 1000, MS // 2)
    return add


def test_a_custom_loop_fed_from_python_gets_the_loop_inside_the_function(tmp_path):
    """A custom loop feeding its tf.function from `for batch in dataset` cannot use Keras'
    steps_per_execution: the remedy is the iterator passed in and a loop over batches inside
    the function, and the time between the eager fetch and the call's own span is reported
    (docs/trace-signals.md, "A batch fetched in Python")."""
    _, run = host_trace(tmp_path, steps=20, step_ms=1.0, compute_ms=0.0,
                        per_step=_eager_fetch_calls(300), readers=0, parse_ops=0)
    f = by_id(analyze(run))["per_step_overhead"]
    assert f.numbers["fetched_from_python"] == 1.0
    assert f.numbers["eager_fetch_fraction"] == pytest.approx(0.3, abs=0.01)
    assert f.remedy.startswith("Run 4 steps per call: pass the iterator")
    assert "tf.range(4)" in f.remedy and "compile(" not in f.remedy
    assert any("fetched from Python" in e and "30.0%" in e for e in f.evidence), f.evidence
    # Fetched right before the function's span: still a loop fed from Python, nothing between.
    _, run = host_trace(tmp_path / "adjacent", steps=20, step_ms=1.0, compute_ms=0.0,
                        per_step=_eager_fetch_calls(0), readers=0, parse_ops=0)
    f = by_id(analyze(run))["per_step_overhead"]
    assert f.numbers["eager_fetch_fraction"] == pytest.approx(0.0, abs=0.001)
    assert f.remedy.startswith("Run 4 steps per call: pass the iterator")
    # Conversions fill the gap: `convert_to_tensor_gaps`' time, not the fetch's.
    _, run = host_trace(tmp_path / "casts", steps=20, step_ms=1.0, compute_ms=0.0,
                        per_step=_eager_fetch_calls(300, casts=True), readers=0, parse_ops=0)
    f = by_id(analyze(run))["per_step_overhead"]
    assert f.numbers["eager_fetch_fraction"] == pytest.approx(0.0, abs=0.001)
    # A batch fetched inside the function (Keras, or next(iterator) in the tf.function).
    _, run = host_trace(tmp_path / "inside", steps=20, step_ms=1.0, compute_ms=0.0,
                        per_step=_small_calls(0.5), readers=0, parse_ops=0)
    f = by_id(analyze(run))["per_step_overhead"]
    assert f.numbers["fetched_from_python"] == 0.0 and f.numbers["eager_fetch_fraction"] is None
    assert f.remedy.startswith("Run more steps per call: Keras compile(steps_per_execution=4)")
    assert not any("fetched from Python" in e for e in f.evidence)


# ---- device count without device planes or metadata -------------------------------------------

def _replica_ops(b, host, main, comp, t0, i):
    for r in range(1, 4):
        comp.event(f"gradient_tape/replica_{r}/dense/MatMul:MatMul", t0 + 80 * MS + r * MS,
                   MS // 2)


def test_mirrored_replicas_count_as_devices(tmp_path):
    _, run = host_trace(tmp_path, per_step=_replica_ops)
    assert analyze(run).ctx.n_devices == 4
    _, run = host_trace(tmp_path / "one")
    assert analyze(run).ctx.n_devices == 1


# ---- GPU traces ---------------------------------------------------------------------------------

def test_gpu_clean_trace_has_no_medium_or_high_finding(tmp_path):
    report = analyze(gpu_trace(tmp_path, h2d_ms=2, h2d_serial=False, nccl_ms=10,
                               nccl_overlapped=True))
    assert report.ctx.has_accelerator and report.ctx.n_devices == 4
    assert medium_or_high(report) == set()


def test_serialized_h2d_on_gpus(tmp_path):
    f = by_id(analyze(gpu_trace(tmp_path, h2d_ms=6, h2d_serial=True)))
    assert f["serialized_h2d"].numbers["overlap_ratio"] == pytest.approx(1.0, abs=0.05)
    assert f["serialized_h2d"].severity in ("medium", "high")


def test_overlapped_h2d_is_not_serialized(tmp_path):
    assert "serialized_h2d" not in by_id(analyze(gpu_trace(tmp_path, h2d_ms=6,
                                                           h2d_serial=False)))


def test_exposed_nccl_is_collective_overhead(tmp_path):
    f = by_id(analyze(gpu_trace(tmp_path, nccl_ms=30)))["collective_overhead"]
    assert f.step_fraction == pytest.approx(0.3, abs=0.03)
    assert f.severity == "high"


def test_nccl_hidden_under_compute_costs_nothing(tmp_path):
    assert "collective_overhead" not in by_id(analyze(gpu_trace(tmp_path, nccl_ms=30,
                                                                nccl_overlapped=True)))


def test_devices_of_several_hosts_add_up(tmp_path):
    """Every host of a multi-host GPU run names its own /device:GPU:0..: two hosts of two GPUs
    are four devices, two per process; their exposed all-reduce crosses the network."""
    for host in ("worker0", "worker1"):
        gpu_trace(tmp_path, devices=2, nccl_ms=30, host_name=host)
    report = analyze(tmp_path)
    assert (report.ctx.n_hosts, report.ctx.n_devices, report.ctx.devices_per_host) == (2, 4, 2)
    assert report.to_dict()["hardware"]["hosts"] == 2
    f = by_id(report)["collective_overhead"]
    assert f.numbers["hosts"] == 2 and f.severity == "high" and "fewer hosts" in f.remedy
    assert "one machine" not in " ".join(f.evidence)  # worker0/worker1 say nothing of machines
    one = analyze(gpu_trace(tmp_path / "one", devices=2, nccl_ms=30))
    assert (one.ctx.n_hosts, one.ctx.n_devices) == (1, 2) and "fewer hosts" not in by_id(
        one)["collective_overhead"].remedy


def test_cpu_workers_exchanging_over_rpc(tmp_path):
    """Two CPU worker processes profiled by TF's remote capture (`<host>_<port>` files): one
    device each, 40% of the step in the all-reduce between them, which is RPC, not memory
    copying, so the whole exposed time counts. Both traces are here: no peer is outside them
    (tests/analyzers/test_one_worker_trace.py reads one alone)."""
    for port in (6001, 6002):
        host_trace(tmp_path, compute_ms=50, per_step=allreduce(52), host_name=f"localhost_{port}")
    report = analyze(tmp_path)
    assert (report.ctx.n_hosts, report.ctx.n_devices) == (2, 2)
    assert report.ctx.collective_group_size == 2
    f = by_id(report)["collective_overhead"]
    assert f.step_fraction == pytest.approx(0.4, abs=0.03)
    assert f.speedup == pytest.approx(1 / (1 - f.step_fraction), rel=0.01) and f.severity == "high"
    assert "one machine (localhost)" in f.evidence[1] and "MirroredStrategy" in f.remedy
    assert f.numbers["peer_wait_fraction"] < 0.01  # both finish computing before exchanging
    assert "peers_outside" not in f.numbers and "First trace every worker" not in f.remedy


def test_a_worker_waiting_for_a_slower_peer(tmp_path):
    """Worker A computes 30 ms and enters the all-reduce at 32 ms; B computes 50 ms and joins at
    52 ms: 18.5 of the 100 ms the two spend in collectives, A waits while B still computes. Only
    the 41.5 ms when neither computes (50.5 to 92 ms) is exposed, and of that the 1.5 ms before
    B joins (50.5 to 52) is A waiting for B: the straggler's, not the exchange's."""
    host_trace(tmp_path, compute_ms=30, per_step=allreduce(32), host_name="worker_a")
    host_trace(tmp_path, compute_ms=50, per_step=allreduce(52), host_name="worker_b")
    found = by_id(analyze(tmp_path))
    f = found["collective_overhead"]
    assert f.numbers["peer_wait_fraction"] == pytest.approx(0.185, abs=0.005)
    assert f.numbers["left_to_straggler"] == pytest.approx(0.015, abs=0.001)
    assert f.step_fraction == pytest.approx(0.40, abs=0.005)
    assert found["straggler_worker"].numbers["straggler"] == "worker_b"


@pytest.mark.parametrize(("hosts", "machine"), [
    (["localhost_6001", "localhost_6002"], "localhost"),
    (["10.0.0.5_6009", "10.0.0.5_6010"], "10.0.0.5"),
    (["10.0.0.5_6009", "10.0.0.6_6009"], None),  # two machines
    (["worker_0", "worker_1"], None),  # not ports
    (["localhost_6001"], None),
])
def test_workers_on_one_machine(hosts, machine):
    assert one_machine(hosts) == machine


@pytest.mark.parametrize(("recorded", "machine"), [
    ({"rank 0 (a)": "vm", "rank 1 (b)": "vm"}, "vm"),  # PyTorch's host_name, whatever the names
    ({"rank 0 (a)": "vm", "rank 1 (b)": "vm2"}, None),
    ({"rank 0 (a)": "vm"}, None),  # one trace without a machine: unknown
])
def test_workers_on_one_recorded_machine(recorded, machine):
    assert one_machine(["rank 0 (a)", "rank 1 (b)"], recorded) == machine


def _embedding_step(update: str, read_ms: float = 0.01):
    """Per step on the compute thread after the model's ops: a 2 ms forward lookup, then the
    table's update: `dense` (Keras 3 Adam: UnsortedSegmentSum and elementwise ops over the
    table, 60 ms in all) or `scatter` (4 ms); and a ReadVariableOp of `read_ms`."""
    def add(b, host, main, comp, t0, i):
        line = host.line("tf_Compute/12", line_id=12)
        line.event("Read/ReadVariableOp:ReadVariableOp", t0 + MS, int(read_ms * MS))
        t = t0 + MS + int(read_ms * MS)
        line.event("embedding_lookup:ResourceGather", t, 2 * MS)
        t += 2 * MS
        if update == "dense":
            for k, op in enumerate(("adam/UnsortedSegmentSum:UnsortedSegmentSum",
                                    "adam/Mul_3:Mul", "adam/Sqrt_1:Sqrt",
                                    "adam/AssignSubVariableOp:AssignSubVariableOp")):
                line.event(op, t + k * 15 * MS, 15 * MS - 1000)
        elif update == "clipped":
            # Keras 3's SGD with global_clipnorm, as TF 2.21 names its ops.
            for k, op in enumerate(("sgd_1/Sum/input:UnsortedSegmentSum", "sgd_1/Sum:Sum",
                                    "sgd_1/mul_1/x:UnsortedSegmentSum",
                                    "sgd_1/AssignSubVariableOp:AssignSubVariableOp")):
                line.event(op, t + k * 15 * MS, 15 * MS - 1000)
        else:
            line.event("ResourceScatterSub:ResourceScatterSub", t, 4 * MS)
    return add


def test_global_clipnorm_densifying_a_table_gradient_is_named(tmp_path):
    """Keras 3's global_clipnorm densifies the table's gradient to take its norm (a densify op
    feeding a Sum) and scales it whole: the clipping's remedy comes first. Adam's densify alone
    is no clipping."""
    clipped = by_id(analyze(host_trace(tmp_path / "c", compute_ms=20,
                                       per_step=_embedding_step("clipped"))[1]))
    f = clipped["dense_embedding_update"]
    assert f.numbers["causes"] == ["dense_optimizer"] and f.numbers["global_clipnorm"]
    assert f.remedy.startswith("Clip before the optimizer, with tf.clip_by_global_norm")
    adam = by_id(analyze(host_trace(tmp_path / "a", compute_ms=20,
                                    per_step=_embedding_step("dense"))[1]))
    assert not adam["dense_embedding_update"].numbers["global_clipnorm"]
    assert "clip_by_global_norm" not in adam["dense_embedding_update"].remedy


def test_dense_optimizer_update_of_a_table(tmp_path):
    """60 ms of the 100 ms step in the optimizer's dense path, 2 ms of lookups: 60 ms less the
    row-sparse update's scatter (SPARSE_LOOKUPS x 2 ms) saved."""
    from analyzers.detectors.dense_embedding_update import SPARSE_LOOKUPS

    report = analyze(host_trace(tmp_path, compute_ms=20, per_step=_embedding_step("dense"))[1])
    f = by_id(report)["dense_embedding_update"]
    assert f.numbers["causes"] == ["dense_optimizer"]
    assert f.step_fraction == pytest.approx(0.60 - SPARSE_LOOKUPS * 0.02, abs=0.005)
    assert f.severity == "high"
    assert "scatter" in f.remedy


def test_the_optimizers_own_scatters_are_replaced_with_its_dense_ops(tmp_path):
    """Keras 3 Adagrad on a table: elementwise passes over every row (30 ms), then a scatter
    into its accumulator and one into the table (8 ms each). The remedy's one row-sparse
    update replaces all of it: 46 ms less SPARSE_LOOKUPS x 2 ms saved. Counting the optimizer's
    scatters as kept, on top of the remedy's own scatter, read 26% here, and 2.86-3.15x where
    runs of the foreign job (`embedding_adagrad`) measured 4.4-5.4x."""
    from analyzers.detectors.dense_embedding_update import SPARSE_LOOKUPS

    def add(b, host, main, comp, t0, i):
        line = host.line("tf_Compute/12", line_id=12)
        line.event("embedding_lookup:ResourceGather", t0 + MS, 2 * MS)
        t = t0 + 3 * MS
        for op, ms in (("adagrad/Sqrt:Sqrt", 15), ("adagrad/Equal:Equal", 15),
                       ("adagrad/ResourceScatterAdd:ResourceScatterAdd", 8),
                       ("adagrad/ResourceScatterSub:ResourceScatterSub", 8)):
            line.event(op, t, ms * MS - 1000)
            t += ms * MS
    f = by_id(analyze(host_trace(tmp_path, compute_ms=20, per_step=add)[1]))[
        "dense_embedding_update"]
    assert f.numbers["causes"] == ["dense_optimizer"]
    assert f.step_fraction == pytest.approx(0.46 - SPARSE_LOOKUPS * 0.02, abs=0.005)


@pytest.mark.parametrize(("op", "optimizer_ms", "found"), [
    ("adagrad/Sqrt:Sqrt", 30, True), ("adagrad/Sqrt:Sqrt", 10, False),
    # MirroredStrategy's all-reduce sits under the optimizer's scope: not an update.
    ("sgd_1/CollectiveReduceV2:CollectiveReduceV2", 30, False),
    # A fused dense apply takes a dense gradient, which no lookup makes: a dense layer's (a TF1
    # MLP's Adam beside a frozen table read 24-28% of a 1.8 ms step in one CI run).
    ("Adam/update_w1/ResourceApplyAdam:ResourceApplyAdam", 30, False)])
def test_optimizer_share_alone(tmp_path, op, optimizer_ms, found):
    """No densifying op (Keras 3 Adagrad): the optimizer's elementwise ops over every row take
    30% of the step, which dense layers' updates never do at a usable batch size; 10% is not
    taken as the tables."""
    def add(b, host, main, comp, t0, i):
        line = host.line("tf_Compute/12", line_id=12)
        line.event("embedding_lookup:ResourceGather", t0 + MS, MS)
        line.event(op, t0 + 2 * MS, optimizer_ms * MS)
    f = by_id(analyze(host_trace(tmp_path, compute_ms=20, per_step=add)[1]))
    assert ("dense_embedding_update" in f) == found
    if found:
        assert f["dense_embedding_update"].step_fraction == pytest.approx(0.28, abs=0.01)


def test_a_gather_in_the_backward_pass_is_not_a_table(tmp_path):
    """A Keras 3 MLP without tables at a small batch: Adam's elementwise passes take 30% of the
    step, and its only gather is the loss's, under the gradient tape (a 64-512-512-1 MLP at
    batch 256 showed both once its warm-up step was left out)."""
    def add(b, host, main, comp, t0, i):
        line = host.line("tf_Compute/12", line_id=12)
        line.event("StatefulPartitionedCall/gradient_tape/compile_loss/binary_crossentropy/"
                   "GatherV2:GatherV2", t0 + MS, MS // 10)
        line.event("StatefulPartitionedCall/adam/Sqrt_5:Sqrt", t0 + 2 * MS, 30 * MS)
    assert "dense_embedding_update" not in by_id(
        analyze(host_trace(tmp_path, compute_ms=20, per_step=add)[1]))


def test_scattered_table_read_whole_every_step(tmp_path):
    report = analyze(host_trace(tmp_path, compute_ms=20,
                                per_step=_embedding_step("scatter", read_ms=15))[1])
    f = by_id(report)["dense_embedding_update"]
    assert f.numbers["causes"] == ["table_copy_on_read"]
    assert f.step_fraction == pytest.approx(0.15, abs=0.01) and "ResourceGather" in f.remedy


def test_a_read_in_a_few_steps_is_not_a_copy_every_step(tmp_path):
    """A TF1 Saver reads each variable (`table/Read/ReadVariableOp`) only in the steps that
    save: 40 ms in 2 of 10 steps (8% of the window) is periodic work (step_stalls'), not a
    table copied each step; the same read in 6 of 10 steps is."""
    def reads_in(steps):
        def add(b, host, main, comp, t0, i):
            line = host.line("tf_Compute/12", line_id=12)
            if i in steps:
                line.event("table/Read/ReadVariableOp:ReadVariableOp", t0 + MS, 40 * MS)
            line.event("embedding_lookup:ResourceGather", t0 + 42 * MS, 2 * MS)
            line.event("ResourceScatterSub:ResourceScatterSub", t0 + 45 * MS, 4 * MS)
        return add
    few = analyze(host_trace(tmp_path / "few", steps=10, compute_ms=20,
                             per_step=reads_in({4, 9}))[1])
    assert "dense_embedding_update" not in by_id(few)
    most = analyze(host_trace(tmp_path / "most", steps=10, compute_ms=20,
                              per_step=reads_in({1, 2, 4, 5, 7, 8}))[1])
    assert by_id(most)["dense_embedding_update"].numbers["causes"] == ["table_copy_on_read"]


def _optimizer_kernels(update: str):
    """tf_op of a GPU trace's kernels 10-19 on every device: the optimizer updating the tables
    densely (Keras 3 Adam: UnsortedSegmentSum, then elementwise ops) or row-sparsely."""
    def tf_op(d: int, k: int) -> str | None:
        if k < 10:
            return None
        if update == "sparse":
            return f"Adam/update_{k}/ResourceSparseApplyAdam:ResourceSparseApplyAdam"
        return ("Adam/UnsortedSegmentSum:UnsortedSegmentSum" if k == 10
                else f"Adam/update_{k}/Mul:Mul")
    return tf_op


@pytest.mark.parametrize(("update", "lookups", "found"), [
    ("dense", 2, True), ("sparse", 2, False), ("dense", 0, False)])
def test_gpu_optimizer_kernels_by_their_tf_op(tmp_path, update, lookups, found):
    """On a GPU the update runs as kernels, named by the op that launched them: 10 of each
    device's 20 kernels (3 ms each, 100 ms steps, the devices side by side) are the optimizer's,
    2 the lookups': 30 ms less SPARSE_LOOKUPS x 6 ms saved. Row-sparse kernels, or no table
    lookup at all, are not this finding."""
    from analyzers.detectors.dense_embedding_update import SPARSE_LOOKUPS

    run = gpu_trace(tmp_path, devices=2, kernels=20, kernel_ms=60, lookups=lookups,
                    tf_op=_optimizer_kernels(update))
    f = by_id(analyze(run)).get("dense_embedding_update")
    assert (f is not None) == found
    if found:
        assert f.numbers["causes"] == ["dense_optimizer"]
        assert f.numbers["lookup_fraction"] == pytest.approx(0.06, abs=0.005)
        saved = 0.30 - SPARSE_LOOKUPS * 0.06
        assert f.step_fraction == pytest.approx(saved, abs=0.01)
        assert f.speedup == pytest.approx(1 / (1 - saved), rel=0.01) and f.severity == "medium"
        assert any("UnsortedSegmentSum" in e for e in f.evidence)
        assert f.top_events[0]["name"].startswith("Adam/")


def test_row_sparse_tables_are_not_dense_updates(tmp_path):
    """A scatter update and microsecond reads; and the dense path without any lookup (no table
    in the model) is not this finding either."""
    sparse = analyze(host_trace(tmp_path / "a", compute_ms=20,
                                per_step=_embedding_step("scatter"))[1])
    assert "dense_embedding_update" not in by_id(sparse)

    def no_lookup(b, host, main, comp, t0, i):
        host.line("tf_Compute/12", line_id=12).event(
            "adam/UnsortedSegmentSum:UnsortedSegmentSum", t0 + MS, 60 * MS)
    dense_mlp = analyze(host_trace(tmp_path / "b", compute_ms=20, per_step=no_lookup)[1])
    assert "dense_embedding_update" not in by_id(dense_mlp)


def test_duplicate_rows_summed_before_a_sparse_apply_are_no_densify(tmp_path):
    """TF1's and Keras 2's optimizers sum a gradient's duplicate rows (`Unique`, then an
    `UnsortedSegmentSum` over the unique rows) before a row-sparse apply, in the update's scope:
    an Adagrad of embedding_column tables (`foreign_jobs.py session_embedding_column`) read
    `dense_embedding_update` medium 1.15x on those sums. Without the `Unique` beside it, the
    same sum is a densified gradient."""
    def update(unique: bool):
        def add(b, host, main, comp, t0, i):
            line = host.line("tf_Compute/12", line_id=12)
            line.event("input_layer/c0_embedding/embedding_lookup:ResourceGather", t0 + MS, 2 * MS)
            scope = "Adagrad/update_input_layer/c0_embedding/embedding_weights/"
            ops = ([(f"{scope}Unique:Unique", 1)] if unique else []) + [
                (f"{scope}UnsortedSegmentSum:UnsortedSegmentSum", 10),
                (f"{scope}ResourceSparseApplyAdagrad:ResourceSparseApplyAdagrad", 10)]
            t = t0 + 4 * MS
            for name, ms in ops:
                line.event(name, t, ms * MS)
                t += ms * MS + 1000
        return add
    dedup = analyze(host_trace(tmp_path / "d", compute_ms=20, per_step=update(True))[1])
    assert "dense_embedding_update" not in by_id(dedup)
    dense = analyze(host_trace(tmp_path / "s", compute_ms=20, per_step=update(False))[1])
    assert by_id(dense)["dense_embedding_update"].numbers["causes"] == ["dense_optimizer"]


def test_many_tiny_kernels_are_launch_overhead(tmp_path):
    """400 kernels of 10 µs a step while the executor dispatches for 20 ms of each 100 ms step
    (16% of it with the GPU idle: the first 4 ms run the kernels); the same kernels without the
    executor's time cost nothing measurable: no finding."""
    run = gpu_trace(tmp_path / "a", kernels=400, kernel_ms=4, devices=1,
                    host_op=("ExecutorState::Process", 0.1, 20.0))
    f = by_id(analyze(run))["kernel_launch_overhead"]
    assert f.numbers["ops_per_step"] == 400
    assert f.step_fraction == pytest.approx(0.16, abs=0.01)
    free = by_id(analyze(gpu_trace(tmp_path / "b", kernels=400, kernel_ms=4, devices=1)))
    assert "kernel_launch_overhead" not in free


@pytest.mark.parametrize(("kernels", "devices", "expected"),
                         [(60, 1, False), (120, 1, True), (30, 4, False)])
def test_a_gpu_idle_in_the_executor_between_tiny_kernels(tmp_path, kernels, devices, expected):
    """A small model's step (real Keras 2.4 traces: 145-148 kernels of 4 µs, the GPU idle 92-96%
    of the step): the executor works 60 ms of each 100 ms step around 5 µs kernels. 60 kernels
    are too few to call that launch overhead, and so are 30 on each of 4 GPUs."""
    run = gpu_trace(tmp_path, kernels=kernels, kernel_ms=kernels * 0.005, devices=devices,
                    host_op=("ExecutorState::Process", 0.1, 60.0))
    f = by_id(analyze(run)).get("kernel_launch_overhead")
    assert (f is not None) == expected
    if expected:
        assert f.step_fraction == pytest.approx(0.6, abs=0.02) and f.severity == "high"


def test_few_long_kernels_are_not_launch_overhead(tmp_path):
    assert "kernel_launch_overhead" not in by_id(analyze(gpu_trace(tmp_path, kernels=10)))


def test_host_device_pingpong(tmp_path):
    f = by_id(analyze(gpu_trace(tmp_path, kernel_ms=50, pingpong_ms=25, devices=1)))
    assert f["host_device_pingpong"].severity in ("medium", "high")


def test_pingpong_needs_an_accelerator_and_host_ops(tmp_path):
    assert "host_device_pingpong" not in by_id(analyze(gpu_trace(tmp_path / "g", devices=1)))
    _, run = host_trace(tmp_path / "h")
    assert "host_device_pingpong" in skipped(analyze(run))


# ---- dstate_threads (sampler) -----------------------------------------------------------------

def test_dstate_skipped_without_sampler(tmp_path):
    _, run = host_trace(tmp_path)
    assert "no OS sampler data" in skipped(analyze(run))["dstate_threads"].reason


def _d_readers(tmp_path, *, readers_kernel: float, read_mb_per_s: float,
               main_state: str = "R", wait_ms: float = 0):
    """12 readers in D around a busy compute thread; together they spend `readers_kernel`
    cores in the kernel while the process reads `read_mb_per_s` from the device."""
    _, run = host_trace(tmp_path, wait_ms=wait_ms)
    threads = {"python3": (main_state, 0.3), "tf_Compute": ("R", 1.0)}
    threads.update({f"tf_data_privat#{i}": ("D", readers_kernel / 12, readers_kernel / 12)
                    for i in range(12)})
    write_sampler(run, thread_samples(500, 50, threads), n_cpus=2, read_mb_per_s=read_mb_per_s)
    return analyze(run)


def test_dstate_threads_found_with_many_d_readers(tmp_path):
    """Small cold reads: 0.6 cores of kernel work for 20 MB/s (30 ms per MB, 100x what large
    reads cost) on two full CPUs: that CPU came out of the model's."""
    f = by_id(_d_readers(tmp_path, readers_kernel=0.6, read_mb_per_s=20))["dstate_threads"]
    assert f.numbers["mean_d_threads"] == pytest.approx(12, abs=0.1)
    assert f.numbers["io_threads"] == 12
    assert f.numbers["io_kernel_share"] == pytest.approx(0.6 / 1.9, abs=0.01)
    assert f.numbers["kernel_ms_per_mb"] == pytest.approx(30, rel=0.05)
    assert f.numbers["saturated_share"] == 1.0
    # 31.6% of the CPU, less the 0.3 ms/MB large reads would still cost: ~31%, 1.45x.
    assert f.speedup == pytest.approx(1 / (1 - 0.31), abs=0.03)
    assert f.severity == "high"
    assert any("small reads" in e for e in f.evidence)


def test_dstate_threads_claim_the_input_wait_of_small_reads(tmp_path):
    """The step also waits 20% for input while the readers sit in D doing small reads, and no
    io_stall finding counts that wait: the estimate adds it. With large reads the wait is a
    storage bandwidth matter, not this finding's."""
    f = by_id(_d_readers(tmp_path / "s", readers_kernel=0.6, read_mb_per_s=20,
                         wait_ms=20))["dstate_threads"]
    assert f.speedup == pytest.approx(1 / (1 - 0.31 - 0.2), abs=0.05)
    assert any("waited for input 20%" in e for e in f.evidence)
    large = by_id(_d_readers(tmp_path / "l", readers_kernel=0.6, read_mb_per_s=2000,
                             wait_ms=20))["dstate_threads"]
    assert large.severity == "low"


def test_dstate_threads_with_large_reads_are_low(tmp_path):
    """The same threads in D, but their kernel time is what the bytes cost (0.3 ms per MB):
    larger reads would save nothing, whatever the D count says."""
    f = by_id(_d_readers(tmp_path, readers_kernel=0.6, read_mb_per_s=2000))["dstate_threads"]
    assert f.numbers["mean_d_threads"] == pytest.approx(12, abs=0.1)
    assert f.numbers["avoidable_kernel_share"] == pytest.approx(0.0, abs=0.005)
    assert f.severity == "low"
    assert any("already large" in e for e in f.evidence)


def test_dstate_threads_with_free_cores_are_low(tmp_path):
    """Small reads, but one runnable thread on two CPUs: the readers' kernel work ran on the
    idle core and took nothing from the model."""
    f = by_id(_d_readers(tmp_path, readers_kernel=0.6, read_mb_per_s=20, main_state="S",
                         wait_ms=0))["dstate_threads"]
    assert f.numbers["saturated_share"] == 0.0
    assert f.severity == "low"
    assert any("cores were often free" in e for e in f.evidence)


def test_no_dstate_finding_when_threads_sleep_normally(tmp_path):
    _, run = host_trace(tmp_path)
    threads = {"python3": ("S", 0.1), "tf_Compute": ("R", 1.0), "tf_data_privat": ("S", 0.1)}
    write_sampler(run, thread_samples(500, 50, threads), n_cpus=2)
    report = analyze(run)
    assert "dstate_threads" not in by_id(report) and "dstate_threads" not in skipped(report)


def test_sampler_alignment_uses_profile_start(tmp_path):
    _, run = host_trace(tmp_path)
    write_sampler(run, thread_samples(200, 50, {"python3": ("R", 1.0)}))
    data = analyze(run).run
    assert data.threads["t_ns"].min() == 0  # first sample at profile_start_time
    assert isinstance(data.threads, pd.DataFrame)


def test_os_threads_are_matched_to_trace_lines_by_activity(tmp_path):
    """/proc names do not tell tf.data threads from compute threads (both can carry the process
    name): the sampler thread running when the tf.data line is busy is the input thread."""
    from analyzers.context import Context
    from analyzers.ingest.logdir import load_run
    from analyzers.signals.os_sampler import summarize, thread_roles

    _, run = host_trace(tmp_path, wait_ms=50, compute_ms=45, parse_ops=1, parse_op_ms=48)
    rows = []
    for k in range(100):  # 200 Hz over the 5 steps
        t = k * 5.0
        first_half = (t % 100) < 48
        for tid, running, cores in ((1001, first_half, 0.3), (1002, not first_half, 0.9)):
            rows.append({"t_ms": t, "tid": tid, "name": "trainer", "state": "R" if running
                         else "S", "user_s": cores * t / 1000, "system_s": 0.0})
    write_sampler(run, pd.DataFrame(rows), n_cpus=2)
    ctx = Context.build(load_run(run))
    roles = thread_roles(ctx, ctx.run.threads)
    assert roles == {1001: "input", 1002: "compute"}
    assert summarize(ctx).input_cpu_share == pytest.approx(0.25, abs=0.02)

    # Rows not grouped by line (as merged Chrome traces come): the same busy flags and roles.
    from analyzers.signals.os_sampler import _lines_busy_at

    shuffled_run = load_run(run)
    shuffled_run.events = shuffled_run.events.sample(frac=1, random_state=0).reset_index(
        drop=True)
    shuffled = Context.build(shuffled_run)
    codes = shuffled.events["line"].array.codes
    assert (codes[1:] != codes[:-1]).sum() > 4 * (len(shuffled.events["line"].cat.categories) + 1)
    t = ctx.run.threads["t_ns"].to_numpy()
    grouped_busy, shuffled_busy = _lines_busy_at(ctx, t), _lines_busy_at(shuffled, t)
    assert grouped_busy.keys() == shuffled_busy.keys() and len(grouped_busy) >= 2
    for line, on in grouped_busy.items():
        assert on.any() and (on == shuffled_busy[line]).all(), line
    assert thread_roles(shuffled, shuffled.run.threads) == roles

    # The process's first thread (tid == pid) is the main one, whatever it runs along with.
    threads = pd.read_parquet(run / "host.threads.parquet")
    threads.loc[threads["tid"] == 1001, "tid"] = 100  # pid: write_sampler's
    threads.to_parquet(run / "host.threads.parquet")
    ctx = Context.build(load_run(run))
    assert thread_roles(ctx, ctx.run.threads) == {100: "main", 1002: "compute"}
    assert summarize(ctx).input_cpu_share == 0.0


def test_scaling_efficiency_from_runs_at_several_device_counts(tmp_path):
    import json

    from analyzers.scaling import scaling_points

    for run, devices, sps in (("r1", 2, 1000.0), ("r2", 4, 1600.0), ("r3", 8, 1200.0)):
        d = tmp_path / "plugins" / "profile" / run
        d.mkdir(parents=True)
        (d / "recadvisor_run.json").write_text(json.dumps(
            {"samples_per_s": sps, "devices": {"count": devices}}))
    pts = scaling_points(tmp_path / "plugins" / "profile" / "r3")
    assert [(p.devices, round(p.efficiency, 2)) for p in pts] == [(2, 1.0), (4, 0.8), (8, 0.3)]
    assert scaling_points(tmp_path / "nowhere" / "r") == []


def test_pytorch_chrome_trace_is_diagnosed_like_an_xplane(tmp_path):
    """Same detectors on a PyTorch-profiler trace: ProfilerStep markers, GPU kernels, NCCL."""
    import json

    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]
    for step in range(4):
        t0 = step * 100_000  # µs
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": 1, "tid": 1, "ts": t0, "dur": 99_000})
        for d in range(2):
            events.append({"ph": "X", "cat": "kernel", "name": "sm80_xmma_gemm_f32f32",
                           "pid": d, "tid": 7, "ts": t0 + 1_000, "dur": 60_000,
                           "args": {"device": d, "correlation": step * 10 + d}})
            events.append({"ph": "X", "cat": "kernel",
                           "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                           "pid": d, "tid": 20, "ts": t0 + 61_000, "dur": 30_000,
                           "args": {"device": d}})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": 1, "tid": 1, "ts": t0 + 500, "dur": 10,
                           "args": {"correlation": step * 10 + d}})
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    report = analyze(path)
    assert (report.ctx.steps.source, report.ctx.n_steps) == ("markers:ProfilerStep#N", 4)
    assert report.ctx.main_line == "1"  # the thread of the ProfilerStep markers (tid 1)
    assert report.ctx.has_accelerator and report.ctx.n_devices == 2
    f = by_id(report)["collective_overhead"]
    assert f.step_fraction == pytest.approx(0.3, abs=0.03) and f.severity == "high"


def test_an_untraced_pipeline_wait_that_d_state_readers_explain_is_theirs(tmp_path):
    """No pipeline event in the trace, a 30% wait, and the sampler sees 12 readers in D state:
    dstate_threads' estimate counts the wait; input_preprocessing does not report it again."""
    _, run = host_trace(tmp_path / "d", wait_ms=30, pipeline="NoStage", readers=0, parse_ops=0)
    threads = {"python3": ("R", 0.3), "tf_Compute": ("R", 1.0)}
    threads.update({f"tf_data_privat#{i}": ("D", 0.05, 0.05) for i in range(12)})
    write_sampler(run, thread_samples(500, 50, threads), n_cpus=2, read_mb_per_s=20)
    found = by_id(analyze(run))
    assert found["dstate_threads"].numbers["input_wait_claimed"] == pytest.approx(0.3, abs=0.01)
    assert "input_preprocessing" not in found and "io_stall" not in found
    # Without the sampler, the wait is input_preprocessing's, its cause unknown.
    _, bare = host_trace(tmp_path / "bare", wait_ms=30, pipeline="NoStage", readers=0,
                         parse_ops=0)
    assert by_id(analyze(bare))["input_preprocessing"].numbers["pipeline_traced"] is False


def _loader_trace(path: Path, wait_us: int, iterator: str = "MultiProcessing",
                  per_example_ops: int = 0, markers: bool = True, other_us: int = 0) -> Path:
    """Five 100 ms PyTorch steps (Kineto JSON, current categories) that fetch from a DataLoader
    for `wait_us`, then compute; `per_example_ops` torch ops (`aten::to` > `aten::copy_`, 500 µs
    each) run inside each fetch, as an in-process loader's transforms do. Without `markers`, no
    ProfilerStep#N (the torch.autograd.profiler API writes none). `other_us`: then two fetches
    from a second loader, with worker processes, of that long together, each holding a 400 µs
    `aten::empty` (unpickling the batch)."""
    import json

    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]
    for step in range(5):
        t0 = step * 100_000  # µs
        if markers:
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                           "pid": 1, "tid": 1, "ts": t0, "dur": 99_000})
        events += [
            {"ph": "X", "cat": "user_annotation",
             "name": f"enumerate(DataLoader)#_{iterator}DataLoaderIter.__next__",
             "pid": 1, "tid": 1, "ts": t0 + 500, "dur": wait_us},
            {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1,
             "ts": t0 + 1_000 + wait_us + other_us, "dur": 97_000 - wait_us - other_us}]
        for k in range(2 if other_us else 0):
            ts = t0 + 600 + wait_us + k * other_us // 2
            events += [{"ph": "X", "cat": "user_annotation",
                        "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                        "pid": 1, "tid": 1, "ts": ts, "dur": other_us // 2 - 10},
                       {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1,
                        "ts": ts + 100, "dur": 400}]
        for i in range(per_example_ops):
            ts = t0 + 1_000 + i * 600
            events += [{"ph": "X", "cat": "cpu_op", "name": "aten::to", "pid": 1, "tid": 1,
                        "ts": ts, "dur": 500},
                       {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1,
                        "ts": ts + 10, "dur": 480}]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_dataloader_wait_is_named_with_pytorch_remedies(tmp_path):
    """A PyTorch job waiting 40 ms of each 100 ms step in the DataLoader's `__next__`: its workers
    are not in the trace, so the cause is unknown, nothing says storage, and the remedy is the
    DataLoader's, not tf.data's."""
    found = by_id(analyze(_loader_trace(tmp_path / "slow.pt.trace.json", 40_000)))
    assert "io_stall" not in found
    f = found["input_preprocessing"]
    assert f.numbers["pipeline_traced"] is False and f.severity == "high"
    assert "num_workers" in f.remedy and "tf.data" not in f.remedy
    assert "worker processes (`_MultiProcessingDataLoaderIter`) do not keep up" in " ".join(
        f.evidence)
    # Workers that keep up: a 2 ms hand-off per 100 ms step is no finding.
    fed = _loader_trace(tmp_path / "fed.pt.trace.json", 2_000)
    assert not {"input_preprocessing", "io_stall"} & set(by_id(analyze(fed)))


def test_an_in_process_dataloader_is_named_with_the_workers_to_add(tmp_path):
    """`_SingleProcessDataLoaderIter` (num_workers=0) loads on the training thread: 40 ms of a
    100 ms step, 32 per-example `aten::to` calls (16 ms, their nested copies not counted again)
    inside each fetch. Two workers loading a batch in 40 ms while 60 ms of compute runs keep up
    (docs/trace-signals.md, "PyTorch DataLoader")."""
    slow = _loader_trace(tmp_path / "slow.pt.trace.json", 40_000, "SingleProcess", 32)
    f = by_id(analyze(slow))["input_preprocessing"]
    assert f.numbers["causes"] == ["in_process_loading"] and f.severity == "high"
    assert f.numbers["suggested_num_workers"] == 2 and "num_workers=2" in f.remedy
    assert f.numbers["loader_op_ms_per_step"] == pytest.approx(16.0)
    # Over the window's 5 steps, as every finding's top events count.
    assert f.top_events[0] == {"name": "aten::to", "total_ms": 80.0, "count": 160}
    assert f.numbers["loader_ms_per_fetch"] == pytest.approx(40.0)
    assert f.speedup == pytest.approx(1 / 0.6, rel=0.03)
    assert "num_workers=0" in f.title
    # CPU only: the workers would share the model's cores, and there is no GPU to pin for.
    assert "pin_memory" not in f.remedy and "upper bound" in f.evidence[-1]
    # A second loader with workers, fetched twice after it in 5 ms: more fetches, less time.
    # The in-process one holds the step up; the evidence says its fetches are 5 of 15, and its
    # ops are the ones inside its own fetches.
    mixed = by_id(analyze(_loader_trace(tmp_path / "mixed.pt.trace.json", 40_000,
                                        "SingleProcess", 32, other_us=5_000)))
    f = mixed["input_preprocessing"]
    assert f.numbers["causes"] == ["in_process_loading"]
    assert "5 of the 15 DataLoader fetches are" in f.evidence[1]
    assert f.numbers["loader_ms_per_fetch"] == pytest.approx(40.0)
    assert f.numbers["loader_op_ms_per_step"] == pytest.approx(16.0)
    assert [t["name"] for t in f.top_events] == ["aten::to"]
    # Loading all but 3 ms of each step: no worker count keeps up, none is asked for.
    busy = by_id(analyze(_loader_trace(tmp_path / "busy.pt.trace.json", 96_000,
                                       "SingleProcess", 32)))["input_preprocessing"]
    assert busy.numbers["suggested_num_workers"] is None
    assert "num_workers=one per spare core" in busy.remedy
    # The same loader fetching in 2 ms: nothing to hide.
    quick = _loader_trace(tmp_path / "quick.pt.trace.json", 2_000, "SingleProcess", 2)
    assert "input_preprocessing" not in by_id(analyze(quick))


def test_work_inside_overlapping_fetches_is_the_wait(tmp_path):
    """A fetch inside another (a loader wrapping a loader): an op after the inner one ends but
    before the outer one does is still inside a fetch."""
    import json

    fetch = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
              {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1,
               "tid": 1, "ts": 0, "dur": 99_000},
              {"ph": "X", "cat": "user_annotation", "name": fetch, "pid": 1, "tid": 1,
               "ts": 500, "dur": 40_000},
              {"ph": "X", "cat": "user_annotation", "name": fetch, "pid": 1, "tid": 1,
               "ts": 1_000, "dur": 4_000},
              {"ph": "X", "cat": "cpu_op", "name": "aten::stack", "pid": 1, "tid": 1,
               "ts": 10_000, "dur": 2_000},
              {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1,
               "ts": 41_000, "dur": 50_000},
              # Kineto's copies of annotations on the GPU's stream are spans, not waits.
              {"ph": "X", "cat": "gpu_user_annotation", "name": fetch, "pid": 0, "tid": 7,
               "ts": 600, "dur": 39_000, "args": {"device": 0}},
              {"ph": "X", "cat": "gpu_user_annotation", "name": "## forward ##", "pid": 0,
               "tid": 7, "ts": 2_000, "dur": 1_000, "args": {"device": 0}}]
    from analyzers.ingest.logdir import load_run

    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ev = load_run(path).events
    kinds = dict(zip(ev["name"].astype(str), ev["kind"].astype(str), strict=True))
    assert kinds["aten::stack"] == "input_wait" and kinds["aten::addmm"] == "host_op"
    assert kinds["## forward ##"] == "other"


@pytest.mark.parametrize(("steps", "warned"), [(1, True), (2, True), (3, False)])
def test_a_window_of_few_steps_is_a_warning(tmp_path, steps, warned):
    report = analyze(gpu_trace(tmp_path, steps=steps, devices=1))
    assert report.ctx.n_steps == steps
    assert bool(report.window_warnings()) is warned


def test_steps_without_markers_are_cut_at_dataloader_fetches(tmp_path):
    """The torch.autograd.profiler API writes no ProfilerStep#N: a loop's DataLoader fetches cut
    its steps, as an eager TF loop's batch fetches do (5 fetches, 4 whole steps), and the
    in-process loader is still named."""
    path = _loader_trace(tmp_path / "t.pt.trace.json", 40_000, "SingleProcess", 32,
                         markers=False)
    report = analyze(path)
    steps = report.ctx.steps
    assert steps.source == ("iterator:enumerate(DataLoader)#_SingleProcessDataLoaderIter"
                            ".__next__")
    assert report.ctx.n_steps == 4 and steps.median_step_ns() == 100e6
    assert by_id(report)["input_preprocessing"].numbers["causes"] == ["in_process_loading"]


# ---- step_stalls -------------------------------------------------------------------------------

def _uneven(tmp, durations_ms: list[float], stall=None, compute_ms: float = 8.0,
            stride: int = 1, marker: str = "train") -> Path:
    """Steps of the given lengths, each with `compute_ms` of ops on a compute thread; `stall(main,
    comp, t0, i, dur_ms)` adds what a long step holds. Markers are numbered i * `stride` (Keras
    numbers them by steps_per_execution) and named `marker`, formatted with the number."""
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main = host.line("python3", line_id=1)
    comp = host.line("tf_Compute/11", line_id=11)
    t0 = 0
    for i, dur in enumerate(durations_ms):
        main.event(marker.format(i=i), t0, int(dur * MS) - 1000, step_num=i * stride, _r=1)
        main.event("EagerLocalExecute: __inference_train_step_42", t0 + MS // 2,
                   int(compute_ms * MS))
        comp.event("dense/MatMul:MatMul", t0 + MS // 2, int(compute_ms * MS) - 1000)
        if stall and dur > 15:
            stall(main, comp, t0, i, dur)
        t0 += int(dur * MS)
    return b.write(tmp)


def _every(k: int, long_ms: float, steps: int = 30, short_ms: float = 10.0) -> list[float]:
    return [long_ms if i % k == k - 1 else short_ms for i in range(steps)]


def test_periodic_checkpoints_are_step_stalls(tmp_path):
    def save(main, comp, t0, i, dur):
        main.event("EagerLocalExecute: SaveV2", t0 + 9 * MS, 60 * MS)
        main.event("EagerLocalExecute: MergeV2Checkpoints", t0 + 70 * MS, 28 * MS)
    f = by_id(analyze(_uneven(tmp_path, _every(5, 100.0), save)))["step_stalls"]
    # Steps 4, 9, ..., 24 (29 is the window's last step, not judged), 10x the median.
    assert f.numbers["stalled_steps"] == [4, 9, 14, 19, 24] and f.numbers["period_steps"] == 5
    assert f.numbers["cause"] == "checkpoint" and f.severity == "high"
    # Per 5-step cycle: 90 ms of excess over 4 x 10 + 100 ms.
    assert f.step_fraction == pytest.approx(90 / 140, rel=0.01)
    assert f.speedup == pytest.approx(140 / 50, rel=0.01)
    assert [e["name"] for e in f.top_events] == ["EagerLocalExecute: SaveV2",
                                                 "EagerLocalExecute: MergeV2Checkpoints"]
    assert any("checkpoint events: 440.0 ms more in the 5 stalled steps (88.0 ms each"
               in e for e in f.evidence), f.evidence
    assert "async" in f.remedy and len(f.time_ranges_ms) == 5


def test_eager_histograms_at_stalls_are_summary_writes(tmp_path):
    """Keras' TensorBoard callback writes histograms eagerly at an epoch's end: the bucketing ops
    run one by one on the Python thread, named only `EagerLocalExecute: <op>` (Sum, OneHot), and
    only the WriteSummary after them says whose they are. Without a write they are work only
    those steps do."""
    def histogram(write):
        def add(main, comp, t0, i, dur):
            for at, op, ms in ((10, "Min", 2), (13, "OneHot", 20), (34, "Sum", 60)):
                for name in ("TFE_Py_FastPathExecute_C", "EagerExecute",
                             f"EagerLocalExecute: {op}", "EagerKernelExecute"):
                    main.event(name, t0 + at * MS, ms * MS)
            if write:
                main.event("EagerLocalExecute: WriteSummary", t0 + 95 * MS, MS // 5)
        return add
    f = by_id(analyze(_uneven(tmp_path / "w", _every(5, 110.0), histogram(True))))["step_stalls"]
    assert f.numbers["cause"] == "summary" and "histogram" in f.remedy
    assert [e["name"] for e in f.top_events][:2] == ["EagerLocalExecute: Sum",
                                                     "EagerLocalExecute: OneHot"]
    bare = by_id(analyze(_uneven(tmp_path / "b", _every(5, 110.0), histogram(False))))
    assert bare["step_stalls"].numbers["cause"] == "extra_work"


def test_untraced_time_in_some_steps_is_python_work(tmp_path):
    """Garbage collection leaves no event: the long steps hold only untraced time."""
    f = by_id(analyze(_uneven(tmp_path, _every(6, 70.0))))["step_stalls"]
    assert f.numbers["cause"] == "python_other" and f.severity == "high"
    assert f.numbers["stalled_steps"] == [5, 11, 17, 23] and f.top_events == []
    assert "gc.freeze()" in f.remedy


def test_a_stray_small_stall_does_not_hide_a_cycle(tmp_path):
    """Garbage collections of 500 ms every 5th step, and one step of 23 ms from noise (a CI
    run's gc.collect() job): the cycle is the major stalls', and its per-cycle saving counts
    them alone."""
    durations = _every(5, 500.0)
    durations[7] = 23.0
    f = by_id(analyze(_uneven(tmp_path, durations)))["step_stalls"]
    assert f.numbers["stalled_steps"] == [4, 7, 9, 14, 19, 24]
    assert f.numbers["period_steps"] == 5 and f.numbers["cause"] == "python_other"
    # Per 5-step cycle: 490 ms of excess over 4 x 10 + 500 ms.
    assert f.speedup == pytest.approx(540 / 50, rel=0.01)


def test_steps_that_run_longer_with_nothing_new_stay_low(tmp_path):
    def slower(main, comp, t0, i, dur):
        comp.event("dense/MatMul:MatMul", t0 + 9 * MS, int((dur - 10) * MS))
    f = by_id(analyze(_uneven(tmp_path, [10.0, 10, 35, 10, 10, 10, 32, 10, 10, 10, 10, 10],
                              slower)))["step_stalls"]
    assert f.numbers["cause"] is None and f.numbers["period_steps"] is None
    assert f.severity == "low" and f.speedup > 1.08  # worth it, but nothing to change is known
    assert "trace does not say why" in " ".join(f.evidence)


def test_an_op_of_every_step_stretched_is_not_new_work(tmp_path):
    """A lookup every step of 0.2 ms that a hiccup stretched to 2.8 ms in two steps (a plain loop
    in a CI run): the same work running longer, not work only those steps do."""
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main = host.line("python3", line_id=1)
    comp = host.line("tf_Compute/11", line_id=11)
    t0 = 0
    for i in range(30):
        stretched = i in (2, 11)
        dur = 9.5 if stretched else 4.5
        main.event("train", t0, int(dur * MS) - 1000, step_num=i, _r=1)
        comp.event("dense/MatMul:MatMul", t0 + MS // 2, 3 * MS)
        comp.event("embedding_lookup:ResourceGather", t0 + int(3.6 * MS),
                   int((2.8 if stretched else 0.2) * MS))
        t0 += int(dur * MS)
    f = by_id(analyze(b.write(tmp_path)))["step_stalls"]
    assert f.numbers["stalled_steps"] == [2, 11]
    assert f.numbers["cause"] is None and f.severity == "low"


def test_work_only_some_steps_do_is_named(tmp_path):
    def export(main, comp, t0, i, dur):
        comp.event("ExportMetrics:PyFunc", t0 + 9 * MS, 50 * MS)
    f = by_id(analyze(_uneven(tmp_path, _every(4, 60.0, steps=20), export)))["step_stalls"]
    assert f.numbers["cause"] == "extra_work" and f.severity == "high"
    assert f.top_events[0]["name"] == "ExportMetrics:PyFunc"


def test_input_bursts_name_file_opens_and_defer_to_the_input_finding(tmp_path):
    """Stalls waiting on a reader that opens its next file: io_stall owns the wait."""
    def next_file(main, comp, t0, i, dur):
        main.event("IteratorGetNextOp::DoCompute", t0 + 9 * MS, 70 * MS)
        main.event(PIPE.split("::BatchV2")[0], t0 + 9 * MS, 70 * MS)
        comp.event(f"{PIPE}[{i}]::FlatMap::TFRecord", t0 + 9 * MS, 69 * MS)
        comp.event("TFRecordDatasetOp::Iterator::SetupStreamsLocked", t0 + 9 * MS, MS,
                   filename=f"/data/part-{i:05d}")
    report = analyze(_uneven(tmp_path, _every(5, 80.0), next_file))
    found = by_id(report)
    f = found["step_stalls"]
    assert f.numbers["cause"] == "input_wait" and f.numbers["period_steps"] == 5
    assert any("opened 1 file(s) per stalled step, 0 per typical step" in e for e in f.evidence)
    # The wait is io_stall's to estimate: shown for its pattern, not counted twice.
    assert "io_stall" in found and f.severity == "low" and f.speedup == 1.0


@pytest.mark.parametrize("durations", [
    [10, 12, 8, 14, 9, 11, 16, 10, 13, 9, 10, 12],  # jitter within 1.6x
    [60, 10, 10, 10, 10, 10, 10, 10, 10, 45],  # only the window's first and last steps
    [10] * 30 + [21] + [10] * 30,  # one stall at 2.1x: 2% of the window
])
def test_even_steps_and_window_edges_are_not_stalls(tmp_path, durations):
    report = analyze(_uneven(tmp_path, [float(d) for d in durations], compute_ms=6.0))
    assert report.steps_found and "step_stalls" not in by_id(report)


def test_a_lone_stall_ranks_only_when_its_events_name_it(tmp_path):
    """One step of 40 ms among 10 ms ones: untraced time is what an OS hiccup leaves too (low);
    a checkpoint's events, or work no other step has, say what it is (ranked on its gain). Two
    untraced stalls rank."""
    durations = [10.0] * 8 + [40.0] + [10.0] * 8

    def save(main, comp, t0, i, dur):
        main.event("EagerLocalExecute: SaveV2", t0 + 9 * MS, 28 * MS)

    def export(main, comp, t0, i, dur):
        comp.event("ExportMetrics:PyFunc", t0 + 9 * MS, 28 * MS)
    f = by_id(analyze(_uneven(tmp_path / "gap", durations)))["step_stalls"]
    assert f.numbers["cause"] == "python_other" and f.severity == "low", f
    assert f.speedup == pytest.approx(200 / 170, rel=0.01)  # still the window's share
    assert any("profile a longer window" in e for e in f.evidence), f.evidence
    for name, stall, cause in (("ckpt", save, "checkpoint"), ("extra", export, "extra_work")):
        f = by_id(analyze(_uneven(tmp_path / name, durations, stall)))["step_stalls"]
        assert f.numbers["cause"] == cause and f.severity == "medium", f
        assert not any("longer window" in e for e in f.evidence)
    two = durations[:3] + [40.0] + durations[4:]
    f = by_id(analyze(_uneven(tmp_path / "two", two)))["step_stalls"]
    assert f.numbers["cause"] == "python_other" and f.severity == "high"


def test_too_few_steps_to_judge(tmp_path):
    assert "step_stalls" not in by_id(analyze(_uneven(tmp_path, [10.0, 10, 50, 10])))


def test_stalls_are_not_per_call_overhead(tmp_path):
    """A fixed cost per call shows in every step; untraced stalls in a few steps are not it."""
    even = by_id(analyze(_uneven(tmp_path / "even", [10.0] * 30)))
    assert even["per_step_overhead"].numbers["overhead_fraction"] == pytest.approx(0.2, abs=0.01)
    stalled = by_id(analyze(_uneven(tmp_path / "stalls", _every(5, 100.0))))
    # 2 ms per call over 29 calls (the last step, a stall at the window's edge, is left out),
    # in 740 ms of steps: below the finding's 10%.
    assert "per_step_overhead" not in stalled and "step_stalls" in stalled


def test_per_call_overhead_is_at_most_what_the_steps_leave_uncovered(tmp_path):
    """Most steps long and uncovered: the median's uncovered time is not paid by the short ones."""
    f = by_id(analyze(_uneven(tmp_path, [10.0, 10, 10, 30, 30, 30, 30, 10, 30, 30, 10])))
    share = f["per_step_overhead"].numbers["overhead_fraction"]
    # 2 ms of each 10 ms step and 22 ms of each 30 ms step is uncovered: 162 of 240 ms.
    assert share <= 162 / 240 + 0.01


@pytest.mark.parametrize(("state", "label", "remedy"), [
    ("R", "untraced Python work on the CPU", "gc.freeze()"),  # a garbage collection
    ("S", "an untraced wait", "time.sleep"),  # a sleep, a lock, a remote call
    ("D", "untraced file I/O", "files from Python"),
])
def test_the_sampler_says_what_untraced_stalls_did(tmp_path, state, label, remedy):
    durations = _every(5, 100.0)
    run = _uneven(tmp_path, durations)
    starts = [sum(durations[:i]) for i in range(len(durations))]
    rows = []
    for t in range(0, int(sum(durations)), 2):  # 500 Hz, the main thread (tid == pid == 100)
        i = max(k for k, s in enumerate(starts) if s <= t)
        stalled = durations[i] > 15 and t - starts[i] >= 10
        rows.append({"t_ms": float(t), "tid": 100, "name": "python", "user_s": 0.0,
                     "system_s": 0.0, "state": state if stalled else ("R" if t % 4 else "S")})
    write_sampler(run, pd.DataFrame(rows))
    f = by_id(analyze(run))["step_stalls"]
    assert f.numbers["cause"] == "python_other" and label in f.title and remedy in f.remedy
    assert f.numbers["main_thread_states"][state] >= 0.85
    # Typical steps: the thread runs half the time.
    assert any("(typical steps: 50%)" in e for e in f.evidence), f.evidence


def _stalls_the_sampler_explains(tmp_path, others: float, throttled: bool | None,
                                 busy_threads: int = 0, untraced: bool = False,
                                 scanned: list | None = None, reaped: bool = False,
                                 live: float | None = None,
                                 live_elsewhere: float | None = None):
    """Every 5th step of 30 takes 100 ms instead of 10: its matmul runs on (the same events, only
    longer). The sampler (every 5 ms, 2 CPUs): the process at 1 core, nothing else running, the
    quota (1 core, unless `throttled` is None) never out; in the stalls' last 90 ms the process
    gets 0.5 core while other processes take `others` cores, and the quota runs out in every
    period that starts there when `throttled`. `busy_threads` more threads are always runnable.
    With `untraced` the long steps' time is not covered by any event (no longer matmul).
    `scanned`: the sampler's scans of the other processes (write_sampler's `others`); with
    `reaped` the others' cores in the stalls are the job's children that exited (its
    `children_s`); with `live`, its live children, read at every sweep, used that many cores in
    the stalls (`live_children_s`), and elsewhere `live_elsewhere`, by default what makes their
    mean the scans' (`scanned` processes whose parent is the job, pid 100)."""
    durations = _every(5, 100.0)

    def longer(main, comp, t0, i, dur):
        comp.event("dense/MatMul:MatMul", t0 + 9 * MS, int((dur - 10) * MS))
    run = _uneven(tmp_path, durations, None if untraced else longer)
    starts = np.cumsum([0.0] + durations[:-1])
    t = np.arange(0.0, sum(durations), 5.0)
    step = np.searchsorted(starts, t, side="right") - 1
    stall = (np.asarray(durations)[step] > 15) & (t - starts[step] >= 10)
    rows = pd.concat([pd.DataFrame({"t_ms": t, "tid": tid, "name": "python", "state": "R",
                                    "user_s": 0.0, "system_s": 0.0})
                      for tid in [100, *range(200, 200 + busy_threads)]], ignore_index=True)
    process = np.where(stall, 50.0, 100.0)
    machine = (process + 100 * np.where(stall, others, 0.0)) / 2
    columns = {"cpu_percent": process, "system_cpu_percent": np.minimum(machine, 100.0)}
    if reaped:
        # Each sweep's interval (5 ms) at `others` cores in the stalls.
        columns["children_s"] = np.cumsum(np.where(stall, others * 0.005, 0.0))
    if live is not None:
        own = sum(cores for _, parent, _, cores in scanned or () if parent == 100)
        elsewhere = ((own * len(t) - live * stall.sum()) / (~stall).sum()
                     if live_elsewhere is None else live_elsewhere)
        columns["live_children_s"] = np.cumsum(np.where(stall, live, elsewhere) * 0.005)
    if throttled is not None:
        periods = (t // 100).astype("int64")
        first = np.diff(periods, prepend=-1) > 0  # the sweep that sees a period begin
        columns["cpu_periods"] = periods
        columns["cpu_throttled_periods"] = np.cumsum(first & stall & throttled).astype("int64")
    write_sampler(run, rows, n_cpus=2, cpu_quota=1.0 if throttled is not None else None,
                  process_columns=columns, others=scanned)
    return by_id(analyze(run))["step_stalls"]


def test_stalls_while_other_processes_took_the_cores_are_contention(tmp_path):
    f = _stalls_the_sampler_explains(tmp_path / "busy", others=1.5, throttled=None)
    assert f.numbers["cause"] == "contention" and "other processes took the cores" in f.title
    assert f.severity == "high" and "a node or cpuset of its own" in f.remedy
    # 1.3 more cores: the stalls' first 10 ms, before the others start, count too.
    assert any("other processes took 1.3 more cores then" in e for e in f.evidence), f.evidence
    # Untraced time in the stalls: the Python thread waited for a core, not a collection.
    f = _stalls_the_sampler_explains(tmp_path / "gap", others=1.5, throttled=None,
                                     untraced=True)
    assert f.numbers["cause"] == "contention", f.evidence
    f = _stalls_the_sampler_explains(tmp_path / "gap_alone", others=0.0, throttled=None,
                                     untraced=True)
    assert f.numbers["cause"] == "python_other", f.evidence
    # The job's own data loader process beside it, and no other process scanned using CPU:
    # the cores the counters give to others in the stalls are its workers'.
    f = _stalls_the_sampler_explains(tmp_path / "own", others=1.5, throttled=None,
                                     scanned=[(400, 100, "python3 worker", 0.6)])
    assert f.numbers["cause"] != "contention", f.evidence
    f = _stalls_the_sampler_explains(tmp_path / "both", others=1.5, throttled=None,
                                     scanned=[(400, 100, "python3 worker", 0.3),
                                              (500, 1, "backup", 0.5)])
    assert f.numbers["cause"] == "contention", f.evidence
    # Children that exited did that work (the job's cutime grew by it): its own.
    f = _stalls_the_sampler_explains(tmp_path / "reaped", others=1.5, throttled=None,
                                     reaped=True)
    assert f.numbers["cause"] != "contention", f.evidence
    # The sampler read the job's live children at every sweep (since 2026-11-30): where they
    # did the stalls' work, it is theirs; where they did not, another process's, though the
    # scans saw none (another container's), which the scans alone could not tell.
    worker = [(400, 100, "python3 worker", 0.6)]
    f = _stalls_the_sampler_explains(tmp_path / "live", others=1.5, throttled=None,
                                     scanned=worker, live=1.5)
    assert f.numbers["cause"] != "contention", f.evidence
    f = _stalls_the_sampler_explains(tmp_path / "unseen", others=1.5, throttled=None,
                                     scanned=worker, live=0.0)
    assert f.numbers["cause"] == "contention", f.evidence
    # Workers the sweeps never read (started anew and found by the last scan only): their work
    # cannot be placed, and the scans must show other processes again.
    f = _stalls_the_sampler_explains(tmp_path / "unread", others=1.5, throttled=None,
                                     scanned=worker, live=0.0, live_elsewhere=0.0)
    assert f.numbers["cause"] != "contention", f.evidence
    # The same stalls with the other core free: nothing took it, the trace cannot say why.
    f = _stalls_the_sampler_explains(tmp_path / "idle", others=0.0, throttled=None)
    assert f.numbers["cause"] is None and f.severity == "low"


def test_cpu_contention_reads_no_more_than_the_whole_window(tmp_path):
    """Other processes at 0.9 core in the typical steps' sampler intervals only, none in the
    stalls (64% of the window's time): over the whole window 0.26 core. cpu_contention takes no
    more than the window's count (over scattered intervals the kernel's ticks are noise, which
    back-to-back intervals add up)."""
    durations = _every(5, 100.0)
    run = _uneven(tmp_path, durations, None)
    starts = np.cumsum([0.0] + durations[:-1])
    t = np.arange(0.0, sum(durations), 5.0)
    step = np.searchsorted(starts, t, side="right") - 1
    typical = np.asarray(durations)[step] < 15
    rows = pd.concat([pd.DataFrame({"t_ms": t, "tid": tid, "name": "python", "state": "R",
                                    "user_s": 0.0, "system_s": 0.0}) for tid in (100, 200)],
                     ignore_index=True)
    machine = np.where(typical, 190.0, 110.0) / 2  # the process's core, others 0.9 or 0.1
    write_sampler(run, rows, n_cpus=2, process_columns={
        "cpu_percent": np.full(len(t), 100.0), "system_cpu_percent": machine}, others=[])
    assert "cpu_contention" not in by_id(analyze(run))
    # The same 0.9 core all along: found.
    write_sampler(run, rows, n_cpus=2, process_columns={
        "cpu_percent": np.full(len(t), 100.0), "system_cpu_percent": np.full(len(t), 95.0)},
        others=[])
    assert "cpu_contention" in by_id(analyze(run))


def test_other_processes_in_the_stalls_alone_are_no_cpu_contention(tmp_path):
    """Other processes took the cores in the stalls only (64% of the window's time), while two
    more threads stayed runnable throughout: step_stalls' finding; cpu_contention reads the
    typical steps, which had the machine to themselves."""
    f = _stalls_the_sampler_explains(tmp_path, others=1.5, throttled=None, busy_threads=2)
    assert f.numbers["cause"] == "contention"
    assert "cpu_contention" not in by_id(analyze(tmp_path))


def test_stalls_while_the_quota_ran_out_are_throttling(tmp_path):
    f = _stalls_the_sampler_explains(tmp_path / "quota", others=0.0, throttled=True)
    assert f.numbers["cause"] == "throttled" and "the CPU quota ran out" in f.title
    assert "raise the limit" in f.remedy
    # 80%: the period that begins as the last stall ends (700 ms) falls in its last sampler
    # interval, while the built counters throttle only periods begun inside a stall.
    assert any("ran out in 80% of its periods then, against 0%" in e for e in f.evidence), (
        f.evidence)
    assert not any("cpu_throttling reports" in e for e in f.evidence)
    # Two more threads always runnable against the 1-core quota: cpu_throttling reports it over
    # the whole window, and the stalls say their estimates overlap.
    f = _stalls_the_sampler_explains(tmp_path / "both", others=0.0, throttled=True,
                                     busy_threads=2)
    assert f.numbers["cause"] == "throttled"
    assert any("cpu_throttling reports the quota" in e for e in f.evidence), f.evidence
    # A quota that never ran out.
    f = _stalls_the_sampler_explains(tmp_path / "never", others=0.0, throttled=False)
    assert f.numbers["cause"] is None


@pytest.mark.parametrize(("every", "retracing"), [(5, False), (3, True)])
def test_tracing_stalls_defer_to_function_retracing(tmp_path, every, retracing):
    """A tf.function traced again every few steps: in a fifth of the steps it is a stall with a
    remedy; in a third, function_retracing reports it and the stall only shows the pattern."""
    def retrace(main, comp, t0, i, dur):
        main.event("tf.function-graph_building", t0 + 9 * MS, 40 * MS)
        main.event(f"EagerLocalExecute: __inference_train_step_{100 + i}", t0 + 50 * MS,
                   25 * MS)
        main.event("EagerKernelExecute", t0 + 70 * MS, 5 * MS)
    found = by_id(analyze(_uneven(tmp_path, _every(every, 80.0), retrace)))
    f = found["step_stalls"]
    assert f.numbers["cause"] == "graph_building" and f.numbers["period_steps"] == every
    assert ("function_retracing" in found) == retracing
    if retracing:
        assert f.severity == "low" and f.speedup == 1.0
    else:
        assert f.severity == "high" and "signature" in f.remedy


def test_stall_periods_count_steps_not_marker_numbers(tmp_path):
    """Keras numbers its markers 0, 8, 16... at steps_per_execution=8: every 5th step is still a
    5-step cycle, and `train 3`-style marker names (xprof's JSON export) are markers, not work."""
    def save(main, comp, t0, i, dur):
        main.event("EagerLocalExecute: SaveV2", t0 + 9 * MS, 88 * MS)
    plain = by_id(analyze(_uneven(tmp_path / "a", _every(5, 100.0), save)))["step_stalls"]
    strided = by_id(analyze(_uneven(tmp_path / "b", _every(5, 100.0), save, stride=8,
                                    marker="train {i}")))["step_stalls"]
    assert plain.numbers["period_steps"] == strided.numbers["period_steps"] == 5
    assert strided.speedup == pytest.approx(plain.speedup, rel=0.001)
    assert strided.numbers["stalled_steps"] == [32, 72, 112, 152, 192]
    assert strided.numbers["cause"] == "checkpoint"

    def slower(main, comp, t0, i, dur):
        comp.event("dense/MatMul:MatMul", t0 + 9 * MS, int((dur - 10) * MS))
    f = by_id(analyze(_uneven(tmp_path / "c", [10.0, 10, 35, 10, 10, 10, 32, 10, 10, 10, 10, 10],
                              slower, marker="train {i}")))["step_stalls"]
    assert f.numbers["cause"] is None and f.severity == "low"


@pytest.mark.parametrize("durations", [
    [10.0] * 5 + [30.0] * 3 + [10.0] * 8,  # a burst: not a 1-step cycle
    [10.0, 10, 30, 10, 30, 10, 30] + [10.0] * 23,  # stalls that stop: not a window-wide cycle
])
def test_stalls_that_do_not_repeat_through_the_window_take_its_share(tmp_path, durations):
    f = by_id(analyze(_uneven(tmp_path, durations)))["step_stalls"]
    excess = sum(d - 10 for d in durations if d >= 20)
    assert f.numbers["period_steps"] is None
    assert f.step_fraction == pytest.approx(excess / sum(durations), rel=0.02)


def test_a_detector_another_one_defers_to_runs_once(tmp_path, monkeypatch):
    """step_stalls asks io_stall whether it owns an input wait: the report's own result."""
    from analyzers.detectors import io_stall

    calls = []
    detect = io_stall.detect
    monkeypatch.setattr(io_stall, "detect", lambda ctx: calls.append(1) or detect(ctx))

    def next_file(main, comp, t0, i, dur):
        main.event("IteratorGetNextOp::DoCompute", t0 + 9 * MS, 70 * MS)
        main.event(PIPE.split("::BatchV2")[0], t0 + 9 * MS, 70 * MS)
        comp.event(f"{PIPE}[{i}]::FlatMap::TFRecord", t0 + 9 * MS, 69 * MS)
    found = by_id(analyze(_uneven(tmp_path, _every(5, 80.0), next_file)))
    assert found["step_stalls"].speedup == 1.0 and "io_stall" in found
    assert len(calls) == 1
