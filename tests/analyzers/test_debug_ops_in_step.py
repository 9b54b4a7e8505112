"""`debug_ops_in_step` on code-built traces (summaries every step or every few, tfdbg's dump
instrumentation, enable_check_numerics, a tf.print, GPU kernels named by their tf_op) and on
recorded TF 2.21 traces of `python tests/analyzers/foreign_jobs.py DIR MODE` (tensorflow-cpu
2.21 on 2026-11-29, 2 cores; the xplanes gzipped in data/tf2.21):
- `debug_dump.xplane.pb.gz`: tfdbg's FULL_HEALTH dump, 34.6 ms a step untraced against 11.4 ms
  for `debug_none`;
- `debug_histograms_rare.xplane.pb.gz`: every variable's histogram under
  `record_if(step % 100 == 0)`, 16.8 ms a step: the table's histogram reads (copies) it every
  step, written or not (`dense_embedding_update` names that read);
- `debug_none.xplane.pb.gz`: the same step without either;
- `session_summaries.xplane.pb.gz`: a TF1 Session loop fetching `merge_all()` (histograms of
  every variable, a 250,000 x 64 table's among them) with every run: 641.5 ms a step untraced
  against 1.38 ms for `session_none`;
- `keras_histograms.xplane.pb.gz`: Keras fit with the TensorBoard callback's `histogram_freq=1`
  in epochs of 8 steps (52.8 ms a step untraced against 14.7 ms without the callback).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzers.detectors.debug_ops_in_step import cause_of
from analyzers.report import analyze
from tests.analyzers.traces import MS, gpu_trace, host_trace, recorded_logdir

DATA = Path(__file__).parent / "data" / "tf2.21"
TORCH = Path(__file__).parent / "data" / "pytorch-cpu-anomaly"


def by_id(report):
    return {f.id: f for f in report.findings}


def recorded(tmp: Path, name: str):
    return analyze(recorded_logdir(tmp, DATA / name, "2026_11_29_21_00_00"))


def ops_after_compute(ops: list[tuple[str, float]], steps: set[int] | None = None):
    """`host_trace`'s `per_step`: `ops` (name, ms) one after another on the compute thread once
    its ops end at 50.5 ms (compute_ms=50), in `steps` (all when None)."""
    def add(b, host, main, comp, t0, i):
        if steps is not None and i not in steps:
            return
        t = t0 + 51 * MS
        for name, ms in ops:
            comp.event(name, t, int(ms * MS))
            t += int(ms * MS)
    return add


@pytest.mark.parametrize(("name", "dumping", "cause"), [
    ("table/write_summary/buckets/cond/Sum:Sum", False, "summaries"),
    ("loss/write_summary:WriteSummary", False, "summaries"),
    ("FlushSummaryWriter:FlushSummaryWriter", False, "summaries"),
    ("Merge/MergeSummary:MergeSummary", False, "summaries"),
    ("weights:HistogramSummary", False, "summaries"),
    ("Relu/DebugIdentityV2_12:DebugIdentityV2", False, "debugger"),
    ("Relu/DebugNumericSummaryV2:DebugNumericSummaryV2", True, "debugger"),
    ("Relu/DebugNumericSummaryV2:DebugNumericSummaryV2", False, "numeric_checks"),
    ("mul/CheckNumericsV2:CheckNumericsV2", False, "numeric_checks"),
    ("VerifyFinite/CheckNumerics:CheckNumerics", False, "numeric_checks"),
    ("PrintV2:PrintV2", False, "prints"),
    ("dense/MatMul:MatMul", False, None),
    # A scope that only resembles the summary scope, a summary-like op name of a model.
    ("rewrite_summary_head/MatMul:MatMul", False, None),
    ("summary_net/Dense:MatMul", False, None),
])
def test_what_each_op_is(name, dumping, cause):
    assert cause_of(name, dumping) == cause


def test_summaries_every_step_leave_the_step(tmp_path):
    """40 ms of histogram ops after 50 ms of model ops, one after another on one thread: their
    share of the ops' busy time (40 of 90 ms) of the 90% of the step ops cover."""
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=ops_after_compute([
        ("table/write_summary/buckets/cond/Sum:Sum", 30),
        ("table/write_summary/buckets/cond/one_hot:OneHot", 9.5),
        ("table/write_summary:WriteSummary", 0.5)]))
    f = by_id(analyze(path))["debug_ops_in_step"]
    assert f.numbers["causes"] == ["summaries"]
    assert f.numbers["summaries_steps_fraction"] == 1.0
    assert f.step_fraction == pytest.approx(0.40, abs=0.01)
    assert f.speedup == pytest.approx(1 / 0.6, rel=0.02) and f.severity == "high"
    assert "record_if" in f.remedy and "by tag: table 100%" in " ".join(f.evidence)


