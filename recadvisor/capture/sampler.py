"""OS sampler: thread states, CPU and I/O of one process, for the same window as the TF profile.

Every `1/hz` seconds one sweep reads, for every thread of the target process,
`/proc/<pid>/task/<tid>/stat` (state letter, cumulative user/system CPU, thread name,
delay-accounted block-I/O ticks), and for the process `/proc/<pid>/stat`, `/proc/<pid>/io` and the
machine's `/proc/stat` line. psutil has no API for per-thread state, name or block-I/O delay, and
its process-level calls open, read and close a file per value; the sampler instead keeps one file
descriptor per /proc file and re-reads it with `pread` (the kernel regenerates the text on every
read at offset 0), and parses the text later, in batches.

About once a second a sweep also reads every other process's `/proc/<pid>/stat` (name, parent,
cumulative CPU), keeping a row where a process's CPU moved: which processes took the machine's
cores, and which of them are the job's own children (data loader workers), can then be told. A
scan costs ~10 us of CPU a process (the kernel writing the text), ~40 ms on a host with 4,000;
where a scan a second would take more than half the sampler's CPU budget, the scans are spaced
out to fit it (`bench/sampler_scan.py`).

Rows are stamped with `time.time_ns()` (CLOCK_REALTIME), the clock of TF's xplane once its
`profile_start_time` is added (docs/trace-signals.md, "Sampler"). Files and columns:
`recadvisor.capture.layout`.

Run it in a *separate process* from the training (`SamplerProcess`, or
`python -m recadvisor.capture.sampler --pid PID ...`) so its sweeps never hold the training
process's GIL; `recadvisor capture` runs it on a thread of its own (parent) process, which is
equally separate from the training.

Only Linux is supported (/proc).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import Any, NamedTuple

from recadvisor.capture.cpu_limits import affinity_cpus, cgroup_cpu_limit, parse_cpu_stat
from recadvisor.capture.layout import OTHERS_SUFFIX, PROCESS_SUFFIX, THREADS_SUFFIX

DEFAULT_HZ = 50.0
MIN_HZ = 1.0
MAX_HZ = 1000.0
FLOOR_HZ = 20.0  # the CPU budget never slows the sampler below this
# The sampler's own CPU, as a share of the whole machine (all cores): what it can take from a job
# that keeps every core busy. The goal is <= 1% of the job's throughput.
DEFAULT_CPU_BUDGET = 0.01
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_READ_SIZE = 4096
# Seconds between scans of the other processes, at the least: ~1 ms a scan for 70 processes,
# ~10 ms for 1,000. Scans may take this share of the sampler's CPU budget; beyond it they are
# spaced out (the threads' sweeps, which the analyzers read at every step, keep the rest).
OTHERS_EVERY_S = 1.0
OTHERS_BUDGET_SHARE = 0.5


class TaskStat(NamedTuple):
    """The fields of a `/proc/<pid>[/task/<tid>]/stat` line the sampler keeps (proc(5) numbers)."""

    tid: int  # field 1
    name: str  # field 2, comm, without the parentheses
    state: str  # field 3: R, S, D, Z, T, t, X, I, ...
    utime_ticks: int  # field 14, clock ticks
    stime_ticks: int  # field 15
    children_ticks: int  # fields 16 + 17, cutime + cstime: CPU of its children once reaped
    num_threads: int  # field 20
    rss_pages: int  # field 24
    blkio_ticks: int  # field 42, delayacct_blkio_ticks (0 when delay accounting is off)


def parse_task_stat(text: bytes | str) -> TaskStat:
    """Parse one stat line. The name (comm) may hold spaces and parentheses: it runs from the first
    '(' to the *last* ')', which the kernel guarantees because the fields after it are numbers."""
    line = text.encode() if isinstance(text, str) else text
    open_ = line.find(b"(")
    close = line.rfind(b")")
    if open_ < 1 or close < open_:
        raise ValueError(f"not a /proc stat line: {line[:80]!r}")
    rest = line[close + 2 :].split()
    if len(rest) < 22:
        raise ValueError(f"truncated /proc stat line: {line[:80]!r}")
    return TaskStat(
        tid=int(line[: open_ - 1]),
        name=line[open_ + 1 : close].decode("utf-8", "replace"),
        state=rest[0].decode(),
        utime_ticks=int(rest[11]),
        stime_ticks=int(rest[12]),
        children_ticks=int(rest[13]) + int(rest[14]),
        num_threads=int(rest[17]),
        rss_pages=int(rest[21]),
        # Field 42 exists since Linux 2.6.18; older or truncated lines count as "not accounted".
        blkio_ticks=int(rest[39]) if len(rest) > 39 else 0,
    )


class ProcEntry(NamedTuple):
    """What the sampler keeps of another process's `/proc/<pid>/stat` line."""

    pid: int  # field 1
    name: str  # field 2, comm
    ppid: int  # field 4
    cpu_ticks: int  # fields 14 + 15, utime + stime
    start_ticks: int  # field 22, starttime (with the pid, names the process: pids are reused)


