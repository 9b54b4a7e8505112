"""Where studies live: SQLite in the output folder by default, any Optuna RDB URL (PostgreSQL) for
several workers on several machines.

Persistence is Optuna's own RDBStorage. Two mechanisms make a killed worker lose at most the trial
it was running: a heartbeat (a RUNNING trial whose worker stopped beating for `GRACE_S` is failed by
the next worker and queued again by RetryHeartbeatStaleTrialCallback), and, on `--resume` on the
same host, an immediate check that the recorded worker process is gone (no need to wait out the
grace period).
"""

from __future__ import annotations

import os
import re
import socket
import warnings
from pathlib import Path

import optuna
import psutil
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from recadvisor.errors import one_line

HEARTBEAT_S = 10
GRACE_S = 60
SQLITE_FILE = "study.db"


def worker_id() -> str:
    """host:pid:start-time; the start time tells a reused pid from the original process."""
    try:
        started = int(psutil.Process().create_time())
    except psutil.Error:
        started = 0
    return f"{socket.gethostname()}:{os.getpid()}:{started}"


def alive(worker: str) -> bool | None:
    """Whether a worker id's process still runs; None when it ran on another host."""
    try:
        host, pid, started = worker.rsplit(":", 2)
    except ValueError:
        return None
    if host != socket.gethostname():
        return None
    try:
        proc = psutil.Process(int(pid))
        return int(proc.create_time()) == int(started)
    except (psutil.NoSuchProcess, ValueError):
        return False
    except psutil.Error:
        return True


def default_url(out: Path) -> str:
    return f"sqlite:///{(Path(out) / SQLITE_FILE).resolve()}"


def redact(url: str) -> str:
    """The URL without its password, for reports and error messages."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def open_storage(url: str) -> RDBStorage:
    """Connect (and create the schema if needed); one-line ValueError when the URL is unusable."""
    if "://" not in url:
        raise ValueError(f"--storage {url!r} is not a database URL (e.g. "
                         "postgresql+psycopg://user:pass@host/db or sqlite:///path/study.db)")
    engine_kwargs = {"pool_pre_ping": True}
    if url.startswith("postgresql"):
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
    try:
        with warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.8
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=HEARTBEAT_S,
                grace_period=GRACE_S,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1),
            )
    except Exception as e:  # sqlalchemy's OperationalError, ArgumentError, a missing driver...
        raise storage_error(url, e) from None


def storage_error(url: str, e: Exception) -> ValueError:
    """One line saying why a storage URL cannot be used, the password redacted."""
    if isinstance(e, ImportError):
        return ValueError(f"cannot use storage {redact(url)}: missing driver ({e.name}); for "
                          "PostgreSQL: pip install 'recadvisor[postgres]'")
    return ValueError(f"cannot open storage {redact(url)}: {one_line(e)}")


def recover_dead_trials(study: optuna.Study, storage: RDBStorage) -> list[int]:
    """Fail the RUNNING trials whose worker process on this host is gone, and queue each again
    with the same parameters; returns their numbers."""
    recovered = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = t.user_attrs.get("worker")
        if not worker or alive(worker) is not False:
            continue
        storage.set_trial_user_attr(t._trial_id, "fail_reason",
                                    f"its worker {worker} died (killed?); queued again")
        if storage.set_trial_state_values(t._trial_id, TrialState.FAIL):
            attrs = {k: v for k, v in t.user_attrs.items()
                     if k not in ("worker", "fail_reason", "samples_per_s")}
            study.enqueue_trial(t.params, user_attrs={**attrs, "retry_of": t.number})
            recovered.append(t.number)
    return recovered