def test_ops_running_beside_the_model_are_counted_by_their_work(tmp_path):
    """Debug ops on a second thread while the model's ops run: 45 ms beside 90 ms. Their
    intervals cover 45% of the step, but the cores they share do 135 ms of work in 90: the
    saving is a third of the ops' 90%."""
    def add(b, host, main, comp, t0, i):
        line = host.line("tf_Compute/12", line_id=12)
        for k in range(3):
            line.event(f"dense_{k}/DebugNumericSummaryV2:DebugNumericSummaryV2",
                       t0 + (2 + 30 * k) * MS, 15 * MS)
            line.event(f"dense_{k}/DebugIdentityV2_{k}:DebugIdentityV2", t0 + (17 + 30 * k) * MS,
                       MS // 100)
    _, path = host_trace(tmp_path, steps=6, compute_ms=90, per_step=add)
    f = by_id(analyze(path))["debug_ops_in_step"]
    assert f.numbers["causes"] == ["debugger"]
    assert f.step_fraction == pytest.approx(0.3, abs=0.01)
    assert "enable_dump_debug_info" in f.remedy


def test_summaries_written_in_a_few_steps_are_left_to_step_stalls(tmp_path):
    """40 ms of a histogram and its write in 2 of 10 steps: periodic work, which `step_stalls`
    prices by its period, though `record_if`'s condition (a `mod` and an `Equal` in the same
    scope) runs in every step; written in 6 of 10 steps, they are written nearly every step."""
    condition = [("table/write_summary/mod:FloorMod", 0.01),
                 ("table/write_summary/Equal:Equal", 0.01)]
    histogram = [("table/write_summary/buckets/cond/Sum:Sum", 40),
                 ("table/write_summary:WriteSummary", 0.2)]

    def every_step_and(steps):
        cond, hist = ops_after_compute(condition), ops_after_compute(histogram, steps)

        def add(b, host, main, comp, t0, i):
            cond(b, host, main, comp, t0, i)
            hist(b, host, main, comp, t0 + MS // 10, i)
        return add
    few = analyze(host_trace(tmp_path / "few", steps=10, compute_ms=50,
                             per_step=every_step_and({3, 7}))[1])
    assert "debug_ops_in_step" not in by_id(few)
    most = analyze(host_trace(tmp_path / "most", steps=10, compute_ms=50,
                              per_step=every_step_and({1, 2, 4, 5, 7, 8}))[1])
    assert by_id(most)["debug_ops_in_step"].numbers["summaries_steps_fraction"] == 0.6


def test_check_numerics_is_not_tfdbg(tmp_path):
    """enable_check_numerics writes a DebugNumericSummaryV2 before each CheckNumericsV2; without
    tfdbg's DebugIdentityV2 ops they are numeric checks, with their own remedy."""
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=ops_after_compute([
        ("dense/DebugNumericSummaryV2:DebugNumericSummaryV2", 9),
        ("dense/CheckNumericsV2:CheckNumericsV2", 1)]))
    f = by_id(analyze(path))["debug_ops_in_step"]
    assert f.numbers["causes"] == ["numeric_checks"]
    assert "enable_check_numerics" in f.remedy and "enable_dump_debug_info" not in f.remedy
    assert f.step_fraction == pytest.approx(10 / 60 * 0.6, abs=0.01)


@pytest.mark.parametrize("ops", [
    [],
    [("PrintV2:PrintV2", 0.5)],  # a tf.print of the loss: 0.5% of the step
    [("dense/MatMul_extra:MatMul", 20)],  # model work
])
def test_no_finding_without_costly_debug_ops(tmp_path, ops):
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=ops_after_compute(ops))
    assert "debug_ops_in_step" not in by_id(analyze(path))


def test_gpu_kernels_of_summary_ops_and_the_host_write(tmp_path):
    """One GPU: 5 of 20 equal kernels belong to a histogram (their tf_op), 60 ms of kernels in a
    100 ms step, and the summary write runs 5 ms on the host after them with the device idle:
    a quarter of the kernels' 60%, plus the 5%."""
    def tf_op(d, k):
        return ("table/write_summary/buckets/cond/Sum:Sum" if k >= 15
                else f"dense_{k}/MatMul:MatMul")
    path = gpu_trace(tmp_path, devices=1, tf_op=tf_op,
                     host_op=("table/write_summary:WriteSummary", 70, 5))
    f = by_id(analyze(path))["debug_ops_in_step"]
    assert f.numbers["causes"] == ["summaries"]
    assert f.step_fraction == pytest.approx(0.25 * 0.6 + 0.05, abs=0.01)


