"""`idle_cores` on code-built CPU traces with sampler data: the model's large ops on one thread of
two usable CPUs, and the cases where idle cores are no fault of the pools."""

from __future__ import annotations

import pytest

from analyzers.findings import Finding, Skipped
from analyzers.report import analyze
from tests.analyzers.traces import host_trace, sweeps, write_sampler


def idle_cores(run) -> Finding | Skipped | None:
    report = analyze(run)
    found = {f.id: f for f in report.findings} | {s.id: s for s in report.skipped}
    return found.get("idle_cores")


def test_one_thread_of_two_cpus_is_found_with_its_estimate(tmp_path):
    # host_trace: 20 ops of ~4.9 ms per 100 ms step on one compute line (98% of the step); the
    # sampler sees one thread run them, the process at 1 core, the machine half idle.
    _, run = host_trace(tmp_path, wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0), n_cpus=2, cpu_percent=100)
    f = idle_cores(run)
    assert isinstance(f, Finding)
    assert f.numbers["workers"] == 1
    assert f.numbers["process_cores"] == pytest.approx(1.0)
    assert f.numbers["idle_cores"] == pytest.approx(1.0)
    share = f.numbers["op_share"]
    assert share == pytest.approx(0.98, abs=0.01)
    # The ops spread over 2 cores instead of 1: that share of the step halves.
    assert f.speedup == pytest.approx(1 / (1 - share / 2), rel=1e-3)
    assert f.severity == "high"
    assert "set_intra_op_parallelism_threads" in f.remedy
    assert f.top_events[0]["name"] == "python3 (tid 1001)"
    assert "1 thread(s) did that work" in f.evidence[1]


def test_a_pool_that_fills_the_cores_is_not_a_finding(tmp_path):
    # One more thread (an intra-op worker, no trace events) runs with the model's: 2 of 2 cores.
    _, run = host_trace(tmp_path, wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0, intra_op=1), n_cpus=2, cpu_percent=200)
    assert idle_cores(run) is None


def test_a_process_allowed_one_cpu_is_not_a_finding(tmp_path):
    # taskset -c 0, a container's cpuset or a 1-CPU quota: the machine's other core is not its.
    _, run = host_trace(tmp_path, wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0), n_cpus=2, cpu_percent=100,
                  affinity_cpus=1)
    assert idle_cores(run) is None


def test_cores_other_processes_keep_busy_are_not_idle(tmp_path):
    _, run = host_trace(tmp_path, wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0), n_cpus=2, cpu_percent=100,
                  machine_percent=100)
    assert idle_cores(run) is None
    # 0.3 of the other core free: within what TF's own pools leave between ops (0.07-0.24).
    write_sampler(run, sweeps(100, 0, input_running=0), n_cpus=2, cpu_percent=100,
                  machine_percent=85)
    assert idle_cores(run) is None


def test_a_quota_counts_and_idle_cores_are_capped_by_it(tmp_path):
    # 4 CPUs, a quota of 3 cores: 2 idle cores the process may use, not 3.
    _, run = host_trace(tmp_path, wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0), n_cpus=4, cpu_percent=100,
                  cpu_quota=3)
    f = idle_cores(run)
    assert isinstance(f, Finding)
    assert f.numbers["idle_cores"] == pytest.approx(2.0)
    assert f.numbers["usable_cpus"] == 3
    assert f.speedup == pytest.approx(1 / (1 - f.numbers["op_share"] * 2 / 3), rel=1e-3)
    assert "of the machine's 4: affinity or cgroup quota" in f.evidence[0]


def test_small_ops_say_nothing_of_the_pools(tmp_path):
    # 20 ops of ~75 µs per 10 ms step: dispatch-bound work, serial whatever the pools.
    _, run = host_trace(tmp_path, steps=60, step_ms=10, wait_ms=0, compute_ms=1.5)
    write_sampler(run, sweeps(10, 0, input_running=0, steps=60), n_cpus=2, cpu_percent=100)
    assert idle_cores(run) is None


def test_waiting_for_input_is_not_counted_as_idle_cores(tmp_path):
    # The step waits 80 ms for input and computes 18 ms: the large ops' share is what the
    # estimate scales, so the gain stays below 10%.
    _, run = host_trace(tmp_path, wait_ms=80)
    write_sampler(run, sweeps(100, 80, input_running=0), n_cpus=2, cpu_percent=100)
    f = idle_cores(run)
    assert isinstance(f, Finding)
    assert f.numbers["op_share"] == pytest.approx(0.18, abs=0.01)
    assert f.speedup < 1.1


def test_without_sampler_data_the_check_is_skipped(tmp_path):
    _, run = host_trace(tmp_path, wait_ms=0)
    s = idle_cores(run)
    assert isinstance(s, Skipped)
    assert "no OS sampler data" in s.reason


