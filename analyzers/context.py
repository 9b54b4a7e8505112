"""Everything detectors read, computed once per run: the event table restricted to the steps, the
step breakdown, the main (step-driving) thread, device facts and the optional sampler/metadata."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from analyzers.events import is_device_plane, present_values
from analyzers.ingest.logdir import RunData
from analyzers.scaling import metadata_device_count
from analyzers.steps import Steps, clip_to_steps, step_breakdown

_CPU_DEVICE = re.compile(r"device:CPU:(\d+)")


@dataclass
class Context:
    run: RunData
    steps: Steps

    _memo: dict[str, Any] = field(default_factory=dict)

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """Signals several detectors share are computed once per run."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @classmethod
    def build(cls, run: RunData) -> Context:
        return cls(run=run, steps=step_breakdown(run.events))

    @property
    def events(self) -> pd.DataFrame:
        return self.run.events

    @cached_property
    def fractions(self) -> dict[str, float]:
        return self.steps.fractions()

    @cached_property
    def total_step_ns(self) -> int:
        return int(self.steps.table["dur_ns"].sum())

    @property
    def n_steps(self) -> int:
        return len(self.steps.table)

    @cached_property
    def in_steps(self) -> pd.DataFrame:
        """Events clipped to step windows, with a `step_idx` column (an event spanning two steps
        appears twice, each part with its clipped times)."""
        ev = self.events
        t = self.steps.table
        idx, step, s, e = self.steps.clipped or clip_to_steps(
            ev["start_ns"].to_numpy(np.int64), ev["end_ns"].to_numpy(np.int64),
            t["start_ns"].to_numpy(np.int64), t["end_ns"].to_numpy(np.int64),
        )
        cols = ["plane", "line", "name", "op_type", "kind", "line_id"]
        out = ev[cols].iloc[idx].reset_index(drop=True)
        out["step_idx"] = step
        out["start_ns"] = s
        out["end_ns"] = e
        out["dur_ns"] = e - s
        return out

    @cached_property
    def device_planes(self) -> list[str]:
        return sorted(p for p in present_values(self.events["plane"]) if is_device_plane(p))

    @property
    def has_accelerator(self) -> bool:
        return bool(self.device_planes)

    @cached_property
    def n_devices(self) -> int:
        if self.device_planes:
            return len(self.device_planes)
        from_meta = metadata_device_count(self.run.metadata or {})
        if from_meta:
            return from_meta
        ids = {m for n in present_values(self.events["name"]) for m in _CPU_DEVICE.findall(n)}
        return max(len(ids), 1)

    @cached_property
    def n_cpus(self) -> int | None:
        if self.run.process is not None and "n_cpus" in self.run.process:
            return int(self.run.process["n_cpus"].iloc[0])
        meta = self.run.metadata or {}
        cpus = (meta.get("host") or {}).get("cpus") if isinstance(meta.get("host"), dict) else None
        return int(cpus) if cpus else None

    @property
    def main_line(self) -> str | None:
        """The thread driving the steps: where the step markers or train-function calls live."""
        return self.steps.line

    @cached_property
    def config(self) -> dict[str, Any] | None:
        cfg = (self.run.metadata or {}).get("config")
        return cfg if isinstance(cfg, dict) else None

