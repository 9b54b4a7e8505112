"""A TF profiler window around a block of training steps.

TensorFlow is imported only when a window starts, so importing this package stays cheap.
"""

from __future__ import annotations

import time
from pathlib import Path


def profile_runs_dir(logdir: Path) -> Path:
    return Path(logdir) / "plugins" / "profile"


class ProfileWindow:
    """`with ProfileWindow(logdir) as w:` profiles the block; afterwards `w.run_dir` is the
    `plugins/profile/<run>` folder TensorFlow wrote, and `w.start_ns`/`w.end_ns` bound the window
    on the wall clock (time.time_ns, the clock TF's xplane timestamps use)."""

    def __init__(
        self, logdir: Path, *, host_tracer_level: int = 2, python_tracer_level: int = 0
    ) -> None:
        self.logdir = Path(logdir)
        self.host_tracer_level = host_tracer_level
        self.python_tracer_level = python_tracer_level
        self.run_dir: Path | None = None
        self.start_ns = 0
        self.end_ns = 0

    def __enter__(self) -> ProfileWindow:
        import tensorflow as tf

        self.logdir.mkdir(parents=True, exist_ok=True)
        self._before = set(self._runs())
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=self.host_tracer_level,
            python_tracer_level=self.python_tracer_level,
            device_tracer_level=1,
        )
        tf.profiler.experimental.start(str(self.logdir), options=options)
        self.start_ns = time.time_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        import tensorflow as tf

        self.end_ns = time.time_ns()
        tf.profiler.experimental.stop()
        new = sorted(set(self._runs()) - self._before, key=lambda p: p.stat().st_mtime)
        if not new:
            raise OSError(f"the TF profiler wrote no run under {profile_runs_dir(self.logdir)}")
        self.run_dir = new[-1]

    def _runs(self) -> list[Path]:
        root = profile_runs_dir(self.logdir)
        return [p for p in root.iterdir() if p.is_dir()] if root.exists() else []
