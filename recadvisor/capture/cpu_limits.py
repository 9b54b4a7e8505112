"""How many CPUs a process may use: its affinity mask, capped by its cgroup's CPU quota.

`os.cpu_count()` is the machine's count. A process pinned by `taskset` or a container's cpuset
may run on fewer, and a container with a CPU limit (Kubernetes `resources.limits.cpu`, Docker
`--cpus`) gets a quota of CPU time per period however many cores it sees. The analyzers count
idle cores against this number, not the machine's (docs/trace-signals.md, "Idle cores").

Only Linux; every read is tolerant: a file that is missing or unreadable means "no limit known".
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import NamedTuple

_MOUNTINFO = "/proc/self/mountinfo"


class CpuLimit(NamedTuple):
    """A CPU quota on a cgroup: `cores` (quota / period) and the group's `cpu.stat`, whose
    throttling counters say how often the quota stopped the group."""

    cores: float
    stat: Path


def affinity_cpus(pid: int) -> int:
    """The CPUs `pid` may run on (taskset, a container's cpuset); the machine's count when the
    platform does not say."""
    try:
        return len(os.sched_getaffinity(pid))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable_cpus(pid: int, proc: str = "/proc", mountinfo: str = _MOUNTINFO) -> float:
    """The CPUs `pid` may use: its affinity count, capped by its cgroup's CPU quota (cores,
    possibly fractional). The machine's count when neither is known."""
    quota = cgroup_cpu_quota(pid, proc, mountinfo)
    allowed = float(affinity_cpus(pid))
    return min(allowed, quota) if quota is not None else allowed


def cgroup_cpu_quota(pid: int, proc: str = "/proc", mountinfo: str = _MOUNTINFO) -> float | None:
    """The tightest CPU quota (quota / period, in cores) on `pid`'s cgroup and its ancestors,
    cgroup v2 (`cpu.max`) or v1 (`cpu.cfs_quota_us` / `cpu.cfs_period_us`); None without one."""
    limit = cgroup_cpu_limit(pid, proc, mountinfo)
    return None if limit is None else limit.cores


def cgroup_cpu_limit(pid: int, proc: str = "/proc", mountinfo: str = _MOUNTINFO
                     ) -> CpuLimit | None:
    """The tightest CPU quota on `pid`'s cgroup and its ancestors, with the `cpu.stat` of the
    group that sets it; None without one."""
    try:
        memberships = Path(f"{proc}/{pid}/cgroup").read_text().splitlines()
        mounts = Path(mountinfo).read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in memberships:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        v2 = controllers == ""
        if not v2 and "cpu" not in controllers.split(","):
            continue
        for root, mountpoint in _cgroup_mounts(mounts, v2):
            for directory in _ancestors(Path(mountpoint), root, path):
                q = _read_quota(directory, v2)
                if q is not None:
                    limits.append(CpuLimit(q, directory / "cpu.stat"))
    return min(limits, key=lambda limit: limit.cores) if limits else None


def parse_cpu_stat(text: bytes | str) -> tuple[int, int, float] | None:
    """(periods, throttled periods, throttled seconds) from a cgroup `cpu.stat`: v1 counts the
    throttled time in ns (`throttled_time`), v2 in µs (`throttled_usec`). The time is summed over
    the CPUs the group's threads were stopped on, not wall time. None when the counters are
    missing (a v2 group without the cpu controller has only usage lines)."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            values[key] = int(value)
    if "nr_periods" not in values or "nr_throttled" not in values:
        return None
    if "throttled_time" in values:
        throttled = values["throttled_time"] / 1e9
    elif "throttled_usec" in values:
        throttled = values["throttled_usec"] / 1e6
    else:
        return None
    return values["nr_periods"], values["nr_throttled"], throttled


def _cgroup_mounts(mounts: list[str], v2: bool) -> list[tuple[str, str]]:
    """(root inside the hierarchy, mount point) of each cgroup2 mount, or each v1 mount that
    carries the `cpu` controller (mountinfo(5): the fields after ` - ` are type, source,
    superblock options)."""
    found = []
    for m in mounts:
        head, sep, tail = m.partition(" - ")
        fields, after = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(after) < 3:
            continue
        fstype, options = after[0], after[2].split(",")
        if (v2 and fstype == "cgroup2") or (not v2 and fstype == "cgroup" and "cpu" in options):
            found.append((fields[3], fields[4]))
    return found


def _ancestors(mountpoint: Path, root: str, path: str) -> list[Path]:
    """The cgroup's directory under the mount and every directory above it up to the mount.
    Inside a container the mount's root is the container's own cgroup, whose path may not
    start with the process's recorded path: then only the mount point itself is read."""
    rel = path
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        rel = path[len(root.rstrip("/")):]
    directory = mountpoint / rel.lstrip("/")
    if not directory.is_dir():
        return [mountpoint]
    out = [directory]
    while directory != mountpoint and mountpoint in directory.parents:
        directory = directory.parent
        out.append(directory)
    return out


def _read_quota(directory: Path, v2: bool) -> float | None:
    try:
        if v2:
            quota, _, period = (directory / "cpu.max").read_text().strip().partition(" ")
            if quota == "max":
                return None
            q, p = float(quota), float(period or 100000)
        else:
            q = float((directory / "cpu.cfs_quota_us").read_text())
            p = float((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    if q <= 0 or p <= 0 or not math.isfinite(q / p):
        return None  # -1: no quota (v1)
    return q / p
