"""The profile runs under the dashboard's root, and what their metadata says, without analyzing.

A run is what `analyzers.ingest.logdir.find_runs` returns (a run folder of xplane.pb / trace JSON,
or a single trace file); its metadata is the `recadvisor_run.json` that `recadvisor train` and
`recadvisor capture` write beside the trace (docs/analyze-json.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from analyzers.ingest.logdir import find_runs
from dashboard.paths import relative
from recadvisor.capture.metadata import METADATA_FILE

# The TF profiler names run folders by their start time.
_RUN_NAME = re.compile(r"^(\d{4})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{2})$")
RUN_LENGTHS = ("warmup_steps", "measure_steps", "profile_steps", "profile_seconds")
MAX_RUNS = 500  # a root with more is truncated (newest kept) and the page says so


@dataclass(frozen=True)
class RunEntry:
    key: str  # the run's path relative to the root: stable across reloads, used in links
    path: Path
    name: str
    started: datetime
    metadata: dict[str, Any] | None

    @property
    def logdir(self) -> Path:
        """The TensorBoard logdir holding the run (what `recadvisor analyze` is given)."""
        p = self.path if self.path.is_dir() else self.path.parent
        if p.parent.name == "profile" and p.parent.parent.name == "plugins":
            return p.parent.parent.parent
        return p

    def stamp(self) -> tuple:
        """Changes whenever a file of the run changes: the analysis cache's key."""
        files = sorted(self.path.iterdir()) if self.path.is_dir() else [self.path]
        out = []
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue
            out.append((f.name, st.st_size, st.st_mtime_ns))
        return tuple(out)

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
            from reference_model.config import TrainConfig, config_to_flags

            # Run lengths say how the run was measured, not what was trained: left out.
            lengths = {k: v for k, v in TrainConfig().to_dict().items() if k in RUN_LENGTHS}
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
    """Runs under `root`, newest first; True when more than MAX_RUNS were found."""
    try:
        paths = find_runs(root)
    except ValueError:
        return [], False
    entries = []
    for p in paths:
        try:
            entries.append(RunEntry(key=relative(root, p), path=p, name=p.name,
                                    started=_started(p), metadata=_metadata(p)))
        except OSError:
            continue  # vanished between the walk and the stat
    entries.sort(key=lambda e: (e.started, e.key), reverse=True)
    return entries[:MAX_RUNS], len(entries) > MAX_RUNS


def find_studies(root: Path) -> list[Path]:
    """SQLite tuning studies (`recadvisor tune` writes OUT/study.db) under the root."""
    return sorted(p for p in root.rglob("*.db") if p.is_file())[:100]
