"""Runs: every profile run under the root, an upload box, and a path box."""

from __future__ import annotations

from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from analyzers.findings import speedup_text
from dashboard import ui
from dashboard.runs import MAX_RUNS, config_summary
from dashboard.uploads import ACCEPTED, save_upload

AUTO_ANALYZE = 25  # the top-finding column analyzes every run up to this many without asking

cfg = ui.settings()
st.title("Runs")
st.caption(f"Profile runs under `{cfg.root}`. Pick one in **Diagnosis**, two in **Compare**.")

entries, truncated = ui.root_runs()
if st.button("Refresh", help="look for new runs under the root"):
    ui.refresh()
    st.rerun()
if truncated:
    st.warning(f"more than {MAX_RUNS} runs under the root: the newest {MAX_RUNS} are listed")

if not entries:
    st.info("No profile runs under the root yet (a run is a folder with *.xplane.pb or trace "
            "JSON). Make one with `recadvisor train --logdir DIR` or `recadvisor capture`, or "
            "upload a trace below.")
else:
    analyze_all = st.toggle("Analyze every run for the top-finding column",
                            value=len(entries) <= AUTO_ANALYZE)
    rows = []
    bar = st.progress(0.0, text="analyzing runs") if analyze_all else None
    for i, e in enumerate(entries):
        top = "unreadable: see the message above" if analyze_all else ""
        if analyze_all:
            with ui.shown_errors(e.key):
                summary = ui.summary_for(e.path)
                f = summary["findings"][0] if summary["findings"] else None
                top = (f"{f['severity']}: {f['id']} "
                       f"({speedup_text(f['impact'])})" if f else "no findings")
                if not summary["steps"]["found"]:
                    top = "no steps found"
            bar.progress((i + 1) / len(entries), text=f"analyzed {e.key}")
        rows.append({"started": e.started, "run": e.key, "samples/s": e.samples_per_s,
                     "top finding": top, "open": "diagnosis?" + urlencode({"run": e.key}),
                     "from": e.source, "config": config_summary(e.metadata)})
    if bar is not None:
        bar.empty()
    st.dataframe(
        pd.DataFrame(rows), hide_index=True, width="stretch",
        column_config={
            "started": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
            "samples/s": st.column_config.NumberColumn(format="%.0f"),
            "open": st.column_config.LinkColumn("diagnosis", display_text="open"),
        },
    )

st.subheader("Upload a trace")
st.caption(f"An `*.xplane.pb`, a Chrome trace `*.json` / `*.json.gz`, or a zipped logdir; at most "
           f"{cfg.max_upload_mb} MB. Uploads are analyzed in a scratch folder, outside the root.")
up = st.file_uploader("trace file", type=list(ACCEPTED), key="upload")
if up is not None:
    with ui.shown_errors(f"upload {up.name}"):
        label = f"upload: {up.name}"
        # Reruns keep the uploaded file: it is saved and analyzed once per upload, not per rerun.
        done = st.session_state.setdefault("_uploads_done", {})
        if up.file_id not in done:
            path = save_upload(up.name, up.getvalue(), max_bytes=cfg.max_upload_bytes,
                               max_unzipped=cfg.max_unzipped_bytes)
            try:
                view = ui.view_for(path)
            except ui.USER_ERRORS as e:
                # Name the upload, not where the server keeps it.
                raise ValueError(str(e).replace(f"{path}: ", "").replace(str(path), up.name)
                                 ) from None
            ui.add_upload(label, path)
            done[up.file_id] = (len(view.findings), view.summary["steps"]["count"])
            st.session_state[ui.SELECTED_KEY] = label
        n, steps = done[up.file_id]
        st.success(f"{up.name}: analyzed, {steps} steps, {n} finding{'s' if n != 1 else ''}. "
                   f"Open it in Diagnosis as “{label}”.")

st.subheader("Open a path under the root")
typed = st.text_input("logdir, run folder or trace file (relative to the root)", key="open_path")
if typed:
    with ui.shown_errors("open"):
        label, path = ui.open_path(typed)
        view = ui.view_for(path)
        st.success(f"{label}: {view.summary['steps']['count']} steps, "
                   f"{len(view.findings)} findings; listed in Diagnosis and Compare")
        st.session_state[ui.SELECTED_KEY] = label
