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
        """The strings at these byte ranges, an object array, as `text` reads each. A stat's
        strings repeat (every `_Send` of an edge carries the same rendezvous key): the bytes
        are sliced, hashed, and each distinct value decoded once."""
        view = memoryview(self.buf)
        raw = [view[s:s + n].tobytes() for s, n in zip(starts.tolist(), lengths.tolist(),
                                                        strict=True)]
        out = np.empty(len(raw), dtype=object)
        if raw:
            inv, uniq = pd.factorize(np.array(raw, dtype=object))
            out[:] = np.array([u.decode("utf-8", "replace") for u in uniq.tolist()],
                              dtype=object)[inv]
        return out


# Stat metadata ids are small in practice (TF numbers them from 1); larger ones are not decoded,
# so the want[plane, id] table stays small.
MAX_STAT_ID = 1 << 20


class XPlaneDecodeError(ValueError):
    pass


def as_buffer(data: bytes | np.ndarray) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes | bytearray) else data
