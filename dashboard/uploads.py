"""Uploaded traces: an xplane.pb, a Chrome trace JSON (optionally gzipped), or a zipped logdir.

Each upload is written into its own fresh folder under the app's scratch directory, never under
the root, and analyzed from there. Zips are unpacked member by member with the names checked
(no absolute paths, no `..`, no links) and the unpacked size capped, so a crafted archive can
neither write outside its folder nor fill the disk. Nothing is ever unpickled.
"""

from __future__ import annotations

import gzip
import hashlib
import stat
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from recadvisor.capture.layout import XPLANE_SUFFIX

ACCEPTED = ("pb", "json", "gz", "zip")
MAX_MEMBERS = 10_000
_SCRATCH = Path(tempfile.gettempdir()) / "recadvisor-dashboard-uploads"


class UploadError(ValueError):
    """An upload the dashboard will not analyze; the message is shown as is."""


def scratch_dir() -> Path:
    _SCRATCH.mkdir(mode=0o700, parents=True, exist_ok=True)
    return _SCRATCH


def save_upload(name: str, data: bytes, *, max_bytes: int, max_unzipped: int,
                scratch: Path | None = None) -> Path:
    """Write the upload where the analyzers can read it; returns the path to analyze."""
    base = PurePosixPath(name.replace("\\", "/")).name or "upload"
    if len(data) > max_bytes:
        raise UploadError(f"{base}: {len(data) / 2**20:.1f} MB is over the upload cap of "
                          f"{max_bytes / 2**20:.0f} MB (recadvisor dashboard --max-upload-mb)")
    if not data:
        raise UploadError(f"{base}: the file is empty")
    digest = hashlib.sha256(data).hexdigest()[:16]
    dest = (scratch or scratch_dir()) / digest
    dest.mkdir(parents=True, exist_ok=True)
    lower = base.lower()
    if lower.endswith(".zip"):
        _unzip(base, data, dest, max_unzipped)
        return dest
    if lower.endswith(".pb"):
        # The loader recognizes xplanes by suffix; keep the host part of the name.
        host = base[: -len(XPLANE_SUFFIX)] if lower.endswith(XPLANE_SUFFIX) else base[:-3]
        target = dest / f"{_safe(host) or 'upload'}{XPLANE_SUFFIX}"
    elif lower.endswith(".json.gz") or lower.endswith(".json"):
        if lower.endswith(".gz") and data[:2] != b"\x1f\x8b":
            raise UploadError(f"{base}: named .gz but not gzip data")
        target = dest / _safe(base)
    elif lower.endswith(".gz"):
        raise UploadError(f"{base}: a .gz upload must be a trace JSON (*.json.gz)")
    else:
        raise UploadError(f"{base}: not a trace (expected *.xplane.pb, *.json, *.json.gz or a "
                          "zipped logdir)")
    target.write_bytes(data)
    return target


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def _unzip(base: str, data: bytes, dest: Path, max_unzipped: int) -> None:
    import io

    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        members = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise UploadError(f"{base}: not a readable zip ({e})") from None
    if len(members) > MAX_MEMBERS:
        raise UploadError(f"{base}: {len(members)} entries; at most {MAX_MEMBERS}")
    total = 0
    with zf:
        for m in members:
            parts = PurePosixPath(m.filename.replace("\\", "/")).parts
            if m.filename.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
                raise UploadError(f"{base}: entry {m.filename!r} points outside the archive")
            if stat.S_ISLNK(m.external_attr >> 16):
                raise UploadError(f"{base}: entry {m.filename!r} is a symbolic link")
            if m.is_dir():
                continue
            total += m.file_size
            if total > max_unzipped:
                raise UploadError(f"{base}: unpacks to more than {max_unzipped / 2**20:.0f} MB")
            target = dest.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with zf.open(m) as src, open(target, "wb") as out:
                    _copy_capped(src, out, m.file_size)
            except (zipfile.BadZipFile, OSError, ValueError, EOFError, gzip.BadGzipFile) as e:
                raise UploadError(f"{base}: entry {m.filename!r} is corrupt ({e})") from None


def _copy_capped(src, out, declared: int) -> None:
    # The declared size is what was checked; a member that inflates past it is refused.
    written = 0
    while chunk := src.read(1 << 20):
        written += len(chunk)
        if written > declared:
            raise ValueError("entry inflates past its declared size")
        out.write(chunk)
