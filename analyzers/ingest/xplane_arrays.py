"""The flat arrays an xplane decodes into, shared by the compiled decoder and the protobuf one
(the fallback where the C walker was not built)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd


@dataclass
class DecodedSpace:
    """Flat arrays for one XSpace file; row indices link event -> line -> plane, stat -> event.

    lines_i columns: plane, id, timestamp_ns, duration_ps; lines_s: name (start, len),
    display_name (start, len) as byte ranges into `buf`. Events: ev_line, ev_mid (metadata id),
    ev_off (offset_ps), ev_dur (duration_ps). stats_i columns (wanted stats only): event, output
    column, kind (field number of the value: 2 double, 3 uint64, 4 int64, 5 str, 6 bytes, 7 ref),
    value (ints and refs; byte start for str/bytes), byte length; stats_d the doubles.
    """

    buf: np.ndarray
    lines_i: np.ndarray
    lines_s: np.ndarray
    ev_line: np.ndarray
    ev_mid: np.ndarray
    ev_off: np.ndarray
    ev_dur: np.ndarray
    stats_i: np.ndarray
    stats_d: np.ndarray
    plane_rest: list[bytes] = field(default_factory=list)

    @property
    def events(self) -> np.ndarray:
        """One row per event: line, metadata id, offset_ps, duration_ps, 0, 0 (the layout of
        XEvent's field numbers; num_occurrences is not decoded)."""
        z = np.zeros(len(self.ev_line), dtype=np.int64)
        return np.stack([self.ev_line.astype(np.int64), self.ev_mid, self.ev_off, self.ev_dur,
                         z, z], axis=1)

    def text(self, start: int, length: int) -> str:
        return self.buf[start : start + length].tobytes().decode("utf-8", "replace")

    def texts(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The strings at these byte ranges, an object array. A stat's strings repeat (every
        `_Send` of an edge carries the same rendezvous key), so each distinct one is decoded
        once: the ranges are gathered as fixed-width byte strings and hashed;
        per-row decoding took 1-2 s on 300,000 keys (bench note in docs/trace-signals.md,
        "Parameter servers"). Fixed-width bytes drop trailing NULs, which TF's strings lack."""
        out = np.empty(len(starts), dtype=object)
        if not len(starts):
            return out
        width = max(int(lengths.max()), 1)
        col = np.arange(width)
        step = max(1, (1 << 22) // width)  # rows per chunk: ~4M gathered cells at a time
        for a in range(0, len(starts), step):
            keep = col < lengths[a:a + step, None]
            cells = self.buf[np.where(keep, starts[a:a + step, None] + col, 0)]
            cells[~keep] = 0
            fixed = np.ascontiguousarray(cells).view(f"S{width}").ravel()
            inv, uniq = pd.factorize(fixed.astype(object))  # hashed: no sort of long keys
            decoded = np.array([u.decode("utf-8", "replace") for u in uniq.tolist()],
                               dtype=object)
            out[a:a + step] = decoded[inv]
        return out


# Stat metadata ids are small in practice (TF numbers them from 1); larger ones are not decoded,
# so the want[plane, id] table stays small.
MAX_STAT_ID = 1 << 20


class XPlaneDecodeError(ValueError):
    pass


def as_buffer(data: bytes | np.ndarray) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes | bytearray) else data
