"""The profile runs under the dashboard's root, and what their metadata says, without analyzing.

A run is what `analyzers.ingest.logdir.walk_runs` finds (a folder of xplane.pb / trace JSON at any
depth under the root); its metadata is the `recadvisor_run.json` that `recadvisor train` and
`recadvisor capture` write beside the trace (docs/analyze-json.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from analyzers.ingest.logdir import walk_runs
from dashboard.paths import confined_run, relative
from recadvisor.capture.metadata import METADATA_FILE

# The TF profiler names run folders by their start time.
_RUN_NAME = re.compile(r"^(\d{4})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{2})$")
MAX_RUNS = 500  # a root with more is truncated (newest kept) and the page says so


@dataclass(frozen=True)
class RunEntry:
    key: str  # the run's path relative to the root: stable across reloads, used in links
    path: Path
    stamp: tuple  # paths.Run.stamp, taken when the run was found
    name: str
    started: datetime
    metadata: dict[str, Any] | None

    @property
    def samples_per_s(self) -> float | None:
        v = (self.metadata or {}).get("samples_per_s")
        return float(v) if isinstance(v, int | float) else None

    @property
    def source(self) -> str:
        m = self.metadata or {}
        if m.get("tool") == "recadvisor.capture":
            return "capture"
        if m.get("tool") == "recadvisor.reference_model":
            return "train"
        return "trace"


def _started(path: Path) -> datetime:
    m = _RUN_NAME.match(path.name)
    if m:
        try:
            return datetime(*map(int, m.groups()))
        except ValueError:
            pass
    return datetime.fromtimestamp(path.stat().st_mtime)


def _metadata(path: Path) -> dict[str, Any] | None:
    f = (path if path.is_dir() else path.parent) / METADATA_FILE
    try:
        data = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def config_summary(meta: dict[str, Any] | None) -> str:
    """The run's configuration as the flags that differ from the trainer's defaults."""
    if not meta:
        return ""
    cfg = meta.get("config")
    if isinstance(cfg, dict):
        try:
            from reference_model.config import RUN_LENGTH_FIELDS, TrainConfig, config_to_flags

            # Run lengths say how the run was measured, not what was trained: left out.
            lengths = {k: v for k, v in TrainConfig().to_dict().items() if k in RUN_LENGTH_FIELDS}
            flags = config_to_flags(TrainConfig.from_dict({**cfg, **lengths}))
            pairs = [f"{flags[i]} {flags[i + 1]}" for i in range(0, len(flags), 2)]
            preset = meta.get("preset")
            head = [f"preset {preset}"] if preset else []
            return ", ".join(head + pairs) or "defaults"
        except (TypeError, ValueError):
            pass
    cmd = meta.get("command")
    if isinstance(cmd, list):
        return " ".join(map(str, cmd))[:200]
    return ""


def discover(root: Path) -> tuple[list[RunEntry], bool]:
    """Runs under `root`, newest first; True when more than MAX_RUNS were found. A run holding a
    link that resolves outside the root is left out (the pages would refuse to open it)."""
    entries = []
    for p in walk_runs(root):
        try:
            p, stamp = confined_run(root, p)
            entries.append(RunEntry(key=relative(root, p), path=p, stamp=stamp, name=p.name,
                                    started=_started(p), metadata=_metadata(p)))
        except (OSError, ValueError):
            continue  # vanished since the walk, leaves the root (OutsideRoot), or too big
    entries.sort(key=lambda e: (e.started, e.key), reverse=True)
    return entries[:MAX_RUNS], len(entries) > MAX_RUNS
