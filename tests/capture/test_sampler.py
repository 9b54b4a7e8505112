"""The OS sampler: /proc parsers on recorded lines, sampling a live process, files, D state."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import psutil
import pyarrow.parquet as pq
import pytest

from recadvisor.capture.cpu_limits import affinity_cpus, cgroup_cpu_quota
from recadvisor.capture.layout import OTHERS_SUFFIX, PROCESS_SUFFIX, THREADS_SUFFIX
from recadvisor.capture.sampler import (
    CLK_TCK,
    FLOOR_HZ,
    OTHERS_EVERY_S,
    Sampler,
    SamplerProcess,
    parse_proc_entry,
    parse_proc_io,
    parse_proc_stat_cpu,
    parse_task_stat,
    sampler_paths,
)

# Recorded on the development machine (Linux 6.18, x86_64) from /proc/<pid>/task/<tid>/stat with
# kernel.task_delayacct=1, 2026-11-22. D_LINE: a thread doing O_DIRECT random reads, caught in
# uninterruptible sleep, its name set to "odirect (rd) x" (spaces and parentheses); 109 ticks of
# block-I/O delay (field 42) after ~1.6 s. PAREN_LINE: a sleeping thread named "a) (b".
D_LINE = (
    "6416 (odirect (rd) x) D 6411 6411 28598 0 -1 4194368 20 0 0 0 0 15 0 0 20 0 3 0 1728228 "
    "165912576 2889 18446744073709551615 94427307982848 94427307983189 140725201106256 0 0 0 0 "
    "16781312 2 1 0 0 -1 0 0 0 109 0 0 94427307994544 94427307995160 94428229885952 "
    "140725201107628 140725201107663 140725201107663 140725201108956 0\n"
)
PAREN_LINE = (
    "6417 (a) (b) S 6411 6411 28598 0 -1 4194368 5 0 0 0 0 0 0 0 20 0 3 0 1728228 165912576 2921 "
    "18446744073709551615 94427307982848 94427307983189 140725201106256 0 0 0 0 16781312 2 1 0 0 "
    "-1 0 0 0 0 0 0 94427307994544 94427307995160 94428229885952 140725201107628 140725201107663 "
    "140725201107663 140725201108956 0\n"
)
# /proc/<pid>/stat of a small TF training loop (whole process: 14 threads, 147,979 pages) and of
# one of its inter-op threads, recorded the same day with delay accounting off.
PROCESS_LINE = (
    "6961 (python) R 6960 6959 28598 0 -1 4194304 75960 75 77 0 970 148 0 0 20 0 14 0 1732920 "
    "2087497728 147979 18446744073709551615 94473283350528 94473283350869 140732724838688 0 0 0 "
    "0 16781312 2 0 0 0 17 0 0 0 0 0 0 94473283362224 94473283362840 94473860546560 "
    "140732724841127 140732724841176 140732724841176 140732724842460 0\n"
)
TF_THREAD_LINE = (
    "6996 (tf_Compute) S 6960 6959 28598 0 -1 4194368 81 75 0 0 67 11 0 0 20 0 14 0 1733233 "
    "2087497728 147979 18446744073709551615 94473283350528 94473283350869 140732724838688 0 0 0 "
    "0 16781312 2 1 0 0 -1 0 0 0 0 0 0 94473283362224 94473283362840 94473860546560 "
    "140732724841127 140732724841176 140732724841176 140732724842460 0\n"
)
IO_TEXT = (
    "rchar: 319325628\nwchar: 19\nsyscr: 5338\nsyscw: 2\nread_bytes: 318390272\n"
    "write_bytes: 0\ncancelled_write_bytes: 0\n"
)
PROC_STAT_TEXT = (
    "cpu  512037 0 105636 2764819 52013 0 905 5921 0 0\n"
    "cpu0 189447 0 40239 1481743 5978 0 116 2979 0 0\n"
    "cpu1 322589 0 65397 1283076 46035 0 788 2942 0 0\n"
    "intr 12465656 0 0 0\n"
)

THREAD_COLUMNS = ["ts_ns", "pid", "tid", "name", "state", "user_s", "system_s", "blkio_ticks"]
PROCESS_COLUMNS = [
    "ts_ns",
    "pid",
    "cpu_percent",
    "rss_bytes",
    "read_bytes",
    "write_bytes",
    "num_threads",
    "system_cpu_percent",
    "iowait_s",
    "n_cpus",
]


def test_parse_d_state_line_with_spaces_and_parentheses_in_the_name():
    st = parse_task_stat(D_LINE)
    assert st.tid == 6416 and st.name == "odirect (rd) x" and st.state == "D"
    assert (st.utime_ticks, st.stime_ticks) == (0, 15)
    assert st.num_threads == 3 and st.rss_pages == 2889
    assert st.blkio_ticks == 109
    assert parse_task_stat(D_LINE.encode()) == st  # bytes, as pread returns


def test_parse_name_with_a_closing_parenthesis_first():
    st = parse_task_stat(PAREN_LINE)
    assert st.tid == 6417 and st.name == "a) (b" and st.state == "S" and st.blkio_ticks == 0


def test_parse_process_and_tf_thread_lines():
    st = parse_task_stat(PROCESS_LINE)
    assert st.tid == 6961 and st.name == "python" and st.state == "R"
    assert (st.utime_ticks, st.stime_ticks, st.num_threads, st.rss_pages) == (970, 148, 14, 147979)
    st = parse_task_stat(TF_THREAD_LINE)
    assert (st.tid, st.name, st.state, st.utime_ticks, st.stime_ticks) == (
        6996,
        "tf_Compute",
        "S",
        67,
        11,
    )


def test_parse_rejects_garbage():
    for bad in ("", "hello", "12 (x) S 1 2"):
        with pytest.raises(ValueError):
            parse_task_stat(bad)


def test_parse_another_processs_entry():
    e = parse_proc_entry(PROCESS_LINE)
    assert (e.pid, e.name, e.ppid, e.cpu_ticks, e.start_ticks) == (6961, "python", 6960,
                                                                   970 + 148, 1732920)
    assert parse_proc_entry(PAREN_LINE).name == "a) (b"
    with pytest.raises(ValueError):
        parse_proc_entry(b"6961 (python) R 6960")


def test_parse_io_and_proc_stat():
    assert parse_proc_io(IO_TEXT) == (318390272, 0, 319325628)
    cpu = parse_proc_stat_cpu(PROC_STAT_TEXT)
    assert cpu.iowait_ticks == 52013
    assert cpu.total_ticks == 512037 + 105636 + 2764819 + 52013 + 905 + 5921
    assert cpu.idle_ticks == 2764819 + 52013


def test_parser_agrees_with_psutil_on_this_process():
    """Per-thread CPU times from our parser match psutil's (which reads the same fields)."""
    me = psutil.Process()
    for t in me.threads():
        with open(f"/proc/self/task/{t.id}/stat", "rb") as f:
            st = parse_task_stat(f.read())
        assert st.tid == t.id
        assert abs(st.utime_ticks / CLK_TCK - t.user_time) <= 0.02
        assert abs(st.stime_ticks / CLK_TCK - t.system_time) <= 0.02