def test_gpu_trace_without_debug_kernels(tmp_path):
    path = gpu_trace(tmp_path, devices=1, tf_op=lambda d, k: f"dense_{k}/MatMul:MatMul")
    assert "debug_ops_in_step" not in by_id(analyze(path))


def test_recorded_tfdbg_dump(tmp_path):
    """Measured 3.02x untraced (34.6 against 11.4 ms); the busy-time share gives ~3.1x, the
    intervals the debug ops ran in would have given 9.7x."""
    report = recorded(tmp_path, "debug_dump.xplane.pb.gz")
    strong = {f.id for f in report.findings if f.severity in ("medium", "high")}
    assert strong == {"debug_ops_in_step"}, report.findings
    f = by_id(report)["debug_ops_in_step"]
    assert f.numbers["causes"] == ["debugger"]
    assert 2.5 < f.speedup < 3.6


def test_recorded_histograms_under_record_if(tmp_path):
    """Written every 100th step, the histograms write nothing in the window, but the table's
    `tf.stop_gradient` read copies it every step: 1.47x estimated, 1.47x measured (16.8 against
    11.4 ms). The read is `dense_embedding_update`'s, with the histogram's remedy."""
    report = recorded(tmp_path, "debug_histograms_rare.xplane.pb.gz")
    f = by_id(report)
    assert "debug_ops_in_step" not in f
    read = f["dense_embedding_update"]
    assert read.numbers["causes"] == ["table_copy_on_read"]
    assert read.numbers["histogram_reads_per_step"] == 1
    assert "tf.summary.histogram" in read.remedy and "embedding_lookup" not in read.remedy
    assert 1.3 < read.speedup < 1.7


def test_recorded_step_without_debug_ops(tmp_path):
    report = recorded(tmp_path, "debug_none.xplane.pb.gz")
    assert not [f for f in report.findings if f.severity in ("medium", "high")], report.findings


def test_recorded_keras_histograms_at_epoch_ends(tmp_path):
    """Written eagerly once an epoch, the histograms are a periodic stall: `step_stalls` names
    the summary by the WriteSummary after the eager bucketing ops (before: "work only those
    steps do", its top event an `EagerLocalExecute: Cast` of 3 ms)."""
    report = recorded(tmp_path, "keras_histograms.xplane.pb.gz")
    f = by_id(report)
    assert "debug_ops_in_step" not in f
    stall = f["step_stalls"]
    assert stall.numbers["cause"] == "summary" and stall.severity == "high"
    assert stall.top_events[0]["name"] == "EagerLocalExecute: Sum"
    assert "histogram_freq" in stall.remedy


def test_recorded_tf1_summaries_fetched_every_run(tmp_path):
    """TF1's summary ops are one op each (HistogramSummary over the whole table): 99% of the
    step, read from a Session.run trace (no step markers), with the TF1 remedy."""
    report = recorded(tmp_path, "session_summaries.xplane.pb.gz")
    strong = {f.id for f in report.findings if f.severity in ("medium", "high")}
    assert strong == {"debug_ops_in_step"}, report.findings
    f = by_id(report)["debug_ops_in_step"]
    assert f.numbers["causes"] == ["summaries"] and f.capped
    assert f.top_events[0]["name"].endswith(":HistogramSummary")
    assert f.remedy.startswith("Fetch the merged summary")
    assert "record_if" not in f.remedy


def torch_trace(tmp: Path, checks_inside: bool, steps: int = 6) -> Path:
    """A PyTorch CPU trace (Kineto JSON) of 10 ms steps: 4 ms forward, then a 5 ms backward
    function; 12 NaN checks of 0.2 ms (isnan, _is_any_true, item) inside it (anomaly mode), or
    the same checks after it (a user's own check of the loss)."""
    events = []

    def op(name, ts, dur, cat="cpu_op"):
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1,
                       "ts": ts, "dur": dur})
    for i in range(steps):
        t = i * 10_000
        op(f"ProfilerStep#{i}", t, 9_900, cat="user_annotation")
        op("aten::linear", t + 100, 4_000)
        op("autograd::engine::evaluate_function: AddmmBackward0", t + 4_200, 5_000)
        op("aten::mm", t + 4_300, 2_000)
        at = t + 6_400 if checks_inside else t + 9_250
        for k, name in enumerate(["aten::isnan", "aten::_is_any_true", "aten::item"] * 4):
            op(name, at + k * 50 if not checks_inside else at + k * 200,
               40 if not checks_inside else 190)
    path = tmp / "vm_1.1.pt.trace.json"
    tmp.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": events}))
    return tmp


