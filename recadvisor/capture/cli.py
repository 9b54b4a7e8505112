"""`recadvisor capture -- CMD ...`: profile a window of any TensorFlow job, with the OS sampler.

The command runs unchanged. Its Pythons get `recadvisor/capture/bootstrap` first on PYTHONPATH;
that folder's `sitecustomize.py` starts and stops the TF profiler inside the first process that
imports TensorFlow (see its docstring), and tells this process when over a control folder. This
process runs the OS sampler against that pid on a thread of its own (a separate process from the
job, so the sampler never takes the job's GIL), then writes the sampler files and the run metadata
into the run folder TF wrote. No TensorFlow import here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from recadvisor.argtypes import non_negative, positive, positive_int
from recadvisor.capture.metadata import host_facts, write_run_metadata
from recadvisor.capture.profiler_window import (
    host_prefix,
    list_runs,
    newest_new_run,
    profile_runs_dir,
)
from recadvisor.capture.sampler import DEFAULT_HZ, MAX_HZ, MIN_HZ, Sampler, sampler_paths
from recadvisor.errors import UserError

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
CONTROL_ENV = "RECADVISOR_CAPTURE"
ACK_WAIT_NOTE = "sampler-ready"
POLL_S = 0.01

DESCRIPTION = """\
Run COMMAND unchanged and profile a window of it: the TF profiler (an xplane.pb xprof opens) and
the OS sampler (thread states, CPU, I/O; Parquet), written with a run metadata file to
LOGDIR/plugins/profile/<run>/. The exit code is COMMAND's.

The window is taken inside the first Python process of COMMAND that imports TensorFlow (through a
sitecustomize.py put first on its PYTHONPATH; a Python started with -E, -I or -S is not profiled).
It starts --delay seconds after COMMAND starts (or as soon as TensorFlow is imported, if later) and
lasts --duration seconds, or --steps steps.

--steps counts calls of a tf.function made from Python (nested calls while tracing do not count)
and, in TF1 graph mode, Session.run calls from the main thread (one step function per session and
set of fetches: the training op's runs, not a checkpoint's; other threads' runs, such as queue
runners', never count). The window opens when the first such call after --delay returns, and
closes when the step function (the one called most often up to then, or, if none was called twice,
the first called again in the window) is called for the (N+1)th time in it, so it holds N whole
steps and the time between them. Keras model.fit calls one tf.function per step (per
steps_per_execution steps), and so does a custom loop with a @tf.function train step. A purely
eager loop has no tf.function to count, and Session callables (Session.make_callable) are not
counted: use --duration. If the step function is not called again, the window closes when the
command exits.

Ctrl-C reaches COMMAND as usual; a window in progress is closed and written as the command exits.
A SIGINT or SIGTERM sent to recadvisor itself is passed on to COMMAND as SIGINT (a second one as
SIGTERM). A command killed outright (SIGKILL, SIGTERM without a handler, a crash in native code)
loses its TF profile; the sampler files and the metadata are written in any case.
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "capture",
        help="profile a window of any TensorFlow job: TF profiler plus OS sampler",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="recadvisor capture --logdir DIR [options] -- COMMAND [ARGS ...]",
    )
    p.add_argument("--logdir", type=Path, required=True, help="TensorBoard logdir to write")
    p.add_argument(
        "--delay",
        type=non_negative,
        default=10.0,
        metavar="S",
        help="seconds from the command's start to the window (default 10)",
    )
    span = p.add_mutually_exclusive_group()
    span.add_argument(
        "--duration", type=positive, metavar="S", help="window length in seconds (default 5)"
    )
    span.add_argument(
        "--steps", type=positive_int, metavar="N", help="window length in tf.function steps"
    )
    p.add_argument(
        "--host-tracer-level",
        type=int,
        choices=(1, 2, 3),
        default=2,
        metavar="N",
        help="TF host tracer level 1-3 (default 2: every op)",
    )
    p.add_argument(
        "--python-tracer-level",
        type=int,
        choices=(0, 1),
        default=0,
        metavar="N",
        help="1 traces every Python call (slows Python-heavy code); default 0",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        metavar="N",
        help="samples per step: with it, samples/s of the window is written to the metadata",
    )
    p.add_argument(
        "--sampler-hz",
        type=float,
        default=DEFAULT_HZ,
        metavar="HZ",
        help=f"OS sampler rate (default {DEFAULT_HZ:g})",
    )
    p.add_argument("--no-sampler", action="store_true", help="TF profile only")
    p.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise UserError("no command to run: recadvisor capture --logdir DIR -- COMMAND [ARGS ...]")
    if not MIN_HZ <= args.sampler_hz <= MAX_HZ:
        raise UserError(f"--sampler-hz must be within {MIN_HZ:g}..{MAX_HZ:g}")
    _check_command(command[0])
    logdir = _writable_logdir(args.logdir)
    duration = args.duration if args.duration is not None else (None if args.steps else 5.0)
    return Capture(command, logdir, args, duration).run()