def parse_proc_entry(text: bytes | str) -> ProcEntry:
    line = text.encode() if isinstance(text, str) else text
    open_, close = line.find(b"("), line.rfind(b")")
    if open_ < 1 or close < open_:
        raise ValueError(f"not a /proc stat line: {line[:80]!r}")
    rest = line[close + 2 :].split()
    if len(rest) < 20:
        raise ValueError(f"truncated /proc stat line: {line[:80]!r}")
    return ProcEntry(pid=int(line[: open_ - 1]),
                     name=line[open_ + 1 : close].decode("utf-8", "replace"),
                     ppid=int(rest[1]), cpu_ticks=int(rest[11]) + int(rest[12]),
                     start_ticks=int(rest[19]))


def parse_proc_io(text: bytes | str) -> tuple[int, int, int]:
    """`/proc/<pid>/io` -> (read_bytes, write_bytes, rchar): bytes that came from or went to
    block devices, and bytes returned by read calls, whatever served them (page cache, network
    file systems, pipes)."""
    raw = text.decode() if isinstance(text, bytes) else text
    fields = dict(line.split(":", 1) for line in raw.splitlines() if ":" in line)
    return int(fields["read_bytes"]), int(fields["write_bytes"]), int(fields["rchar"])


class CpuTimes(NamedTuple):
    total_ticks: int
    idle_ticks: int  # idle + iowait: time no task ran
    iowait_ticks: int


def parse_proc_stat_cpu(text: bytes | str) -> CpuTimes:
    """The aggregate `cpu ` line of `/proc/stat` (all CPUs). guest/guest_nice are already counted
    in user/nice, so they are left out of the total."""
    raw = text.decode() if isinstance(text, bytes) else text
    for line in raw.splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]]
            v += [0] * (8 - len(v))
            user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
            total = user + nice + system + idle + iowait + irq + softirq + steal
            return CpuTimes(total, idle + iowait, iowait)
    raise ValueError("no aggregate 'cpu ' line in /proc/stat text")


