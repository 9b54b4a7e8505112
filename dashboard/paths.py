"""Every file the dashboard reads is under its root (uploads excepted: the app writes those)."""

from __future__ import annotations

from pathlib import Path

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
    if resolved != root and not resolved.is_relative_to(root):
        raise OutsideRoot(f"{text} is outside the dashboard root {root}")
    return resolved


def relative(root: Path, path: Path) -> str:
    """How the page shows a path under the root."""
    try:
        rel = path.resolve().relative_to(root.resolve())
    except ValueError:
        return str(path)
    return str(rel) if str(rel) != "." else "."


def confined_run(root: Path, path: Path) -> Path:
    """`path` (a run folder or trace file) resolved, checked with every file it holds: a trace or
    side file that is a link out of the root makes the whole run OutsideRoot."""
    resolved = under_root(root, path)
    if resolved.is_dir():
        # rglob yields a linked folder but does not descend into it: the check below catches it.
        for i, f in enumerate(resolved.rglob("*")):
            if i >= MAX_CHECKED:
                raise ValueError(f"{path}: more than {MAX_CHECKED} files; open a run folder")
            under_root(root, f)
    return resolved
