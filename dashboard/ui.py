"""Streamlit glue shared by the pages: settings, cached analysis, the run picker, error display.

Caching: analyses are kept with `st.cache_resource` (the object itself, shared across sessions,
never pickled), keyed by the run's path and a stamp of its files' sizes and mtimes, so reopening
a run is a dictionary lookup and a rewritten trace is analyzed again. Runs under the root carry
the stamp taken when they were listed (refreshed every 15 s or by the Refresh button), so a
rerun walks no run folder; uploads and typed paths are stamped when used.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import streamlit as st

from analyzers.report import analyze
from dashboard import settings as settings_mod
from dashboard.analysis import RunView, load_view
from dashboard.paths import MAX_CHECKED, OutsideRoot, confined_run, relative, stamp, under_root
from dashboard.runs import RunEntry, discover
from dashboard.uploads import UploadError
from recadvisor.errors import USER_ERRORS

UPLOADS_KEY = "uploaded_runs"  # session: label -> path of each analyzed upload
OPENED_KEY = "opened_paths"  # session: paths typed in under the root
SELECTED_KEY = "selected_run"
# Markdown badges (Streamlit renders them itself: no emoji font needed on the viewer's side).
SEVERITY_BADGE = {"high": ":red-badge[HIGH]", "medium": ":orange-badge[MEDIUM]",
                  "low": ":gray-badge[low]"}


def settings() -> settings_mod.Settings:
    return settings_mod.from_env()


# A view holds the run's whole event table (tens of MB per million events): few are kept. The
# Runs page needs only each run's summary, kept apart and small.
@st.cache_resource(max_entries=8, show_spinner=False)
def _cached_view(path: str, stamp: tuple) -> RunView:
    return load_view(Path(path))


def view_for(path: Path) -> RunView:
    return _cached_view(str(path), _stamp(path))


def analyzed(label: str, path: Path) -> RunView | None:
    """The run's view, analyzing it with a spinner; None (the error shown) when it is unreadable."""
    with shown_errors(f"cannot analyze {label}"), st.spinner(f"analyzing {label}"):
        return view_for(path)
    return None


@st.cache_resource(max_entries=2000, show_spinner=False)
def _cached_summary(path: str, stamp: tuple) -> dict[str, Any]:
    # Not through _cached_view: analyzing every listed run must not evict the few views the
    # other pages show. A failure is kept too (st.cache_resource does not keep exceptions), so
    # an unreadable run is not decoded again on every rerun.
    try:
        return analyze(Path(path)).to_dict()
    except USER_ERRORS as e:
        return {"error": str(e)}


def summary_for(path: Path) -> dict[str, Any]:
    """The run's analysis as `recadvisor analyze --format json` prints it; raises the error
    that made it unreadable."""
    summary = _cached_summary(str(path), _stamp(path))
    if "error" in summary:
        raise ValueError(summary["error"])
    return summary


def _stamp(path: Path) -> tuple:
    listed = {e.path: e.stamp for e in root_runs()[0]}
    if path in listed:
        return listed[path]
    return stamp(sorted(itertools.islice(path.rglob("*"), MAX_CHECKED)) if path.is_dir()
                 else [path])


@st.cache_resource(ttl=15, show_spinner=False)
def _cached_runs(root: str) -> tuple[list[RunEntry], bool]:
    return discover(Path(root))


def root_runs() -> tuple[list[RunEntry], bool]:
    return _cached_runs(str(settings().root))


def refresh() -> None:
    _cached_runs.clear()


def run_options() -> dict[str, Path]:
    """Every run the pickers offer: label -> path (root runs, opened paths, uploads)."""
    opts: dict[str, Path] = {}
    for e in root_runs()[0]:
        opts[e.key] = e.path
    for label, path in st.session_state.get(OPENED_KEY, {}).items():
        opts.setdefault(label, Path(path))
    for label, path in st.session_state.get(UPLOADS_KEY, {}).items():
        opts[label] = Path(path)
    return opts


def open_path(text: str) -> tuple[str, Path]:
    """A run typed in as a path under the root: its label and path. Raises on bad paths."""
    root = settings().root
    path = under_root(root, text)
    if not path.exists():
        raise FileNotFoundError(f"{relative(root, path)}: no such file or directory")
    confined_run(root, path)
    label = relative(root, path)
    st.session_state.setdefault(OPENED_KEY, {})[label] = str(path)
    return label, path


def add_upload(label: str, path: Path) -> None:
    st.session_state.setdefault(UPLOADS_KEY, {})[label] = str(path)


def pick_run(label: str, key: str, options: dict[str, Path], *, param: str = "run",
             default: str | None = None) -> str | None:
    """A run selectbox that follows (and sets) the `?<param>=` query parameter. Without one,
    it starts at `default`, else the run last picked in Diagnosis, else the newest."""
    names = list(options)
    if not names:
        return None
    wanted = st.query_params.get(param)
    if wanted and wanted not in options:
        # A link or typed URL naming a run that is not listed: it must still be under the root.
        try:
            wanted, options_path = open_path(wanted)
            options[wanted] = options_path
            names = list(options)
        except USER_ERRORS as e:  # OutsideRoot included: a ValueError
            # Stop here: showing another run under the error would pass it off as the one asked.
            st.error(f"cannot open run {wanted!r}: {e}")
            st.stop()
    # The URL wins only when it changed since this picker last wrote it (a link followed, an
    # address typed); otherwise the user's pick stands and the URL follows it.
    applied_key = f"_url_{key}"
    url_changed = wanted is not None and wanted != st.session_state.get(applied_key)
    if key not in st.session_state or st.session_state[key] not in names:
        for pref in (wanted, default, st.session_state.get(SELECTED_KEY), names[0]):
            if pref in names:
                st.session_state[key] = pref
                break
    elif url_changed and wanted in names:
        st.session_state[key] = wanted
    choice = st.selectbox(label, names, key=key)
    st.query_params[param] = choice
    st.session_state[applied_key] = choice
    if param == "run":
        st.session_state[SELECTED_KEY] = choice
    return choice


@contextlib.contextmanager
def shown_errors(what: str) -> Iterator[None]:
    """Bad input becomes one line in the page; anything else one line saying it is a bug."""
    try:
        yield
    except (UploadError, OutsideRoot) as e:
        st.error(str(e))
    except USER_ERRORS as e:
        st.error(f"{what}: {e}")
    except Exception as e:  # noqa: BLE001 -- the page must not show a traceback
        st.error(f"{what}: internal error ({type(e).__name__}: {e}); please report it")


def fmt_rate(v: Any) -> str:
    return f"{v:,.0f}" if isinstance(v, int | float) else "—"
