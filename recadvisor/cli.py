"""The `recadvisor` command: one subcommand per capability, each in the package that owns it.

A subcommand module exposes `add_parser(subparsers)` and `run(args) -> int`. Modules are imported
here only to register their flags; none may import TensorFlow at import time, so `--help` is fast
and the analyzer path works where TensorFlow is not installed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

import recadvisor
from recadvisor.errors import USER_ERRORS, UserError

# In CLI order. Modules that do not exist yet (capabilities still being built) are left out.
SUBCOMMAND_MODULES: list[str] = [
    "reference_model.data.cli",  # data
    "reference_model.train_cli",  # train
    "recadvisor.capture.cli",  # capture
    "analyzers.cli",  # analyze, diff
    "tuner.cli",  # tune
    "dashboard.cli",  # dashboard
]


def _load(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and name.startswith(e.name):
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recadvisor",
        description="Performance advisor for training recommender models in TensorFlow: "
        "profile a job, name the root causes, tune the fix.",
    )
    parser.add_argument(
        "--version", action="version", version=f"recadvisor {recadvisor.__version__}"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        module = _load(name)
        if module is None:
            continue
        before = set(subparsers.choices)
        module.add_parser(subparsers)
        for cmd in set(subparsers.choices) - before:
            subparsers.choices[cmd].set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        parser.print_usage(sys.stderr)
        print("recadvisor: error: a command is required (see recadvisor --help)", file=sys.stderr)
        return 2
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: usage error (2) or --help/--version (0)
        return int(e.code or 0)
    if getattr(args, "_run", None) is None:
        parser.print_usage(sys.stderr)
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print(f"recadvisor {args.command}: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as e:
        if os.environ.get("RECADVISOR_DEBUG") == "1":
            raise
        code = e.code if isinstance(e, UserError) else 2
        print(f"recadvisor {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return code
    except Exception as e:  # a bug: short by default, the traceback on request
        if os.environ.get("RECADVISOR_DEBUG") == "1":
            raise
        print(
            f"recadvisor {args.command}: internal error: {type(e).__name__}: {_one_line(e)} "
            "(set RECADVISOR_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


def _one_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


if __name__ == "__main__":
    sys.exit(main())
