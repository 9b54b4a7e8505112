"""xplane files decoded with protobuf alone, into the same arrays as the compiled decoder.

The fallback where the C walker was not built (it is an optional extension: no compiler at
install), and the reference the compiled decoder is tested against. Loops over the events in
Python (~1 µs each, ~13x slower than the walker). Same output as `xplane_decode.decode_events`;
tests hold the two to each other.
"""

from __future__ import annotations

import numpy as np

from analyzers.ingest.xplane_arrays import DecodedSpace
from analyzers.ingest.xplane_schema import XSpace

_KIND = {"double_value": 2, "uint64_value": 3, "int64_value": 4, "str_value": 5,
         "bytes_value": 6, "ref_value": 7}
_INT64 = 1 << 63


def decode_small(space: XSpace, want: np.ndarray) -> DecodedSpace:
    """Lines, events and the stats `want` selects (want[plane, stat id] = column, -1 = skip)."""
    aux = bytearray()  # line names and text stat values; `buf` of the result

    def keep(data: bytes) -> tuple[int, int]:
        start = len(aux)
        aux.extend(data)
        return start, len(data)

    lines_i, lines_s = [], []
    ev_line: list[int] = []
    ev_mid: list[int] = []
    ev_off: list[int] = []
    ev_dur: list[int] = []
    st_i: list[tuple[int, int, int, int, int]] = []
    st_d: list[float] = []
    width = want.shape[1]
    for pi, plane in enumerate(space.planes):
        for line in plane.lines:
            li = len(lines_i)
            lines_i.append((pi, line.id, line.timestamp_ns, line.duration_ps))
            lines_s.append((*keep(line.name.encode()), *keep(line.display_name.encode())))
            events = line.events
            first = len(ev_line)
            ev_line.extend([li] * len(events))
            ev_mid.extend([e.metadata_id for e in events])
            ev_off.extend([e.offset_ps for e in events])
            ev_dur.extend([e.duration_ps for e in events])
            for k, e in enumerate(events):
                for st in e.stats:
                    mid = st.metadata_id
                    col = int(want[pi, mid]) if 0 <= mid < width else -1
                    if col < 0:
                        continue
                    which = st.WhichOneof("value")
                    kind = _KIND.get(which, 0)
                    value, length, dbl = 0, 0, 0.0
                    if kind == 2:
                        dbl = st.double_value
                    elif kind in (5, 6):
                        raw = st.str_value.encode() if kind == 5 else st.bytes_value
                        value, length = keep(raw)
                    elif kind:
                        value = getattr(st, which)
                        value = value - (1 << 64) if value >= _INT64 else value
                    st_i.append((first + k, col, kind, value, length))
                    st_d.append(dbl)
    return DecodedSpace(
        buf=np.frombuffer(bytes(aux), dtype=np.uint8),
        lines_i=np.array(lines_i, dtype=np.int64).reshape(-1, 4),
        lines_s=np.array(lines_s, dtype=np.int64).reshape(-1, 4),
        ev_line=np.array(ev_line, dtype=np.int32),
        ev_mid=np.array(ev_mid, dtype=np.int64),
        ev_off=np.array(ev_off, dtype=np.int64),
        ev_dur=np.array(ev_dur, dtype=np.int64),
        stats_i=np.array(st_i, dtype=np.int64).reshape(-1, 5),
        stats_d=np.array(st_d, dtype=np.float64),
    )
