"""Logdirs of several hosts (workers profiled into one run, a trace file each): what one worker
does per step reads the same whether one worker's file or every worker's is analyzed, and
threads are told apart by host (docs/trace-signals.md, "Several hosts").

The workers here run the same program, thread ids included, as workers in containers do (each
starts its Python as the same low pid, whose main thread has that id)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzers.detectors.kernel_launch_overhead import _executor_overhead
from analyzers.report import analyze
from analyzers.signals.executions import executions
from tests.analyzers.test_detectors import _casts, _small_calls, by_id
from tests.analyzers.test_session_steps import session_trace
from tests.analyzers.traces import MS, host_trace, sweeps, write_sampler
from tests.analyzers.xspace_builder import DEFAULT_PROFILE_START_NS, XSpaceBuilder

RUN = Path("plugins") / "profile" / "2026_01_01_00_00_00"


def _workers(tmp: Path, hosts: int, **trace) -> Path:
    """`hosts` workers' traces of one program in one run folder."""
    for w in range(hosts):
        host_trace(tmp, host_name=f"worker{w}", **trace)
    return tmp / RUN


def _one_and_two(tmp: Path, **trace):
    return analyze(_workers(tmp / "one", 1, **trace)), analyze(_workers(tmp / "two", 2, **trace))


def test_calls_per_step_are_one_workers(tmp_path):
    one, two = _one_and_two(tmp_path, steps=20, step_ms=1.0, compute_ms=0.0,
                            per_step=_small_calls(0.5), readers=0, parse_ops=0)
    # Both workers' training threads are line 1 of /host:CPU: the step thread is one host's,
    # and so are the calls read from it.
    assert two.ctx.n_hosts == 2 and two.ctx.steps.thread[0] in two.ctx.hosts
    assert len(executions(two.ctx)) == len(executions(one.ctx)) == 20
    a, b = by_id(one)["per_step_overhead"], by_id(two)["per_step_overhead"]
    # Each worker reads one batch per call: two workers' fetches are not two batches a call.
    assert b.numbers["batches_per_call"] == a.numbers["batches_per_call"] == 1
    assert b.numbers["suggested_steps_per_call"] == a.numbers["suggested_steps_per_call"] == 4
    assert b.numbers["overhead_fraction"] == pytest.approx(a.numbers["overhead_fraction"])
    assert "steps_per_execution=4" in b.remedy


def test_input_work_per_step_is_one_workers(tmp_path):
    """40 parse ops a step on each worker's tf.data threads, and a 60 ms wait."""
    one, two = _one_and_two(tmp_path, wait_ms=60, parse_ops=40, parse_op_ms=0.5)
    a, b = by_id(one)["input_preprocessing"], by_id(two)["input_preprocessing"]
    for key in ("parse_ops_per_step", "input_op_ms_per_step", "reader_ms_per_step",
                "reader_concurrency"):
        assert b.numbers[key] == pytest.approx(a.numbers[key], rel=0.01), key
    assert a.numbers["parse_ops_per_step"] == pytest.approx(40)
    assert b.numbers["reader_concurrency"] == pytest.approx(4, rel=0.05)
    assert any("40 parse ops per step" in e for e in b.evidence)


def test_conversions_per_step_are_one_workers(tmp_path):
    one, two = _one_and_two(tmp_path, compute_ms=70, per_step=_casts(20, 1.0))
    a, b = by_id(one)["convert_to_tensor_gaps"], by_id(two)["convert_to_tensor_gaps"]
    assert b.numbers["eager_casts_per_step"] == a.numbers["eager_casts_per_step"] == 20
    assert b.numbers["conversions_per_step"] == a.numbers["conversions_per_step"]


def _small_ops(n: int):
    """`n` ops of 5 µs per step on an executor thread, each in a 100 µs executor span."""
    def add(b, host, main, comp, t0, i):
        for k in range(n):
            s = t0 + 20 * MS + k * 100_000
            host.line("tf_Compute/12", line_id=12).event("ExecutorState::Process", s, 100_000)
            host.line("tf_Compute/13", line_id=13).event(f"add_{k}:AddV2", s + 1000, 5000)
    return add


