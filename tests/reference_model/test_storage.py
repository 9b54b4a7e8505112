"""The page-cache evictor behind the `dstate_io` preset: cold files, and no readahead on the
descriptors TensorFlow opens, so each small read is one device request."""

from __future__ import annotations

import ctypes
import mmap
import os
import time

import pytest

from reference_model.storage import PageCacheEvictor, drop_from_page_cache

PAGE = mmap.PAGESIZE


def _resident_pages(path: str) -> int:
    """Pages of `path` in the page cache (mincore over a read-only mapping)."""
    size = os.path.getsize(path)
    n = (size + PAGE - 1) // PAGE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    with open(path, "rb") as f:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
        assert addr not in (None, ctypes.c_void_p(-1).value)
        try:
            vec = ctypes.create_string_buffer(n)
            assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return sum(b & 1 for b in vec.raw)
        finally:
            libc.munmap(addr, size)


def _evict(path) -> None:
    """Drop the file's pages, retrying until none is resident (skip where the filesystem keeps
    files in memory)."""
    for _ in range(50):
        drop_from_page_cache([str(path)])
        if _resident_pages(str(path)) == 0:
            return
        time.sleep(0.02)
    pytest.skip("this filesystem keeps the file in memory (tmpfs?): nothing to evict")


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "train-00000-of-00001.tfrecord"
    path.write_bytes(os.urandom(8 << 20))
    os.sync()
    _evict(path)
    return path


READS = 64


def _pages_after_small_reads(path, evictor: PageCacheEvictor | None) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        if evictor is not None:
            evictor._mark_open_files()
        for _ in range(READS):
            os.read(fd, PAGE)
        return _resident_pages(str(path))
    finally:
        os.close(fd)


def test_small_reads_of_marked_descriptors_fetch_no_readahead(data_file):
    """Sequential page-sized reads of a cold file bring in the kernel's growing readahead
    window beyond the pages asked for, unless the evictor has marked the descriptor: then each
    read fetches its own page only."""
    # Marked first: an unmarked pass leaves readahead in flight that lands after the eviction.
    marked = _pages_after_small_reads(data_file, PageCacheEvictor([str(data_file)]))
    _evict(data_file)
    normal = _pages_after_small_reads(data_file, None)
    assert normal >= READS + 16, normal
    assert marked <= READS + 1, marked


def test_a_file_reopened_under_the_same_descriptor_is_marked_again(data_file):
    """A reader that finishes a file and opens it again gets the descriptor number it just
    freed, for the same path, and a new open file with readahead on: the next scan marks it
    too."""
    ev = PageCacheEvictor([str(data_file)])
    first = os.open(data_file, os.O_RDONLY)
    ev._mark_open_files()
    os.close(first)
    _evict(data_file)
    again = os.open(data_file, os.O_RDONLY)
    try:
        assert again == first  # the lowest free number: the case under test
        ev._mark_open_files()
        for _ in range(READS):
            os.read(again, PAGE)
        assert _resident_pages(str(data_file)) <= READS + 1
    finally:
        os.close(again)


def test_only_descriptors_of_the_data_files_are_marked(data_file, tmp_path):
    other = tmp_path / "other.bin"
    other.write_bytes(b"x" * 4096)
    ev = PageCacheEvictor([str(data_file)])
    fd_data, fd_other = os.open(data_file, os.O_RDONLY), os.open(other, os.O_RDONLY)
    try:
        ev._mark_open_files()
        assert fd_data in ev._marked and fd_other not in ev._marked
    finally:
        os.close(fd_data)
        os.close(fd_other)
    ev._mark_open_files()
    assert fd_data not in ev._marked


def test_the_evictor_thread_marks_a_file_opened_while_it_runs(data_file):
    with PageCacheEvictor([str(data_file)], interval_s=0.05, scan_interval_s=0.01) as ev:
        fd = os.open(data_file, os.O_RDONLY)
        try:
            for _ in range(200):
                if fd in ev._marked:
                    break
                ev._stop.wait(0.01)
            assert fd in ev._marked
        finally:
            os.close(fd)


def test_an_open_of_a_data_file_wakes_the_evictor_before_its_scan_interval(data_file, tmp_path):
    """inotify: the open itself, not the next scan, triggers the marking (a one-minute scan
    interval here); opening some other file triggers no scan; leaving the block ends the wait."""
    other = tmp_path / "other.bin"
    other.write_bytes(b"x")
    ev = PageCacheEvictor([str(data_file)], interval_s=60, scan_interval_s=60)
    scans = []
    mark = ev._mark_open_files
    ev._mark_open_files = lambda: (scans.append(time.monotonic()), mark())
    with ev:
        if ev._poll is None:
            pytest.skip("no inotify here: the evictor scans on its interval only")
        time.sleep(0.05)  # the thread's first wait has begun
        with open(other, "rb"):
            time.sleep(0.1)
        assert scans == []
        fd = os.open(data_file, os.O_RDONLY)
        try:
            for _ in range(200):
                if fd in ev._marked:
                    break
                time.sleep(0.005)
            assert fd in ev._marked
        finally:
            os.close(fd)
        t = time.monotonic()
    assert time.monotonic() - t < 1.0 and not ev._thread.is_alive()
