"""A TF profiler window around a block of training steps, with the OS sampler over the same window.

TensorFlow is imported only when a window starts, so importing this package stays cheap.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recadvisor.capture.layout import XPLANE_SUFFIX

if TYPE_CHECKING:
    from recadvisor.capture.sampler import SamplerProcess

# RECADVISOR_SAMPLER=0 turns the sampler off where `sampler` is not given (benchmarks, debugging).
SAMPLER_ENV = "RECADVISOR_SAMPLER"


def profile_runs_dir(logdir: Path) -> Path:
    return Path(logdir) / "plugins" / "profile"


def list_runs(logdir: Path) -> set[Path]:
    root = profile_runs_dir(logdir)
    return {p for p in root.iterdir() if p.is_dir()} if root.exists() else set()


def newest_new_run(logdir: Path, before: set[Path]) -> Path | None:
    """The run folder TF created under `logdir` since `before` was listed (newest if several)."""
    new = sorted(list_runs(logdir) - before, key=lambda p: p.stat().st_mtime)
    return new[-1] if new else None


def host_prefix(run_dir: Path) -> str:
    """The `<host>` of `<host>.xplane.pb` in `run_dir` (TF names it after the host name); the
    machine's host name when there is no xplane (yet)."""
    for p in sorted(Path(run_dir).glob(f"*{XPLANE_SUFFIX}")):
        return p.name[: -len(XPLANE_SUFFIX)]
    return socket.gethostname()


def sampler_enabled_by_env() -> bool:
    return os.environ.get(SAMPLER_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class ProfileWindow:
    """`with ProfileWindow(logdir) as w:` profiles the block; afterwards `w.run_dir` is the
    `plugins/profile/<run>` folder TensorFlow wrote, and `w.start_ns`/`w.end_ns` bound the window
    on the wall clock (time.time_ns, the clock TF's xplane timestamps use).

    The OS sampler (`recadvisor.capture.sampler`) runs over the window in a separate process
    against this one, and its Parquet files land beside the xplane as `<host>.threads.parquet`,
    `<host>.process.parquet` and `<host>.others.parquet`; `w.sampler_info` says what it wrote
    (None when off). `sampler` defaults to on unless RECADVISOR_SAMPLER=0. A sampler that
    cannot start or write is reported on stderr and in `sampler_info`; the profile is kept
    either way.
    """

    def __init__(
        self,
        logdir: Path,
        *,
        host_tracer_level: int = 2,
        python_tracer_level: int = 0,
        sampler: bool | None = None,
        sampler_hz: float = 50.0,  # sampler.DEFAULT_HZ
    ) -> None:
        self.logdir = Path(logdir)
        self.host_tracer_level = host_tracer_level
        self.python_tracer_level = python_tracer_level
        self.sampler = sampler_enabled_by_env() if sampler is None else sampler
        self.sampler_hz = sampler_hz
        self.run_dir: Path | None = None
        self.start_ns = 0
        self.end_ns = 0
        self.sampler_info: dict[str, Any] | None = None
        self._sampler: SamplerProcess | None = None
        self._sampler_tmp: Path | None = None

    def __enter__(self) -> ProfileWindow:
        import tensorflow as tf

        self.logdir.mkdir(parents=True, exist_ok=True)
        self._before = list_runs(self.logdir)
        if self.sampler:
            self._start_sampler()
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=self.host_tracer_level,
            python_tracer_level=self.python_tracer_level,
            device_tracer_level=1,
        )
        try:
            tf.profiler.experimental.start(str(self.logdir), options=options)
        except BaseException:
            self._discard_sampler()
            raise
        self.start_ns = time.time_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        import tensorflow as tf

        self.end_ns = time.time_ns()
        if self._sampler is not None:
            self._sampler.signal_stop()  # its last sweep is now; it writes while TF collects
        try:
            tf.profiler.experimental.stop()
        except BaseException:
            self._discard_sampler()
            raise
        self.run_dir = newest_new_run(self.logdir, self._before)
        if self.run_dir is None:
            self._discard_sampler()
            raise OSError(f"the TF profiler wrote no run under {profile_runs_dir(self.logdir)}")
        if self._sampler is not None:
            self._finish_sampler(self.run_dir)

    def _start_sampler(self) -> None:
        # Imported here: `python -m recadvisor.capture.sampler` imports this package first.
        from recadvisor.capture.sampler import SamplerProcess, sampler_paths

        # The sampler writes into a scratch folder beside the runs (same file system, so the
        # final move is a rename); the run folder's name is known only once TF has written it.
        self._sampler_tmp = Path(tempfile.mkdtemp(prefix=".sampler-", dir=self.logdir))
        threads, process, others = sampler_paths(self._sampler_tmp, "sampler")
        try:
            self._sampler = SamplerProcess(os.getpid(), threads, process, self.sampler_hz,
                                           others_path=others).start()
        except OSError as e:
            self._warn(f"OS sampler not started: {e}")
            self.sampler_info = {"error": str(e)}
            self._discard_sampler()

    def _finish_sampler(self, run_dir: Path) -> None:
        from recadvisor.capture.sampler import sampler_paths

        assert self._sampler is not None and self._sampler_tmp is not None
        result = self._sampler.stop()
        why = self._sampler.error
        self._sampler = None
        src = sampler_paths(self._sampler_tmp, "sampler")
        if result is None or not all(p.exists() for p in src):
            self._warn(f"the OS sampler wrote no files ({why})")
            self.sampler_info = {"error": f"the sampler wrote no files ({why})"}
        else:
            dst = sampler_paths(run_dir, host_prefix(run_dir))
            for s, d in zip(src, dst, strict=True):
                os.replace(s, d)
            self.sampler_info = {
                "hz": result["hz"],
                "pid": result["pid"],
                "files": [d.name for d in dst],
                "samples": result["samples"],
                "achieved_hz": result["achieved_hz"],
                "start_unix_ns": result["start_ns"],
                "end_unix_ns": result["end_ns"],
                "cpu_s": result.get("cpu_s"),
                "delay_accounting": result.get("delay_accounting"),
            }
        self._discard_sampler()

    def _discard_sampler(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None
        if self._sampler_tmp is not None:
            shutil.rmtree(self._sampler_tmp, ignore_errors=True)
            self._sampler_tmp = None

    @staticmethod
    def _warn(message: str) -> None:
        print(f"recadvisor: warning: {message}", file=sys.stderr)
