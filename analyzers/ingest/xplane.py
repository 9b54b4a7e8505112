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

from analyzers.events import STAT_COLUMNS, build_events
from analyzers.ingest.xplane_decode import XPlaneDecodeError, decode_xspace
from analyzers.ingest.xplane_schema import XPlane

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


def read_xplane(path: Path, host: str) -> XSpaceTable:
    data = Path(path).read_bytes()
    if not data:
        raise ValueError(f"{path}: empty xplane file")
    try:
        space = decode_xspace(data)
        planes = [XPlane.FromString(rest) for rest in space.plane_rest]
    except (XPlaneDecodeError, Exception) as e:  # protobuf raises its own DecodeError
        raise ValueError(f"{path}: {e}") from None

    plane_stats: dict[str, dict[str, object]] = {}
    for p in planes:
        stat_names = {k: m.name for k, m in p.stat_metadata.items()}
        plane_stats[p.name] = {stat_names.get(s.metadata_id, "?"): _stat_value(s, stat_names)
                               for s in p.stats}
    start = plane_stats.get(TASK_ENV_PLANE, {}).get("profile_start_time")
    t0 = int(start) if isinstance(start, int) else 0

    lines_i, lines_s, ev = space.lines_i, space.lines_s, space.events
    line_plane = lines_i[:, 0]
    line_names = np.array(
        [space.text(*(d if d[1] else n))
         for n, d in zip(lines_s[:, :2], lines_s[:, 2:], strict=True)],
        dtype=object,
    )
    ev_line = ev[:, 0]
    ev_plane = line_plane[ev_line]
    line_ts = lines_i[ev_line, 2]
    if t0 == 0 and len(ev):
        # Absolute line timestamps (no Task Environment plane): the earliest line with events
        # starts the trace (empty lines may carry timestamp 0).
        t0 = int(lines_i[np.unique(ev_line), 2].min())
        line_ts = line_ts - t0
    start_ns = line_ts + ev[:, 2] // 1000
    dur_ns = ev[:, 3] // 1000

    # Event names: per plane metadata ids → one global list of names, then integer codes.
    names: list[str] = []
    codes = np.full(len(ev), -1, dtype=np.int64)
    for pi, p in enumerate(planes):
        sel = np.flatnonzero(ev_plane == pi)
        if not len(sel) or not p.event_metadata:
            continue
        ids = np.fromiter(p.event_metadata.keys(), dtype=np.int64, count=len(p.event_metadata))
        order = np.argsort(ids)
        ids = ids[order]
        meta = [p.event_metadata[int(i)] for i in ids]
        pos = np.searchsorted(ids, ev[sel, 1]).clip(0, len(ids) - 1)
        known = ids[pos] == ev[sel, 1]
        codes[sel[known]] = pos[known] + len(names)
        names.extend(m.name or m.display_name for m in meta)

    stats = _pivot_stats(space, planes, ev_plane)
    return XSpaceTable(
        events=build_events(
            host=host,
            plane=(ev_plane, [p.name for p in planes]),
            line=(ev_line, list(line_names)),
            line_id=lines_i[ev_line, 1],
            name_codes=codes,
            names=names,
            start_ns=start_ns,
            dur_ns=dur_ns,
            stats=stats,
        ),
        t0_unix_ns=t0,
        planes=[p.name for p in planes],
        plane_stats=plane_stats,
    )


def _pivot_stats(space, planes: list, ev_plane: np.ndarray) -> dict[str, np.ndarray]:
    """The few stats detectors use, one column each (int64 with -1 as missing, or object)."""
    n = len(space.events)
    out: dict[str, np.ndarray] = {}
    si = space.stats_i
    if not len(si):
        return out
    st_plane = ev_plane[si[:, 0]]
    # (plane, stat metadata id) → stat name, and ref ids → interned strings, per plane.
    wanted = {alias: col for col, aliases in STAT_COLUMNS.items() for alias in aliases}
    for pi, p in enumerate(planes):
        by_name = {m.name: k for k, m in p.stat_metadata.items() if m.name in wanted}
        if not by_name:
            continue
        in_plane = st_plane == pi
        for stat_name, mid in by_name.items():
            col = wanted[stat_name]
            rows = np.flatnonzero(in_plane & (si[:, 1] == mid))
            if not len(rows):
                continue
            kinds = si[rows, 2]
            events = si[rows, 0]
            numeric = (kinds == _INT64) | (kinds == _UINT64)
            if numeric.any():
                arr = out.setdefault(col, np.full(n, -1, dtype=np.int64))
                if arr.dtype == object:
                    arr[events[numeric]] = si[rows[numeric], 3]
                else:
                    arr[events[numeric]] = si[rows[numeric], 3]
            textual = (kinds == _STR) | (kinds == _REF) | (kinds == _BYTES)
            if textual.any():
                arr = out.get(col)
                if arr is None or arr.dtype != object:
                    obj = np.full(n, None, dtype=object)
                    if arr is not None:
                        has = arr >= 0
                        obj[has] = arr[has]
                    arr = out[col] = obj
                refs = {k: m.name for k, m in p.stat_metadata.items()}
                for r in rows[textual]:
                    if si[r, 2] == _REF:
                        arr[si[r, 0]] = refs.get(int(si[r, 3]), "")
                    else:
                        arr[si[r, 0]] = space.text(int(si[r, 3]), int(si[r, 4]))
            dbl = kinds == _DOUBLE
            if dbl.any():
                arr = out.setdefault(col, np.full(n, -1, dtype=np.int64))
                if arr.dtype != object:
                    arr[events[dbl]] = space.stats_d[rows[dbl]].astype(np.int64)
    return out