@pytest.mark.parametrize(("ops", "found"), [(100, False), (200, True)])
def test_ops_per_step_are_one_workers(tmp_path, ops, found):
    """kernel_launch_overhead counts a step's ops against a threshold (150): a second worker
    running the same 100 ops does not make 200."""
    one, two = _one_and_two(tmp_path, compute_ms=10, per_step=_small_ops(ops))
    for report in (one, two):
        f = by_id(report).get("kernel_launch_overhead")
        assert (f is not None) == found
        if found:
            assert f.numbers["ops_per_step"] == ops + 20  # host_trace's own 20 MatMuls


def _sampler(run: Path, host: str) -> None:
    write_sampler(run, sweeps(100, 0, input_running=2), n_cpus=2, host=host)


@pytest.mark.parametrize("sampled", ["worker0", "worker1", "somewhere_else"])
def test_the_sampler_is_set_against_its_own_hosts_lines(tmp_path, sampled):
    """Two workers whose compute threads have different ids (separate machines); the sampler
    watched one of them. Its threads are matched to that host's lines only: the model has one
    busy compute line (3 runnable threads on 2 cores, 1 of them the model's: 1.5x), not two.
    A sampler named after no host of the trace is set against none."""
    for w in range(2):
        host_trace(tmp_path, wait_ms=0, parse_op_ms=70, host_name=f"worker{w}",
                   compute_line=11 + w)
    run = tmp_path / RUN
    _sampler(run, sampled)
    f = by_id(analyze(run)).get("input_preprocessing")
    if sampled == "somewhere_else":
        assert f is None  # the contention is the only evidence, and it cannot be placed
        return
    assert f.numbers["model_threads"] == pytest.approx(0.98, abs=0.03)
    assert f.numbers["contention_slowdown"] == pytest.approx(1.5, rel=0.02)


def test_a_sampler_of_the_only_host_needs_no_matching_name(tmp_path):
    """One trace file and sampler files under another name (the capture's hostname is not the
    profiler's): one machine, so they belong together."""
    _, run = host_trace(tmp_path, wait_ms=0, parse_op_ms=70, host_name="worker0")
    _sampler(run, "vm")
    f = by_id(analyze(run))["input_preprocessing"]
    assert f.numbers["contention_slowdown"] == pytest.approx(1.5, rel=0.02)



def test_queue_runners_are_the_step_threads_own(tmp_path):
    """Two TF1 workers, each a training thread and 2 queue-runner threads, thread ids alike:
    the other worker's training runs are not queue runners of this one's, and its work covers
    none of this one's waits."""
    for hosts in (1, 2):
        for w in range(hosts):
            session_trace(queue_threads=2).write(tmp_path / str(hosts), host=f"worker{w}")
    one, two = (by_id(analyze(tmp_path / str(h)))["queue_input"] for h in (1, 2))
    assert two.numbers["filling_threads"] == one.numbers["filling_threads"] == 2
    assert two.numbers["filling_runs_per_step"] == one.numbers["filling_runs_per_step"]
    assert two.step_fraction == pytest.approx(one.step_fraction, rel=0.01)


def _calls_trace(tmp: Path, host: str, shift_ms: float) -> None:
    """A worker whose steps are train-function calls (no step markers), 20 of 10 ms, each with
    30 eager casts on its Python thread and 200 small ops on an executor thread; its clock
    `shift_ms` behind the first worker's."""
    b = XSpaceBuilder(profile_start_ns=DEFAULT_PROFILE_START_NS + int(shift_ms * MS))
    cpu = b.plane("/host:CPU")
    main, comp = cpu.line("python3", line_id=1), cpu.line("tf_Compute/11", line_id=11)
    for i in range(20):
        t0 = i * 10 * MS
        main.event("EagerLocalExecute: __inference_train_function_42", t0 + 1000, 9 * MS)
        for k in range(30):
            main.event("convert_to_tensor", t0 + 1000 + k * 10_000, 5_000)
        # The executor between its ops: dispatch time, so the 200 ops are a finding.
        comp.event("ExecutorState::Process", t0 + 390_000, 8_020_000)
        for k in range(200):
            comp.event(f"add_{k}:AddV2", t0 + 400_000 + k * 40_000, 5000)
    b.write(tmp, host=host)