class Sampler:
    """Samples one process. `sample()` takes one sweep; `run(stop)` sweeps at `hz` until `stop` is
    set or the process is gone; `start()`/`stop()` do that on a daemon thread of this process.

    A sweep only reads: the raw /proc lines are kept and parsed in batches every few seconds (an
    idle thread's line repeats, so each distinct line is parsed once), which keeps the per-sweep
    cost near the kernel's cost of producing the text. The thread list is re-read when the
    process's thread count changes, a thread's file stops answering, or every `relist_every`
    sweeps; a thread that appears is picked up then, one that exits is dropped.
    """

    def __init__(
        self,
        pid: int,
        hz: float = DEFAULT_HZ,
        clock=time.time_ns,
        compact_every: int = 250,
        relist_every: int = 10,
        cpu_budget: float | None = DEFAULT_CPU_BUDGET,
    ) -> None:
        if not MIN_HZ <= hz <= MAX_HZ:
            raise ValueError(f"sampler rate {hz} Hz is outside {MIN_HZ:g}..{MAX_HZ:g}")
        self.pid = int(pid)
        self.hz = float(hz)
        self.cpu_budget = cpu_budget
        self._clock = clock
        self._compact_every = compact_every
        self._relist_every = relist_every
        self._task_dir = f"/proc/{self.pid}/task"
        try:
            self._stat_fd: int | None = os.open(f"/proc/{self.pid}/stat", os.O_RDONLY)
        except FileNotFoundError:
            raise ProcessLookupError(f"no process {self.pid} to sample") from None
        self._io_fd = _open_or_none(f"/proc/{self.pid}/io")  # needs ptrace access: may be denied
        self._sys_fd: int | None = os.open("/proc/stat", os.O_RDONLY)
        self._fd_of: dict[str, int] = {}
        self._fd_list: list[int] = []
        self._nthreads = b""  # the thread count at the last listing, as text
        self._since_list = 0
        # Raw sweeps, parsed by _compact(): (ts, thread lines, process stat, io, /proc/stat,
        # the quota group's cpu.stat, the child processes' (pid, start) and stat lines).
        self._raw: list[tuple[int, list[bytes], bytes, bytes | None, bytes, bytes | None,
                              list[tuple[tuple[int, int], bytes]]]] = []
        # Parsed: one TaskStat per thread row (identical lines share one object), the sweep's
        # timestamp and row count per sweep, one tuple per process row.
        self._rows: list[TaskStat] = []
        self._sweep_ts = array("q")
        self._sweep_rows = array("q")
        self._prows: list[tuple[int, ...]] = []
        self.n_cpus = os.cpu_count() or 1
        # Affinity and cgroup quota, read once: what the process can use of the n_cpus; the
        # quota's group's cpu.stat is read every sweep (how often the quota stopped it).
        self.affinity_cpus = affinity_cpus(self.pid)
        limit = cgroup_cpu_limit(self.pid)
        self.cpu_quota = limit.cores if limit else None
        self._cg_fd = _open_or_none(str(limit.stat)) if limit else None
        # Other processes: the rows kept (where a process's CPU moved since the last scan,
        # every process at the first), as (ts, ProcEntry, command line); per process (pid,
        # start), its CPU ticks at the last scan and its command line once it moved.
        self._others: list[tuple[int, ProcEntry, str]] = []
        self._others_last: dict[tuple[int, int], int] = {}
        self._others_cmd: dict[tuple[int, int], str] = {}
        # Each process's stat text at the last scan: an idle process's text repeats byte for
        # byte, and is not parsed again; its parsed entry, for the parents.
        self._others_text: dict[str, bytes] = {}
        self._others_entry: dict[str, ProcEntry] = {}
        # The job's own child processes (descendants of the sampled one, found by the scans):
        # every sweep reads their stat too, so that their CPU is placed interval by interval
        # (a data loader's workers work while the model computes), not a scan's second apart.
        # Per (pid, start): the open stat file, and the CPU ticks (its own and its reaped
        # children's) it is counted from: its first read for one alive at the first scan, 0 for
        # one started later (its CPU since its start then lands at the sweep after the scan).
        self._kid_fd: dict[tuple[int, int], int] = {}
        self._kid_base: dict[tuple[int, int], int | None] = {}
        self._others_due = 0
        self.others_every_s = OTHERS_EVERY_S  # stretched when scans outgrow their budget share
        self.others_scans = 0
        self.others_cpu_s = 0.0  # CPU time of the scans (part of sweep_cpu_s)
        self._scan_s = 0.0  # the CPU time of the last sweep's scan (0 when it had none)
        self._scan_rate = 0.0  # CPU seconds a second the scans take, at the last one's cost
        self.gone = False  # the process exited
        self.late_sweeps = 0  # sweeps that started more than one period late
        self.sweep_cpu_s = 0.0  # CPU time of the sweeps (run()'s, and start()'s first)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def samples(self) -> int:
        return len(self._sweep_ts) + len(self._raw)

    def sample(self) -> bool:
        """One sweep; False (and nothing recorded) once the process is gone."""
        ts = self._clock()
        try:
            pstat = os.pread(self._stat_fd, _READ_SIZE, 0)
        except ProcessLookupError:
            pstat = b""
        close = pstat.rfind(b")")
        if close < 0 or pstat[close + 2 : close + 3] in (b"Z", b"X"):
            self.gone = True
            return False
        nthreads = pstat[close + 2 :].split(None, 18)[17]
        self._since_list += 1
        if nthreads != self._nthreads or self._since_list >= self._relist_every:
            try:
                self._list_threads(os.listdir(self._task_dir))
            except FileNotFoundError:
                self.gone = True
                return False
            self._nthreads = nthreads
        try:
            lines = [os.pread(fd, _READ_SIZE, 0) for fd in self._fd_list]
        except OSError:  # a thread exited since the listing
            lines = self._read_tolerant()
        io = cg = None
        if self._io_fd is not None:
            with contextlib.suppress(OSError):
                io = os.pread(self._io_fd, _READ_SIZE, 0)
        if self._cg_fd is not None:
            with contextlib.suppress(OSError):
                cg = os.pread(self._cg_fd, _READ_SIZE, 0)
        kids = []
        for key, fd in list(self._kid_fd.items()):
            try:
                kids.append((key, os.pread(fd, _READ_SIZE, 0)))
            except OSError:  # it exited and was waited for: its CPU is in its parent's now
                os.close(self._kid_fd.pop(key))
        self._raw.append((ts, lines, pstat, io, os.pread(self._sys_fd, _READ_SIZE, 0), cg, kids))
        self._scan_s = 0.0
        if ts >= self._others_due:
            c0 = time.thread_time()
            self._scan_others(ts)
            self._scan_s = cost = time.thread_time() - c0
            self.others_scans += 1
            self.others_cpu_s += cost
            budget = (self.cpu_budget or 0.0) * self.n_cpus * OTHERS_BUDGET_SHARE
            if budget > 0:
                self.others_every_s = max(OTHERS_EVERY_S, cost / budget)
            self._scan_rate = cost / self.others_every_s
            self._others_due = ts + int(self.others_every_s * 1e9)
        if len(self._raw) >= self._compact_every:
            self._compact()
        return True

    def _list_threads(self, tids: list[str]) -> None:
        fd_of = self._fd_of
        for tid in set(fd_of).difference(tids):
            os.close(fd_of.pop(tid))
        for tid in tids:
            if tid not in fd_of:
                fd = _open_or_none(f"{self._task_dir}/{tid}/stat")
                if fd is not None:
                    fd_of[tid] = fd
        self._fd_list = list(fd_of.values())
        self._since_list = 0

    def _read_tolerant(self) -> list[bytes]:
        lines = []
        for tid, fd in list(self._fd_of.items()):
            try:
                lines.append(os.pread(fd, _READ_SIZE, 0))
            except OSError:
                os.close(self._fd_of.pop(tid))
        self._fd_list = list(self._fd_of.values())
        self._nthreads = b""  # list the threads again at the next sweep
        return lines

    def _compact(self) -> None:
        """Parse the raw sweeps kept since the last call."""
        cache: dict[bytes, TaskStat] = {}
        rows, prows = self._rows, self._prows
        for ts, lines, pstat, io, sysl, cg, kids in self._raw:
            n = len(rows)
            for line in lines:
                st = cache.get(line)
                if st is None:
                    if not line:  # read after the thread exited: no text
                        continue
                    st = cache[line] = parse_task_stat(line)
                rows.append(st)
            self._sweep_ts.append(ts)
            self._sweep_rows.append(len(rows) - n)
            proc = parse_task_stat(pstat)
            rd, wr, rchar = -1, -1, -1
            if io:
                with contextlib.suppress(KeyError, ValueError):
                    rd, wr, rchar = parse_proc_io(io)
            cpu = parse_proc_stat_cpu(sysl)
            periods, throttled, throttled_us = -1, -1, -1
            if cg and (counters := parse_cpu_stat(cg)) is not None:
                periods, throttled, throttled_us = *counters[:2], round(counters[2] * 1e6)
            live = 0
            for key, line in kids:
                with contextlib.suppress(ValueError):
                    k = cache.get(line)
                    if k is None:
                        k = cache[line] = parse_task_stat(line)
                    ticks = k.utime_ticks + k.stime_ticks + k.children_ticks
                    base = self._kid_base.get(key)
                    if base is None:
                        base = self._kid_base[key] = ticks
                    live += ticks - base
            prows.append(
                (ts, proc.utime_ticks, proc.stime_ticks, proc.rss_pages * PAGE_SIZE, rd, wr,
                 proc.num_threads, cpu.total_ticks, cpu.idle_ticks, cpu.iowait_ticks, rchar,
                 periods, throttled, throttled_us, proc.children_ticks, live)
            )  # fmt: skip
        self._raw.clear()

    def _scan_others(self, ts: int) -> None:
        """Every other process's CPU: a row where it moved since the last scan (at the first,
        every process), with its command line read once it does (Python processes are all
        `python3` by name)."""
        last, cmds, first = self._others_last, self._others_cmd, not self._others_last
        before, texts = self._others_text, {}
        parsed, entries = self._others_entry, {}
        for entry, line in _other_stats(self.pid):
            texts[entry] = line
            if before.get(entry) == line:
                if entry in parsed:
                    entries[entry] = parsed[entry]
                continue
            try:
                e = parse_proc_entry(line)
            except ValueError:
                continue
            entries[entry] = e
            key = (e.pid, e.start_ticks)
            if last.get(key) == e.cpu_ticks:
                continue
            last[key] = e.cpu_ticks
            if not first and key not in cmds:
                cmds[key] = _command_line(e.pid)
            self._others.append((ts, e, cmds.get(key, "")))
        self._others_text, self._others_entry = texts, entries
        self._watch_children(entries.values(), first)

    def _watch_children(self, entries, first: bool) -> None:
        """Open the stat files of the sampled process's descendants the scan found (the sampler's
        own process, a child of the job where the job starts it, is left out: it is counted as
        the sampler's)."""
        kids_of: dict[int, list[ProcEntry]] = {}
        me = os.getpid()
        for e in entries:
            if e.pid != me:
                kids_of.setdefault(e.ppid, []).append(e)
        todo, found = [self.pid], set()
        while todo:
            for e in kids_of.get(todo.pop(), ()):
                key = (e.pid, e.start_ticks)
                if key not in found:
                    found.add(key)
                    todo.append(e.pid)
        for key in found.difference(self._kid_fd):
            if key in self._kid_base:
                continue  # watched before and gone since (pids are reused; starts are not)
            fd = _open_or_none(f"/proc/{key[0]}/stat")
            if fd is not None:
                self._kid_fd[key] = fd
                self._kid_base[key] = None if first else 0

    def run(self, stop: threading.Event) -> None:
        """Sweep every 1/hz s until `stop` is set or the process exits; one last sweep after
        `stop` so the samples cover the moment the caller stopped. A late sweep skips the ticks it
        missed, it does not burst to catch up.

        CPU budget: the sampler's own CPU time per sweep (the /proc reads, parsing, the timer
        wake-up) is tracked; when `hz` sweeps a second would cost more than `cpu_budget` of the
        machine (all cores), less what the other processes' scans take, the period is stretched
        to fit, down to `FLOOR_HZ` at the lowest. The scans are spaced out to take no more than
        `OTHERS_BUDGET_SHARE` of the budget (`sample`), and their cost is left out of the
        sweeps': a long scan once a second would otherwise slow every sweep after it.
        """
        c0 = time.thread_time()
        base = 1.0 / self.hz
        longest = max(base, 1.0 / FLOOR_HZ)
        budget = self.cpu_budget * self.n_cpus if self.cpu_budget else None  # CPU-s per s
        period = base
        cost = 0.0  # smoothed CPU seconds per sweep
        due = time.monotonic()
        cpu_prev = c0
        while not stop.is_set():
            if not self.sample():
                break
            cpu_now = time.thread_time()
            spent = cpu_now - cpu_prev - self._scan_s
            cost = spent if not cost else 0.9 * cost + 0.1 * spent
            cpu_prev = cpu_now
            if budget:
                period = min(longest, max(base, cost / (budget - self._scan_rate)))
            due += period
            now = time.monotonic()
            if now > due + period:
                self.late_sweeps += 1
                due = now + period
            if due > now:
                time.sleep(due - now)  # cheaper to wake from than Event.wait; stop is checked next
        else:
            # The other processes too: a window shorter than their scans' period still lies
            # between two of them.
            self._others_due = 0
            self.sample()
        self.sweep_cpu_s += time.thread_time() - c0

    def start(self) -> Sampler:
        """Sample on a daemon thread of this process; the first sweep is done before returning.

        Use it from a process other than the one sampled (`recadvisor capture` does): in the
        sampled process itself the sweeps would take that process's GIL."""
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        c0 = time.thread_time()
        if not self.sample():
            raise ProcessLookupError(f"process {self.pid} exited before sampling started")
        self.sweep_cpu_s += time.thread_time() - c0  # the first scan of every process is here
        self._thread = threading.Thread(
            target=self.run, args=(self._stop,), name="recadvisor-sampler", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.close()

    def close(self) -> None:
        for fd in [*self._fd_of.values(), *self._kid_fd.values(), self._stat_fd, self._io_fd,
                   self._sys_fd, self._cg_fd]:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd_of.clear()
        self._kid_fd.clear()
        self._fd_list = []
        self._stat_fd = self._io_fd = self._sys_fd = self._cg_fd = None

    def drop_before(self, ts_ns: int) -> None:
        """Forget samples taken before `ts_ns` (a sampler started early, trimmed to its window)."""
        self._compact()
        k = bisect.bisect_left(self._sweep_ts, ts_ns)
        if k:
            del self._rows[: sum(self._sweep_rows[:k])]
            del self._sweep_ts[:k], self._sweep_rows[:k], self._prows[:k]
        # The other processes' rows stay: the last one before the window is its baseline.

    def tables(self):
        """The two pyarrow Tables, columns as in `recadvisor.capture.layout`."""
        import numpy as np
        import pyarrow as pa

        self._compact()
        n = len(self._rows)
        cols = list(zip(*self._rows, strict=True)) if n else [()] * len(TaskStat._fields)
        tf = dict(zip(TaskStat._fields, cols, strict=True))
        sweep_ts = np.frombuffer(self._sweep_ts, dtype=np.int64)
        threads = pa.table(
            {
                "ts_ns": pa.array(np.repeat(sweep_ts, self._sweep_rows), pa.int64()),
                "pid": pa.array(np.full(n, self.pid, np.int32)),
                "tid": pa.array(tf["tid"], pa.int32()),
                "name": pa.array(tf["name"], pa.string()),
                "state": pa.array(tf["state"], pa.string()),
                "user_s": pa.array(np.asarray(tf["utime_ticks"], np.float64) / CLK_TCK),
                "system_s": pa.array(np.asarray(tf["stime_ticks"], np.float64) / CLK_TCK),
                "blkio_ticks": pa.array(tf["blkio_ticks"], pa.int64()),
            }
        )
        m = len(self._prows)
        p = np.asarray(self._prows, dtype=np.int64).reshape(m, 16)
        (ts, user, system, rss, rd, wr, nth, tot, idle, iow, rchar, periods, throttled, thr_us,
         children, live) = p.T
        cpu_pct = np.zeros(m)
        sys_pct = np.zeros(m)
        if m > 1:
            # Over the interval ending at each sample; the first sample has no interval (0).
            dt_s = np.diff(ts) / 1e9
            dtot = np.diff(tot)
            with np.errstate(divide="ignore", invalid="ignore"):
                busy = np.diff(user + system) / CLK_TCK
                cpu_pct[1:] = np.where(dt_s > 0, 100.0 * busy / dt_s, 0)
                sys_pct[1:] = np.where(dtot > 0, 100.0 * (1 - np.diff(idle) / dtot), 0)
        process = pa.table(
            {
                "ts_ns": pa.array(ts, pa.int64()),
                "pid": pa.array(np.full(m, self.pid, np.int32)),
                "cpu_percent": pa.array(cpu_pct),
                "rss_bytes": pa.array(rss, pa.int64()),
                "read_bytes": pa.array(rd, pa.int64()),
                "write_bytes": pa.array(wr, pa.int64()),
                "num_threads": pa.array(nth.astype(np.int32)),
                "system_cpu_percent": pa.array(sys_pct),
                "iowait_s": pa.array(iow / CLK_TCK),
                "n_cpus": pa.array(np.full(m, self.n_cpus, np.int32)),
                # Beyond the fixed columns: cumulative process CPU seconds. cpu_percent over one
                # 20 ms interval is quantized by the kernel's 1/CLK_TCK accounting; differences
                # of these over longer windows are not.
                "user_s": pa.array(user / CLK_TCK),
                "system_s": pa.array(system / CLK_TCK),
                "rchar_bytes": pa.array(rchar, pa.int64()),
                "affinity_cpus": pa.array(np.full(m, self.affinity_cpus, np.int32)),
                "cpu_quota": pa.array(np.full(m, self.cpu_quota or -1.0, np.float64)),
                "cpu_periods": pa.array(periods, pa.int64()),
                "cpu_throttled_periods": pa.array(throttled, pa.int64()),
                "cpu_throttled_s": pa.array(np.where(thr_us >= 0, thr_us / 1e6, -1.0)),
                "children_s": pa.array(children / CLK_TCK),
                "live_children_s": pa.array(live / CLK_TCK),
            }
        )
        return threads, process

    def others_table(self):
        """The other processes' rows (`recadvisor.capture.layout`: `<host>.others.parquet`)."""
        import pyarrow as pa

        ts = [t for t, _, _ in self._others]
        cols = list(zip(*(e for _, e, _ in self._others), strict=True)) or [()] * len(
            ProcEntry._fields)
        e = dict(zip(ProcEntry._fields, cols, strict=True))
        return pa.table({
            "ts_ns": pa.array(ts, pa.int64()),
            "pid": pa.array(e["pid"], pa.int32()),
            "ppid": pa.array(e["ppid"], pa.int32()),
            "name": pa.array(e["name"], pa.string()),
            "cmd": pa.array([c for _, _, c in self._others], pa.string()),
            "cpu_s": pa.array([c / CLK_TCK for c in e["cpu_ticks"]], pa.float64()),
            "start_ticks": pa.array(e["start_ticks"], pa.int64()),
            "sampled_pid": pa.array([self.pid] * len(ts), pa.int32()),
            "sampler_pid": pa.array([os.getpid()] * len(ts), pa.int32()),
        })

    def write(self, threads_path: Path, process_path: Path,
              others_path: Path | None = None) -> tuple[Path, ...]:
        """Write the Parquet files atomically (temp name, then rename): threads and process,
        and the other processes' when `others_path` is given."""
        import pyarrow.parquet as pq

        threads, process = self.tables()
        todo = [(threads, Path(threads_path)), (process, Path(process_path))]
        if others_path is not None:
            todo.append((self.others_table(), Path(others_path)))
        out = []
        for table, path in todo:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            pq.write_table(table, tmp, compression="zstd")
            os.replace(tmp, path)
            out.append(path)
        return tuple(out)

    def summary(self) -> dict[str, Any]:
        self._compact()
        ts = self._sweep_ts
        span = (ts[-1] - ts[0]) / 1e9 if len(ts) > 1 else 0.0
        return {
            "pid": self.pid,
            "hz": self.hz,
            "samples": len(ts),
            "thread_rows": len(self._rows),
            "start_ns": ts[0] if ts else None,
            "end_ns": ts[-1] if ts else None,
            "achieved_hz": round((len(ts) - 1) / span, 2) if span > 0 else None,
            "late_sweeps": self.late_sweeps,
            "sweep_cpu_s": round(self.sweep_cpu_s, 4),
            "cpu_budget": self.cpu_budget,
            # The other processes' scans: how many, their CPU (within sweep_cpu_s) and the last
            # interval between them (over 1 s where a scan outgrew its budget share).
            "others_scans": self.others_scans,
            "others_cpu_s": round(self.others_cpu_s, 4),
            "others_every_s": round(self.others_every_s, 3),
            "delay_accounting": delay_accounting_enabled(),
        }


def _other_stats(pid: int) -> list[tuple[str, bytes]]:
    """(pid, stat line) of every process but `pid` (one that exits meanwhile is skipped). Bare
    os.open/os.read: Python's buffered file objects cost half as much again as the kernel's
    work for these small files."""
    lines = []
    own = str(pid)
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != own:
            try:
                fd = os.open(f"/proc/{entry}/stat", os.O_RDONLY)
            except OSError:
                continue
            try:
                lines.append((entry, os.read(fd, _READ_SIZE)))
            except OSError:
                pass
            finally:
                os.close(fd)
    return lines


def _command_line(pid: int, limit: int = 200) -> str:
    """`/proc/<pid>/cmdline`, arguments joined by spaces, cut at `limit` characters ('' for a
    kernel thread or a process gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4 * limit)
    except OSError:
        return ""
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")[:limit]


def _open_or_none(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None


def delay_accounting_enabled() -> bool | None:
    """Whether the kernel fills `blkio_ticks` (sysctl kernel.task_delayacct); None if unknown."""
    try:
        return Path("/proc/sys/kernel/task_delayacct").read_text().strip() == "1"
    except OSError:
        return None


def sampler_paths(directory: Path, host: str) -> tuple[Path, Path, Path]:
    """`<dir>/<host>.threads.parquet`, `<dir>/<host>.process.parquet`,
    `<dir>/<host>.others.parquet`."""
    d = Path(directory)
    return (d / f"{host}{THREADS_SUFFIX}", d / f"{host}{PROCESS_SUFFIX}",
            d / f"{host}{OTHERS_SUFFIX}")


class SamplerProcess:
    """The sampler in a child process (`python -m recadvisor.capture.sampler`), against `pid`.

    `start()` returns once the first sweep is done (so the samples cover everything after it);
    `stop()` signals it, waits for the files and returns its summary. It also stops by itself,
    writing what it has, when the target exits or on SIGINT/SIGTERM (Ctrl-C reaches it too).
    """

    def __init__(
        self,
        pid: int,
        threads_path: Path,
        process_path: Path,
        hz: float = DEFAULT_HZ,
        cpu_budget: float | None = DEFAULT_CPU_BUDGET,
        others_path: Path | None = None,
    ) -> None:
        self.cmd = [
            sys.executable,
            "-m",
            "recadvisor.capture.sampler",
            "--pid",
            str(pid),
            "--hz",
            str(hz),
            "--threads-out",
            str(threads_path),
            "--process-out",
            str(process_path),
            "--cpu-budget",
            str(cpu_budget or 0),
            *(["--others-out", str(others_path)] if others_path is not None else []),
        ]
        self.proc: subprocess.Popen | None = None
        self.result: dict[str, Any] | None = None
        self.error: str | None = None  # why stop() returned None

    def start(self, timeout: float = 60.0) -> SamplerProcess:
        self.proc = subprocess.Popen(
            self.cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
        )
        line = _readline(self.proc, timeout)
        if not line.startswith("{"):
            self.proc.kill()
            self.proc.wait()
            raise OSError(f"the sampler process did not start (exit {self.proc.returncode})")
        return self

    def signal_stop(self) -> None:
        """Ask it to stop now without waiting (it takes one last sweep, then writes)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 120.0) -> dict[str, Any] | None:
        if self.proc is None:
            return None
        self.signal_stop()
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        lines = [x for x in (out or "").splitlines() if x.startswith("{")]
        summaries = [json.loads(x) for x in lines if "samples" in x]
        self.result = summaries[-1] if summaries else None
        if self.result is None:
            self.error = (f"the sampler process wrote no summary (exit {self.proc.returncode}, "
                          f"stdout {out!r:.200})")
        return self.result


