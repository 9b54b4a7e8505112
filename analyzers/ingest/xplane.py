"""`*.xplane.pb` → event table rows (see analyzers/events.py for the columns).

Timestamps: TF writes each XLine's `timestamp_ns` relative to the profile start and keeps the
absolute start in the `Task Environment` plane's `profile_start_time` stat (docs/trace-signals.md);
files from other writers carry absolute line timestamps and no such plane. Either way this module
returns `t0_unix_ns` and start times relative to it.

Memory: a large file is memory-mapped, not read; the decoder gives each chunk of lines' pages back
once it is through with them, and the mapping is closed as soon as the few strings the table keeps
(line names, text stats) are out of it; the decoder's per-event arrays then become the table's
columns in place, line by line (the decoder emits each line's events contiguously), so no n-sized
temporary is built on the way (bench/analyzer_speed.py).
"""

from __future__ import annotations

import gc
import gzip
import mmap
import shutil
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.events import (
    SESSION_RUN,
    STAT_COLUMNS,
    TEXT_STATS,
    build_events,
    small_codes,
    stat_aliases,
)
from analyzers.ingest.hlo import METADATA_PLANE, HloOp, plane_hlo_ops
from analyzers.ingest.xplane_arrays import (
    MAX_STAT_ID,
    DecodedSpace,
    XPlaneDecodeError,
)
from analyzers.ingest.xplane_schema import XPlane, XSpace

TASK_ENV_PLANE = "Task Environment"

# Value kinds from the decoder (protobuf field numbers of XStat's oneof).
_DOUBLE, _UINT64, _INT64, _STR, _BYTES, _REF = 2, 3, 4, 5, 6, 7


@dataclass
class XSpaceTable:
    events: pd.DataFrame
    t0_unix_ns: int
    planes: list[str] = field(default_factory=list)
    plane_stats: dict[str, dict[str, object]] = field(default_factory=dict)
    # XLA thunk name -> its HLO instruction (analyzers/ingest/hlo.py), from the saved modules.
    hlo_ops: dict[str, HloOp] = field(default_factory=dict)


@dataclass
class _Decoded:
    """What the table needs from a file, with nothing pointing into the file's bytes."""

    planes: list
    space: DecodedSpace
    line_names: list[str]
    stats: dict[str, tuple[np.ndarray, np.ndarray]]


def _stat_value(stat, names: dict[int, str]) -> object:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(stat, kind)
    return names.get(value, str(value)) if kind == "ref_value" else value


@cache
def compiled_decoder_built() -> bool:
    """Whether the C wire walker was built at install and loads (it is optional: no compiler,
    no walker; a build for another Python is found but does not import)."""
    try:
        import analyzers.ingest._xplane_wire  # noqa: F401
    except ImportError:
        return False
    return True


# What load_run reports when it had to read a large file with protobuf.
SLOW_DECODER_WARNING = ("the compiled xplane decoder was not built at install (no C compiler?): "
                        "read with protobuf, ~13x slower; with a C compiler present, reinstall "
                        "(pip install -e ., or rm .venv/.installed-stamp and make test)")


