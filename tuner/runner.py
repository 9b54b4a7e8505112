"""Run one trial in its own subprocess: timeout, memory cap, early stop, and a one-line reason.

The trial's process runs in its own session (so a timeout or a prune kills everything it started,
e.g. the profiler's sampler) and, on Linux, dies with the tuner (PR_SET_PDEATHSIG): a tuner killed
with SIGKILL leaves no orphan training job holding the cores.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tuner import protocol

DEFAULT_WORKER = (sys.executable, "-m", "tuner.trial_worker")
_PR_SET_PDEATHSIG = 1


class TrialFailed(Exception):
    """The trial could not produce a measurement; str(e) is the one-line reason."""


class TrialStopped(Exception):
    """The caller asked to stop the trial early (pruned)."""


@dataclass
class Limits:
    timeout_s: float = 600.0
    # A trial reports about once a second while timed: this long without a report after the
    # first one means it hung (TF 2.21's input pipeline occasionally stops with the CPU idle).
    stall_s: float | None = 60.0
    memory_bytes: int | None = None  # RSS of the trial's whole process tree
    poll_s: float = 0.2


@dataclass
class Outcome:
    samples_per_s: float
    result: dict[str, Any]
    progress: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    log: Path | None = None


def _die_with_parent_fn() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the forked child
    except (OSError, AttributeError):
        return None
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


_DIE_WITH_PARENT = _die_with_parent_fn()


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    with contextlib.suppress(psutil.Error):
        for p in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
    return total


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


def _last_line(log: Path) -> str:
    try:
        with log.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln]
    for ln in reversed(lines):  # the worker's own one-line summary, when it wrote one
        if ln.startswith("error: "):
            return ln[len("error: "):]
    return lines[-1] if lines else ""


def _exit_reason(rc: int, log: Path) -> str:
    line = _last_line(log)
    if rc < 0:
        sig = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if -rc == 9 else ""
        return f"killed by {sig}{hint}" + (f"; last output: {line}" if line else "")
    return line or f"exited with code {rc} and no result"


def run_trial(
    request: dict[str, Any],
    *,
    workdir: Path,
    name: str,
    worker: Sequence[str] = DEFAULT_WORKER,
    limits: Limits | None = None,
    on_progress: Callable[[dict[str, Any]], bool] | None = None,
    env: dict[str, str] | None = None,
) -> Outcome:
    """Run `worker REQUEST.json`; return its result or raise TrialFailed / TrialStopped.

    `on_progress(message)` returning True stops the trial (the pruner said so).
    """
    limits = limits or Limits()
    workdir.mkdir(parents=True, exist_ok=True)
    req_path = workdir / f"{name}.request.json"
    req_path.write_text(json.dumps(request, indent=1))
    log = workdir / f"{name}.log"
    started = time.monotonic()
    with log.open("wb") as err:
        try:
            proc = subprocess.Popen(
                [*worker, str(req_path)],
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
                bufsize=1,
                start_new_session=True,
                preexec_fn=_DIE_WITH_PARENT,  # noqa: PLW1509 - only prctl, resolved beforehand
                env={**os.environ, **(env or {})},
            )
        except OSError as e:
            raise TrialFailed(f"cannot start the trial worker {worker[0]}: {e}") from None
    messages: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            msg = protocol.decode(line.rstrip("\n"))
            if msg is not None:
                messages.put(msg)
        messages.put(None)

    reader = threading.Thread(target=read, name=f"trial-{name}-stdout", daemon=True)
    reader.start()
    ps = psutil.Process(proc.pid)
    progress: list[dict[str, Any]] = []
    result: dict[str, Any] | None = None
    eof = False
    last_report = started
    try:
        while True:
            try:
                msg = messages.get(timeout=limits.poll_s)
            except queue.Empty:
                msg = False
            if msg is None:
                eof = True
            elif msg:
                last_report = time.monotonic()
                if msg["event"] == "progress":
                    progress.append(msg)
                    if on_progress is not None and on_progress(msg):
                        _kill(proc)
                        raise TrialStopped()
                elif msg["event"] == "result":
                    result = msg
            if eof and proc.poll() is not None:
                break
            if eof:  # stdout closed: the process is exiting
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=limits.poll_s)
                continue
            now = time.monotonic()
            if (limits.stall_s and progress and result is None
                    and now - last_report > limits.stall_s):
                _kill(proc)
                raise TrialFailed(f"stalled: no progress for {limits.stall_s:.0f} s after "
                                  f"{len(progress)} reports (hung)")
            elapsed = now - started
            if elapsed > limits.timeout_s:
                _kill(proc)
                raise TrialFailed(f"timed out after {limits.timeout_s:.0f} s "
                                  f"({len(progress)} progress reports, no result)")
            if limits.memory_bytes:
                rss = _tree_rss(ps)
                if rss > limits.memory_bytes:
                    _kill(proc)
                    raise TrialFailed(f"out of memory: {rss / 2**20:,.0f} MiB resident, over "
                                      f"the trial limit of {limits.memory_bytes / 2**20:,.0f} MiB")
    finally:
        if proc.poll() is None:
            _kill(proc)
        reader.join(timeout=5)
    wall = time.monotonic() - started
    if result is None:  # a result followed by a crash in teardown still counts
        raise TrialFailed(_exit_reason(proc.returncode, log))
    value = result.get("samples_per_s")
    if not isinstance(value, int | float) or value <= 0:
        raise TrialFailed("the trial measured no throughput (no timed steps?)")
    return Outcome(samples_per_s=float(value), result=result, progress=progress, wall_s=wall,
                   log=log)