def _readline(proc: subprocess.Popen, timeout: float) -> str:
    """The first stdout line of `proc`, or '' after `timeout` s or at EOF."""
    box: list[str] = []
    t = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    return box[0] if box else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m recadvisor.capture.sampler",
        description="Sample a process's thread states, CPU and I/O until it exits or SIGINT/"
        "SIGTERM, then write the Parquet files. Prints one JSON line when the first sweep "
        "is done and one (the summary) after writing.",
    )
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--hz", type=float, default=DEFAULT_HZ)
    ap.add_argument(
        "--cpu-budget",
        type=float,
        default=DEFAULT_CPU_BUDGET,
        help="share of the machine's CPU the sampler may use; it slows down (not below "
        f"{FLOOR_HZ:g} Hz) to stay within it; 0: no budget (default {DEFAULT_CPU_BUDGET:g})",
    )
    ap.add_argument("--threads-out", type=Path, required=True)
    ap.add_argument("--process-out", type=Path, required=True)
    ap.add_argument("--others-out", type=Path, help="the other processes' CPU (optional)")
    args = ap.parse_args(argv)
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        sampler = Sampler(args.pid, args.hz, cpu_budget=args.cpu_budget or None)
    except (ProcessLookupError, ValueError) as e:
        print(f"sampler: error: {e}", file=sys.stderr)
        return 2
    if not sampler.sample():
        print(f"sampler: error: process {args.pid} exited", file=sys.stderr)
        return 2
    print(json.dumps({"ready": True, "pid": args.pid}), flush=True)
    # The sweeps run on a worker thread: a signal handler runs on the main thread, and calling
    # `stop.set()` there while the main thread itself sat inside `stop.wait()` (holding the
    # Event's internal lock) deadlocked the process now and then. The main thread only joins.
    worker = threading.Thread(target=sampler.run, args=(stop,), name="sampler", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.2)
    sampler.close()
    sampler.write(args.threads_out, args.process_out, args.others_out)
    t = os.times()
    summary = sampler.summary()
    summary["cpu_s"] = round(t.user + t.system, 3)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
