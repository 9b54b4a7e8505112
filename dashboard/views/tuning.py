"""Tuning: a study from its storage (SQLite under the root, or a URL such as PostgreSQL):
history, best trials, importances, Pareto front, the best configuration as a command."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import charts, studies, ui
from dashboard.paths import OutsideRoot, relative, under_root


@st.cache_resource(ttl=10, show_spinner=False)
def _names(url: str) -> list[str]:
    return studies.study_names(url)


@st.cache_resource(ttl=10, show_spinner=False)
def _summary(url: str, study: str) -> dict:
    return studies.load_summary(url, study)


@st.cache_resource(ttl=10, show_spinner=False)
def _checked_url(root: str, url: str) -> str:
    # Connects and inspects the tables: not on every rerun (a widget click) of the page.
    return studies.check_url(Path(root), url)


@st.cache_resource(ttl=15, show_spinner=False)
def _files(root: str) -> list:
    return studies.find_study_files(Path(root))


cfg = ui.settings()
st.title("Tuning")
files = _files(str(cfg.root))
sources = [relative(cfg.root, p) for p in files] + ["storage URL…"]
default = len(sources) - 1 if cfg.storage else 0
source = st.selectbox("study storage", sources, index=default, key="tuning_source",
                      help="SQLite studies found under the root, or any Optuna storage URL")
url = None
with ui.shown_errors("storage"):
    if source == "storage URL…":
        typed = st.text_input("storage URL", value=cfg.storage or "", key="tuning_url",
                              placeholder="postgresql+psycopg://user:pass@host/db")
        url = _checked_url(str(cfg.root), typed) if typed else None
    else:
        url = studies.sqlite_url(files[sources.index(source)])
if url is None:
    if not files and not cfg.storage:
        st.info("No tuning studies under the root. Run `recadvisor tune --out DIR` (its "
                "study.db appears here) or give a storage URL.")
    st.stop()

summary = None
with ui.shown_errors(f"cannot read {studies.redact(url)}"):
    names = _names(url)
    if not names:
        st.info(f"{studies.redact(url)} holds no studies yet.")
        st.stop()
    study = st.selectbox("study", names, key="tuning_study")
    summary = _summary(url, study)
if summary is None:
    st.stop()

counts = summary["counts"]
c1, c2, c3, c4 = st.columns(4)
start, best = summary.get("start") or {}, summary.get("best")
c1.metric("start samples/s", ui.fmt_rate(start.get("samples_per_s")))
c2.metric("best samples/s", ui.fmt_rate(best["samples_per_s"]) if best else "—")
c3.metric("speedup", f"{summary['speedup']:.2f}x" if summary.get("speedup") else "—")
c4.metric("trials", f"{counts.get('complete', 0)} done",
          help=", ".join(f"{k} {v}" for k, v in counts.items() if v))
st.caption(f"sampler {summary.get('sampler')} · storage {summary['storage']}"
           + (f" · preset {summary['preset']}" if summary.get("preset") else ""))

if best:
    st.subheader(f"Best configuration (trial {best['trial']}, from {best['source']})")
    st.code(best["command"], language="bash", wrap_lines=True)
    sp = best.get("spread") or {}
    if sp.get("n", 0) > 1:
        st.caption(f"median of {sp['n']} measurements, {sp['min']:,.0f}–{sp['max']:,.0f} "
                   "samples/s")
    if best.get("changes_from_start"):
        st.markdown("changes from the start: " + ", ".join(
            f"`{k}` → `{v}`" for k, v in best["changes_from_start"].items()))
    st.download_button("best_config.json", json.dumps(best["config"], indent=2),
                       file_name="best_config.json", mime="application/json")

st.plotly_chart(charts.optimization_history(summary), key="history")

imp = summary.get("importances") or {}
if imp.get("values"):
    st.plotly_chart(charts.importances(imp["values"]), key="importances")
else:
    st.caption(f"parameter importances: {imp.get('reason', 'not available')}")

if summary.get("pareto_front"):
    st.plotly_chart(charts.pareto_front(summary), key="pareto")
    st.dataframe(pd.DataFrame(summary["pareto_front"]), hide_index=True, width="stretch")
elif summary.get("objectives") and len(summary["objectives"]) > 1:
    st.caption("Pareto front: no completed trials yet")

if summary.get("improvements"):
    st.subheader("Improvements")
    st.dataframe(pd.DataFrame(summary["improvements"]), hide_index=True, width="stretch")
if summary.get("verified_remedies"):
    st.subheader("Remedies: estimated vs measured")
    st.dataframe(pd.DataFrame(summary["verified_remedies"]), hide_index=True, width="stretch")
for r in summary.get("guidance") or []:
    with st.expander(f"guidance round {r.get('round')}: trial {r.get('analyzed_trial')}"):
        # The profile the round analyzed, when it lies under the root: open its diagnosis.
        logdir = Path(r["logdir"]) if r.get("logdir") else None
        if logdir is not None and logdir.exists():
            try:
                key = relative(cfg.root, under_root(cfg.root, logdir))
            except OutsideRoot:
                key = None
            if key is not None:
                st.page_link("views/diagnosis.py", label=f"diagnosis of {key}",
                             query_params={"run": key}, icon=":material/troubleshoot:")
        st.json(r, expanded=False)

st.subheader("Best trials")
trials = pd.DataFrame(summary.get("trials") or [])
if not trials.empty:
    done = trials[trials["state"] == "COMPLETE"].sort_values("samples_per_s", ascending=False)
    cols = [c for c in ("number", "samples_per_s", "source", "changes_from_start",
                        "duration_s", "remeasured") if c in done]
    shown = done[cols].head(10).assign(
        changes_from_start=lambda x: x["changes_from_start"].map(
            lambda c: ", ".join(f"{k}={v}" for k, v in (c or {}).items())))
    st.dataframe(shown, hide_index=True, width="stretch")
    with st.expander(f"all {len(trials)} trials"):
        st.dataframe(trials.astype(str), hide_index=True, width="stretch")
