"""Compare: two runs side by side (analyzers.diff): breakdowns, findings resolved and new,
speedup."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from analyzers.diff import diff_reports, remaining_text, resolved_text
from analyzers.findings import speedup_text
from dashboard import charts, ui

st.title("Compare")
options = ui.run_options()
if len(options) < 2:
    st.info("Compare needs two runs: make or upload another (see Runs).")
    st.stop()

left, right = st.columns(2)
with right:
    after = ui.pick_run("after", "compare_after", options, param="after")
with left:
    # Default "before": the newest other run (runs are listed newest first).
    before = ui.pick_run("before", "compare_before", options, param="before",
                         default=next(k for k in options if k != after))
if before == after:
    st.warning("The same run is picked twice: choose two different runs.")
    st.stop()

a, b = ui.analyzed(before, options[before]), ui.analyzed(after, options[after])
if a is None or b is None:
    st.stop()
if not (a.summary["steps"]["found"] and b.summary["steps"]["found"]):
    st.error("One of the runs has no steps: there is nothing to compare per step.")
    st.stop()
d = diff_reports(a.report, b.report)

m1, m2, m3 = st.columns(3)
m1.metric("speedup", f"{d['speedup']:.2f}x" if d["speedup"] else "—",
          help=f"from {d['speedup_basis']}")
m2.metric("mean step", f"{d['after']['mean_step_ms']:.1f} ms",
          delta=f"{d['after']['mean_step_ms'] - d['before']['mean_step_ms']:+.1f} ms",
          delta_color="inverse",
          help=(f"median {d['before']['median_step_ms']:.1f} → "
                f"{d['after']['median_step_ms']:.1f} ms"))
m3.metric("samples/s", ui.fmt_rate(d["after"]["samples_per_s"]),
          delta=(f"{d['after']['samples_per_s'] - d['before']['samples_per_s']:+,.0f}"
                 if d["after"]["samples_per_s"] and d["before"]["samples_per_s"] else None))
st.caption(f"speedup basis: {d['speedup_basis']}"
           + (f"; devices {d['devices']['before']} → {d['devices']['after']}, scaling "
              f"efficiency {d['scaling_efficiency']:.0%}" if d["scaling_efficiency"] else ""))

st.plotly_chart(charts.compare_breakdown(d), key="compare_breakdown")

groups = (
    ("Resolved", [":green[resolved] `{}` {}".format(
        f["id"], resolved_text(f, d["speedup"], len(d["resolved"])).removeprefix(f["id"] + " "))
        for f in d["resolved"]]),
    ("New", [f":orange[new] `{f['id']}` ({f['severity']})" for f in d["new"]]),
    ("Remaining", [f"`{f['id']}`: {remaining_text(f)}" for f in d["remaining"]]),
)
for col, (title, lines) in zip(st.columns(3), groups, strict=True):
    with col:
        st.subheader(title)
        if lines:
            st.markdown("\n".join(f"- {line}" for line in lines))
        else:
            st.caption("none")

st.subheader("Findings side by side")
cols = st.columns(2)
for col, (label, v) in zip(cols, ((before, a), (after, b)), strict=True):
    with col:
        st.markdown(f"**{label}**")
        rows = [{"finding": f["id"], "severity": f["severity"],
                 "share": f["impact"]["step_fraction"],
                 "est. speedup": speedup_text(f["impact"])} for f in v.findings]
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                         column_config={"share": st.column_config.NumberColumn(format="percent")})
        else:
            st.caption("no findings")
