"""A compiled decoder from `*.xplane.pb` bytes straight into flat NumPy arrays.

Why not parse with protobuf and loop over the messages: on a TF trace that runs at ~0.4M
events/s and holds every event as a Python object, far from the goal of >=2M events/s with RSS
within 3x the file. This decoder walks the wire format (the C extension `_xplane_wire`, built at
install): the top level first, skipping each line by its length, then the lines in chunks,
counting first and filling preallocated arrays second, so no per-event Python object is ever
built. Only the small parts of each plane (names, metadata maps, plane stats) go to protobuf,
copied out into `rest`. The wire format and the walkers' contracts are in _xplane_wire.c.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from analyzers.ingest import _xplane_wire as wire
from analyzers.ingest.xplane_arrays import (
    MAX_STAT_ID,
    DecodedSpace,
    XPlaneDecodeError,
    as_buffer,
)

# Lines are decoded in runs of about this many bytes (see decode_events).
CHUNK_BYTES = 16 << 20
# Threads decoding chunks side by side (each holds one chunk of a mapped file's pages).
MAX_WORKERS = 4

# Error codes returned by the compiled functions (0 = ok); the byte offset travels beside them.
_ERRORS = {
    1: "truncated varint",
    2: "length runs past the end of its message",
    3: "unsupported wire type",
    4: "fixed-width field runs past the end",
    5: "field number 0",
    6: "output arrays too small",
}


def _check(code: int, offset: int) -> None:
    if code:
        raise XPlaneDecodeError(
            f"not a valid xplane: {_ERRORS.get(code, 'corrupt')} at byte {offset}")


@dataclass
class Layout:
    """A file's planes without their lines (bytes protobuf parses as an XPlane) and each line's
    (plane, payload start, payload end) byte span."""

    plane_rest: list[bytes]
    spans: np.ndarray


def decode_layout(buf: np.ndarray) -> Layout:
    """Cheap: lines are skipped by length, so only their first bytes are read."""
    counts = np.zeros(5, dtype=np.int64)
    wire.walk_rest(buf, False, counts, np.zeros((0, 2), np.int64), np.zeros(0, np.uint8),
                   np.zeros((0, 3), np.int64))
    _check(int(counts[2]), int(counts[3]))
    planes_rest = np.zeros((int(counts[0]), 2), dtype=np.int64)
    rest = np.zeros(int(counts[1]), dtype=np.uint8)
    spans = np.zeros((int(counts[4]), 3), dtype=np.int64)
    wire.walk_rest(buf, True, counts, planes_rest, rest, spans)
    return Layout([rest[a:b].tobytes() for a, b in planes_rest], spans)


def _chunks(spans: np.ndarray, chunk_bytes: int) -> list[tuple[int, int]]:
    """Runs of consecutive lines of about `chunk_bytes` (a longer line is a chunk of its own)."""
    out, first, size = [], 0, 0
    for k, n in enumerate((spans[:, 2] - spans[:, 1]).tolist()):
        if size and size + n > chunk_bytes:
            out.append((first, k))
            first, size = k, 0
        size += n
    if first < len(spans):
        out.append((first, len(spans)))
    return out


def decode_events(buf: np.ndarray, want: np.ndarray, spans: np.ndarray,
                  release: Callable[[int, int], None] | None = None,
                  chunk_bytes: int = CHUNK_BYTES, workers: int | None = None) -> DecodedSpace:
    """Lines, events and the stats `want` selects (want[plane, stat id] = column, -1 = skip).

    Lines are decoded in chunks: every chunk is counted, then every chunk is filled at its own
    offsets, chunks side by side on `workers` threads (the compiled walker releases the GIL; a
    chunk writes only its own rows). `release(start, end)` is called with each chunk's byte range
    once a pass is done with it, so a memory-mapped file's pages can be given back while the
    rest is decoded (the peak holds a chunk of the file per worker beside the arrays, not the
    whole file)."""
    chunks = _chunks(spans, chunk_bytes)
    want = np.ascontiguousarray(want, dtype=np.int64)
    spans = np.ascontiguousarray(spans, dtype=np.int64)
    width = want.shape[1]
    e2 = np.zeros((0, 4), np.int64)
    e1 = np.zeros(0, np.int64)
    no_lines, no_stats, no_doubles = (np.zeros(0, np.int32), np.zeros((0, 5), np.int64),
                                      np.zeros(0, np.float64))

    def count(chunk: tuple[int, int]) -> np.ndarray:
        a, b = chunk
        counts = np.zeros(4, dtype=np.int64)
        wire.walk_lines(buf, spans, a, b, False, want, width, counts, e2, e2, no_lines, e1, e1, e1,
                        no_stats, no_doubles)
        if release is not None:
            release(int(spans[a, 1]), int(spans[b - 1, 2]))
        return counts

    counted = _each(count, chunks, workers)
    for c in counted:  # the first error in file order
        _check(int(c[2]), int(c[3]))
    sizes = np.array([c[:2] for c in counted], dtype=np.int64).reshape(-1, 2)
    bases = np.cumsum(sizes, axis=0) - sizes  # each chunk's first event and stat row
    n_events, n_stats = (int(x) for x in sizes.sum(axis=0))
    out = DecodedSpace(
        buf=buf,
        lines_i=np.zeros((len(spans), 4), dtype=np.int64),
        lines_s=np.zeros((len(spans), 4), dtype=np.int64),
        ev_line=np.zeros(n_events, dtype=np.int32),
        ev_mid=np.zeros(n_events, dtype=np.int64),
        ev_off=np.zeros(n_events, dtype=np.int64),
        ev_dur=np.zeros(n_events, dtype=np.int64),
        stats_i=np.zeros((n_stats, 5), dtype=np.int64),
        stats_d=np.zeros(n_stats, dtype=np.float64),
    )

    def fill(k: int) -> np.ndarray:
        a, b = chunks[k]
        counts = np.array([bases[k, 0], bases[k, 1], 0, 0], dtype=np.int64)
        wire.walk_lines(buf, spans, a, b, True, want, width, counts, out.lines_i, out.lines_s,
                        out.ev_line, out.ev_mid, out.ev_off, out.ev_dur, out.stats_i, out.stats_d)
        if release is not None:
            release(int(spans[a, 1]), int(spans[b - 1, 2]))
        return counts

    for c in _each(fill, range(len(chunks)), workers):
        _check(int(c[2]), int(c[3]))
    keep = out.stats_i[:, 1] >= 0  # stats whose id was found only after decoding
    if not keep.all():
        out.stats_i, out.stats_d = out.stats_i[keep], out.stats_d[keep]
    return out


def _each(func: Callable, items, workers: int | None) -> list:
    """func over items, in order; on threads when there are several items and cores."""
    items = list(items)
    workers = min(workers or os.cpu_count() or 1, len(items), MAX_WORKERS)
    if workers <= 1:
        return [func(x) for x in items]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(func, items))


def decode_xspace(data: bytes | np.ndarray) -> DecodedSpace:
    """Everything, every stat kept with its metadata id as its column (tests, benchmarks)."""
    from analyzers.ingest.xplane_schema import XPlane

    buf = as_buffer(data)
    layout = decode_layout(buf)
    planes = [XPlane.FromString(r) for r in layout.plane_rest]
    width = max((k + 1 for p in planes for k in p.stat_metadata if 0 <= k < MAX_STAT_ID),
                default=1)
    ids = np.arange(width, dtype=np.int64)
    out = decode_events(buf, np.tile(ids, (max(len(planes), 1), 1)), layout.spans)
    out.plane_rest = layout.plane_rest
    return out
