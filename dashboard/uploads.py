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
import shutil
import stat
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath

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
    elif lower.endswith(".json.gz"):
        target = dest / _safe(base[:-3])
        _gunzip(base, data, target, max_unzipped)
        return target
    elif lower.endswith(".json"):
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
            except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
                raise UploadError(f"{base}: entry {m.filename!r} is corrupt ({e})") from None
    _gunzip_members(base, dest, max_unzipped - total)


def _gunzip(base: str, data: bytes, target: Path, cap: int) -> None:
    import io

    if data[:2] != b"\x1f\x8b":
        raise UploadError(f"{base}: named .gz but not gzip data")
    try:
        with gzip.open(io.BytesIO(data)) as src, open(target, "wb") as out:
            _copy_capped(src, out, cap)
    except ValueError:
        target.unlink(missing_ok=True)
        raise UploadError(f"{base}: unpacks to more than {cap / 2**20:.0f} MB") from None
    except (OSError, EOFError, zlib.error) as e:
        target.unlink(missing_ok=True)
        raise UploadError(f"{base}: corrupt gzip data ({e})") from None


def _gunzip_members(base: str, dest: Path, budget: int) -> None:
    """Gzipped traces inside a zip are inflated here too, within what is left of the cap."""
    for f in sorted(dest.rglob("*.gz")):
        data = f.read_bytes()
        f.unlink()
        target = f.with_suffix("")
        _gunzip(f"{base}: {f.relative_to(dest)}", data, target, budget)
        budget -= target.stat().st_size


def _copy_capped(src, out, declared: int) -> None:
    # The declared size is what was checked; a member that inflates past it is refused.
    written = 0
    while chunk := src.read(1 << 20):
        written += len(chunk)
        if written > declared:
            raise ValueError("entry inflates past its declared size")
        out.write(chunk)
