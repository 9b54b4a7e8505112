"""What the other findings weigh once the largest is fixed (analyzers/after_fix.py)."""

from __future__ import annotations

import pytest

from analyzers.after_fix import after_top_fix, describe
from analyzers.findings import Finding, speedup_from_saving
from analyzers.report import analyze, render_text
from tests.analyzers.traces import host_trace


def _finding(fid: str, share: float, saved: float | None = None, **numbers) -> Finding:
    return Finding(id=fid, title=fid, step_fraction=share,
                   speedup=speedup_from_saving(share if saved is None else saved),
                   evidence=[], remedy="", numbers=numbers)


def test_the_reference_trainers_default_preset():
    """The `default` preset (2026-11-29, /tmp/dnext): the input pipeline's fix 10.73x, its ops
    1.68x faster without the input threads; casting 3.27 ms of a 513.8 ms step, the serial copies
    0.5%. Its fixed run read casting 4.1% and the copies 2.3% of a 51.6 ms step."""
    findings = [_finding("input_preprocessing", 0.91, 1 - 1 / 10.73, contention_slowdown=1.68),
                _finding("convert_to_tensor_gaps", 3.27 / 513.8),
                _finding("serialized_h2d", 0.005, 0.005 * 0.75)]
    after = after_top_fix(findings)
    assert after.fixed == "input_preprocessing" and after.faster_cpu == 1.68
    shares = {p.id: p.share for p in after.findings}
    assert shares["convert_to_tensor_gaps"] == pytest.approx(0.041, abs=0.001)
    assert shares["serialized_h2d"] == pytest.approx(0.032, abs=0.001)
    assert all(p.severity == "low" for p in after.findings)


def test_a_masked_problem_comes_out():
    """3% of a step that waits 90% for its input is 30% of the step once the input keeps up."""
    after = after_top_fix([_finding("io_stall", 0.9),
                           _finding("convert_to_tensor_gaps", 0.03)])
    [p] = after.findings
    assert p.share == pytest.approx(0.3) and p.speedup == pytest.approx(1 / 0.7)
    assert p.severity == "high" and p.severity_now == "low"
    line = describe(after)
    assert line.startswith("after io_stall's fix (the step 10.00x shorter): ")
    assert "convert_to_tensor_gaps 30% of the step (1.43x: high; low now)" in line


def test_what_is_not_projected():
    # The same time: an input stall beside the input pipeline's finding is its wait too.
    assert after_top_fix([_finding("input_preprocessing", 0.8),
                          _finding("io_stall", 0.6)]) is None
    # A fix that speeds up every op (a CPU quota lifted) leaves the others' shares as they are.
    assert after_top_fix([_finding("cpu_throttling", 0.5),
                          _finding("convert_to_tensor_gaps", 0.05)]) is None
    # A top fix worth less than a medium finding, or nothing beside it.
    assert after_top_fix([_finding("io_stall", 0.05),
                          _finding("convert_to_tensor_gaps", 0.01)]) is None
    assert after_top_fix([_finding("io_stall", 0.9)]) is None
    # More than the step that is left: the two overlap, whatever their ids say.
    assert after_top_fix([_finding("io_stall", 0.9),
                          _finding("step_stalls", 0.2)]) is None


def test_the_report_says_what_comes_next(tmp_path):
    """A step waiting 60 ms for per-example parsing, with 20 ms of Python around the call:
    `medium` now, `high` once the input keeps up (50% of a 40 ms step)."""
    _, run = host_trace(tmp_path, steps=6, wait_ms=60, compute_ms=20, parse_ops=40,
                        parse_op_ms=0.5)
    report = analyze(run)
    doc = report.to_dict()["after_top_fix"]
    assert doc["fixed"] == "input_preprocessing" and doc["speedup"] == pytest.approx(2.5)
    [p] = doc["findings"]
    assert p["id"] == "per_step_overhead" and p["share"] == pytest.approx(0.5, abs=0.01)
    assert p["severity"] == "high"
    assert {f.id: f.severity for f in report.findings}["per_step_overhead"] == "medium"
    assert ("next: after input_preprocessing's fix (the step 2.50x shorter): per_step_overhead "
            "50% of the step") in render_text(report)