def read_xplane(path: Path, host: str, decoder: str = "auto") -> XSpaceTable:
    """`decoder`: "small" (protobuf), "compiled" (the C walker) or "auto" (the compiled one when
    built: it is faster at every size, ~13x on a 2.5 MB TF profile)."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if not size:
            raise ValueError(f"{path}: empty xplane file")
        f.seek(0)
        if decoder == "small" or (decoder == "auto" and not compiled_decoder_built()):
            d = _decode(f.read(), small=True, path=path)
        else:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                d = _decode(mapped, small=False, path=path)
            finally:
                _unmap(mapped, path)
    return _table(d, host)


def read_gzipped_xplane(path: Path, host: str) -> XSpaceTable:
    """An `*.xplane.pb.gz` (TF never writes one; people gzip profiles to share them): inflated
    into a temporary file, which the decoder maps like any other, then removed."""
    with tempfile.NamedTemporaryFile(suffix=".xplane.pb") as tmp:
        try:
            with gzip.open(path, "rb") as src:
                shutil.copyfileobj(src, tmp, 1 << 20)
        except (OSError, EOFError, zlib.error) as e:
            raise ValueError(f"{path}: not a readable gzip-compressed xplane ({e})") from None
        tmp.flush()
        try:
            return read_xplane(Path(tmp.name), host)
        except ValueError as e:  # named after the file the user gave, not the temporary one
            raise ValueError(str(e).replace(tmp.name, f"{path} (inflated)")) from None


def _unmap(mapped: mmap.mmap, path: Path) -> None:
    try:
        mapped.close()
        return
    except BufferError:
        pass
    # A view of the mapping caught in a reference cycle (a traceback's frames, for one) lives
    # until the cycle collector runs.
    gc.collect()
    try:
        mapped.close()
    except BufferError:
        raise RuntimeError(f"{path}: decoder invariant broken: a view of the mapped file "
                           "outlived decoding") from None


def _decode(data: bytes | mmap.mmap, *, small: bool, path: Path) -> _Decoded:
    error = None
    try:
        return _decode_unchecked(data, small)
    except XPlaneDecodeError as e:
        error = f"{path}: {e}"
    except Exception as e:  # protobuf raises its own DecodeError on a corrupt plane
        error = f"{path}: not a valid xplane ({type(e).__name__}: {e})"
    # Raised outside the handler, so no traceback frame keeps a view of a mapping being closed.
    raise ValueError(error)


def _decode_unchecked(data: bytes | mmap.mmap, small: bool) -> _Decoded:
    if small:
        from analyzers.ingest.xplane_small import decode_small

        whole = XSpace.FromString(data)
        planes = list(whole.planes)
        want, columns = _wanted_stats(planes)
        space = decode_small(whole, want)
    else:
        from analyzers.ingest.xplane_decode import decode_events, decode_layout

        buf = np.frombuffer(data, dtype=np.uint8)
        layout = decode_layout(buf)
        planes = [XPlane.FromString(rest) for rest in layout.plane_rest]
        want, columns = _wanted_stats(planes)
        release = _page_releaser(data) if isinstance(data, mmap.mmap) else None
        space = decode_events(buf, want, layout.spans, release)
    lines_s = space.lines_s
    line_names = [space.text(*(d if d[1] else n))
                  for n, d in zip(lines_s[:, :2], lines_s[:, 2:], strict=True)]
    stats = _stat_columns(space, planes, columns)
    space.buf = np.zeros(0, dtype=np.uint8)  # the file's bytes are not needed any more
    return _Decoded(planes, space, line_names, stats)


def _page_releaser(mapped: mmap.mmap) -> Callable[[int, int], None]:
    """Drops decoded byte ranges of a read-only file mapping from this process's memory: the
    pages stay in the page cache, and the few later reads (line names, text stats) fault them
    back in, so the peak holds one chunk of the file beside the decoder's arrays instead of all
    of it (docs/trace-signals.md, "Reading large files")."""
    page = mmap.PAGESIZE

    def release(start: int, end: int) -> None:
        first = start // page * page
        if end > first:
            mapped.madvise(mmap.MADV_DONTNEED, first, end - first)

    return release


def _table(d: _Decoded, host: str) -> XSpaceTable:
    planes, space = d.planes, d.space
    plane_stats: dict[str, dict[str, object]] = {}
    for p in planes:
        stat_names = {k: m.name for k, m in p.stat_metadata.items()}
        plane_stats[p.name] = {stat_names.get(s.metadata_id, "?"): _stat_value(s, stat_names)
                               for s in p.stats}
    start = plane_stats.get(TASK_ENV_PLANE, {}).get("profile_start_time")
    t0 = int(start) if isinstance(start, int) else 0

    lines_i, ev_line = space.lines_i, space.ev_line
    if len(ev_line) > 1 and (ev_line[1:] < ev_line[:-1]).any():
        raise RuntimeError("decoder invariant broken: events not grouped by line")
    # Events arrive grouped by line, in line order: line k's events are ev[bounds[k]:bounds[k+1]].
    per_line = np.bincount(ev_line, minlength=len(lines_i))
    bounds = np.concatenate(([0], np.cumsum(per_line)))
    line_ts = lines_i[:, 2].copy()
    if t0 == 0 and len(ev_line):
        # Absolute line timestamps (no Task Environment plane): the earliest line with events
        # starts the trace (empty lines may carry timestamp 0).
        t0 = int(line_ts[per_line > 0].min())
        line_ts -= t0

    # Name codes index the sorted distinct names of all planes; unknown metadata ids get the
    # extra last code, "<unknown>" (added only if some event needs it).
    plane_names = [[m.name or m.display_name for m in (p.event_metadata[i] for i in
                    sorted(p.event_metadata))] for p in planes]
    categories, inverse = _distinct([n for ns in plane_names for n in ns])
    unknown = len(categories)
    codes = np.empty(len(ev_line), dtype=small_codes(unknown + 1))
    start_ns, dur_ns, mids = space.ev_off, space.ev_dur, space.ev_mid
    bounds_names = np.cumsum([0, *map(len, plane_names)])
    lookups = [_name_lookup(np.array(sorted(p.event_metadata), dtype=np.int64),
                            inverse[a:b].astype(codes.dtype), unknown)
               for p, a, b in zip(planes, bounds_names[:-1], bounds_names[1:], strict=True)]
    for k in np.flatnonzero(per_line):
        a, b = bounds[k], bounds[k + 1]
        # offset_ps → start_ns and duration_ps → dur_ns, in the decoder's own arrays.
        np.floor_divide(start_ns[a:b], 1000, out=start_ns[a:b])
        start_ns[a:b] += line_ts[k]
        np.floor_divide(dur_ns[a:b], 1000, out=dur_ns[a:b])
        codes[a:b] = lookups[lines_i[k, 0]](mids[a:b])
    # The metadata ids and line indices are spent (per_line holds the layout): 12 bytes per
    # event freed before the table's columns are built (bench/analyzer_speed.py).
    del mids, ev_line
    space.ev_mid = np.zeros(0, dtype=np.int64)
    space.ev_line = np.zeros(0, dtype=np.int32)
    names = [*map(str, categories)]
    if len(codes) and (codes == unknown).any():
        names.append("<unknown>")

    line_plane = lines_i[:, 0]
    return XSpaceTable(
        events=build_events(
            host=host,
            plane=_per_line(line_plane, [p.name for p in planes], per_line),
            line=_per_line(np.arange(len(lines_i)), d.line_names, per_line),
            line_id=_per_line(np.arange(len(lines_i)), list(lines_i[:, 1]), per_line),
            name_codes=codes,
            names=names,
            start_ns=start_ns,
            dur_ns=dur_ns,
            stats=d.stats,
        ),
        t0_unix_ns=t0,
        planes=[p.name for p in planes],
        plane_stats=plane_stats,
        hlo_ops={k: v for p in planes if p.name == METADATA_PLANE
                 for k, v in plane_hlo_ops(p).items()},
    )


def _name_lookup(ids: np.ndarray, codes: np.ndarray, unknown: int
                 ) -> Callable[[np.ndarray], np.ndarray]:
    """One plane's metadata ids (sorted) → name codes, built once per plane and applied to each of
    its lines' events (`unknown` for ids the plane lacks)."""
    if not len(ids):
        return lambda mids: np.full(len(mids), unknown, dtype=codes.dtype)
    if ids[0] >= 0 and ids[-1] < 4 * len(ids) + 1024:
        # TF's ids are small and dense: a lookup table beats a binary search per event.
        lut = np.full(int(ids[-1]) + 2, unknown, dtype=codes.dtype)
        lut[ids] = codes
        return lambda mids: lut[np.clip(mids, -1, len(lut) - 1)]  # -1, past the end: last slot

    def search(mids: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(ids, mids).clip(0, len(ids) - 1)
        return np.where(ids[pos] == mids, codes[pos], unknown).astype(codes.dtype)

    return search


def _per_line(line_value: np.ndarray, values: list, per_line: np.ndarray
              ) -> tuple[np.ndarray, list]:
    """A column that is constant within each line: (row codes, distinct values), built from one
    small code per line repeated over that line's events."""
    uniq, inverse = _distinct([values[i] for i in line_value])
    return np.repeat(inverse.astype(small_codes(len(uniq))), per_line), list(uniq)


def _distinct(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and each value's index among them."""
    if not values:
        return np.asarray([], dtype=object), np.zeros(0, dtype=np.int64)
    return np.unique(np.asarray(values, dtype=object), return_inverse=True)


def _wanted_stats(planes: list) -> tuple[np.ndarray, list[str]]:
    """want[plane, stat metadata id] = index into `columns` of the stats the table keeps."""
    columns = list(STAT_COLUMNS)
    runs = any(m.name == SESSION_RUN for p in planes for m in p.event_metadata.values())
    alias = {a: columns.index(col) for a, col in stat_aliases(runs).items()}
    width = 1
    for p in planes:
        for k, m in p.stat_metadata.items():
            if m.name in alias and k < MAX_STAT_ID:
                width = max(width, k + 1)
    want = np.full((max(len(planes), 1), width), -1, dtype=np.int64)
    for pi, p in enumerate(planes):
        for k, m in p.stat_metadata.items():
            if m.name in alias and 0 <= k < width:
                want[pi, k] = alias[m.name]
    return want, columns


def _stat_columns(space: DecodedSpace, planes: list, columns: list[str]
                  ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The decoded stats, one column each as (event rows, values): ints, or str for text stats.
    Where an event carries one column twice (aliases), the last value wins."""
    si = space.stats_i
    ev_plane = space.lines_i[space.ev_line[si[:, 0]], 0] if len(si) else np.zeros(0, np.int64)
    ref_names = [{k: m.name for k, m in p.stat_metadata.items()} for p in planes]
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for ci, col in enumerate(columns):
        rows = np.flatnonzero(si[:, 1] == ci)
        if not len(rows):
            continue
        kinds, events, values = si[rows, 2], si[rows, 0], si[rows, 3]
        if col in TEXT_STATS:
            refs = np.flatnonzero(kinds == _REF)
            texts = np.flatnonzero((kinds == _STR) | (kinds == _BYTES))
            # Each distinct (plane, reference) is looked up once: sends repeat their keys. A
            # reference is a stat metadata id, numbered from 1: the rare one past 2**32 is
            # looked up on its own.
            ref_ids, ref_planes = values[refs], ev_plane[rows[refs]].astype(np.int64)
            small = (ref_ids >= 0) & (ref_ids < 1 << 32)
            pairs, inv = np.unique((ref_planes[small] << 32) | ref_ids[small],
                                   return_inverse=True)
            named = np.empty(len(refs), dtype=object)
            named[small] = np.array([ref_names[p >> 32].get(p & 0xFFFFFFFF, "")
                                     for p in pairs.tolist()], dtype=object)[inv.ravel()]
            named[~small] = [ref_names[p].get(v, "") for p, v in
                             zip(ref_planes[~small].tolist(), ref_ids[~small].tolist(),
                                 strict=True)]
            values_out = np.concatenate((named,
                                         space.texts(values[texts], si[rows[texts], 4])))
            # Text values after references: where both exist for an event, the text wins.
            out[col] = _last_per_event(np.concatenate((events[refs], events[texts])),
                                       values_out)
        else:
            ints = (kinds == _INT64) | (kinds == _UINT64) | (kinds == _REF)
            dbl = kinds == _DOUBLE
            # Doubles after ints: where both exist for an event, the double wins, as it always has.
            out[col] = _last_per_event(
                np.concatenate((events[ints], events[dbl])),
                np.concatenate((values[ints], space.stats_d[rows[dbl]].astype(np.int64))),
            )
    return out


def _last_per_event(events: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(events, kind="stable")
    events, values = events[order], values[order]
    last = np.ones(len(events), dtype=bool)
    last[:-1] = events[1:] != events[:-1]
    return events[last], values[last]
