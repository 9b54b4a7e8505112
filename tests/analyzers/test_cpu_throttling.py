"""`cpu_throttling` on code-built CPU traces with sampler data: a 1-core quota on a process that
keeps 2 threads runnable, and the cases where the quota costs nothing more to fix."""

from __future__ import annotations

import pytest

from analyzers.findings import Finding, Skipped
from analyzers.report import analyze
from tests.analyzers.traces import host_trace, sweeps, write_sampler


def throttled(run) -> Finding | Skipped | None:
    report = analyze(run)
    found = {f.id: f for f in report.findings} | {s.id: s for s in report.skipped}
    return found.get("cpu_throttling")


def two_runnable() -> object:
    """The model's thread and one intra-op worker runnable while the ops run (a stopped thread
    stays runnable)."""
    return sweeps(100, 0, input_running=0, intra_op=1, steps=10)


def test_a_quota_below_the_runnable_threads_with_idle_cores_is_found(tmp_path):
    # 2 CPUs, a 1-core quota stopping the group in 90% of its periods; the process gets its one
    # core (cpu_percent 100), the machine is half idle.
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, two_runnable(), n_cpus=2, cpu_percent=100, cpu_quota=1, throttled=0.9)
    f = throttled(run)
    assert isinstance(f, Finding)
    assert f.numbers["throttled_period_share"] == pytest.approx(0.9, abs=0.05)
    assert f.numbers["extra_cores"] == pytest.approx(0.96, abs=0.05)  # 2 runnable, 98% of the step
    # The host side of the step (all of it here) spread over ~2 cores instead of 1.
    host = f.numbers["host_share"]
    assert f.speedup == pytest.approx(1 / (1 - host * 0.96 / 1.96), rel=0.03)
    assert f.severity == "high"
    assert "set_intra_op_parallelism_threads(1)" in f.remedy
    assert "toward the 2 CPUs" in f.remedy


def test_a_process_that_wants_no_more_than_its_quota_is_not_a_finding(tmp_path):
    # One thread runnable in a 1-core quota: stopped often, but it uses what it was given.
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0, steps=10), n_cpus=2, cpu_percent=100,
                  cpu_quota=1, throttled=0.9)
    assert throttled(run) is None


def test_a_quota_that_rarely_stops_the_process_is_not_a_finding(tmp_path):
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, two_runnable(), n_cpus=2, cpu_percent=100, cpu_quota=1, throttled=0.1)
    assert throttled(run) is None


def test_no_idle_core_to_take_reads_low(tmp_path):
    # Other processes keep the machine's other core busy: a higher limit would find none free.
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, two_runnable(), n_cpus=2, cpu_percent=100, cpu_quota=1, throttled=0.9,
                  machine_percent=100)
    f = throttled(run)
    assert isinstance(f, Finding) and f.severity == "low" and f.speedup == 1.0
    assert "would find none free" in f.evidence[2]


def test_no_quota_or_no_counters(tmp_path):
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, two_runnable(), n_cpus=2, cpu_percent=100, affinity_cpus=2)
    assert throttled(run) is None  # no quota: counters at -1
    write_sampler(run, two_runnable(), n_cpus=2, cpu_percent=100)
    assert throttled(run) is None  # sampler data written before the counters existed


def test_without_sampler_data_the_check_is_skipped(tmp_path):
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    s = throttled(run)
    assert isinstance(s, Skipped) and "no OS sampler data" in s.reason