TARGET = textwrap.dedent(
    """
    import os, sys, threading, time
    def named(name, fn):
        def body():
            with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
                f.write(name)
            fn()
        threading.Thread(target=body, daemon=True).start()
    def spin():
        while True:
            sum(range(1000))
    named("busy worker", spin)
    named("idle (waiter)", lambda: time.sleep(3600))
    time.sleep(0.2)
    print("ready", flush=True)
    time.sleep(float(sys.argv[1]))
    """
)


@pytest.fixture
def target(tmp_path):
    """A Python process with a busy and an idle named thread; runs `seconds` then exits."""
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    procs = []

    def start(seconds=30.0):
        p = subprocess.Popen(
            [sys.executable, str(script), str(seconds)], stdout=subprocess.PIPE, text=True
        )
        assert p.stdout.readline().strip() == "ready"
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def _sample_for(pid: int, seconds: float, hz: float, out) -> None:
    """Sample `pid` for `seconds` at `hz` (no CPU budget) and write the files into `out` as
    host "h"."""
    s = Sampler(pid, hz=hz, cpu_budget=None).start()
    time.sleep(seconds)
    s.stop()
    s.write(*sampler_paths(out, "h"))


def _sample_script(out, seconds: float, hz: float, code: str, *args: str):
    """Run `code` (it prints "ready" when set up) with `args`, sample it as `_sample_for` does
    and return its process table."""
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        _sample_for(p.pid, seconds, hz, out)
    finally:
        p.kill()
        p.wait()
    return _read(out)[1].to_pandas()


