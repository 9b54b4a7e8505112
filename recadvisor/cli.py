"""The `recadvisor` command: one subcommand per capability, each in the package that owns it.

Registry contract. Every module named in `SUBCOMMAND_MODULES` exposes

    add_parser(subparsers) -> None   # subparsers.add_parser("name", ...) once or more
    run(args: argparse.Namespace) -> int

`add_parser` may register several subcommands (analyzers.cli: `analyze` and `diff`); every
subcommand it adds is dispatched to that module's `run`. Each module is imported to register its
flags, so its module level must stay light: no TensorFlow (nor Streamlit) import at import time;
import heavy things inside `run`. That keeps `recadvisor --help` fast and lets the analyzer path
run where TensorFlow is not installed. A module that does not exist yet is skipped.

Errors. `run` raises `recadvisor.errors.UserError` (or ValueError / OSError and its subclasses)
for bad input: printed as one line `recadvisor <cmd>: error: <message>`, exit code 2 (or
`UserError.code`). Anything else is a bug: one line, exit 1; RECADVISOR_DEBUG=1 adds the
traceback.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

import recadvisor
from recadvisor.errors import USER_ERRORS, UserError, one_line

# In `--help` order. A module not built yet is skipped silently.
SUBCOMMAND_MODULES: list[str] = [
    "reference_model.data.cli",  # data
    "reference_model.train_cli",  # train
    "recadvisor.capture.cli",  # capture
    "analyzers.cli",  # analyze, diff
    "tuner.cli",  # tune
    "dashboard.cli",  # dashboard
]

# Which module owns each command, so `recadvisor analyze ...` imports only analyzers.cli (the
# analyzer's start-up time is a benchmarked goal). --help and unknown commands load them all.
COMMAND_OWNERS: dict[str, str] = {
    "data": "reference_model.data.cli",
    "train": "reference_model.train_cli",
    "capture": "recadvisor.capture.cli",
    "analyze": "analyzers.cli",
    "diff": "analyzers.cli",
    "tune": "tuner.cli",
    "dashboard": "dashboard.cli",
}

# Commands whose process leaves without the interpreter's teardown. They hold only in-memory
# tables and write their outputs whole (print, or a temporary file replaced in one step), so
# there is nothing for the teardown to finish; unloading pandas' and pyarrow's few hundred
# modules and freeing the event table is 0.15-0.25 s of a ~0.9 s `analyze` on a small trace
# (bench/analyzer_speed.py). Commands with threads, databases or servers keep the normal exit.
NO_TEARDOWN_COMMANDS = frozenset({"analyze", "diff"})

_COMMAND_DEST = "_recadvisor_command"
_RUN_DEST = "_recadvisor_run"


def _debug() -> bool:
    return os.environ.get("RECADVISOR_DEBUG", "") not in ("", "0")


def _load(name: str) -> ModuleType | None:
    """Import a registered module; None when that module (or its package) does not exist.

    A ModuleNotFoundError for anything else (a missing dependency, a typo inside the module) is
    a real error and propagates.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and (name == e.name or name.startswith(e.name + ".")):
            return None
        raise


def build_parser(modules: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recadvisor",
        description="Performance advisor for training recommender models in TensorFlow: "
        "profile a job, name the root causes, tune the fix.",
    )
    parser.add_argument(
        "--version", action="version", version=f"recadvisor {recadvisor.__version__}"
    )
    subparsers = parser.add_subparsers(dest=_COMMAND_DEST, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES if modules is None else modules:
        module = _load(name)
        if module is None:
            continue
        before = set(subparsers.choices)
        module.add_parser(subparsers)
        for cmd in set(subparsers.choices) - before:
            subparsers.choices[cmd].set_defaults(**{_RUN_DEST: module.run})
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = None
    if argv and COMMAND_OWNERS.get(argv[0]) in SUBCOMMAND_MODULES:
        parser = build_parser([COMMAND_OWNERS[argv[0]]])
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        if argv[0] not in sub.choices:  # that module is not built yet: full registry below
            parser = None
    parser = parser or build_parser()
    if not argv:
        parser.print_usage(sys.stderr)
        print("recadvisor: error: a command is required (see recadvisor --help)", file=sys.stderr)
        return 2
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: usage error (2) or --help / --version (0)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    run = getattr(args, _RUN_DEST, None)
    if run is None:
        parser.print_usage(sys.stderr)
        print("recadvisor: error: a command is required (see recadvisor --help)", file=sys.stderr)
        return 2
    cmd = getattr(args, _COMMAND_DEST)
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        print(f"recadvisor {cmd}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `recadvisor ... | head`: the reader left; not an error of ours
        _silence_stdout()
        return 141
    except USER_ERRORS as e:
        code = e.code if isinstance(e, UserError) else 2
        if _debug():
            traceback.print_exc()
        print(f"recadvisor {cmd}: error: {one_line(e)}", file=sys.stderr)
        return code
    except Exception as e:  # a bug: one line by default, the traceback on request
        if _debug():
            traceback.print_exc()
            return 1
        print(
            f"recadvisor {cmd}: internal error: {type(e).__name__}: {one_line(e)} "
            "(set RECADVISOR_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def exit_process(code: int, teardown: bool = True) -> NoReturn:
    """Exit with `code`, without the interpreter's teardown when `teardown` is False or when the
    process trained. A process that trained keeps its tf.data iterators alive to the end (tearing
    one down can deadlock in TF 2.21, reference_model/train.py): the teardown would destroy them.
    The atexit handlers still run (the deadlock is in the teardown after them; `recadvisor
    capture`'s bootstrap stops and writes its profile in one) and output is flushed, so nothing
    already written is lost. Used by every process that may train (this CLI, trial workers), and
    with `teardown=False` by the commands in NO_TEARDOWN_COMMANDS."""
    train = sys.modules.get("reference_model.train")
    if not teardown or (train is not None and train.has_abandoned_iterators()):
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    sys.exit(code)


def entry() -> NoReturn:
    """The console script and `python -m recadvisor`."""
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    exit_process(main(), teardown=command not in NO_TEARDOWN_COMMANDS)


if __name__ == "__main__":
    entry()