def test_workers_apart_in_time_without_step_markers(tmp_path):
    """Steps from train-function calls have no number to line two workers' up: one worker's
    calls are the steps (two workers 3.3 ms apart made 40 windows of both, and the per-worker
    counts were halved), and the other worker's events count where they fall in them."""
    for hosts in (1, 2):
        for w in range(hosts):
            _calls_trace(tmp_path / str(hosts), f"worker{w}", 3.3 * w)
    one, two = (analyze(tmp_path / str(h) / RUN) for h in (1, 2))
    assert one.ctx.n_steps == two.ctx.n_steps == 20
    assert two.ctx.steps.source.startswith("function:")
    for report in (one, two):
        found = by_id(report)
        assert found["kernel_launch_overhead"].numbers["ops_per_step"] == pytest.approx(
            200, rel=0.02)
        assert found["convert_to_tensor_gaps"].numbers["conversions_per_step"] == pytest.approx(
            30, rel=0.02)


def test_workers_apart_in_time_keep_their_executors_apart(tmp_path):
    """Two TF1 queue workers 3.1 ms apart: the other worker's queue runners keep its executor
    threads in framework code while this worker's step runs, which is not this worker's
    dispatch overhead (it read 0.054 of the step against 0.0008 for one worker)."""
    for hosts in (1, 2):
        for w in range(hosts):
            b = session_trace(queue_threads=2)
            b.profile_start_ns = DEFAULT_PROFILE_START_NS + w * 3_100_000
            b.write(tmp_path / str(hosts), host=f"worker{w}")
    one, two = (_executor_overhead(analyze(tmp_path / str(h)).ctx) for h in (1, 2))
    assert one < 0.01
    assert two == pytest.approx(one, abs=0.002)


def test_each_machines_sampler_is_read_on_its_own(tmp_path):
    """Two workers waiting on storage, each with its own sampler files (the same pid: one
    container each) and its own read rate: the read rate shown is the step thread's host's,
    not two machines' cumulative counters read as one process's."""
    rates = {"worker0": 50.0, "worker1": 80.0}
    for host, rate in rates.items():
        host_trace(tmp_path, wait_ms=60, host_name=host)
        write_sampler(tmp_path / RUN, sweeps(100, 60, input_running=0), n_cpus=2,
                      cpu_percent=30, read_mb_per_s=0.0, rchar_mb_per_s=rate, host=host)
    report = analyze(tmp_path / RUN)
    f = by_id(report)["io_stall"]
    host = report.ctx.steps.thread[0]
    assert report.ctx.sampler_host == host
    assert f.numbers["read_mb_per_s"] == pytest.approx(rates[host], rel=0.02)


def test_one_machines_threads_are_not_read_with_anothers_process(tmp_path):
    """Thread sweeps of worker1 and process sweeps of worker0 only: the process counters (CPUs,
    CPU use) of one machine do not go with the threads of another."""
    for host in ("worker0", "worker1"):
        host_trace(tmp_path, wait_ms=60, host_name=host)
    run = tmp_path / RUN
    _sampler(run, "worker1")
    (run / "worker1.process.parquet").rename(run / "worker0.process.parquet")
    ctx = analyze(run).ctx
    assert ctx.sampler_host == "worker1" and ctx.sampler_threads is not None
    assert ctx.sampler_process is None and ctx.n_cpus is None
