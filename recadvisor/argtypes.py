"""argparse `type=` converters shared by the subcommands: a bad value is argparse's one-line
usage error (exit 2), never a traceback."""

from __future__ import annotations

import argparse


def positive(text: str) -> float:
    v = float(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text}")
    return v


def non_negative(text: str) -> float:
    v = float(text)
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text}")
    return v


def positive_int(text: str) -> int:
    v = int(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer: {text}")
    return v
