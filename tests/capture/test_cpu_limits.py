"""The CPUs a process may use: affinity, and cgroup v1/v2 CPU quotas, on fake /proc and cgroup
trees and, where this machine lets us, on a real process in a real cgroup."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recadvisor.capture.cpu_limits import (
    cgroup_cpu_limit,
    cgroup_cpu_quota,
    parse_cpu_stat,
    usable_cpus,
)
from recadvisor.capture.sampler import Sampler

V1_MOUNTS = (
    "31 23 0:28 / /CG rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /CG/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /CG/memory rw,relatime - cgroup cgroup rw,memory\n"
)
V2_MOUNTS = "29 23 0:26 / /CG rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def fake(tmp: Path, cgroup: str, mounts: str, files: dict[str, str], pid: int = 7) -> tuple:
    """A /proc with `pid`'s cgroup file, a mountinfo naming tmp/CG, and `files` under it."""
    proc = tmp / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text(cgroup)
    mountinfo = tmp / "mountinfo"
    mountinfo.write_text(mounts.replace("/CG", str(tmp / "CG")))
    for rel, text in files.items():
        path = tmp / "CG" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pid, str(proc), str(mountinfo)


def test_v1_quota_of_the_group_and_its_ancestors(tmp_path):
    pid, proc, mi = fake(tmp_path, "4:memory:/x\n2:cpu,cpuacct:/kubepods/pod1/ctr\n", V1_MOUNTS, {
        "cpu,cpuacct/kubepods/pod1/ctr/cpu.cfs_quota_us": "-1\n",
        "cpu,cpuacct/kubepods/pod1/ctr/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/kubepods/pod1/cpu.cfs_quota_us": "150000\n",  # the pod's limit: 1.5 cores
        "cpu,cpuacct/kubepods/pod1/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    assert cgroup_cpu_quota(pid, proc, mi) == pytest.approx(1.5)


def test_the_limit_names_the_group_that_sets_it(tmp_path):
    pid, proc, mi = fake(tmp_path, "0::/kubepods/pod1/ctr\n", V2_MOUNTS, {
        "kubepods/pod1/ctr/cpu.max": "max 100000\n",
        "kubepods/pod1/cpu.max": "250000 100000\n",
        "kubepods/cpu.max": "800000 100000\n"})
    limit = cgroup_cpu_limit(pid, proc, mi)
    assert limit.cores == pytest.approx(2.5)
    assert limit.stat == tmp_path / "CG" / "kubepods" / "pod1" / "cpu.stat"


def test_cpu_stat_counters_of_both_versions():
    v1 = "nr_periods 2498\nnr_throttled 1399\nthrottled_time 74948998083\nnr_bursts 0\n"
    assert parse_cpu_stat(v1.encode()) == (2498, 1399, pytest.approx(74.948998083))
    v2 = ("usage_usec 51\nuser_usec 40\nsystem_usec 11\nnr_periods 20\nnr_throttled 5\n"
          "throttled_usec 250000\n")
    assert parse_cpu_stat(v2) == (20, 5, pytest.approx(0.25))
    assert parse_cpu_stat("usage_usec 51\nuser_usec 40\n") is None


def test_v2_cpu_max(tmp_path):
    pid, proc, mi = fake(tmp_path, "0::/system.slice/job.service\n", V2_MOUNTS, {
        "system.slice/job.service/cpu.max": "200000 100000\n",
        "system.slice/cpu.max": "max 100000\n"})
    assert cgroup_cpu_quota(pid, proc, mi) == pytest.approx(2.0)


def test_no_quota_anywhere(tmp_path):
    pid, proc, mi = fake(tmp_path, "0::/user.slice\n", V2_MOUNTS,
                         {"user.slice/cpu.max": "max 100000\n"})
    assert cgroup_cpu_quota(pid, proc, mi) is None


def test_inside_a_container_the_mount_is_the_containers_own_group(tmp_path):
    # The recorded path names the host's hierarchy; the container mounts its own group at the
    # root, so the path does not exist under the mount: the mount point's quota is the one.
    pid, proc, mi = fake(tmp_path, "0::/kubepods.slice/pod9/ctr\n", V2_MOUNTS,
                         {"cpu.max": "50000 100000\n"})
    assert cgroup_cpu_quota(pid, proc, mi) == pytest.approx(0.5)


def test_unreadable_or_garbled_files_mean_no_quota(tmp_path):
    assert cgroup_cpu_quota(1, str(tmp_path / "none"), str(tmp_path / "none")) is None
    pid, proc, mi = fake(tmp_path, "garbage\n0::/a\n", V2_MOUNTS, {"a/cpu.max": "lots\n"})
    assert cgroup_cpu_quota(pid, proc, mi) is None


def test_affinity_caps_the_count():
    cpus = sorted(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             preexec_fn=lambda: os.sched_setaffinity(0, {cpus[0]}))
    try:
        assert usable_cpus(child.pid) == 1
    finally:
        child.kill()
        child.wait()
    assert 1 <= usable_cpus(os.getpid()) <= len(cpus)


@contextlib.contextmanager
def _v1_group(name: str):
    """A real cgroup v1 `cpu` group, or a skip where this machine has none we may write."""
    root = Path("/sys/fs/cgroup/cpu")
    group = root / name
    try:
        group.mkdir()
    except OSError as e:
        pytest.skip(f"no writable cgroup v1 cpu hierarchy here ({e.strerror})")
    try:
        yield group
    finally:
        with contextlib.suppress(OSError):
            group.rmdir()


def test_a_real_quota_on_a_real_process():
    with _v1_group(f"recadvisor-test-{os.getpid()}") as group:
        (group / "cpu.cfs_quota_us").write_text("50000")  # half a core per 100 ms period
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            (group / "cgroup.procs").write_text(str(child.pid))
            assert cgroup_cpu_quota(child.pid) == pytest.approx(0.5)
            assert usable_cpus(child.pid) == pytest.approx(0.5)
        finally:
            child.kill()
            child.wait()


def test_the_sampler_records_a_real_quota_and_its_throttling():
    with _v1_group(f"recadvisor-sampled-{os.getpid()}") as group:
        (group / "cpu.cfs_quota_us").write_text("50000")
        spin = "import time\nt = time.time()\nwhile time.time() - t < 30: pass\n"
        child = subprocess.Popen([sys.executable, "-c", spin])
        try:
            (group / "cgroup.procs").write_text(str(child.pid))
            s = Sampler(child.pid, hz=50, cpu_budget=None).start()
            time.sleep(1.0)
            s.stop()
            process = s.tables()[1].to_pandas()
        finally:
            child.kill()
            child.wait()
    assert (process.cpu_quota == 0.5).all()
    assert (process.affinity_cpus == len(os.sched_getaffinity(0))).all()
    # One spinning thread on a half-core quota is stopped in every 100 ms period.
    periods = process.cpu_periods.iloc[-1] - process.cpu_periods.iloc[0]
    throttled = process.cpu_throttled_periods.iloc[-1] - process.cpu_throttled_periods.iloc[0]
    assert periods >= 8 and throttled >= periods - 2, (periods, throttled)
    assert process.cpu_throttled_s.iloc[-1] - process.cpu_throttled_s.iloc[0] > 0.3
