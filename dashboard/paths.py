"""Every file the dashboard reads is under its root (uploads excepted: the app writes those)."""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from typing import NamedTuple

MAX_CHECKED = 20_000  # files under a folder opened by path


class OutsideRoot(ValueError):
    """A path that resolves (symlinks followed) outside the dashboard's root."""


def under_root(root: Path, path: str | Path) -> Path:
    """`path` (absolute, or relative to `root`) resolved; OutsideRoot if it leaves `root`."""
    root = root.resolve()
    text = str(path).strip()
    if not text:
        raise ValueError("empty path")
    if "\x00" in text:
        raise ValueError("path contains a NUL byte")
    p = Path(text).expanduser()
    resolved = (p if p.is_absolute() else root / p).resolve()
    if not resolved.is_relative_to(root):
        raise OutsideRoot(f"{text} is outside the dashboard root {root}")
    return resolved


def relative(root: Path, path: Path) -> str:
    """How the page shows a path under the root."""
    try:
        rel = path.resolve().relative_to(root.resolve())
    except ValueError:
        return str(path)
    return str(rel)


class Run(NamedTuple):
    path: Path  # resolved
    stamp: tuple  # (file, size, mtime_ns) of each file: a rewritten run reads as a new one


def confined_run(root: Path, path: Path) -> Run:
    """`path` (a run folder or trace file) resolved, checked with every file it holds: a trace or
    side file that is a link out of the root makes the whole run OutsideRoot. The same walk
    stamps the run, so caches keyed by the stamp never walk it again."""
    resolved = under_root(root, path)
    # rglob yields a linked folder but does not descend into it: the check below catches it.
    files = (sorted(itertools.islice(resolved.rglob("*"), MAX_CHECKED + 1))
             if resolved.is_dir() else [resolved])
    if len(files) > MAX_CHECKED:
        raise ValueError(f"{path}: more than {MAX_CHECKED} files; open a run folder")
    for f in files:
        under_root(root, f)
    return Run(resolved, stamp(files))


def stamp(files: list[Path]) -> tuple:
    """(file, size, mtime_ns) of each file that still exists."""
    out = []
    for f in files:
        with contextlib.suppress(OSError):  # vanished since the walk
            st = f.stat()
            out.append((str(f), st.st_size, st.st_mtime_ns))
    return tuple(out)
