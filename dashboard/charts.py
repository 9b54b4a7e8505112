"""Plotly figures for the pages; pure functions of the tables in dashboard.analysis / summaries."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analyzers.steps import ALL_CATEGORIES, CATEGORIES, IDLE

# One colour per event kind, stable across pages (input waits and copies stand out).
KIND_COLORS = {
    "input_wait": "#d62728", "input_work": "#ff9896", "h2d": "#ff7f0e", "d2h": "#ffbb78",
    "d2d": "#c5b0d5", "collective": "#9467bd", "launch": "#bcbd22", "sync": "#dbdb8d",
    "device_compute": "#2ca02c",
    "host_op": "#98df8a", "convert": "#e377c2", "framework": "#7f7f7f", "other": "#c7c7c7",
    "gil_wait": "#8c564b",
}
# A step category takes the colour of the first kind it is fed by (analyzers.steps.CATEGORIES).
CATEGORY_COLORS = {cat: KIND_COLORS[kinds[0]] for cat, kinds in CATEGORIES.items()} | {
    IDLE: KIND_COLORS["other"]}
STATE_COLORS = {"R": "#2ca02c", "S": "#aec7e8", "D": "#d62728", "other": "#c7c7c7"}


def _layout(fig: go.Figure, title: str, height: int = 380) -> go.Figure:
    fig.update_layout(title=title, height=height, margin={"l": 10, "r": 10, "t": 50, "b": 10},
                      legend={"orientation": "h", "y": -0.2})
    return fig


def step_breakdown(table: pd.DataFrame) -> go.Figure:
    """Stacked bar per step: where each step's time went (ms)."""
    fig = go.Figure()
    for c in ALL_CATEGORIES:
        if c in table and table[c].sum() > 0:
            fig.add_bar(name=c, x=table["step"], y=table[c], marker_color=CATEGORY_COLORS[c],
                        hovertemplate=f"step %{{x}}<br>{c}: %{{y:.2f}} ms<extra></extra>")
    fig.update_layout(barmode="stack", xaxis_title="step", yaxis_title="ms")
    return _layout(fig, "Step time by category")


def step_timeline(events: pd.DataFrame, stalls: list[dict[str, Any]], step: int) -> go.Figure:
    """One row per thread/stream, one bar per event (ms from the step's start); the input waits
    and the findings' time ranges are shaded red."""
    fig = go.Figure()
    for kind, g in events.groupby("kind", sort=False):
        fig.add_bar(name=kind, y=g["track"], x=g["dur_ms"], base=g["start_ms"], orientation="h",
                    marker_color=KIND_COLORS.get(str(kind), "#c7c7c7"),
                    customdata=g[["name"]], hovertemplate="%{customdata[0]}<br>"
                    "start %{base:.3f} ms, %{x:.3f} ms<extra>" + str(kind) + "</extra>")
    for s in stalls:
        fig.add_vrect(x0=s["start_ms"], x1=s["end_ms"], fillcolor="red", opacity=0.15,
                      line_width=0, annotation_text=s["finding"], annotation_position="top left")
    n_tracks = events["track"].nunique() if len(events) else 1
    fig.update_layout(barmode="overlay", xaxis_title="ms from the step's start",
                      yaxis={"autorange": "reversed"})
    return _layout(fig, f"Timeline of step {step}", height=max(320, 28 * n_tracks + 140))


def thread_states(states: pd.DataFrame, cpu: pd.DataFrame | None) -> go.Figure:
    """Threads per state at each sampler sweep, and the process's CPU use (% of all cores)."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for s in ("R", "D", "S", "other"):
        if states[s].sum() > 0:
            fig.add_scatter(x=states["t_ms"], y=states[s], name=f"{s} threads", mode="lines",
                            stackgroup="states", line={"color": STATE_COLORS[s]})
    if cpu is not None:
        fig.add_scatter(x=cpu["t_ms"], y=cpu["cpu_pct"], name="CPU % (all cores)",
                        mode="lines", line={"color": "black", "width": 1.5}, secondary_y=True)
        fig.update_yaxes(title_text="CPU %", range=[0, 105], secondary_y=True)
    fig.update_yaxes(title_text="threads", secondary_y=False)
    fig.update_xaxes(title_text="ms from the trace start")
    return _layout(fig, "Thread states (OS sampler)")


def compare_breakdown(diff: dict[str, Any]) -> go.Figure:
    """Median step split by category, before vs after (ms)."""
    rows = [(c, v["before_ms"], v["after_ms"]) for c, v in diff["breakdown"].items()
            if v["before_ms"] or v["after_ms"]]
    fig = go.Figure()
    for i, label in ((1, "before"), (2, "after")):
        fig.add_bar(name=f"{label}: {diff[label]['run']}", x=[r[0] for r in rows],
                    y=[r[i] for r in rows])
    fig.update_layout(barmode="group", yaxis_title="ms of the median step")
    return _layout(fig, "Step breakdown, before and after")


def _trials_frame(summary: dict[str, Any]) -> pd.DataFrame:
    df = pd.DataFrame(summary.get("trials") or [])
    if df.empty:
        return df
    df["kind"] = df["source"].fillna("sampler").astype(str).str.split(":").str[0]
    return df


def optimization_history(summary: dict[str, Any]) -> go.Figure:
    """Each trial's samples/s (pruned trials at their last report), and the best so far."""
    df = _trials_frame(summary)
    fig = go.Figure()
    if df.empty:
        return _layout(fig, "Optimization history (no trials)")
    done = df[df["state"] == "COMPLETE"].dropna(subset=["samples_per_s"])
    for kind, g in done.groupby("kind"):
        fig.add_scatter(x=g["number"], y=g["samples_per_s"], mode="markers", name=str(kind),
                        marker={"size": 9}, customdata=g[["source"]],
                        hovertemplate="trial %{x}: %{y:,.0f} samples/s<br>%{customdata[0]}"
                        "<extra></extra>")
    if "last_reported_samples_per_s" in df:
        pr = df[df["state"] == "PRUNED"].dropna(subset=["last_reported_samples_per_s"])
        if len(pr):
            fig.add_scatter(x=pr["number"], y=pr["last_reported_samples_per_s"], mode="markers",
                            name="pruned", marker={"symbol": "x", "color": "grey"})
    if len(done):
        order = done.sort_values("number")
        fig.add_scatter(x=order["number"], y=order["samples_per_s"].cummax(), mode="lines",
                        name="best so far", line={"shape": "hv", "color": "black"})
    fig.update_layout(xaxis_title="trial", yaxis_title="samples/s")
    return _layout(fig, "Optimization history")


def importances(values: dict[str, float]) -> go.Figure:
    items = sorted(values.items(), key=lambda kv: kv[1])
    fig = go.Figure(go.Bar(x=[v for _, v in items], y=[k for k, _ in items], orientation="h"))
    fig.update_layout(xaxis_title="share of the objective's variance")
    return _layout(fig, "Parameter importances", height=max(260, 26 * len(items) + 120))


def pareto_front(summary: dict[str, Any]) -> go.Figure:
    front = pd.DataFrame(summary.get("pareto_front") or [])
    fig = go.Figure()
    if not front.empty:
        fig.add_scatter(x=front["devices"], y=front["samples_per_s"], mode="lines+markers",
                        name="Pareto front", customdata=front[["trial"]],
                        hovertemplate="trial %{customdata[0]}: %{y:,.0f} samples/s on %{x} "
                        "devices<extra></extra>")
    fig.update_layout(xaxis_title="devices", yaxis_title="samples/s")
    return _layout(fig, "Pareto front: samples/s vs devices")
