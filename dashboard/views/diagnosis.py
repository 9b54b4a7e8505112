"""Diagnosis: one run's findings (cards by impact), step breakdown, a step's timeline, and the
sampler's thread states."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from analyzers.after_fix import breakdown_text
from analyzers.findings import speedup_text
from analyzers.ingest.logdir import gpu_model
from analyzers.report import cpu_limits_text, json_value
from dashboard import analysis, charts, ui

st.title("Diagnosis")
options = ui.run_options()
choice = ui.pick_run("run", "diagnosis_run", options)
if choice is None:
    st.info("No runs to diagnose: none under the root and none uploaded (see Runs).")
    st.stop()

view = ui.analyzed(choice, options[choice])
if view is None:
    st.stop()

d = view.summary
steps = d["steps"]
c1, c2, c3, c4 = st.columns(4)
c1.metric("median step", f"{steps['median_ms']:.1f} ms" if steps["found"] else "—")
c2.metric("steps", steps["count"])
c3.metric("samples/s", ui.fmt_rate(d["samples_per_s"]))
hw = d["hardware"]
hosts = hw.get("hosts", 1)  # reports cached before the key existed lack it
c4.metric("devices", f"{hw['devices']} {'GPU/TPU' if hw['accelerator'] else 'CPU'}"
          + (f" on {hosts} hosts" if hosts > 1 else ""))
gpus = sorted({f"{gpu_model(name) + ' ' if gpu_model(name) else ''}(compute capability {cc})"
               for name, cc in hw.get("gpus", {}).items()})  # reports cached before: none
limits = cpu_limits_text(hw)  # reports cached before the keys existed: ""
st.caption(f"{d['run_dir']} · "
           + (f"GPU: {', '.join(gpus)} · " if gpus else "")
           + (f"CPUs: {hw['cpus'] or '?'} ({limits}) · " if limits else "")
           + f"sampler data: {'yes' if d['sampler'] else 'no'} · analyzed in {view.load_s:.1f} s")
st.download_button("report.json (as `recadvisor analyze --format json`)",
                   json.dumps(d, indent=2, default=json_value), file_name="report.json",
                   mime="application/json")
for w in d["warnings"]:
    st.warning(w)
for e in steps.get("left_out", []):  # reports cached before the key existed lack it
    st.caption(f"Left out of every share and estimate: step {e['step']} "
               f"({e['dur_ms']:,.1f} ms, {e['x_median']:.1f}x the median"
               + ("; tracing and compilation ran in it" if e["warmup"] else "")
               + "): a one-time cost at the window's edge, or a stall that fell there.")
if not steps["found"]:
    st.error("No steps found: the trace has no step markers (step_num) and no repeated train "
             "function calls, so nothing can be said per step.")
    st.stop()

st.header("Findings")
if not view.findings:
    st.success("No findings: nothing in this trace costs a measurable share of step time.")
counts = {sev: sum(f["severity"] == sev for f in view.findings) for sev in ui.SEVERITY_BADGE}
if view.findings:
    st.markdown(" ".join(f"{ui.SEVERITY_BADGE[k]} {v}" for k, v in counts.items() if v)
                + " — ordered by estimated impact")
for f in view.findings:
    impact = f["impact"]
    with st.container(border=True):
        st.markdown(f"#### {ui.SEVERITY_BADGE.get(f['severity'], '')} {f['title']}")
        st.markdown(f"`{f['id']}` · **{impact['step_fraction']:.0%}** of step time · estimated "
                    f"speedup if fixed **{speedup_text(impact)}**")
        st.markdown("\n".join(f"- {line}" for line in f["evidence"]["summary"]))
        st.markdown(f"**Remedy:** {f['remedy']['text']}")
        if f["remedy"]["command"]:
            st.code(f["remedy"]["command"], language="bash", wrap_lines=True)
        tops = f["evidence"]["top_events"]
        if tops:
            with st.expander("events behind it"):
                st.dataframe(pd.DataFrame(tops), hide_index=True, width="stretch")
after = d.get("after_top_fix")  # reports cached before the key existed lack it
if after:
    faster = (f", the model's ops {after['faster_cpu']:.2f}x faster without the input threads "
              "beside them" if after["faster_cpu"] > 1 else "")
    parts = [f"`{p['id']}` {p['share']:.0%} of the step ({p['speedup']:.2f}x, {p['severity']})"
             for p in after["findings"]]
    if after.get("breakdown"):
        parts.append("the step then: " + breakdown_text(after["breakdown"]))
    st.info(f"**Next**, once `{after['fixed']}` is fixed (the step {after['speedup']:.2f}x "
            f"shorter{faster}): " + "; ".join(parts))
for s in d["skipped"]:
    st.caption(f"not checked: `{s['id']}`: {s['reason']}")

st.header("Step breakdown")
table = analysis.step_breakdown_ms(view)
st.plotly_chart(charts.step_breakdown(table), key="breakdown")
shares = pd.DataFrame([{"category": k, "share of step time": v}
                       for k, v in sorted(d["breakdown"].items(), key=lambda kv: -kv[1]) if v])
st.dataframe(shares, hide_index=True,
             column_config={"share of step time": st.column_config.ProgressColumn(
                 format="percent", min_value=0.0, max_value=1.0)})

st.header("Timeline")
slowest = analysis.slowest_step(view)
all_steps = [int(s) for s in table["step"]]
step = st.selectbox("step", all_steps, index=all_steps.index(slowest),
                    format_func=lambda s: f"{s}" + (" (slowest)" if s == slowest else ""),
                    key="timeline_step")
events, left_out = analysis.step_events(view, step)
stalls = analysis.stalls_in_step(view, step)
st.plotly_chart(charts.step_timeline(events, stalls, step), key="timeline")
# The analyzers' attribution, not a sum of events: waits nest (GetNext op, Iterator::Root...).
wait_ms = float(table.loc[table["step"] == step, "input_wait"].iloc[0])
st.caption(f"{len(events)} events in step {step}"
           + (f" ({left_out} shortest left out)" if left_out else "")
           + f"; red: input waits ({wait_ms:.1f} ms of the step exposed)"
           + (f" and the time ranges of {', '.join(sorted({s['finding'] for s in stalls}))}"
              if stalls else ""))

st.header("Thread states")
states = analysis.thread_states(view)
if states is None:
    st.info("No OS sampler data in this run: capture with `recadvisor capture` or "
            "`recadvisor train --logdir` to get thread states (R/S/D) and CPU use.")
else:
    st.plotly_chart(charts.thread_states(states, analysis.process_cpu(view)), key="threads")
    st.caption(f"{len(states)} sweeps; D = uninterruptible (usually I/O) sleep. Peak "
               f"{int(states['D'].max())} threads in D, {int(states['R'].max())} running.")
    others = analysis.other_processes(view)
    if others is not None:
        st.subheader("Other processes on the machine")
        st.dataframe(others, hide_index=True, width="stretch")
        st.caption("Mean cores over the steps, from the sampler's scans of every process about "
                   "once a second; the job's own are its child processes (data loader workers). "
                   "`cpu_contention` reports the others when they took cores the job wanted.")
