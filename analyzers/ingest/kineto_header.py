"""The few top-level fields of a PyTorch profiler (Kineto) trace that say which process wrote it:
`distributedInfo` (rank, world size, backend) and `host_name`, read from the file's head.

Kineto writes its metadata before the `traceEvents` list (docs/trace-signals.md, "PyTorch ranks"),
so the head is enough: a folder of many cycles is sorted into ranks without parsing each file.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path

# Device properties of 8 GPUs take ~5 KB; metadata past this is not a Kineto header.
HEAD_BYTES = 256 << 10
_EVENTS_KEY = b'"traceEvents"'


@dataclass(frozen=True)
class KinetoHeader:
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    machine: str | None = None  # the `host_name` Kineto records (socket.gethostname())
    # (name, compute capability major, minor) of each GPU in `deviceProperties`.
    gpus: tuple[tuple[str, int, int], ...] = ()


def read_head(path: Path, limit: int = HEAD_BYTES) -> bytes:
    """Up to `limit` bytes of the (decompressed) file, ending before its `traceEvents` key; b""
    when unreadable: the full read reports the error."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit)
            if raw[:2] == b"\x1f\x8b":
                # A partial stream: decompressobj stops where the bytes read end.
                raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, limit)
    except (OSError, zlib.error):
        return b""
    end = raw.find(_EVENTS_KEY)
    return raw if end < 0 else raw[:end]


def _value(head: str, key: str) -> object:
    at = head.find(f'"{key}"')
    if at < 0:
        return None
    colon = head.find(":", at + len(key) + 2)
    if colon < 0:
        return None
    start = colon + 1
    while start < len(head) and head[start] in " \t\r\n":
        start += 1
    try:
        return json.JSONDecoder().raw_decode(head, start)[0]
    except json.JSONDecodeError:
        return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def kineto_header(path: Path) -> KinetoHeader | None:
    """The writer's rank, world size, backend, machine and GPUs, or None when the head names
    none."""
    head = read_head(path).decode("utf-8", errors="replace")
    if not head:
        return None
    dist = _value(head, "distributedInfo")
    dist = dist if isinstance(dist, dict) else {}
    machine = _value(head, "host_name")
    props = _value(head, "deviceProperties")
    gpus = tuple((str(p.get("name", "")), major, minor)
                 for p in (props if isinstance(props, list) else []) if isinstance(p, dict)
                 and (major := _int(p.get("computeMajor"))) is not None
                 and (minor := _int(p.get("computeMinor"))) is not None)
    header = KinetoHeader(rank=_int(dist.get("rank")), world_size=_int(dist.get("world_size")),
                          backend=dist.get("backend") if isinstance(dist.get("backend"), str)
                          else None,
                          machine=machine if isinstance(machine, str) and machine else None,
                          gpus=gpus)
    return header if header != KinetoHeader() else None
