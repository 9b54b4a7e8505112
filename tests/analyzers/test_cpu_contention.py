"""`cpu_contention` on code-built CPU traces with sampler data: other processes keeping busy the
cores a process with two runnable threads wanted, and the cases where they take nothing of it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyzers.findings import Finding, Skipped
from analyzers.report import analyze
from tests.analyzers.traces import host_trace, sweeps
from tests.analyzers.traces import write_sampler as write_any_sampler


def write_sampler(run, threads, **kw) -> None:
    """Sampler files with the scans of the other processes (none using CPU unless given)."""
    write_any_sampler(run, threads, **{"others": [], **kw})


def contention(run) -> Finding | Skipped | None:
    report = analyze(run)
    found = {f.id: f for f in report.findings} | {s.id: s for s in report.skipped}
    return found.get("cpu_contention")


def machine_warning(run) -> bool:
    return any("other processes on the machine used" in w
               for w in analyze(run).to_dict()["warnings"])


def two_runnable(steps: int = 10):
    """The model's thread and one intra-op worker runnable while the ops run (98% of each
    100 ms step)."""
    return sweeps(100, 0, input_running=0, intra_op=1, steps=steps)


def test_other_processes_on_the_cores_the_job_wants_are_found(tmp_path):
    # 2 CPUs, the process gets one core (cpu_percent 100) with two threads runnable, and the
    # machine is full: other processes hold the other core.
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, two_runnable(), n_cpus=2, cpu_percent=100, machine_percent=100)
    f = contention(run)
    assert isinstance(f, Finding), f
    # The machine's other core less the sampler's own 0.1.
    assert f.numbers["others_cores"] == pytest.approx(0.9, abs=0.01)
    assert f.numbers["sampler_cores"] == pytest.approx(0.1, abs=0.01)
    assert f.numbers["runnable"] == pytest.approx(1.96, abs=0.05)
    assert f.numbers["extra_cores"] == pytest.approx(0.9, abs=0.01)
    host = f.numbers["host_share"]
    assert host > 0.9
    assert f.speedup == pytest.approx(1 / (1 - host * 0.9 / 1.9), rel=0.03)
    assert f.severity == "high"
    assert "cpuset" in f.remedy
    assert not machine_warning(run)  # the finding says it


def test_the_cores_given_back_are_no_more_than_the_others_took(tmp_path):
    # 4 CPUs: other processes use 0.7 core (the sampler 0.1 more), the process 3 with 4 threads
    # runnable; the machine is full. It gets back those 0.7, not the core it wanted.
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0, intra_op=3, steps=10), n_cpus=4,
                  cpu_percent=300, machine_percent=95)
    f = contention(run)
    assert isinstance(f, Finding), f
    assert f.numbers["others_cores"] == pytest.approx(0.7, abs=0.01)
    assert f.numbers["extra_cores"] == pytest.approx(0.7, abs=0.01)


def test_a_process_that_got_what_it_wanted_is_not_a_finding(tmp_path):
    # One thread runnable, one core used: the other core's process took nothing of it.
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0, steps=10), n_cpus=2, cpu_percent=100,
                  machine_percent=100)
    assert contention(run) is None
    # Every figure of the report still includes the sharing: a warning says so.
    assert machine_warning(run)


def test_idle_cores_mean_nobody_took_them(tmp_path):
    # Two threads runnable on one core's worth, the other core idle: not other processes' doing.
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, two_runnable(), n_cpus=2, cpu_percent=100)
    assert contention(run) is None
    # 4 CPUs, other processes on one of them, two idle: whatever kept the thread waiting, a
    # free core was there to take.
    write_sampler(run, two_runnable(), n_cpus=4, cpu_percent=100, machine_percent=50)
    assert contention(run) is None


def test_others_on_cpus_outside_the_affinity_take_none_of_the_jobs(tmp_path):
    # Pinned to 2 of 4 CPUs (taskset), other processes use 2.5 cores (the sampler 0.1 more): 2
    # of them can sit outside the job's CPUs, 0.5 took its.
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, two_runnable(), n_cpus=4, cpu_percent=100, machine_percent=90,
                  affinity_cpus=2)
    f = contention(run)
    assert isinstance(f, Finding), f
    assert f.numbers["others_cores"] == pytest.approx(0.5, abs=0.01)
    assert f.numbers["extra_cores"] == pytest.approx(0.5, abs=0.01)
    assert "CPUs outside the job's affinity" in f.evidence[0]
    # Pinned to 1 of 2: the other process's core is not one the job may use.
    write_sampler(run, two_runnable(), n_cpus=2, cpu_percent=100, machine_percent=100,
                  affinity_cpus=1)
    assert contention(run) is None


def test_a_quota_caps_what_the_job_may_want(tmp_path):
    # A 1.5-core quota that never ran out on 2 CPUs, 4 threads runnable: half a core more to
    # take, whatever the other processes hold.
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0, intra_op=3, steps=10), n_cpus=2,
                  cpu_percent=100, machine_percent=100, cpu_quota=1.5)
    f = contention(run)
    assert isinstance(f, Finding), f
    assert f.numbers["extra_cores"] == pytest.approx(0.5, abs=0.01)


def test_a_quota_that_stops_the_process_is_cpu_throttling(tmp_path):
    # A 2-core quota on 4 CPUs, 4 threads runnable on 1.5 cores, the machine full, the process
    # stopped in 90% of its periods: the quota is what it runs into, cpu_throttling's finding.
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0, intra_op=3, steps=10), n_cpus=4,
                  cpu_percent=150, cpu_quota=2, throttled=0.9, machine_percent=100)
    assert contention(run) is None
    assert "cpu_throttling" in {f.id for f in analyze(run).findings}


def test_the_processes_that_took_the_cores_are_named(tmp_path):
    _, run = host_trace(tmp_path, steps=20, wait_ms=0)
    hog = "python3 cpu_hog.py 1000 1000 120 2"
    write_sampler(run, two_runnable(20), n_cpus=2, cpu_percent=100, machine_percent=100,
                  others=[(300, 1, hog, 0.45), (301, 1, hog, 0.45), (302, 1, "sshd", 0.05),
                          (303, 1, "kworker", 0.01)])
    f = contention(run)
    assert isinstance(f, Finding), f
    assert f.numbers["busiest_others"][0] == {"command": hog, "pids": [300, 301], "cores": 0.9}
    assert f.numbers["own_children_cores"] == 0.0
    assert f"`{hog}` (2 processes) 0.90 cores; `sshd` (pid 302) 0.05 cores" in f.evidence[3]
    assert "`sampler`" not in f.evidence[3]  # its own process is left out
    assert "kworker" not in f.evidence[3]  # under 0.05 core


def test_a_process_started_in_the_window_counts_from_its_start(tmp_path):
    """Scans at 0, 1, 2 and 3 s around 2.5 s of steps: a neighbour started between the first
    two scans first shows with the CPU it used since (0.8 s), then 1 core a second; one there
    from the start holds 100 s of CPU from before, which does not count."""
    _, run = host_trace(tmp_path, steps=25, wait_ms=0)
    write_sampler(run, two_runnable(25), n_cpus=2, cpu_percent=100, machine_percent=100)
    ts = pd.read_parquet(run / "host.process.parquet")["ts_ns"].min()
    rows = [(0, 500, 100.0), (1, 500, 100.5), (2, 500, 101.0), (3, 500, 101.5),
            (1, 501, 0.8), (2, 501, 1.8), (3, 501, 2.8)]
    pd.DataFrame([{"ts_ns": ts + k * 10**9, "pid": pid, "ppid": 1, "name": f"p{pid}",
                   "cmd": f"job {pid}", "cpu_s": cpu, "start_ticks": 1, "sampled_pid": 100,
                   "sampler_pid": 999} for k, pid, cpu in rows]).to_parquet(
        run / "host.others.parquet")
    f = contention(run)
    assert isinstance(f, Finding), f
    busiest = {x["command"]: x["cores"] for x in f.numbers["busiest_others"]}
    assert busiest == {"job 501": pytest.approx(2.8 / 3, abs=1e-3), "job 500": 0.5}


def test_the_jobs_own_child_processes_are_not_others(tmp_path):
    # The machine is full, but a data loader worker (the sampled process's child) and its own
    # child hold the other core: the job's work, not a neighbour's.
    _, run = host_trace(tmp_path, steps=20, wait_ms=0)
    write_sampler(run, two_runnable(20), n_cpus=2, cpu_percent=100, machine_percent=100,
                  others=[(400, 100, "python3 -c worker", 0.6), (401, 400, "gzip -d", 0.4)])
    assert contention(run) is None
    # Beside a neighbour taking 0.5 core, only those count.
    write_sampler(run, two_runnable(20), n_cpus=2, cpu_percent=100, machine_percent=100,
                  others=[(400, 100, "python3 -c worker", 0.4), (500, 1, "backup", 0.5)])
    f = contention(run)
    assert isinstance(f, Finding), f
    assert f.numbers["others_cores"] == pytest.approx(0.5, abs=0.01)
    assert f.numbers["own_children_cores"] == pytest.approx(0.4, abs=0.01)
    assert "`backup` (pid 500)" in f.evidence[3] and "own child processes" in f.evidence[3]


def test_beside_the_jobs_own_children_only_scanned_others_count(tmp_path):
    # A worker process of the job's own at 0.3 core by the scans, the machine full: the counters
    # leave 0.6 core to "others", but no other process was scanned using CPU (a data loader's
    # work follows the step's phases, which scans a second apart cannot place).
    _, run = host_trace(tmp_path, steps=20, wait_ms=0)
    write_sampler(run, two_runnable(20), n_cpus=2, cpu_percent=100, machine_percent=100,
                  others=[(400, 100, "python3 worker", 0.3)])
    assert contention(run) is None
    assert not machine_warning(run)  # nor do they make a warning


def test_children_that_exited_count_as_the_jobs_own(tmp_path):
    # Short-lived children, gone before any scan: their CPU (0.9 core over the steps) lands in
    # the process's cutime, the sampler's children_s.
    _, run = host_trace(tmp_path, steps=20, wait_ms=0)
    th = two_runnable(20)
    secs = np.sort(th["t_ms"].unique()) / 1000
    write_sampler(run, th, n_cpus=2, cpu_percent=100, machine_percent=100, others=[],
                  process_columns={"children_s": 0.9 * secs})
    assert contention(run) is None
    assert not machine_warning(run)
    write_sampler(run, th, n_cpus=2, cpu_percent=100, machine_percent=100, others=[],
                  process_columns={"children_s": 0.0 * secs})
    assert isinstance(contention(run), Finding)


def test_live_children_read_at_every_sweep_are_placed_where_they_ran(tmp_path):
    # The sampler read the job's worker at every sweep (live_children_s, since 2026-11-30): its
    # mean over the scans is 0.3 core, but it used 0.9 over the typical steps (a data loader
    # works while the model computes): the job's own, no finding, no warning.
    _, run = host_trace(tmp_path, steps=20, wait_ms=0)
    th = two_runnable(20)
    secs = np.sort(th["t_ms"].unique()) / 1000
    worker = [(400, 100, "python3 worker", 0.3)]
    write_sampler(run, th, n_cpus=2, cpu_percent=100, machine_percent=100, others=worker,
                  process_columns={"live_children_s": 0.9 * secs})
    assert contention(run) is None
    assert not machine_warning(run)
    # The worker used 0.3 over the steps: the other 0.6 core is another process's, one the
    # scans could not see (another container's). Without the sweeps' reads the scans alone
    # must leave it out (test_beside_the_jobs_own_children_only_scanned_others_count).
    write_sampler(run, th, n_cpus=2, cpu_percent=100, machine_percent=100, others=worker,
                  process_columns={"live_children_s": 0.3 * secs})
    f = contention(run)
    assert isinstance(f, Finding), f
    assert f.numbers["own_children_cores"] == pytest.approx(0.3, abs=0.01)
    assert f.numbers["others_cores"] == pytest.approx(0.6, abs=0.01)
    # The 0.6 core won back is shared by the process (1 core) and its worker (0.3).
    host = f.numbers["host_share"]
    assert f.speedup == pytest.approx(1 / (1 - host * 0.6 / 1.9), rel=0.03)
    # Workers the sweeps never read (a PyDataset's per-fit workers, found by the last scan
    # only): their 0.5 core, their mean over the scans' span, cannot be placed in the steps,
    # and only scanned others count again (not the 0.4 core the counters leave).
    write_sampler(run, th, n_cpus=2, cpu_percent=100, machine_percent=100,
                  others=[(400, 100, "python3 worker", 0.5)],
                  process_columns={"live_children_s": 0.0 * secs})
    assert contention(run) is None


def test_others_out_of_the_samplers_view(tmp_path):
    # The machine full, no process the sampler can see used CPU: another container or a VM.
    _, run = host_trace(tmp_path, steps=20, wait_ms=0)
    write_sampler(run, two_runnable(20), n_cpus=2, cpu_percent=100, machine_percent=100,
                  others=[])
    f = contention(run)
    assert isinstance(f, Finding) and "outside its view" in f.evidence[3], f


def test_without_the_other_processes_scans_the_check_is_skipped(tmp_path):
    # Sampler data from before 2026-11-30: the job's own child processes would count as others.
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_any_sampler(run, two_runnable(), n_cpus=2, cpu_percent=100, machine_percent=100)
    s = contention(run)
    assert isinstance(s, Skipped) and "own child processes cannot be told" in s.reason
    assert "no scans of the other processes" in s.reason
    assert machine_warning(run)


def test_an_unreadable_others_file_is_a_warning(tmp_path):
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    write_sampler(run, two_runnable(), n_cpus=2, cpu_percent=100, machine_percent=100)
    (run / "host.others.parquet").write_bytes(b"PAR1 truncated")
    report = analyze(run)
    assert any("host.others.parquet: unreadable sampler file" in w
               for w in report.to_dict()["warnings"]), report.to_dict()["warnings"]
    assert report.ctx.sampler_process is not None  # the other files still count
    assert isinstance(contention(run), Skipped)


def test_too_few_sampler_intervals_say_nothing(tmp_path):
    # A 0.1 s window (10 steps of 10 ms): 20 sweeps at 200 Hz, 8 inside the typical steps' ops.
    _, run = host_trace(tmp_path, steps=10, step_ms=10, wait_ms=0)
    write_sampler(run, sweeps(10, 0, input_running=0, intra_op=1, steps=10, hz=100),
                  n_cpus=2, cpu_percent=100, machine_percent=100)
    assert contention(run) is None


def test_without_sampler_data_the_check_is_skipped(tmp_path):
    _, run = host_trace(tmp_path, steps=10, wait_ms=0)
    s = contention(run)
    assert isinstance(s, Skipped) and "no OS sampler data" in s.reason
