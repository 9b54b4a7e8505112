"""Root confinement, study discovery (read-only), run discovery and metadata."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from dashboard.paths import OutsideRoot, confined_run, relative, under_root
from dashboard.runs import config_summary, discover
from dashboard.studies import check_url, find_study_files, is_optuna_db


def test_under_root(tmp_path):
    (tmp_path / "a").mkdir()
    assert under_root(tmp_path, "a") == (tmp_path / "a").resolve()
    assert under_root(tmp_path, str(tmp_path / "a")) == (tmp_path / "a").resolve()
    for bad in ("..", "../x", "/etc", "a/../../x"):
        with pytest.raises(OutsideRoot, match="outside the dashboard root"):
            under_root(tmp_path / "a", bad)
    with pytest.raises(ValueError):
        under_root(tmp_path, "")


def test_symlink_out_of_the_root_is_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    os.symlink("/etc", root / "etc")
    with pytest.raises(OutsideRoot):
        under_root(root, "etc/passwd")
    assert relative(root, root / "x") == "x" and relative(root, root) == "."


def test_study_files_are_optuna_dbs_only_and_never_written(tmp_path):
    (tmp_path / "junk.db").write_bytes(b"not sqlite")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    before = other.read_bytes()
    assert find_study_files(tmp_path) == []
    assert other.read_bytes() == before and not is_optuna_db(tmp_path / "junk.db")
    with pytest.raises(ValueError, match="not an Optuna study"):
        check_url(tmp_path, f"sqlite:///{other}")


def test_study_urls(tmp_path, study_root):
    db = study_root / "tune" / "study.db"
    assert find_study_files(study_root) == [db]
    assert check_url(study_root, "sqlite:///tune/study.db") == f"sqlite:///{db}"
    assert check_url(study_root, f"sqlite:///{db}") == f"sqlite:///{db}"
    with pytest.raises(OutsideRoot):
        check_url(tmp_path, f"sqlite:///{db}")
    with pytest.raises(ValueError, match="no such study file"):
        check_url(study_root, "sqlite:///tune/missing.db")
    with pytest.raises(ValueError, match="names a file"):
        check_url(study_root, "sqlite://")
    with pytest.raises(ValueError, match="not a storage URL"):
        check_url(study_root, "tune/study.db")
    # Network storages are not files under the root; they must answer and hold Optuna's tables.
    with pytest.raises(ValueError, match=r"cannot open storage postgresql\+psycopg://u:\*\*\*@"):
        check_url(study_root, "postgresql+psycopg://u:secret@no-such-host.invalid/db")


def test_discover_reads_metadata_and_orders_newest_first(tmp_path):
    for name, sps in (("2026_01_01_00_00_00", 10.0), ("2026_02_01_00_00_00", 20.0)):
        run = tmp_path / "log" / "plugins" / "profile" / name
        run.mkdir(parents=True)
        (run / "h.xplane.pb").write_bytes(b"")
        (run / "recadvisor_run.json").write_text(json.dumps({
            "tool": "recadvisor.reference_model", "preset": "gzip", "samples_per_s": sps,
            "config": {"compression": "gzip", "measure_steps": 7}}))
    entries, truncated = discover(tmp_path)
    assert not truncated
    assert [e.name for e in entries] == ["2026_02_01_00_00_00", "2026_01_01_00_00_00"]
    e = entries[0]
    assert e.samples_per_s == 20.0 and e.source == "train"
    assert e.key == "log/plugins/profile/2026_02_01_00_00_00"
    # Run lengths are left out of the config column; the knob that differs is shown.
    assert config_summary(e.metadata) == "preset gzip, --compression gzip"
    assert discover(tmp_path / "log" / "plugins")[0]  # a folder deeper still finds them


def test_discover_empty_root(tmp_path):
    assert discover(tmp_path) == ([], False)


def test_runs_linking_out_of_the_root_are_not_listed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.trace.json").write_text("{}")
    root = tmp_path / "root"
    (root / "linked").mkdir(parents=True)
    os.symlink(outside / "secret.trace.json", root / "linked" / "t.trace.json")
    os.symlink(outside, root / "dirlink")
    (root / "real").mkdir()
    (root / "real" / "t.trace.json").write_text("{}")
    (root / "tune").mkdir()
    (root / "tune" / "summary.json").write_text("{}")  # tuning output, not a trace
    assert [e.key for e in discover(root)[0]] == ["real"]
    with pytest.raises(OutsideRoot):
        confined_run(root, root / "linked")
    with pytest.raises(OutsideRoot):
        confined_run(root, root)  # a folder holding a link out is refused as a whole


def test_rdb_urls_must_already_hold_optuna_tables(tmp_path):
    from dashboard.studies import _check_rdb

    other = tmp_path / "plain.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(ValueError, match="holds no Optuna studies"):
        _check_rdb(f"sqlite:///{other}")
    assert sqlite3.connect(other).execute(
        "SELECT count(*) FROM sqlite_master").fetchone() == (1,)  # nothing was created
