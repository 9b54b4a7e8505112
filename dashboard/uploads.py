"""Uploaded traces: an xplane.pb, a Chrome trace JSON (optionally gzipped), or a zipped logdir.

Each upload is written into its own folder under the app's scratch directory (private to this
process: created with mkdtemp, mode 0700, removed at exit), never under the root, and analyzed
from there. Zips are unpacked member by member with the names checked (no absolute paths, no
`..`, no links); gzip is inflated here, as a stream, so the unpacked size of both is capped and a
crafted archive can neither write outside its folder nor fill the disk or memory. Nothing is ever
unpickled.
"""

from __future__ import annotations

import atexit
import gzip
import hashlib
import io
import shutil
import stat
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from recadvisor.capture.layout import XPLANE_SUFFIX

ACCEPTED = ("pb", "json", "gz", "zip")
MAX_MEMBERS = 10_000
_scratch: Path | None = None


class UploadError(ValueError):
    """An upload the dashboard will not analyze; the message is shown as is."""


def scratch_dir() -> Path:
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="recadvisor-dashboard-uploads-"))
        atexit.register(shutil.rmtree, _scratch, True)
    return _scratch


def save_upload(name: str, data: bytes, *, max_bytes: int, max_unzipped: int,
                scratch: Path | None = None) -> Path:
    """Write the upload where the analyzers can read it; returns the path to analyze."""
    base = PurePosixPath(name.replace("\\", "/")).name or "upload"
    if len(data) > max_bytes:
        raise UploadError(f"{base}: {len(data) / 2**20:.1f} MB is over the upload cap of "
                          f"{max_bytes / 2**20:.0f} MB (recadvisor dashboard --max-upload-mb)")
    if not data:
        raise UploadError(f"{base}: the file is empty")
    lower = base.lower()
    if not lower.endswith((".zip", ".pb", ".json", ".json.gz")):
        raise UploadError(f"{base}: a .gz upload must be a trace JSON (*.json.gz)"
                          if lower.endswith(".gz") else
                          f"{base}: not a trace (expected *.xplane.pb, *.json, *.json.gz or a "
                          "zipped logdir)")
    # Checked first, so a refused upload leaves no folder behind; one refused while unpacking
    # (a bad entry, a bomb, a corrupt member) takes what it wrote with it.
    dest = (scratch or scratch_dir()) / hashlib.sha256(data).hexdigest()[:16]
    dest.mkdir(parents=True, exist_ok=True)
    try:
        return _write(base, lower, data, dest, max_unzipped)
    except UploadError:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def _write(base: str, lower: str, data: bytes, dest: Path, max_unzipped: int) -> Path:
    if lower.endswith(".zip"):
        _unzip(base, data, dest, max_unzipped)
        return dest
    if lower.endswith(".pb"):
        # The loader recognizes xplanes by suffix; keep the host part of the name.
        host = base[: -len(XPLANE_SUFFIX)] if lower.endswith(XPLANE_SUFFIX) else base[:-3]
        target = dest / f"{_safe(host) or 'upload'}{XPLANE_SUFFIX}"
    elif lower.endswith(".json.gz"):
        target = dest / _safe(base[:-3])
        _gunzip(base, data, target, max_unzipped)
        return target
    else:
        target = dest / _safe(base)
    target.write_bytes(data)
    return target


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def _unzip(base: str, data: bytes, dest: Path, max_unzipped: int) -> None:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        members = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise UploadError(f"{base}: not a readable zip ({e})") from None
    if len(members) > MAX_MEMBERS:
        raise UploadError(f"{base}: {len(members)} entries; at most {MAX_MEMBERS}")
    budget = max_unzipped
    over = f"{base}: unpacks to more than {max_unzipped / 2**20:.0f} MB"
    with zf:
        for m in members:
            parts = PurePosixPath(m.filename.replace("\\", "/")).parts
            if m.filename.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
                raise UploadError(f"{base}: entry {m.filename!r} points outside the archive")
            if stat.S_ISLNK(m.external_attr >> 16):
                raise UploadError(f"{base}: entry {m.filename!r} is a symbolic link")
            if m.is_dir():
                continue
            if m.file_size > budget:
                raise UploadError(over)
            # Gzipped traces inside the archive are inflated here, within the same budget.
            gz = parts[-1].lower().endswith(".gz")
            target = dest.joinpath(*parts[:-1], parts[-1][:-3] if gz else parts[-1])
            target.parent.mkdir(parents=True, exist_ok=True)
            corrupt = f"{base}: entry {m.filename!r} is corrupt"
            try:
                with zf.open(m) as raw:
                    src = gzip.GzipFile(fileobj=raw) if gz else raw
                    # A plain entry may not inflate past its declared (and checked) size.
                    budget -= _write_capped(
                        src, target, budget if gz else m.file_size,
                        over if gz else f"{corrupt} (it inflates past its declared size)",
                        corrupt)
            except (zipfile.BadZipFile, OSError) as e:
                raise UploadError(f"{corrupt} ({e})") from None


def _gunzip(base: str, data: bytes, target: Path, cap: int) -> None:
    if data[:2] != b"\x1f\x8b":
        raise UploadError(f"{base}: named .gz but not gzip data")
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as src:
        _write_capped(src, target, cap, f"{base}: unpacks to more than {cap / 2**20:.0f} MB",
                      f"{base}: corrupt gzip data")


def _write_capped(src: BinaryIO, target: Path, limit: int, over: str, corrupt: str) -> int:
    """Stream `src` into `target`, at most `limit` bytes; returns the bytes written. Past the
    limit (`over`) or on unreadable data (`corrupt`): the partial file is removed."""
    written = 0
    try:
        with open(target, "wb") as out:
            while chunk := src.read(1 << 20):
                written += len(chunk)
                if written > limit:
                    raise UploadError(over)
                out.write(chunk)
    except UploadError:
        target.unlink(missing_ok=True)
        raise
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile) as e:
        target.unlink(missing_ok=True)
        raise UploadError(f"{corrupt} ({e})") from None
    return written