def _read(tmp_path, host="h"):
    threads, process, _ = sampler_paths(tmp_path, host)
    return pq.read_table(threads), pq.read_table(process)


def test_sampler_thread_records_every_thread_at_the_rate(target, tmp_path):
    p = target()
    s = Sampler(p.pid, hz=50, cpu_budget=None).start()
    t0 = time.time_ns()
    time.sleep(1.0)
    t1 = time.time_ns()
    s.stop()
    paths = s.write(*sampler_paths(tmp_path, "h"))
    assert [x.name for x in paths] == ["h" + THREADS_SUFFIX, "h" + PROCESS_SUFFIX,
                                       "h" + OTHERS_SUFFIX]
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".")]  # no temp files left
    threads, process = _read(tmp_path)
    assert threads.column_names[:8] == THREAD_COLUMNS
    assert process.column_names[:10] == PROCESS_COLUMNS
    th = threads.to_pandas()
    pr = process.to_pandas()
    assert th.ts_ns.min() <= t0 and th.ts_ns.max() >= t1  # the samples cover the window
    assert 40 <= len(pr) <= 60, len(pr)  # ~50 sweeps in 1 s (first + last extra)
    assert set(th.tid) == set(int(x) for x in os.listdir(f"/proc/{p.pid}/task"))
    busy = th[th.name == "busy worker"]
    idle = th[th.name == "idle (waiter)"]
    assert len(busy) == len(pr) and len(idle) == len(pr)
    assert set(idle.state) == {"S"}
    assert busy.user_s.iloc[-1] - busy.user_s.iloc[0] > 0.3  # it spun (with the GIL, shared)
    assert (th.pid == p.pid).all() and (pr.pid == p.pid).all()
    assert pr.rss_bytes.min() > 1_000_000 and (pr.num_threads >= 3).all()
    assert (pr.n_cpus == os.cpu_count()).all()
    assert (pr.affinity_cpus == affinity_cpus(p.pid)).all()
    quota = cgroup_cpu_quota(p.pid)
    assert (pr.cpu_quota == (quota or -1.0)).all()
    if quota is None:  # no quota group: no throttling counters
        assert (pr.cpu_periods == -1).all() and (pr.cpu_throttled_s == -1).all()
    else:
        assert pr.cpu_periods.is_monotonic_increasing and (pr.cpu_throttled_s >= 0).all()
    assert pr.cpu_percent.iloc[1:].mean() > 20  # the spinning thread
    assert 0 <= pr.system_cpu_percent.max() <= 100.0 + 1e-6
    assert pr.iowait_s.is_monotonic_increasing
    assert str(threads.schema.field("ts_ns").type) == "int64"
    assert str(threads.schema.field("tid").type) == "int32"
    assert str(process.schema.field("n_cpus").type) == "int32"
    summary = s.summary()
    assert summary["samples"] == len(pr) and 40 <= summary["achieved_hz"] <= 60


def test_bytes_read_from_the_page_cache_count_in_rchar(tmp_path):
    """A process re-reading a cached 4 MB file: block-device reads stay flat (read_bytes) while
    the bytes its read calls returned grow (rchar_bytes)."""
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(4 << 20))
    code = ("import sys, time\nprint('ready', flush=True)\nt = time.time()\n"
            "while time.time() - t < 30:\n    open(sys.argv[1], 'rb').read()\n"
            "    time.sleep(0.05)\n")
    pr = _sample_script(tmp_path, 1.0, 20, code, str(data))
    assert str(_read(tmp_path)[1].schema.field("rchar_bytes").type) == "int64"
    assert pr.rchar_bytes.is_monotonic_increasing
    # ~20 re-reads of 4 MB in 1 s; at least a few whatever the machine's load
    assert pr.rchar_bytes.iloc[-1] - pr.rchar_bytes.iloc[0] >= 3 * (4 << 20)
    assert pr.read_bytes.iloc[-1] - pr.read_bytes.iloc[0] < (4 << 20)


