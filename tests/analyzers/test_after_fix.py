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


# Two reference-trainer runs and their input fixes (`remedy.command`), all profiled and analyzed,
# 2026-11-29: the traced breakdown and findings (share, speedup, contention slowdown) of the slow
# run, and what the fixed run read.
PAIRS = {
    "default": dict(
        breakdown={"host_compute": 0.1148, "collective": 0.0101, "copy_d2d": 0.0001,
                   "copy_h2d": 0.0012, "input_wait": 0.8493, "convert": 0.0064,
                   "framework": 0.0097, "python_other": 0.0084},
        findings=[("input_preprocessing", 0.9103, 10.731, 1.68),
                  ("convert_to_tensor_gaps", 0.0064, 1.006, None),
                  ("serialized_h2d", 0.0045, 1.003, None)],
        fixed_breakdown={"host_compute": 0.747, "framework": 0.079, "python_other": 0.058,
                         "collective": 0.053, "convert": 0.041},
        fixed_findings={"convert_to_tensor_gaps": 0.041, "serialized_h2d": 0.023}),
    "per_example, casting and serial copies": dict(
        breakdown={"host_compute": 0.1019, "collective": 0.0198, "copy_d2d": 0.0002,
                   "copy_h2d": 0.0007, "input_wait": 0.849, "convert": 0.0043,
                   "gil_wait": 0.0003, "framework": 0.0135, "python_other": 0.0103},
        findings=[("input_preprocessing", 0.8961, 8.387, 1.453),
                  ("convert_to_tensor_gaps", 0.0043, 1.004, None),
                  ("serialized_h2d", 0.0022, 1.001, None)],
        fixed_breakdown={"host_compute": 0.673, "collective": 0.123, "framework": 0.102,
                         "python_other": 0.057, "convert": 0.032},
        fixed_findings={"convert_to_tensor_gaps": 0.032, "serialized_h2d": 0.013}),
}


@pytest.mark.parametrize("pair", list(PAIRS))
def test_projections_against_the_fixed_runs(pair):
    """`recadvisor train --preset default` (10.7x estimated, 9.7x measured), and `--preset
    per_example --cast host --input-copy serial` (8.4x, 7.9x): the step after the input fix
    read within 2 points of the fixed run, category by category and finding by finding. The
    estimates' speedups are against the untraced step (the profiler slowed these steps 1.04x
    and 1.15x): the step's own proportions, not the speedups, say what is left."""
    case = PAIRS[pair]
    findings = [Finding(id=i, title=i, step_fraction=share, speedup=x, evidence=[], remedy="",
                        numbers={"contention_slowdown": c} if c else {})
                for i, share, x, c in case["findings"]]
    after = after_top_fix(findings, case["breakdown"])
    assert after.fixed == "input_preprocessing"
    assert all(p.severity == "low" for p in after.findings)
    shares = {p.id: p.share for p in after.findings}
    for fid, read in case["fixed_findings"].items():
        assert shares[fid] == pytest.approx(read, abs=0.02), fid
    for category, read in case["fixed_breakdown"].items():
        assert after.breakdown[category] == pytest.approx(read, abs=0.02), category
    assert "input_wait" not in after.breakdown and "gil_wait" not in after.breakdown


def test_a_masked_problem_comes_out():
    """3% of a step that waits 90% for its input is 30% of the step once the input keeps up."""
    after = after_top_fix([_finding("io_stall", 0.9), _finding("convert_to_tensor_gaps", 0.03)],
                          {"input_wait": 0.9, "convert": 0.03, "host_compute": 0.07})
    [p] = after.findings
    assert p.share == pytest.approx(0.3) and p.speedup == pytest.approx(1 / 0.7)
    assert p.severity == "high" and p.severity_now == "low"
    assert after.breakdown == pytest.approx({"convert": 0.3, "host_compute": 0.7})
    line = describe(after)
    assert line.startswith("after io_stall's fix (the step 10.00x shorter): ")
    assert "convert_to_tensor_gaps 30% of the step (1.43x: high; low now)" in line
    assert line.endswith("; the step then: host_compute 70%, convert 30%")


def test_a_wait_the_fix_only_partly_hides():
    """More readers hide a 90% wait only down to a quarter of the batch's reading (io_stall's
    estimate, 4x): what is left of the wait stays in the step that is left."""
    after = after_top_fix([_finding("io_stall", 0.9, 0.75),
                           _finding("convert_to_tensor_gaps", 0.02)],
                          {"input_wait": 0.9, "convert": 0.02, "host_compute": 0.08})
    assert after.breakdown == pytest.approx({"input_wait": 0.6, "convert": 0.08,
                                             "host_compute": 0.32})


def test_what_is_not_projected():
    # The same time: an input stall beside the input pipeline's finding is its wait too (and
    # without the input's breakdown, nothing is left to say).
    assert after_top_fix([_finding("input_preprocessing", 0.8),
                          _finding("io_stall", 0.6)], {}) is None
    # A fix that speeds up every op (a CPU quota lifted) leaves the others' shares as they are.
    assert after_top_fix([_finding("cpu_throttling", 0.5),
                          _finding("convert_to_tensor_gaps", 0.05)], {}) is None
    # A top fix worth less than a medium finding, or nothing beside it.
    assert after_top_fix([_finding("io_stall", 0.05),
                          _finding("convert_to_tensor_gaps", 0.01)], {}) is None
    assert after_top_fix([_finding("io_stall", 0.9)], {}) is None
    # More than the step that is left: the two overlap, whatever their ids say.
    assert after_top_fix([_finding("step_stalls", 0.9),
                          _finding("convert_to_tensor_gaps", 0.2)], {}) is None


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
