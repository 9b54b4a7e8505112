"""Windows that span epochs: step numbers that start over, validation batches beside training
ones, and what runs at an epoch's end (docs/trace-signals.md, "Epochs and validation").

Traces are built like Keras fits on a CPU host: a tf.function call per batch on the Python
thread whose ops (forward, `gradient_tape/` backward, optimizer updates) run on a compute thread;
between epochs, evaluation calls of a function with forward ops only and a new input iterator
(`MakeIterator`, then the old iterator's teardown inside `TFE_DeleteTensorHandle`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzers.findings import Finding
from analyzers.report import analyze
from tests.analyzers.xspace_builder import XSpaceBuilder

MS = 1_000_000
TRAIN_FN = "EagerLocalExecute: __inference_multi_step_on_iterator_10"
EVAL_FN = "EagerLocalExecute: __inference_multi_step_on_iterator_20"
FORWARD = "sequential/dense/MatMul:MatMul"
BACKWARD = ("gradient_tape/sequential/dense/MatMul/MatMul:MatMul",
            "adam/AssignSubVariableOp:AssignSubVariableOp")
# An XLA-compiled function's kernels are named after HLO: nothing says backward or update.
XLA_FORWARD, XLA_BACKWARD = "MatMul.8", ("MatMul_1.4", "divide_subtract_fusion.3")


def fit(tmp: Path, *, epochs: int = 3, per_epoch: int = 12, step_ms: float = 10.0,
        markers: str | None = "Profiled batch", number_on: bool = False, stride: int = 1,
        evals: int = 0,
        eval_ms: float = 2.0, eval_marker: str | None = None, eval_trains: bool = False,
        new_iterator: bool = False, teardown_ms: float = 40.0, eval_fn: str = EVAL_FN,
        xla: bool = False, eval_op: str | None = None, tracing_ms: float = 0.0,
        distributed: bool = False, hiccup: int | None = None) -> Path:
    """A fit of `epochs` x `per_epoch` batches of `step_ms`. Markers named `markers` (None: no
    marker, steps come from the calls) numbered from 0 in each epoch, or on through the run
    (`number_on`), `stride` apart (Keras numbers by steps_per_execution). After each epoch but
    the last: `evals` evaluation calls of `eval_ms` (each in an `eval_marker` marker when given;
    with backward ops too when `eval_trains`), and with `new_iterator` a new iterator made and
    the old one torn down (`teardown_ms`). `xla`: kernels named as XLA names them; `eval_op`:
    what the evaluation calls run instead of the forward op; `tracing_ms` of graph building
    with the new iterator, made by tf.distribute's MultiDeviceIteratorInit when `distributed`;
    the batch numbered `hiccup` in the run lasts 2.5x as long, its ops too."""
    forward, backward = (XLA_FORWARD, XLA_BACKWARD) if xla else (FORWARD, BACKWARD)
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main = host.line("python3", line_id=1)
    comp = host.line("tf_Compute/11", line_id=11)
    t = 0
    for epoch in range(epochs):
        for i in range(per_epoch):
            num = (epoch * per_epoch + i if number_on else i) * stride
            if markers:
                main.event(markers, t, int(step_ms * MS) - 1000, step_num=num, _r=1)
            length = step_ms * (2.5 if epoch * per_epoch + i == hiccup else 1.0)
            compute = int((length - 1) * MS)
            main.event(TRAIN_FN, t + MS // 2, compute)
            third = compute // 3
            for k, op in enumerate((forward, *backward)):
                comp.event(op, t + MS // 2 + k * third, third - 1000)
            main.event("TFE_DeleteTensorHandle", t + MS // 2 + compute, 10_000)
            t += int(length * MS)
        if epoch == epochs - 1:
            break
        for j in range(evals):
            if eval_marker:
                main.event(eval_marker, t, int(eval_ms * MS) - 1000, step_num=j, _r=1)
            main.event(eval_fn, t + 1000, int(eval_ms * MS) - 2000)
            comp.event(eval_op or forward, t + 2000, int(eval_ms * MS) // 2)
            if eval_trains:
                for k, op in enumerate(backward):
                    comp.event(op, t + 2000 + int(eval_ms * MS) // 2 + k * 200_000, 100_000)
            t += int(eval_ms * MS)
        if new_iterator and distributed:
            main.event("EagerLocalExecute: MultiDeviceIteratorInit", t, 2 * MS)
            t += 2 * MS
        if tracing_ms:
            main.event("tf.function-graph_building", t, int(tracing_ms * MS))
            t += int(tracing_ms * MS)
        if new_iterator:
            main.event("EagerLocalExecute: MakeIterator", t, 3 * MS)
            main.event("TFE_DeleteTensorHandle", t + 3 * MS, int(teardown_ms * MS))
            t += int((3 + teardown_ms) * MS)
    return b.write(tmp)


def stalls(logdir: Path) -> Finding | None:
    return {f.id: f for f in analyze(logdir).findings}.get("step_stalls")


def test_step_numbers_that_start_over_begin_a_new_epoch(tmp_path):
    """Keras numbers its batches from 0 in each epoch: batch 3 of two epochs is two steps,
    numbered on (the 2nd epoch's batch 3 is step 15), and the step before each restart holds
    that epoch's end. Numbers that go on through the run are one epoch to the analyzer."""
    report = analyze(fit(tmp_path / "restart", evals=4))
    steps = report.ctx.steps
    assert report.ctx.n_steps == 36 and steps.table["step"].tolist() == list(range(36))
    assert steps.epoch_ends.tolist() == [11, 23] and steps.epoch_rows == 12
    on = analyze(fit(tmp_path / "on", evals=4, number_on=True)).ctx.steps
    assert on.table["step"].tolist() == list(range(36))
    assert on.epoch_ends.tolist() == [] and on.epoch_rows is None


def test_a_window_inside_two_epochs_counts_the_epoch_from_its_numbers(tmp_path):
    """One epoch's end in the window: the epoch is as long as the last number before the
    restart says (0-based), at the numbers' stride."""
    report = analyze(fit(tmp_path, epochs=2, evals=4))
    assert report.ctx.steps.epoch_rows == 12 and report.ctx.steps.epoch_ends.tolist() == [11]


def test_epochs_of_strided_numbers(tmp_path):
    """At steps_per_execution 8 Keras numbers its calls 0, 8, ..., 88 each epoch: 12 steps an
    epoch, and the second epoch's first call is step 96, as Keras' global count has it."""
    steps = analyze(fit(tmp_path, stride=8, evals=4)).ctx.steps
    assert steps.epoch_rows == 12 and steps.epoch_ends.tolist() == [11, 23]
    assert steps.table["step"].tolist() == list(range(0, 36 * 8, 8))


def test_validation_markers_are_not_steps(tmp_path):
    """Keras 2 marks validation batches `test` as it marks training ones `train`: 40 of them an
    epoch outnumber the 12 training batches, but only `train` windows hold a backward pass."""
    report = analyze(fit(tmp_path, markers="train", evals=40, eval_marker="test",
                         eval_fn="EagerLocalExecute: __inference_test_function_20"))
    assert report.ctx.steps.source == "markers:train" and report.ctx.n_steps == 36


def test_an_evaluation_function_named_like_the_training_one_is_not_the_step(tmp_path):
    """Keras 3 calls both multi_step_on_iterator: without markers, the function whose calls run
    a backward pass gives the steps, though the other is called and runs longer in all. When
    both train (a second training function, as a GAN has), the longer one still wins."""
    report = analyze(fit(tmp_path / "eval", markers=None, evals=40, new_iterator=True))
    assert report.ctx.steps.source == f"function:{TRAIN_FN}"
    # The first batch after the window's start is an edge; the calls chain into 36 windows.
    assert report.ctx.n_steps + len(report.ctx.steps.left_out) == 36
    both = analyze(fit(tmp_path / "both", markers=None, evals=100, eval_trains=True))
    assert both.ctx.steps.source == f"function:{EVAL_FN}"


def test_without_backward_names_the_function_with_more_ops_per_call_trains(tmp_path):
    """XLA names kernels after HLO (`MatMul.20`, `divide_subtract_fusion.3`): the training
    function is the one whose calls run 1.5x the others' ops or more (3 against 1 here), and
    the evaluation calls in the stalls are evaluation. Calls of the same weight say nothing:
    the longer function in all gives the steps, as before."""
    report = analyze(fit(tmp_path / "xla", markers=None, evals=40, new_iterator=True, xla=True))
    assert report.ctx.steps.source == f"function:{TRAIN_FN}"
    f = {f.id: f for f in report.findings}["step_stalls"]
    assert f.numbers["named_ms"]["evaluation"] == pytest.approx(2 * 40 * 1.998, rel=0.01)
    same = analyze(fit(tmp_path / "same", markers=None, evals=100, eval_trains=True, xla=True))
    assert same.ctx.steps.source == f"function:{EVAL_FN}"
    # In the stalls, a function as heavy per call as a training step is not evaluation.
    heavy = {f.id: f for f in analyze(fit(tmp_path / "heavy", evals=40, eval_trains=True,
                                          xla=True)).findings}["step_stalls"]
    assert heavy.numbers["cause"] == "extra_work"


def test_evaluation_at_epoch_ends_is_named_and_costed_per_epoch(tmp_path):
    """40 evaluation calls of 2 ms after every 12 training batches of 10 ms: 80 ms an epoch,
    named from the calls' ops (forward only), estimated per epoch, not per window."""
    f = stalls(fit(tmp_path / "eval", evals=40))
    assert f.numbers["cause"] == "evaluation" and f.severity == "high"
    assert f.numbers["stalled_steps"] == [11, 23] and f.numbers["period_steps"] == 12
    assert f.step_fraction == pytest.approx(80 / (12 * 10 + 80), rel=0.02)
    assert "validation_freq" in f.remedy
    assert f.top_events[0]["name"] == EVAL_FN and f.top_events[0]["count"] == 80
    # The same calls with a backward pass are not evaluation: work only those steps do; nor
    # are calls that write summaries (no op of the model's).
    trains = stalls(fit(tmp_path / "trains", evals=40, eval_trains=True))
    assert trains.numbers["cause"] == "extra_work"
    summaries = stalls(fit(tmp_path / "summaries", evals=40,
                           eval_op="summary/WriteScalarSummary:WriteScalarSummary"))
    assert summaries.numbers["cause"] == "summary"
    assert "evaluation" not in summaries.numbers["named_ms"]


def test_a_new_iterator_at_epoch_ends_is_named(tmp_path):
    """A new iterator every epoch (3 ms) and the old one's teardown (40 ms): the data starting
    over, whose remedy repeats the dataset. With both an evaluation and a new iterator, the
    larger is the cause and the other is listed with its remedy."""
    f = stalls(fit(tmp_path / "it", new_iterator=True))
    assert f.numbers["cause"] == "new_iterator" and f.numbers["period_steps"] == 12
    assert "steps_per_epoch" in f.remedy and f.severity == "high"
    assert {e["name"] for e in f.top_events} >= {"TFE_DeleteTensorHandle",
                                                 "EagerLocalExecute: MakeIterator"}
    both = stalls(fit(tmp_path / "both", evals=20, new_iterator=True, teardown_ms=60.0))
    assert both.numbers["cause"] == "new_iterator"
    assert set(both.numbers["named_ms"]) == {"evaluation", "new_iterator"}
    assert any(e.startswith("also in those steps: evaluation +79.9 ms") for e in both.evidence)
    assert "Also (evaluation): Evaluate less often" in both.remedy
    # Named work under MIN_ALSO_SHARE of the excess (2 evaluation calls: 4 ms of ~130) is not
    # listed.
    few = stalls(fit(tmp_path / "few", evals=2, new_iterator=True, teardown_ms=60.0))
    assert not any(e.startswith("also in those steps") for e in few.evidence)
    assert "Also (" not in few.remedy
    # A small stall elsewhere (15 ms in a step of the epoch's middle) leaves the epochs' ends
    # what they are; its share of the window is added to the per-epoch saving.
    hiccup = stalls(fit(tmp_path / "hiccup", new_iterator=True, hiccup=17))
    assert hiccup.numbers["cause"] == "new_iterator" and hiccup.numbers["period_steps"] == 12
    assert hiccup.numbers["stalled_steps"] == [11, 17, 23]
    assert hiccup.step_fraction == pytest.approx(
        f.step_fraction + 15 / (36 * 10 + 2 * 43 + 15), rel=0.03)
    # One iterator through the run (a repeated dataset): even steps, no finding.
    assert stalls(fit(tmp_path / "repeat")) is None


def test_a_distributed_iterator_s_tracing_is_the_iterator_s(tmp_path):
    """tf.distribute traces per-device functions for each new MultiDeviceIterator: that graph
    building is the new iterator's cost, not a retraced step. Beside a plain iterator, the
    same tracing stays a cause of its own."""
    f = stalls(fit(tmp_path / "dist", new_iterator=True, tracing_ms=60.0, distributed=True))
    assert f.numbers["cause"] == "new_iterator" and "graph_building" not in f.numbers["named_ms"]
    assert f.numbers["named_ms"]["new_iterator"] == pytest.approx(2 * (2 + 60 + 3 + 40),
                                                                  rel=0.01)
    plain = stalls(fit(tmp_path / "plain", new_iterator=True, tracing_ms=60.0))
    assert plain.numbers["cause"] == "graph_building"
    assert set(plain.numbers["named_ms"]) == {"graph_building", "new_iterator"}


def test_without_markers_the_epoch_comes_from_the_new_iterators(tmp_path):
    """Without step numbers, an epoch spans the steps between two new iterators; with one
    epoch's end only, the window's share stands in and the evidence says how to scale it."""
    f = stalls(fit(tmp_path / "three", markers=None, new_iterator=True))
    assert f.numbers["cause"] == "new_iterator" and f.numbers["period_steps"] == 12
    one = stalls(fit(tmp_path / "two", markers=None, epochs=2, new_iterator=True))
    assert one.numbers["period_steps"] is None
    assert any("the window does not show an epoch's length" in e for e in one.evidence)


def test_workers_whose_windows_start_in_different_epochs(tmp_path):
    """Two workers' markers, the second's clock 0.3 ms ahead and its window opening after its
    epoch's restart: its 12 batches are the first worker's epoch 1, not its epoch 0 (which
    held batches 10 and 11 only)."""
    for host, nums in (("worker0", [(10, 0), (11, 10)] + [(i, 70 + 10 * i) for i in range(12)]),
                       ("worker1", [(i, 70 + 10 * i) for i in range(12)])):
        b = XSpaceBuilder()
        plane = b.plane("/host:CPU")
        main, comp = plane.line("python3", line_id=1), plane.line("tf_Compute/11", line_id=11)
        skew = 300_000 if host == "worker1" else 0
        for num, t in nums:
            main.event("train", t * MS + skew, 10 * MS - 1000, step_num=num, _r=1)
            comp.event(BACKWARD[0], t * MS + skew + MS, 8 * MS)
        b.write(tmp_path, host=host)
    steps = analyze(tmp_path).ctx.steps
    assert steps.table["step"].tolist() == [10, 11, *range(12, 24)]
    assert steps.epoch_ends.tolist() == [1] and steps.epoch_rows == 12
