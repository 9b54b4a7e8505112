"""Uploads are written only inside their own scratch folder, capped, and checked by name."""

from __future__ import annotations

import gzip
import io
import stat
import zipfile
from pathlib import Path

import pytest

from dashboard.uploads import UploadError, save_upload

CAP = dict(max_bytes=2**20, max_unzipped=4 * 2**20)


def _zip(entries: dict[str, bytes], link: str | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
    return buf.getvalue()


def test_xplane_keeps_its_host_name(tmp_path):
    p = save_upload("worker0.xplane.pb", b"\x0a\x00", scratch=tmp_path, **CAP)
    assert p.name == "worker0.xplane.pb" and p.parent.parent == tmp_path
    q = save_upload("trace.pb", b"\x0a\x00", scratch=tmp_path, **CAP)
    assert q.name == "trace.xplane.pb"


def test_json_and_gzipped_json(tmp_path):
    assert save_upload("t.json", b"{}", scratch=tmp_path, **CAP).read_bytes() == b"{}"
    gz = gzip.compress(b"{}")
    assert save_upload("t.trace.json.gz", gz, scratch=tmp_path, **CAP).read_bytes() == b"{}"
    with pytest.raises(UploadError, match="not gzip data"):
        save_upload("t.json.gz", b"{}", scratch=tmp_path, **CAP)


@pytest.mark.parametrize("name", ["notes.txt", "model.pkl", "x.gz", "noext"])
def test_other_types_are_refused(tmp_path, name):
    with pytest.raises(UploadError):
        save_upload(name, b"data", scratch=tmp_path, **CAP)
    assert not any(tmp_path.iterdir())  # refused before anything, even a folder, is written


def test_empty_and_oversized(tmp_path):
    with pytest.raises(UploadError, match="empty"):
        save_upload("a.json", b"", scratch=tmp_path, **CAP)
    with pytest.raises(UploadError, match="over the upload cap of 1 MB"):
        save_upload("a.json", b" " * (2**20 + 1), scratch=tmp_path, **CAP)


def test_path_in_the_name_is_dropped(tmp_path):
    p = save_upload("../../etc/evil.json", b"{}", scratch=tmp_path, **CAP)
    assert p.is_relative_to(tmp_path) and p.name == "evil.json"


def test_zip_unpacks_a_logdir(tmp_path):
    data = _zip({"plugins/profile/run1/h.xplane.pb": b"\x0a\x00", "readme": b"x"})
    p = save_upload("logdir.zip", data, scratch=tmp_path, **CAP)
    assert (p / "plugins/profile/run1/h.xplane.pb").read_bytes() == b"\x0a\x00"


@pytest.mark.parametrize("entries,link,message", [
    ({"../escape.json": b"{}"}, None, "outside the archive"),
    ({"/abs.json": b"{}"}, None, "outside the archive"),
    ({"a/../../b.json": b"{}"}, None, "outside the archive"),
    ({"ok.json": b"{}"}, "link.json", "symbolic link"),
])
def test_zip_entries_cannot_escape(tmp_path, entries, link, message):
    scratch = tmp_path / "scratch"
    with pytest.raises(UploadError, match=message):
        save_upload("x.zip", _zip(entries, link), scratch=scratch, **CAP)
    # Nothing of the archive was written anywhere: not in scratch, its parent, or its folder.
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not Path("/abs.json").exists()


def test_zip_bomb_is_stopped(tmp_path):
    data = _zip({"big.json": b"\0" * (8 * 2**20)})  # compresses to a few KB
    assert len(data) < CAP["max_bytes"]
    with pytest.raises(UploadError, match="unpacks to more than 4 MB"):
        save_upload("bomb.zip", data, scratch=tmp_path, **CAP)


def test_corrupt_zip(tmp_path):
    with pytest.raises(UploadError, match="not a readable zip"):
        save_upload("x.zip", b"PK\x03\x04 truncated", scratch=tmp_path, **CAP)
    data = bytearray(_zip({"a.json": b"{" * 5000}))
    data[60:90] = b"\xff" * 30  # damage the compressed member, keep the directory
    with pytest.raises(UploadError, match="corrupt|not a readable zip"):
        save_upload("y.zip", bytes(data), scratch=tmp_path, **CAP)


def test_gzip_bombs_are_stopped(tmp_path):
    bomb = gzip.compress(b" " * (8 * 2**20))
    assert len(bomb) < CAP["max_bytes"]
    with pytest.raises(UploadError, match="unpacks to more than 4 MB"):
        save_upload("t.trace.json.gz", bomb, scratch=tmp_path, **CAP)
    with pytest.raises(UploadError, match="unpacks to more than"):
        save_upload("l.zip", _zip({"run/t.trace.json.gz": bomb}), scratch=tmp_path, **CAP)
    with pytest.raises(UploadError, match="corrupt gzip"):
        save_upload("t.json.gz", b"\x1f\x8b" + b"\0" * 40, scratch=tmp_path, **CAP)


def test_gzipped_traces_are_stored_inflated(tmp_path):
    p = save_upload("w.trace.json.gz", gzip.compress(b"{}"), scratch=tmp_path, **CAP)
    assert p.name == "w.trace.json" and p.read_bytes() == b"{}"
    q = save_upload("l.zip", _zip({"run/w.trace.json.gz": gzip.compress(b"[]")}),
                    scratch=tmp_path, **CAP)
    assert (q / "run" / "w.trace.json").read_bytes() == b"[]"
    assert not list(q.rglob("*.gz"))


def test_default_scratch_is_private():
    from dashboard.uploads import scratch_dir

    d = scratch_dir()
    assert d.is_dir() and (d.stat().st_mode & 0o777) == 0o700 and scratch_dir() == d
