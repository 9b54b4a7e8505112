"""Slow-storage emulation for the input pipeline: real reads of the real files, plus the latency and
bandwidth limits of remote storage, and page-cache eviction for cold reads.

Why TF's SleepDataset and not a Python sleep: Python functions inside tf.data (py_function) hold the
GIL and run almost serially, so a Python sleep stalls every reader at once. SleepDataset sleeps in
the C++ iterator of one reader, so parallel readers overlap their waits as they do against real
remote storage (per-stream latency and bandwidth, not a global lock).
"""

from __future__ import annotations

import os
import threading
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
    """Keeps the data files out of the page cache, as when the dataset is far larger than RAM:
    every read then goes to the device and the reader threads wait in uninterruptible sleep."""

    def __init__(self, paths: Sequence[str], interval_s: float = 0.5) -> None:
        self.paths = list(paths)
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="page-cache-evictor", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            drop_from_page_cache(self.paths)

    def __enter__(self) -> PageCacheEvictor:
        drop_from_page_cache(self.paths)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
