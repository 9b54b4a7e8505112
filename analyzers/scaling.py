"""Scaling efficiency across runs of one job at different device counts.

Reads only the run metadata files (samples/s measured outside the profiler, device count) of the
runs beside the analyzed one, so it costs nothing when there is a single run. Efficiency of a run
with n devices = (its samples/s / the smallest-device run's) / (n / that run's device count).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from recadvisor.capture.metadata import METADATA_FILE


@dataclass
class ScalingPoint:
    run: str
    devices: int
    samples_per_s: float
    efficiency: float = 1.0


def metadata_device_count(meta: dict) -> int | None:
    """Devices of a run, from its metadata (`devices.count`, else the trainer config)."""
    dev = meta.get("devices")
    if isinstance(dev, dict) and dev.get("count"):
        return int(dev["count"])
    cfg = meta.get("config")
    if isinstance(cfg, dict) and cfg.get("devices"):
        return int(cfg["devices"])
    return None


def scaling_points(run_dir: Path) -> list[ScalingPoint]:
    """One point per sibling run with metadata; empty unless at least two device counts exist."""
    points = []
    parent = Path(run_dir).parent
    if not parent.is_dir():
        return []
    for d in sorted(p for p in parent.iterdir() if p.is_dir()):
        f = d / METADATA_FILE
        if not f.exists():
            continue
        try:
            meta = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        n, sps = metadata_device_count(meta), meta.get("samples_per_s")
        if n and isinstance(sps, int | float) and sps > 0:
            points.append(ScalingPoint(d.name, n, float(sps)))
    if len({p.devices for p in points}) < 2:
        return []
    base = min(points, key=lambda p: (p.devices, -p.samples_per_s))
    for p in points:
        p.efficiency = (p.samples_per_s / base.samples_per_s) / (p.devices / base.devices)
    return sorted(points, key=lambda p: p.devices)
