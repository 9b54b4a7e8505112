"""Slow-storage emulation for the input pipeline: real reads of the real files, plus the latency and
bandwidth limits of remote storage, and page-cache eviction for cold reads.

Why TF's SleepDataset and not a Python sleep: Python functions inside tf.data (py_function) hold the
GIL and run almost serially, so a Python sleep stalls every reader at once. SleepDataset sleeps in
the C++ iterator of one reader, so parallel readers overlap their waits as they do against real
remote storage (per-stream latency and bandwidth, not a global lock).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import threading
import time
from collections.abc import Sequence

import tensorflow as tf
from tensorflow.python.data.experimental.ops import testing as tfdata_testing


def _sleep(dataset: tf.data.Dataset, micros: int) -> tf.data.Dataset:
    return dataset.apply(tfdata_testing.sleep(micros)) if micros > 0 else dataset


def open_records(
    path: tf.Tensor,
    *,
    compression: str,
    buffer_bytes: int,
    open_latency_ms: float,
    bandwidth_mbps: float,
    record_bytes: float,
) -> tf.data.Dataset:
    """A TFRecordDataset for one file that pays `open_latency_ms` before its first record and
    reads at most `bandwidth_mbps` (per reader) afterwards."""
    # The file is opened inside flat_map, after the (emulated) open latency has passed. The
    # bandwidth sleep sits inside the flat_map function too: chained after it, an error in the
    # file (a truncated record) left TF 2.21's iterator teardown hanging.
    per_record_us = int(record_bytes / (bandwidth_mbps * 1e6) * 1e6) if bandwidth_mbps > 0 else 0
    opened = _sleep(tf.data.Dataset.from_tensors(path), int(open_latency_ms * 1000))
    return opened.flat_map(
        lambda p: _sleep(
            tf.data.TFRecordDataset(
                p, compression_type="GZIP" if compression == "gzip" else "",
                buffer_size=buffer_bytes,
            ),
            per_record_us,
        )
    )


def drop_from_page_cache(paths: Sequence[str]) -> None:
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class PageCacheEvictor:
    """Keeps the data files out of the page cache, as on storage far larger than RAM that serves
    each read request as it comes: every read goes to the device and the reader thread waits in
    uninterruptible sleep (D) for it.

    Dropping the cached pages alone does not do that: the kernel's readahead fetches 128 KB+
    ahead of a sequential reader in the background, and its 4 KB reads then hit the cache
    (3.5 µs each, D in 0.1% of samples; docs/trace-signals.md, "Sampler"). So the evictor also
    marks the process's open descriptors of those files POSIX_FADV_RANDOM, which turns readahead
    off for them (TF opens the files itself; its descriptors are found in /proc/self/fd): each
    read is then one device request of the reader's own size (~80 µs for 4 KB on the dev VM's
    virtio disk), and a larger read buffer is the cure, as on real cold storage.
    """

    def __init__(self, paths: Sequence[str], interval_s: float = 0.5,
                 scan_interval_s: float = 0.02) -> None:
        self.paths = list(paths)
        self.interval_s = interval_s
        self.scan_interval_s = scan_interval_s
        self._real = {os.path.realpath(p) for p in self.paths}
        self._marked: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="page-cache-evictor", daemon=True)
        # With inotify: the watch (readable when a data file is opened) and a pipe that ends the
        # wait when the evictor stops, polled together.
        self._fds: tuple[int, ...] = ()  # (watch, pipe read end, pipe write end)
        self._poll: select.poll | None = None

    def _mark_open_files(self) -> None:
        """POSIX_FADV_RANDOM on every descriptor of a data file, at every scan. Marking only the
        new (descriptor, path) pairs missed reopens: a reader that finishes a file and opens the
        same one again (`repeat()` over as many interleave slots as files) gets the number it
        just freed, for the same path, and a new open file with readahead on (a CI run's 4 KB
        reads reached the device in large requests). The hint is idempotent and costs a syscall
        per descriptor. A descriptor closed and reused between the readlink and the fadvise gets
        the hint instead: it only turns readahead off for that file."""
        try:
            fds = os.listdir("/proc/self/fd")
        except OSError:
            return
        seen: dict[int, str] = {}
        for name in fds:
            fd = int(name)
            try:
                target = os.readlink(f"/proc/self/fd/{name}")
            except OSError:
                continue
            if target not in self._real:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            except OSError:
                continue
            seen[fd] = target
        self._marked = seen  # what the last scan marked

    def _wait(self) -> None:
        """Until a data file is opened (inotify) or a scan interval passes. Scanning on the open
        itself leaves the reader a fraction of a millisecond of readahead instead of up to a
        scan interval: at 5 ms, a reader that opened its file just after a scan had its
        readahead ramp up to the device's 8 MB before the mark, and 3 runs in 5 of a job with 16
        fast readers read most bytes in large requests. poll, not select: a job's descriptors
        may number beyond select's 1024."""
        if self._poll is None:
            self._stop.wait(self.scan_interval_s)
            return
        for fd, _ in self._poll.poll(self.scan_interval_s * 1000):
            with contextlib.suppress(BlockingIOError):
                os.read(fd, 1 << 16)

    def _loop(self) -> None:
        next_drop = time.monotonic() + self.interval_s
        last_scan = 0.0
        while True:
            self._wait()
            if self._stop.is_set():
                return
            # A job opening files back to back would keep the thread scanning, holding the GIL
            # the job's own Python needs: one scan per MIN_SCAN_GAP_S at most.
            gap = MIN_SCAN_GAP_S - (time.monotonic() - last_scan)
            if gap > 0:
                time.sleep(gap)
            self._mark_open_files()
            last_scan = time.monotonic()
            if last_scan >= next_drop:
                drop_from_page_cache(self.paths)
                next_drop = time.monotonic() + self.interval_s

    def __enter__(self) -> PageCacheEvictor:
        drop_from_page_cache(self.paths)
        self._watch()
        try:
            self._thread.start()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._fds:
            os.write(self._fds[2], b"x")
        self._thread.join()
        self._close()

    def _watch(self) -> None:
        opens = watch_opens(self.paths)
        if opens is None:
            return
        try:
            wake = os.pipe()
        except OSError:
            os.close(opens)
            return
        self._fds = (opens, *wake)
        self._poll = select.poll()
        for fd in self._fds[:2]:
            self._poll.register(fd, select.POLLIN)

    def _close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds, self._poll = (), None


# The least time between two scans of /proc/self/fd (each ~1 ms of Python for ~50 descriptors).
MIN_SCAN_GAP_S = 0.001
_IN_OPEN = 0x20  # inotify(7)


def watch_opens(paths: Sequence[str]) -> int | None:
    """An inotify descriptor that becomes readable whenever one of `paths` is opened, or None
    where inotify is unavailable (not Linux, no libc symbol, the user's watch or instance limit
    reached): the evictor then finds new descriptors on its scan interval alone."""
    try:
        libc = ctypes.CDLL(None)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    for p in paths:
        if libc.inotify_add_watch(fd, os.fsencode(p), _IN_OPEN) < 0:
            os.close(fd)
            return None
    return fd
