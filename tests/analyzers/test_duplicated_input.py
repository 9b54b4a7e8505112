"""`duplicated_input` on code-built traces: pipelines (or workers) that read the same files, and
the single pipelines and sharded workers that reopen or share nothing."""

from __future__ import annotations

import pytest

from analyzers.report import analyze
from tests.analyzers.traces import MS, PIPE, host_trace, sweeps, write_sampler
from tests.analyzers.xspace_builder import XSpaceBuilder

DATA_SHARDED = "Iterator::Root::Prefetch::Shard::Rebatch::Prefetch::BatchV2::ParallelInterleaveV4"

ID = "duplicated_input"
OPEN = "TFRecordDatasetOp::Iterator::SetupStreamsLocked"


def _opens(files_of_step, copies: int = 1, apart_ms: float = 2.0, roots: int = 1,
           roots_line: str | None = None):
    """Per step i, copy c of `copies` pipelines opens the files `files_of_step(i, c)` names, the
    copies `apart_ms` apart, each on its own reader thread; the training thread (or the line
    `roots_line`) pulls `roots` batches (Iterator::Root calls)."""
    def add(b, host, main, comp, t0, i):
        puller = main if roots_line is None else host.line(roots_line, line_id=90)
        for c in range(copies):
            line = host.line(f"tf_data_iterator_resource/{60 + c}", line_id=60 + c)
            for k, name in enumerate(files_of_step(i, c)):
                start = t0 + 3 * MS + k * 10 * MS + int(c * apart_ms * MS)
                line.event(f"{PIPE}[{i}]::FlatMap[{k}]::TFRecord", start, 2 * MS)
                line.event(OPEN, start + 1000, 500, filename=name)
        for r in range(roots):
            puller.event("Iterator::Root", t0 + MS // 4 + r * 1000, 500)
    return add


def _shard(n: int) -> str:
    return f"/data/train/part-{n:05d}-of-00064.tfrecord"


def _finding(run):
    return {f.id: f for f in analyze(run).findings}.get(ID)


def test_two_pipelines_reading_the_same_files(tmp_path):
    """Each step pulls a batch from each of 2 pipelines with the same seed: every file opened
    twice, 2 ms apart; the steps wait 30 ms on producers that, alone, would need half the time."""
    _, run = host_trace(tmp_path, steps=8, wait_ms=30,
                        per_step=_opens(lambda i, c: [_shard(2 * i), _shard(2 * i + 1)], copies=2,
                                        roots=2))
    f = _finding(run)
    assert f is not None and f.numbers["copies"] == 2 and f.numbers["how"] == "pipelines"
    assert f.numbers["files_read_more_than_once"] == 16 == f.numbers["files_opened"]
    assert f.numbers["batches_per_step"] == 2
    assert f.numbers["reopen_gap_ms"] == pytest.approx(2.0)
    # After the fix a step is the model's 70 ms (one pipeline's 50 ms of waiting hides in it).
    assert f.speedup == pytest.approx(100 / 70, rel=0.01)
    assert f.severity == "high"
    assert "broadcast" in f.remedy
    assert f.config_changes == {}  # not a reference-trainer run: no flags to give
    assert any("in /data/train: part-00000-of-00064.tfrecord" in e for e in f.evidence)


def test_one_pipeline_reopening_its_files_each_epoch(tmp_path):
    """One pipeline over 4 files, a file per step, pulled twice a step (steps_per_execution 2,
    gradient accumulation): over 12 steps each file is opened 3 times, an epoch (4 steps) apart.
    Repeats are not copies."""
    _, run = host_trace(tmp_path, steps=12, wait_ms=30,
                        per_step=_opens(lambda i, c: [_shard(i % 4)], roots=2))
    assert _finding(run) is None


def test_a_reshuffled_epoch_boundary_is_not_a_copy(tmp_path):
    """With the file list reshuffled each epoch, the file read last in one epoch can come first
    in the next: one file reopened soon after, out of 8."""
    order = [0, 1, 2, 3, 4, 5, 6, 7, 7, 3, 5, 0, 1, 6, 2, 4]
    _, run = host_trace(tmp_path, steps=16, wait_ms=30,
                        per_step=_opens(lambda i, c: [_shard(order[i])], roots=2))
    assert _finding(run) is None


def test_copies_that_cost_nothing_are_low(tmp_path):
    """The same duplication with no wait and no sampler data to show contention: named, with no
    gain to claim."""
    _, run = host_trace(tmp_path, steps=8,
                        per_step=_opens(lambda i, c: [_shard(2 * i), _shard(2 * i + 1)], copies=2,
                                        roots=2))
    f = _finding(run)
    assert f is not None and f.severity == "low" and f.speedup == pytest.approx(1.0)


@pytest.mark.parametrize("sharded", [False, True])
def test_workers_reading_the_same_files(tmp_path, sharded):
    """Two workers profiled into one run: unsharded, both open every file; sharded by file, each
    opens its own."""
    for w in range(2):
        def files(i, c, w=w):
            return [_shard(2 * i + w)] if sharded else [_shard(i)]
        host_trace(tmp_path, steps=8, wait_ms=30, per_step=_opens(files),
                   host_name=f"worker_{w}")
    f = _finding(tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00")
    if sharded:
        assert f is None
    else:
        assert f is not None and f.numbers["how"] == "hosts" and f.numbers["copies"] == 2
        assert f.numbers["files_read_more_than_once"] == 8
        assert "worker" in f.title and f.severity == "high"


def test_input_preprocessing_defers_to_the_copies_unless_it_has_a_cause(tmp_path):
    """Producers busy with parsing (two 10 ms parse ops a step against a 30 ms wait: CPU-bound)
    whose pipelines read the same files: the copies are the cause. With GZIP files the
    decompression is a cause of its own, and both findings stand."""
    for suffix, both in (("", False), (".gz", True)):
        def files(i, c, suffix=suffix):
            return [_shard(2 * i) + suffix, _shard(2 * i + 1) + suffix]
        _, run = host_trace(tmp_path / (suffix or "plain"), steps=8, wait_ms=30, parse_ops=2,
                            parse_op_ms=10,
                            per_step=_opens(files, copies=2, roots=2))
        found = {f.id: f for f in analyze(run).findings}
        assert found[ID].severity == "high"
        assert ("input_preprocessing" in found) is both


def test_one_pipeline_with_more_interleave_slots_than_files(tmp_path):
    """A repeated file list read by an interleave with more slots than files has two epochs of
    each file open side by side: every file opened twice at once, yet the step pulls one batch
    from one pipeline (a Keras job over 8 files with cycle_length 16)."""
    _, run = host_trace(tmp_path, steps=8, wait_ms=30,
                        per_step=_opens(lambda i, c: [_shard(2 * i), _shard(2 * i + 1)], copies=2))
    assert _finding(run) is None


def test_two_pipelines_over_different_files(tmp_path):
    """Two batches a step from two pipelines that read different data (training examples and a
    side input): each file opened once."""
    _, run = host_trace(tmp_path, steps=8, wait_ms=30,
                        per_step=_opens(lambda i, c: [_shard(16 * c + 2 * i),
                                                      _shard(16 * c + 2 * i + 1)],
                                        copies=2, roots=2))
    assert _finding(run) is None


def test_batches_pulled_off_the_training_thread_are_no_witness(tmp_path):
    """A multi-device iterator's thread pulls from the root once per device; the training thread
    pulls none itself. With an interleave that reads two epochs of each file side by side, the
    opens alone look like copies."""
    _, run = host_trace(tmp_path, steps=8, wait_ms=30,
                        per_step=_opens(lambda i, c: [_shard(2 * i), _shard(2 * i + 1)], copies=2,
                                        roots=2, roots_line="tf_data_multi_device_iterator/90"))
    assert _finding(run) is None


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_contention_the_copies_cause(tmp_path, suffix):
    """No wait, but 3 producer threads runnable beside the model's one on 2 cores: its ops took
    2x as long (the sampler). With no cause of the pipeline's own, one pipeline's producers fit
    beside the model and the fix takes all of it: 2x. With GZIP files, decompression stays with
    the one pipeline left: half the 3 threads beyond the model's go, 1.25x of slowdown remains."""
    def files(i, c):
        return [_shard(2 * i) + suffix, _shard(2 * i + 1) + suffix]
    _, run = host_trace(tmp_path, per_step=_opens(files, copies=2, roots=2))
    assert _finding(run).severity == "low"  # no sampler: no contention to see
    write_sampler(run, sweeps(100, 0, input_running=3), n_cpus=2)
    f = _finding(run)
    assert f.numbers["contention_slowdown"] == pytest.approx(2.0, rel=0.03)
    if suffix:
        assert f.numbers["slowdown_after"] == pytest.approx(1.25, rel=0.03)
        assert f.speedup == pytest.approx(2.0 / 1.25, rel=0.03)
    else:
        assert f.numbers["slowdown_after"] == 1.0
        assert f.speedup == pytest.approx(2.0, rel=0.03)
    assert f.severity == "high"


def _shard_stage(name: str, num_shards: int):
    """A Shard stage's call per step, with its `num_shards` stat, on a tf.data thread."""
    def add(b, host, main, comp, t0, i):
        host.line("tf_data_multi_device_iterator_resource/70", line_id=70).event(
            name, t0 + MS // 2, MS, num_shards=num_shards, index=1)
    return add


@pytest.mark.parametrize(("pipeline", "stage", "num_shards", "found"), [
    # tf.distribute's AutoShardPolicy.DATA: the shard above everything, readers included.
    (DATA_SHARDED, "Iterator::Root::Prefetch::Shard", 2, True),
    # The file list sharded (AutoShardPolicy.FILE written by hand): below the interleave.
    (PIPE, f"{PIPE}::Shard::TensorSlice", 2, False),
    (PIPE, f"{PIPE}::Shard", 2, False),
    # One shard of one: nothing dropped.
    (DATA_SHARDED, "Iterator::Root::Prefetch::Shard", 1, False),
])
def test_records_sharded_after_reading(tmp_path, pipeline, stage, num_shards, found):
    """One worker's trace is enough: a Shard stage above the record readers keeps 1 in
    num_shards of what every worker reads. A 30 ms wait on producers with half the work left is
    the model's 70 ms after the fix."""
    _, run = host_trace(tmp_path, steps=8, wait_ms=30, pipeline=pipeline,
                        per_step=_shard_stage(stage, num_shards))
    f = _finding(run)
    if not found:
        assert f is None
        return
    assert f.numbers["how"] == "shard" and f.numbers["copies"] == 2
    assert f.speedup == pytest.approx(100 / 70, rel=0.01) and f.severity == "high"
    assert "AutoShardPolicy.FILE" in f.remedy and "keeps 1 in 2" in f.title
    assert "Shard::Rebatch::Prefetch::BatchV2::ParallelInterleaveV4::FlatMap::TFRecord" in (
        f.evidence[0])


def test_input_stalls_of_copied_pipelines_are_the_copies_to_count(tmp_path):
    """Every 5th step waits 70 ms on producers busy parsing (CPU-bound, no cause of their own),
    two pipelines reading the same files: input_preprocessing leaves the wait to
    duplicated_input, and step_stalls, which shows the stalls, counts none of it again."""
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main = host.line("python3", line_id=1)
    comp = host.line("tf_Compute/11", line_id=11)
    parse = host.line("tf_data_iterator_resource/40", line_id=40)
    readers = [host.line(f"tf_data_iterator_resource/{60 + c}", line_id=60 + c) for c in (0, 1)]
    # Four interleave inputs open all the time: a parallel pipeline, no cause of its own.
    slots = [host.line(f"tf_data_private_threadpool/{20 + r}", line_id=20 + r) for r in range(4)]
    t0 = 0
    for i in range(30):
        stalled = i % 5 == 4
        dur = 80 if stalled else 10
        main.event("train", t0, dur * MS - 1000, step_num=i, _r=1)
        for r in range(2):
            main.event("Iterator::Root", t0 + MS // 4 + r * 1000, 500)
        for r, line in enumerate(slots):
            line.event(f"{PIPE}[{4 * i + r}]::FlatMap", t0, dur * MS - 2000)
        for c, line in enumerate(readers):
            line.event(f"{PIPE}[{i}]::FlatMap[0]::TFRecord", t0 + MS + c * 2 * MS, MS)
            line.event(OPEN, t0 + MS + c * 2 * MS + 1000, 500, filename=_shard(i))
        if stalled:
            main.event("IteratorGetNextOp::DoCompute", t0 + MS, 70 * MS)
            main.event(PIPE.split("::BatchV2")[0], t0 + MS, 70 * MS)
            parse.event("ParseExample/ParseExampleV2:ParseExampleV2", t0 + MS, 65 * MS)
        c0 = t0 + (71 if stalled else 1) * MS
        comp.event("dense/MatMul:MatMul", c0, 8 * MS - 1000)
        t0 += dur * MS
    found = {f.id: f for f in analyze(b.write(tmp_path)).findings}
    assert found[ID].severity in ("medium", "high") and "input_preprocessing" not in found
    stalls = found["step_stalls"]
    assert stalls.numbers["cause"] == "input_wait" and stalls.severity == "low"
    assert stalls.speedup == 1.0
