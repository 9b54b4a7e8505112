"""Tuning studies the dashboard can open: SQLite files under the root, or a storage URL.

A `.db` under the root, or a database URL, is opened only if it already holds Optuna's tables
(SQLite files are checked read-only), so the page never creates tables in somebody else's
database; a `sqlite:///` URL typed in the page must point under the root as well.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analyzers.ingest.logdir import walk_files
from dashboard.paths import OutsideRoot, under_root
from tuner.storage import redact, storage_error

MAX_STUDY_FILES = 50


def is_optuna_db(path: Path) -> bool:
    try:
        _check_rdb(f"sqlite:///file:{path}?mode=ro&uri=true")  # read-only: nothing is created
    except ValueError:
        return False
    return True


def find_study_files(root: Path) -> list[Path]:
    found = []
    for p in sorted(walk_files(root, ("*.db",))):
        try:
            p = under_root(root, p)
        except OutsideRoot:
            continue  # a link out of the root
        if p.is_file() and is_optuna_db(p):
            found.append(p)
            if len(found) >= MAX_STUDY_FILES:
                break
    return found


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def check_url(root: Path, url: str) -> str:
    """The URL to open; a SQLite file must exist under the root and be an Optuna database."""
    url = url.strip()
    if "://" not in url:
        raise ValueError(f"{url!r} is not a storage URL (sqlite:///path/study.db or "
                         "postgresql+psycopg://user:pass@host/db)")
    if url.startswith("sqlite"):
        prefix = "sqlite:///"
        rest = url[len(prefix):].split("?", 1)[0] if url.startswith(prefix) else ""
        if not rest or rest == ":memory:":
            raise ValueError("a SQLite storage URL names a file: sqlite:///path/study.db")
        # sqlite:////abs/x.db is absolute; sqlite:///x.db is taken relative to the root.
        path = under_root(root, rest)
        if not path.is_file():
            raise ValueError(f"no such study file: {path}")
        if not is_optuna_db(path):
            raise ValueError(f"{path} is not an Optuna study database")
        return sqlite_url(path)
    _check_rdb(url)
    return url


def _check_rdb(url: str) -> None:
    """A database is opened only if it already holds Optuna's tables: Optuna would otherwise
    create them in whatever database the URL names."""
    from sqlalchemy import create_engine, inspect

    args = {"connect_timeout": 10} if url.startswith("postgresql") else {}
    try:
        engine = create_engine(url, connect_args=args)
        try:
            tables = set(inspect(engine).get_table_names())
        finally:
            engine.dispose()
    except Exception as e:  # sqlalchemy's ArgumentError, OperationalError, a missing driver...
        raise storage_error(url, e) from None
    if not {"studies", "trials"} <= tables:
        raise ValueError(f"{redact(url)} holds no Optuna studies (no studies/trials tables)")


def study_names(url: str) -> list[str]:
    from tuner.storage import open_storage

    storage = open_storage(url)
    return [s.study_name for s in storage.get_all_studies()]


def load_summary(url: str, study: str) -> dict[str, Any]:
    from tuner.summary import summarize_storage

    return summarize_storage(url, study)


__all__ = ["check_url", "find_study_files", "load_summary", "redact", "sqlite_url",
           "study_names"]
