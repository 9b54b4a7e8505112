"""`queue_input`: a TF1 Session.run step waiting on a queue-runner input pipeline (code-built
traces of tests/analyzers/test_session_steps.py; the real jobs are `foreign_jobs.py
session_queue` / `session_queue_data`)."""

from __future__ import annotations

import pytest

from analyzers.report import analyze
from tests.analyzers.test_session_steps import session_trace


def _finding(tmp_path, **kw):
    session_trace(**kw).write(tmp_path)
    report = analyze(tmp_path)
    return {f.id: f for f in report.findings}.get("queue_input"), report


def test_idle_training_runs_beside_queue_runners(tmp_path):
    """Each 10 ms step's 9 ms training run has its ops (and their executor events) for 4.8 ms:
    the rest, 4.2 ms, it waits on its dequeue, which writes no event (6 such waits in 59 ms of
    steps: the last step ends with its run)."""
    f, report = _finding(tmp_path, queue_threads=2)
    assert f is not None and f.severity == "high"
    assert f.step_fraction == pytest.approx(6 * 4.17 / 59, abs=0.005)
    assert f.numbers["filling_threads"] == 2 and f.numbers["queue_ops"] == ["FIFOQueueV2"]
    assert f.numbers["filling_runs_per_step"] == pytest.approx(80, abs=2)
    assert "tf.data" in f.remedy and report.ctx.fractions["framework"] > 0.3


def test_no_queue_no_finding(tmp_path):
    """The same idle runs without a queue op: nothing says the run waited on a queue."""
    f, _ = _finding(tmp_path, queue_threads=2, queue_op="reader/Identity:Identity")
    assert f is None


def test_busy_training_runs_no_finding(tmp_path):
    """Queue runners beside training runs that their own ops fill: no wait."""
    f, _ = _finding(tmp_path, queue_threads=2, busy_runs=True)
    assert f is None


def test_without_run_ids_nothing_is_said(tmp_path):
    """Without ids the training run's own work cannot be told from the queue runners'."""
    f, _ = _finding(tmp_path, queue_threads=2, ids=False)
    assert f is None