def test_cpu_budget_slows_the_sampler_but_not_below_the_floor(target):
    p = target()
    s = Sampler(p.pid, hz=50, cpu_budget=1e-6).start()  # no sweep fits: the floor rate
    time.sleep(1.0)
    s.stop()
    assert FLOOR_HZ * 0.75 <= s.summary()["achieved_hz"] <= FLOOR_HZ * 1.25
    s = Sampler(p.pid, hz=50, cpu_budget=0.5).start()  # every sweep fits: the rate asked for
    time.sleep(1.0)
    s.stop()
    summary = s.summary()
    assert summary["achieved_hz"] >= 40 and summary["cpu_budget"] == 0.5


def test_scans_of_the_other_processes_are_spaced_out_to_fit_their_budget(target, tmp_path):
    """On a host with thousands of processes a scan costs tens of ms (bench/sampler_scan.py):
    the scans are spaced out to take no more than their share of the sampler's CPU budget, and
    the first and last sweeps still scan (a window lies between two scans)."""
    p = target()
    s = Sampler(p.pid, hz=50, cpu_budget=1e-6).start()  # no scan a second fits
    time.sleep(2.3)
    s.stop()
    s.write(*sampler_paths(tmp_path, "h"))
    assert s.others_scans == 2 and s.others_every_s > 2.3, (s.others_scans, s.others_every_s)
    df = pq.read_table(tmp_path / ("h" + OTHERS_SUFFIX)).to_pandas()
    assert df.ts_ns.nunique() == 2
    s = Sampler(p.pid, hz=50, cpu_budget=0.5).start()  # scans fit: about once a second
    time.sleep(1.3)
    s.stop()
    assert s.others_scans == 3 and s.others_every_s == OTHERS_EVERY_S


def test_a_costly_scan_does_not_slow_the_sweeps_after_it(target, monkeypatch):
    """Scans of 60 ms of CPU within their budget share (one every 1.2 s): the sweeps, which
    alone fit the rate asked for, keep it. Counted into the sweeps' cost, each scan would slow
    the next second's sweeps toward the floor rate."""
    scan = Sampler._scan_others

    def costly(self, ts):
        scan(self, ts)
        end = time.thread_time() + 0.06
        while time.thread_time() < end:
            pass
    monkeypatch.setattr(Sampler, "_scan_others", costly)
    p = target()
    s = Sampler(p.pid, hz=50, cpu_budget=0.1 / (os.cpu_count() or 1)).start()
    time.sleep(3.0)
    s.stop()
    assert s.others_every_s > 1.0 and s.others_scans >= 3, s.others_every_s
    assert s.summary()["achieved_hz"] >= 40, s.summary()


def test_sampler_stops_when_the_process_exits(target, tmp_path):
    p = target(seconds=0.5)
    s = Sampler(p.pid, hz=50)
    stop = threading.Event()
    t = threading.Thread(target=s.run, args=(stop,))
    t.start()
    p.wait()
    t.join(5)
    assert not t.is_alive() and s.gone
    s.close()
    s.write(*sampler_paths(tmp_path, "h"))
    threads, process = _read(tmp_path)
    assert process.num_rows >= 10 and threads.num_rows >= 3 * 10


def test_sampler_drop_before_trims_to_the_window(target):
    p = target()
    s = Sampler(p.pid, hz=100, compact_every=7).start()
    time.sleep(0.3)
    cut = time.time_ns()
    time.sleep(0.3)
    s.stop()
    s.drop_before(cut)
    threads, process = s.tables()
    assert min(process.column("ts_ns").to_pylist()) >= cut
    assert min(threads.column("ts_ns").to_pylist()) >= cut
    assert set(threads.column("ts_ns").to_pylist()) == set(process.column("ts_ns").to_pylist())


def test_no_such_process():
    with pytest.raises(ProcessLookupError):
        Sampler(2**22 + 12345)
    with pytest.raises(ValueError):
        Sampler(os.getpid(), hz=0.1)