def _check_command(name: str) -> None:
    if os.sep in name:
        if not os.path.isfile(name):
            raise UserError(f"command not found: {name}", code=127)
        if not os.access(name, os.X_OK):
            raise UserError(f"command not executable: {name}", code=126)
    elif shutil.which(name) is None:
        raise UserError(f"command not found: {name}", code=127)


def _terminal_foreground() -> bool:
    """Whether this process is in the foreground process group of its terminal (so a Ctrl-C
    there reached every process of the group, the command included)."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
    return False


def _writable_logdir(logdir: Path) -> Path:
    logdir = logdir.expanduser().resolve()
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=logdir, prefix=".write-test-"):
            pass
    except OSError as e:
        raise UserError(f"cannot write --logdir {logdir}: {e.strerror or e}") from None
    return logdir


class Capture:
    """One `recadvisor capture` run: the command, its control folder, the sampler, the files."""

    def __init__(
        self, command: list[str], logdir: Path, args: argparse.Namespace, duration: float | None
    ) -> None:
        self.command = command
        self.logdir = logdir
        self.args = args
        self.duration = duration
        self.control = Path(tempfile.mkdtemp(prefix="recadvisor-capture-"))
        self.events_path = self.control / "events.jsonl"
        self.events_offset = 0
        self.sampler: Sampler | None = None
        self.profiled_pid: int | None = None
        self.imported = False
        self.window: dict[str, Any] = {}
        self.errors: list[str] = []
        self.untraced: dict[str, Any] | None = None  # the step function before the window
        self.interrupted = 0
        self.written = False
        self.sampler_summary: dict[str, Any] | None = None

    def child_env(self, t0_ns: int) -> dict[str, str]:
        env = dict(os.environ)
        cfg = {
            "control": str(self.control),
            "logdir": str(self.logdir),
            "t0_ns": t0_ns,
            "delay_s": self.args.delay,
            "duration_s": self.duration,
            "steps": self.args.steps,
            "host_tracer_level": self.args.host_tracer_level,
            "python_tracer_level": self.args.python_tracer_level,
        }
        env[CONTROL_ENV] = json.dumps(cfg)
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(BOOTSTRAP_DIR) + (os.pathsep + old if old else "")
        return env

    def run(self) -> int:
        self.before = list_runs(self.logdir)
        t0 = time.time_ns()
        # Started in the background (nohup, `cmd &`, many CI runners) we inherit SIGINT ignored,
        # and an ignored signal stays ignored across exec: the job would never see the Ctrl-C we
        # forward. It must start with the default disposition (our handler is installed below).
        if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            child = subprocess.Popen(self.command, env=self.child_env(t0))
        except FileNotFoundError:
            self._cleanup()
            raise UserError(f"command not found: {self.command[0]}", code=127) from None
        except PermissionError:
            self._cleanup()
            raise UserError(f"command not executable: {self.command[0]}", code=126) from None
        self.child = child
        handlers = self._install_signal_handlers()
        try:
            code = self._supervise(child)
        finally:
            self._restore_signal_handlers(handlers)
            if child.poll() is None:  # only on an error of ours: do not leave the job orphaned
                child.send_signal(signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(30)
            self._finish(child.returncode)
            self._cleanup()
        return code

    # -- supervision ---------------------------------------------------------------------------
    def _supervise(self, child: subprocess.Popen) -> int:
        while True:
            self._read_events()
            rc = child.poll()
            if rc is not None:
                self._read_events()
                break
            time.sleep(POLL_S)
        if rc < 0:  # killed by a signal: the shell's convention
            return 128 - rc
        return rc

    def _install_signal_handlers(self):
        """First SIGINT/SIGTERM: the command gets SIGINT (a Python job then exits cleanly and its
        profile window is written), unless it is a Ctrl-C typed at a terminal whose foreground
        group holds both processes: the command got that one already. Second: SIGTERM."""

        def on_signal(signum, frame):
            self.interrupted += 1
            if self.child.poll() is not None:
                return
            if self.interrupted > 1:
                self.child.send_signal(signal.SIGTERM)
            elif not (signum == signal.SIGINT and _terminal_foreground()):
                self.child.send_signal(signal.SIGINT)

        return {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    @staticmethod
    def _restore_signal_handlers(handlers) -> None:
        for s, h in handlers.items():
            signal.signal(s, h)

    def _read_events(self) -> None:
        try:
            with open(self.events_path, "rb") as f:
                f.seek(self.events_offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # a line being written is read next time
        self.events_offset += end
        for line in data[:end].splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            self._on_event(ev)

    def _on_event(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "imported":
            self.imported = True
            self.profiled_pid = ev["pid"]
        elif kind == "armed":
            self.profiled_pid = ev["pid"]
            self._start_sampler(ev["pid"])
            (self.control / ACK_WAIT_NOTE).touch()
        elif kind == "started":
            self.window["start_unix_ns"] = ev["start_ns"]
            self.untraced = ev.get("untraced")
            before = ("" if not self.untraced else
                      f"; before it, {self.untraced['function']} took "
                      f"{self.untraced['p50']:.1f} ms per call, median of "
                      f"{self.untraced['steps']}")
            self._say(f"profiling pid {ev['pid']} ({self._window_text()}{before})")
        elif kind == "stopping":
            self.window["end_unix_ns"] = ev["end_ns"]
            self.window["stop_reason"] = ev.get("reason")
            self.window["step_function"] = ev.get("step_function")
            self.window["steps"] = ev.get("steps")
            self._stop_sampler()
        elif kind == "stopped":
            self.window["xplane_written"] = True
            self._write_outputs(exit_code=None)
        elif kind in ("error", "warning"):
            msg = ev.get("message", "?")
            if kind == "error":
                self.errors.append(msg)
            self._say(f"{kind}: {msg}")

    def _window_text(self) -> str:
        if self.args.steps:
            return f"{self.args.steps} steps"
        return f"{self.duration:g} s"

    # -- sampler -------------------------------------------------------------------------------
    def _start_sampler(self, pid: int) -> None:
        if self.args.no_sampler or self.sampler is not None:
            return
        try:
            self.sampler = Sampler(pid, self.args.sampler_hz).start()
        except (OSError, ValueError) as e:
            self.errors.append(f"OS sampler not started: {e}")
            self._say(f"warning: OS sampler not started: {e}")
            self.sampler = None

    def _stop_sampler(self) -> None:
        if self.sampler is not None and self.sampler._thread is not None:
            self.sampler.stop()

    # -- outputs -------------------------------------------------------------------------------
    def _finish(self, exit_code: int | None) -> None:
        self._stop_sampler()
        if "start_unix_ns" not in self.window:
            if not self.imported:
                why = "it did not import tensorflow in a Python process (or it exited first)"
            elif self.errors:
                why = self.errors[-1]
            else:
                why = "it exited before the window opened (--delay)"
            self._say(f"nothing was profiled: {why}")
            return
        if "end_unix_ns" not in self.window:  # killed inside the window: no "stopping" event
            self.window["end_unix_ns"] = None
            self.window["stop_reason"] = "killed"
        self._write_outputs(exit_code=exit_code, final=True)

    def _write_outputs(self, exit_code: int | None, final: bool = False) -> None:
        run_dir = newest_new_run(self.logdir, self.before)
        xplane = run_dir is not None
        if run_dir is None:
            # The command died before TF wrote its profile: keep the sampler's data anyway, in a
            # run folder named as TF names them.
            run_dir = profile_runs_dir(self.logdir) / time.strftime("%Y_%m_%d_%H_%M_%S")
            run_dir.mkdir(parents=True, exist_ok=True)
        host = host_prefix(run_dir)
        files = []
        if self.sampler is not None and not self.written:
            paths = sampler_paths(run_dir, host)
            self.sampler.write(*paths)
            files = [p.name for p in paths]
            self.sampler_summary = {**self.sampler.summary(), "files": files}
            self.written = True
        meta = self._metadata(run_dir, exit_code, final)
        write_run_metadata(run_dir, meta)
        if final:
            names = sorted(p.name for p in run_dir.iterdir() if not p.name.startswith("."))
            note = "" if xplane else " (no TF profile: the command died inside the window)"
            self._say(f"wrote {run_dir}: {', '.join(names)}{note}")

    def _metadata(self, run_dir: Path, exit_code: int | None, final: bool) -> dict[str, Any]:
        w = dict(self.window)
        start, end = w.get("start_unix_ns"), w.get("end_unix_ns")
        steps = w.get("steps") or 0
        steps_per_s = None
        if start and end and steps:
            steps_per_s = steps / ((end - start) / 1e9)
        bs = self.args.batch_size
        w["steps_per_s"] = steps_per_s
        w["sampler"] = self.sampler_summary
        return {
            "tool": "recadvisor.capture",
            "command": self.command,
            "command_line": shlex.join(self.command),
            "cwd": os.getcwd(),
            "pid": self.child.pid,
            "profiled_pid": self.profiled_pid,
            "exit_code": exit_code,
            "finished": final,
            "interrupted": bool(self.interrupted),
            "capture": {
                "delay_s": self.args.delay,
                "duration_s": self.duration,
                "steps": self.args.steps,
                "host_tracer_level": self.args.host_tracer_level,
                "python_tracer_level": self.args.python_tracer_level,
                "batch_size": bs,
            },
            # Throughput inside the profiled window (slowed by the tracer; see trace-signals.md).
            "samples_per_s": steps_per_s * bs if steps_per_s and bs else None,
            # The step function's calls before the window, untraced (the trainer's key): the
            # analyzer's reference for how much the profiler slowed the steps.
            "step_time_ms": self._untraced_steps(w),
            "profile_window": w,
            "errors": self.errors,
            "host": host_facts(),
            "run_dir": str(run_dir),
        }

    def _untraced_steps(self, window: dict[str, Any]) -> dict[str, Any] | None:
        u = self.untraced
        if not u or (window.get("step_function") not in (None, u["function"])):
            return None  # timed another function than the one the window counted
        return {**u, "measured": "before the profile window, untraced"}

    def _cleanup(self) -> None:
        shutil.rmtree(self.control, ignore_errors=True)

    @staticmethod
    def _say(message: str) -> None:
        print(f"recadvisor capture: {message}", file=sys.stderr, flush=True)