def test_autograd_anomaly_checks_inside_backward_functions(tmp_path):
    """12 checks of 0.19 ms inside the backward function: 2.3 ms of a 10 ms step. The same
    checks (shorter) after the backward pass are the user's own: no finding."""
    f = by_id(analyze(torch_trace(tmp_path / "in", True)))["debug_ops_in_step"]
    assert f.numbers["causes"] == ["anomaly_detection"] and f.numbers["checks_per_step"] == 4
    assert f.step_fraction == pytest.approx(12 * 0.19 / 9.9, abs=0.01)
    assert "set_detect_anomaly" in f.remedy
    assert "debug_ops_in_step" not in by_id(analyze(torch_trace(tmp_path / "out", False)))


def test_recorded_autograd_anomaly_mode(tmp_path):
    """`torch_anomaly_job.py`, torch 2.13.0 CPU: 9.5-9.7 ms a step with anomaly mode against
    5.6-5.7 ms without (1.70x, 1.71x); the checks read 1.35x, a lower bound (the stack traces
    it records for every forward op are untraced)."""
    for name, found in (("anomaly", True), ("none", False)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / f"vm_1.{name}.pt.trace.json.gz").write_bytes(
            (TORCH / f"{name}.pt.trace.json.gz").read_bytes())
        f = by_id(analyze(folder))
        assert ("debug_ops_in_step" in f) == found
        if found:
            assert f["debug_ops_in_step"].numbers["checks_per_step"] == 16
            assert 1.2 < f["debug_ops_in_step"].speedup < 1.5


def eager_histograms(write: bool, eager_model_ops: int = 0):
    """`host_trace`'s `per_step` (compute_ms=10, the function call from 0.5 to 10.5 ms): a
    histogram written eagerly from the Python loop after the call, its ops one by one (Min,
    Max, OneHot, Sum: 30 ms) then `WriteSummary` when `write`; before the call,
    `eager_model_ops` eager ops of 0.1 ms (an eager loop around a compiled piece)."""
    def add(b, host, main, comp, t0, i):
        for k in range(eager_model_ops):
            main.event("EagerLocalExecute: Relu", t0 + 10_000 * k // max(eager_model_ops, 1),
                       5_000)
        t = t0 + 11 * MS
        for op, ms in (("Min", 2), ("Max", 2), ("OneHot", 8), ("Sum", 18)):
            main.event(f"EagerLocalExecute: {op}", t, ms * MS - 1000)
            main.event("EagerKernelExecute", t + 1000, ms * MS - 3000)
            t += ms * MS
        if write:
            main.event("EagerLocalExecute: WriteSummary", t, MS // 5)
    return add


def test_summaries_written_eagerly_beside_a_compiled_step(tmp_path):
    """A tf.function step (10 ms) then 30 ms of a histogram's eager ops and its write, every
    step of 42 ms: the eager ops are the summary's (no eager loop, no per-call overhead), their
    span from the call's end to the write's end leaving the step. Without the write they are
    unnamed eager work; in an eager loop (30 more eager ops a step) they may be the model's,
    and `eager_execution` keeps them."""
    _, path = host_trace(tmp_path / "w", steps=6, step_ms=42, compute_ms=10,
                         per_step=eager_histograms(True))
    f = by_id(analyze(path))
    assert "eager_execution" not in f and "per_step_overhead" not in f
    summary = f["debug_ops_in_step"]
    assert summary.numbers["causes"] == ["summaries"]
    assert summary.numbers["eager_writes_per_step"] == 1
    assert summary.step_fraction == pytest.approx(30.7 / 42, abs=0.01)
    assert summary.top_events[0]["name"] == "EagerLocalExecute: Sum"
    _, bare = host_trace(tmp_path / "b", steps=6, step_ms=42, compute_ms=10,
                         per_step=eager_histograms(False))
    assert "debug_ops_in_step" not in by_id(analyze(bare))
    _, loop = host_trace(tmp_path / "l", steps=6, step_ms=42, compute_ms=10,
                         per_step=eager_histograms(True, eager_model_ops=30))
    found = by_id(analyze(loop))
    assert "debug_ops_in_step" not in found and "eager_execution" in found


def test_recorded_histograms_written_eagerly(tmp_path):
    """`debug_histograms_eager` (TF 2.21): the w1 and w2 histograms written from the Python loop
    after each compiled step: 48.2 ms a step against 11.4 ms without (4.2x). Before, this read
    `eager_execution` high 1.34x ("wrap the step in tf.function"), then `per_step_overhead`."""
    report = recorded(tmp_path, "debug_histograms_eager.xplane.pb.gz")
    strong = {f.id for f in report.findings if f.severity in ("medium", "high")}
    assert strong == {"debug_ops_in_step"}, report.findings
    f = by_id(report)["debug_ops_in_step"]
    assert f.numbers["eager_writes_per_step"] == 2
    assert 3.0 < f.speedup < 5.0