def test_sampler_process_writes_on_stop_and_on_sigint(target, tmp_path):
    p = target()
    paths = sampler_paths(tmp_path / "a", "h")
    threads, process, others = paths
    sp = SamplerProcess(p.pid, threads, process, hz=50, others_path=others).start()
    time.sleep(0.5)
    result = sp.stop()
    assert result is not None, sp.error
    assert result["samples"] >= 20 and result["pid"] == p.pid and result["cpu_s"] > 0
    assert all(x.exists() for x in paths)
    # Ctrl-C (SIGINT) also flushes what was sampled.
    paths = sampler_paths(tmp_path / "b", "h")[:2]  # no others file asked for: none written
    sp = SamplerProcess(p.pid, *paths, hz=50).start()
    time.sleep(0.5)
    sp.proc.send_signal(signal.SIGINT)
    out, _ = sp.proc.communicate(timeout=60)
    assert sp.proc.returncode == 0
    assert json.loads(out.strip().splitlines()[-1])["samples"] >= 20
    assert pq.read_table(paths[1]).num_rows >= 20
    assert sorted(x.name for x in (tmp_path / "b").iterdir()) == sorted(x.name for x in paths)


DIRECT_READER = textwrap.dedent(
    """
    import mmap, os, random, sys, threading, time
    path, seconds = sys.argv[1], float(sys.argv[2])
    size = os.path.getsize(path)
    def reader():
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write("direct reader")
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, 1 << 16)  # page-aligned, as O_DIRECT needs
        while True:
            os.preadv(fd, [buf], random.randrange(size >> 16) << 16)
    threading.Thread(target=reader, daemon=True).start()
    print("ready", flush=True)
    time.sleep(seconds)
    """
)


def _o_direct_supported(path) -> str | None:
    """None if O_DIRECT reads of `path` work, else why not."""
    import mmap

    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as e:
        return f"O_DIRECT open fails on this file system ({e.strerror})"
    try:
        os.preadv(fd, [mmap.mmap(-1, 1 << 16)], 0)
    except OSError as e:
        return f"O_DIRECT reads fail on this file system ({e.strerror})"
    finally:
        os.close(fd)
    return None


def test_a_thread_blocked_on_storage_is_sampled_in_d_state(tmp_path):
    """O_DIRECT reads bypass the page cache, so each one waits for the device in uninterruptible
    sleep (D). Seen on the development machine's virtio disk in ~2/3 of samples."""
    data = tmp_path / "big.bin"
    with open(data, "wb") as f:
        for _ in range(32):
            f.write(os.urandom(1 << 20))
    why = _o_direct_supported(data)
    if why:
        pytest.skip(f"cannot produce a D-state thread here: {why}")
    script = tmp_path / "reader.py"
    script.write_text(DIRECT_READER)
    p = subprocess.Popen(
        [sys.executable, str(script), str(data), "30"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        s = Sampler(p.pid, hz=100).start()
        time.sleep(1.5)
        s.stop()
    finally:
        p.kill()
        p.wait()
    threads, _ = s.tables()
    th = threads.to_pandas()
    reader = th[th.name == "direct reader"]
    assert len(reader) > 50
    d_share = (reader.state == "D").mean()
    if d_share == 0:
        pytest.skip("storage answered every O_DIRECT read without a sampled D state (too fast)")
    assert d_share > 0.05, reader.state.value_counts()


SPIN = ("import sys, time\nend = time.time() + float(sys.argv[1])\n"
        "while time.time() < end:\n    pass\n")
PARENT = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], "30", sys.argv[2]])
    time.sleep(0.5)  # the child's CPU before the sampler starts is not the window's
    print("ready", flush=True)
    time.sleep(30)