def test_input_producers_running_beside_the_ops_are_not_pool_workers(tmp_path):
    # A tf.data thread parses for the first 42 ms of each step, while the model's ops run: the
    # sampler sees it running in ~42% of the large ops' sweeps, but its trace line says it is an
    # input producer (signals/os_sampler.py thread_roles), so the pool still has one worker.
    _, run = host_trace(tmp_path, wait_ms=0, parse_ops=20, parse_op_ms=4)
    th = sweeps(100, 0, input_running=0)
    producer = (th["tid"] == 1002) & (th["t_ms"] % 100 < 42)
    th.loc[producer, "state"] = "R"
    write_sampler(run, th, n_cpus=2, cpu_percent=142)
    f = idle_cores(run)
    assert isinstance(f, Finding)
    assert [e["name"] for e in f.top_events] == ["python3 (tid 1001)"]
    assert f.numbers["idle_cores"] == pytest.approx(0.58, abs=0.01)


def test_a_pool_that_spreads_its_ops_thinly_over_many_cores_is_not_capped(tmp_path):
    # 8 CPUs: the op's own thread runs throughout, and the ops wake all 7 pool threads, one at a
    # time (an op split a few ways on a large machine): each runs in ~14% of the sweeps, below
    # the busy cut, but 8 threads woken by the ops is a full pool, not a capped one.
    _, run = host_trace(tmp_path, wait_ms=0)
    th = sweeps(100, 0, input_running=0, intra_op=7)
    pool = th["tid"].between(1010, 1016) & (th["state"] == "R")
    sweep = (th["t_ms"] * 200 / 1000).round().astype(int)
    th.loc[pool & (sweep % 7 != th["tid"] - 1010), "state"] = "S"
    write_sampler(run, th, n_cpus=8, cpu_percent=200)
    assert idle_cores(run) is None
    # The same process with its pool's threads never running: one thread for 8 CPUs.
    th.loc[th["tid"].between(1010, 1016), "state"] = "S"
    write_sampler(run, th, n_cpus=8, cpu_percent=100)
    f = idle_cores(run)
    assert isinstance(f, Finding) and f.numbers["idle_cores"] == pytest.approx(7.0)


def _inter_op_pair(tmp_path, names: str):
    """Two threads share the ops of each step on 2 CPUs, one running throughout and the other in
    half the sweeps (1.5 cores), both named `names` (TF's inter-op threads, `tf_Compute`, or the
    unnamed threads of its intra-op pool, which keep the process's name)."""
    _, run = host_trace(tmp_path, wait_ms=0)
    th = sweeps(100, 0, input_running=0, intra_op=1)
    sweep = (th["t_ms"] * 200 / 1000).round().astype(int)
    th.loc[(th["tid"] == 1010) & (sweep % 2 == 1), "state"] = "S"
    th.loc[th["tid"].isin([1001, 1010]), "name"] = names
    write_sampler(run, th, n_cpus=2, cpu_percent=150)
    return run


def test_ops_run_inline_on_inter_op_threads_are_an_intra_op_pool_of_one(tmp_path):
    # One intra-op and two inter-op threads: each op runs on the inter-op thread that traces it,
    # two at a time where the graph allows; 1.5 of 2 cores used (1.12-1.24x slower than TF's
    # pools, measured).
    f = idle_cores(_inter_op_pair(tmp_path, "tf_Compute"))
    assert isinstance(f, Finding)
    assert f.numbers["workers"] == 2 and f.numbers["idle_cores"] == pytest.approx(0.5)
    assert "each op ran inline on one thread (an intra-op pool of one)" in f.evidence[1]
    assert f.speedup == pytest.approx(1 / (1 - f.numbers["op_share"] * 0.5 / 2), rel=1e-3)


def test_two_intra_op_threads_at_1_5_cores_are_a_full_pool(tmp_path):
    # The same sweeps from the intra-op pool's own threads: the pool holds as many threads as
    # CPUs, and the half core left is the ops' own.
    assert idle_cores(_inter_op_pair(tmp_path, "python3")) is None


def test_large_ops_that_run_serially_say_nothing_of_the_pools(tmp_path):
    # One thread runs large scatters (no pool splits them) on 2 CPUs: one core idle, but a
    # bigger pool would not have used it.
    _, run = host_trace(tmp_path, wait_ms=0, compute_op="ResourceScatterAdd")
    write_sampler(run, sweeps(100, 0, input_running=0), n_cpus=2, cpu_percent=100)
    assert idle_cores(run) is None
    _, run = host_trace(tmp_path / "mm", wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0), n_cpus=2, cpu_percent=100)
    assert isinstance(idle_cores(run), Finding)
