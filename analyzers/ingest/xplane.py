"""`*.xplane.pb` → event table rows (see analyzers/events.py for the columns).

Timestamps: TF writes each XLine's `timestamp_ns` relative to the profile start and keeps the
absolute start in the `Task Environment` plane's `profile_start_time` stat (docs/trace-signals.md);
files from other writers carry absolute line timestamps and no such plane. Either way this module
returns `t0_unix_ns` and start times relative to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.events import STAT_COLUMNS, TEXT_STATS, build_events
from analyzers.ingest.xplane_arrays import MAX_STAT_ID, XPlaneDecodeError, as_buffer
from analyzers.ingest.xplane_schema import XPlane, XSpace

# Below this size protobuf decodes faster than numba can be imported and loaded.
SMALL_FILE_BYTES = 4 << 20

TASK_ENV_PLANE = "Task Environment"

# Value kinds from the decoder (protobuf field numbers of XStat's oneof).
_DOUBLE, _UINT64, _INT64, _STR, _BYTES, _REF = 2, 3, 4, 5, 6, 7


@dataclass
class XSpaceTable:
    events: pd.DataFrame
    t0_unix_ns: int
    planes: list[str] = field(default_factory=list)
    plane_stats: dict[str, dict[str, object]] = field(default_factory=dict)


def _stat_value(stat, names: dict[int, str]) -> object:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(stat, kind)
    return names.get(value, str(value)) if kind == "ref_value" else value


def read_xplane(path: Path, host: str, decoder: str = "auto") -> XSpaceTable:
    """`decoder`: "small" (protobuf), "compiled" (numba) or "auto" (by file size)."""
    data = Path(path).read_bytes()
    if not data:
        raise ValueError(f"{path}: empty xplane file")
    buf = as_buffer(data)
    try:
        if decoder == "small" or (decoder == "auto" and len(data) < SMALL_FILE_BYTES):
            from analyzers.ingest.xplane_small import decode_small

            whole = XSpace.FromString(data)
            planes = list(whole.planes)
            want, columns = _wanted_stats(planes)
            space = decode_small(whole, want)
        else:
            from analyzers.ingest.xplane_decode import decode_events, decode_plane_rest

            planes = [XPlane.FromString(rest) for rest in decode_plane_rest(buf)]
            want, columns = _wanted_stats(planes)
            space = decode_events(buf, want)
    except XPlaneDecodeError as e:
        raise ValueError(f"{path}: {e}") from None
    except Exception as e:  # protobuf raises its own DecodeError on a corrupt plane
        raise ValueError(f"{path}: not a valid xplane ({type(e).__name__}: {e})") from None

    plane_stats: dict[str, dict[str, object]] = {}
    for p in planes:
        stat_names = {k: m.name for k, m in p.stat_metadata.items()}
        plane_stats[p.name] = {stat_names.get(s.metadata_id, "?"): _stat_value(s, stat_names)
                               for s in p.stats}
    start = plane_stats.get(TASK_ENV_PLANE, {}).get("profile_start_time")
    t0 = int(start) if isinstance(start, int) else 0

    lines_i, lines_s = space.lines_i, space.lines_s
    ev_line = space.ev_line
    ev_plane = lines_i[ev_line, 0] if len(ev_line) else np.zeros(0, dtype=np.int64)
    line_names = [space.text(*(d if d[1] else n))
                  for n, d in zip(lines_s[:, :2], lines_s[:, 2:], strict=True)]
    line_ts = lines_i[:, 2]
    if t0 == 0 and len(ev_line):
        # Absolute line timestamps (no Task Environment plane): the earliest line with events
        # starts the trace (empty lines may carry timestamp 0).
        t0 = int(line_ts[np.unique(ev_line)].min())
        line_ts = line_ts - t0
    start_ns = line_ts[ev_line] + space.ev_off // 1000
    dur_ns = space.ev_dur // 1000

    # Event names: per plane metadata ids → one global list of names, then integer codes.
    names: list[str] = []
    codes = np.full(len(ev_line), -1, dtype=np.int64)
    for pi, p in enumerate(planes):
        if not p.event_metadata:
            continue
        sel = np.flatnonzero(ev_plane == pi) if len(planes) > 1 else np.arange(len(ev_line))
        if not len(sel):
            continue
        ids = np.fromiter(p.event_metadata.keys(), dtype=np.int64, count=len(p.event_metadata))
        ids.sort()
        meta = [p.event_metadata[int(i)] for i in ids]
        mids = space.ev_mid[sel]
        if ids[0] >= 0 and ids[-1] < 4 * len(ids) + 1024:
            # TF's ids are small and dense: a lookup table beats a binary search per event.
            lut = np.full(int(ids[-1]) + 1, -1, dtype=np.int64)
            lut[ids] = np.arange(len(ids)) + len(names)
            inside = (mids >= 0) & (mids <= ids[-1])
            codes[sel[inside]] = lut[mids[inside]]
        else:
            pos = np.searchsorted(ids, mids).clip(0, len(ids) - 1)
            known = ids[pos] == mids
            codes[sel[known]] = pos[known] + len(names)
        names.extend(m.name or m.display_name for m in meta)

    return XSpaceTable(
        events=build_events(
            host=host,
            plane=(ev_plane, [p.name for p in planes]),
            line=(ev_line, line_names),
            line_id=lines_i[ev_line, 1],
            name_codes=codes,
            names=names,
            start_ns=start_ns,
            dur_ns=dur_ns,
            stats=_stat_columns(space, planes, columns, ev_plane),
        ),
        t0_unix_ns=t0,
        planes=[p.name for p in planes],
        plane_stats=plane_stats,
    )


def _wanted_stats(planes: list) -> tuple[np.ndarray, list[str]]:
    """want[plane, stat metadata id] = index into `columns` of the stats the table keeps."""
    columns = list(STAT_COLUMNS)
    alias = {a: columns.index(col) for col, aliases in STAT_COLUMNS.items() for a in aliases}
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


def _stat_columns(space, planes: list, columns: list[str],
                  ev_plane: np.ndarray) -> dict[str, np.ndarray]:
    """The decoded stats as one column each: int64 with -1 for absent, or object for text."""
    n = len(space.ev_line)
    si = space.stats_i
    out: dict[str, np.ndarray] = {}
    for ci, col in enumerate(columns):
        rows = np.flatnonzero(si[:, 1] == ci)
        if not len(rows):
            continue
        kinds, events, values = si[rows, 2], si[rows, 0], si[rows, 3]
        if col in TEXT_STATS:
            arr = np.full(n, None, dtype=object)
            refs = kinds == _REF
            if refs.any():
                for pi, p in enumerate(planes):
                    in_plane = refs & (ev_plane[events] == pi)
                    if in_plane.any():
                        ref_names = {k: m.name for k, m in p.stat_metadata.items()}
                        arr[events[in_plane]] = [ref_names.get(int(v), "") for v in
                                                 values[in_plane]]
            texts = (kinds == _STR) | (kinds == _BYTES)
            for r in np.flatnonzero(texts):
                arr[events[r]] = space.text(int(values[r]), int(si[rows[r], 4]))
        else:
            arr = np.full(n, -1, dtype=np.int64)
            ints = (kinds == _INT64) | (kinds == _UINT64) | (kinds == _REF)
            arr[events[ints]] = values[ints]
            dbl = kinds == _DOUBLE
            arr[events[dbl]] = space.stats_d[rows[dbl]].astype(np.int64)
        out[col] = arr
    return out