""")


def test_the_other_processes_cpu_is_scanned_with_the_jobs_own_children_told_apart(tmp_path):
    """The sampled process has a spinning child (the job's own: a data loader worker); another
    process spins beside it. Both are scanned about once a second with their command lines and
    parents, and the sampler's own process is named."""
    tag = f"{tmp_path.name}-spin"  # this run's processes, not another's
    parent = subprocess.Popen([sys.executable, "-c", PARENT, SPIN, f"child-{tag}"],
                              stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", SPIN, "30", f"other-{tag}"])
    try:
        assert parent.stdout.readline().strip() == "ready"
        _sample_for(parent.pid, 2.3, 50, tmp_path)
    finally:
        procs = [*psutil.Process(parent.pid).children(), parent, other]
        for p in procs:
            p.kill()
        for p in procs:  # the parent first reaps its child
            p.wait()
    df = pq.read_table(tmp_path / ("h" + OTHERS_SUFFIX)).to_pandas()
    assert (df.sampled_pid == parent.pid).all() and (df.sampler_pid == os.getpid()).all()
    assert parent.pid not in set(df.pid)  # its own CPU is in the process file
    scans = sorted(df.ts_ns.unique())
    # About once a second, and at the last sweep (stopped 2.3 s in).
    assert len(scans) == 4 and 0.9e9 <= scans[1] - scans[0] <= 1.5e9, scans
    first = df[df.ts_ns == scans[0]]
    assert not first.duplicated(["pid", "start_ticks"]).any()
    spinners = df[df.cmd.str.endswith(tag)]
    child = spinners[spinners.cmd.str.endswith(f"child-{tag}")]
    assert set(child.ppid) == {parent.pid}
    assert set(spinners[spinners.cmd.str.endswith(f"other-{tag}")].pid) == {other.pid}
    for pid in set(spinners.pid):
        # A row at every scan (its CPU moved), 0.5-1 core each second on 2 CPUs; its command
        # line read from the second scan on.
        rows = df[df.pid == pid]
        assert len(rows) == 4 and rows.cpu_s.is_monotonic_increasing
        assert rows.cmd.iloc[0] == "" and set(rows.cmd.iloc[1:]) == {rows.cmd.iloc[1]} != {""}
        cores = (rows.cpu_s.iloc[-1] - rows.cpu_s.iloc[0]) / ((rows.ts_ns.iloc[-1]
                                                               - rows.ts_ns.iloc[0]) / 1e9)
        assert cores > 0.3, cores
    # Processes whose CPU did not move after the first scan have no later row.
    later = df[df.ts_ns > scans[0]]
    assert len(later) < len(first)
    # The child (not the other spinner) is read at every sweep: its CPU interval by interval.
    pr = _read(tmp_path)[1].to_pandas()
    live = pr.live_children_s.to_numpy()
    rows = df[df.pid == child.pid.iloc[0]]
    used = rows.cpu_s.iloc[-1] - rows.cpu_s.iloc[0]
    assert live[0] == 0 and (np.diff(live) >= 0).all() and abs(live[-1] - used) < 0.05, (
        live[-1], used)
    assert (np.diff(live) > 0).mean() > 0.5


LATE_PARENT = textwrap.dedent("""
    import subprocess, sys, time
    print("ready", flush=True)
    time.sleep(1.2)
    subprocess.Popen([sys.executable, "-c", sys.argv[1], "30"])
    time.sleep(30)
""")


def test_a_child_started_after_the_first_scan_is_counted_from_its_start(tmp_path):
    """A worker process the job starts while it is sampled is found by the next scan and read at
    every sweep from then on; the CPU it used before that scan is counted at the sweep after it,
    so the job's own children's CPU over the window is whole."""
    pr = _sample_script(tmp_path, 3.3, 50, LATE_PARENT, SPIN)
    df = pq.read_table(tmp_path / ("h" + OTHERS_SUFFIX)).to_pandas()
    child = df[df.ppid == pr.pid.iloc[0]]
    assert len(child) and child.ts_ns.min() > df.ts_ns.min(), child  # not there at the first
    live = pr.live_children_s.to_numpy()
    assert abs(live[-1] - child.cpu_s.iloc[-1]) < 0.05, (live[-1], child.cpu_s.iloc[-1])
    # Nothing before the scan that found it; then one step with what it had used, then sweeps.
    found = np.flatnonzero(live > 0)[0]
    assert pr.ts_ns.iloc[found] > child.ts_ns.min(), (pr.ts_ns.iloc[found], child.ts_ns.min())


REAPER = textwrap.dedent("""
    import subprocess, sys, time
    print("ready", flush=True)
    end = time.time() + 30
    while time.time() < end:  # children that spin 0.2 s each, then exit and are waited for
        subprocess.run([sys.executable, "-c", sys.argv[1], "0.2"])
""")


def test_children_that_exit_are_counted_in_the_processs_children_cpu(tmp_path):
    """Children that live 0.2 s, between two scans of the other processes: their CPU shows in
    the sampled process's `children_s` (cutime + cstime) once it waits for them."""
    pr = _sample_script(tmp_path, 1.5, 50, REAPER, SPIN)
    grew = pr.children_s.iloc[-1] - pr.children_s.iloc[0]
    assert pr.children_s.is_monotonic_increasing and grew > 0.3, grew
