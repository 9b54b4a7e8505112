"""The table queries every detector goes through: category masks, events clipped to the steps,
heaviest events. Checked against naive per-row versions on random tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzers.context import Context
from analyzers.events import CHUNK, build_events, cat_mask
from analyzers.findings import heaviest_events
from analyzers.ingest.logdir import RunData
from analyzers.steps import Steps

NAMES = [f"op{i}" for i in range(20)]


def _column(rng: np.random.Generator, n: int) -> pd.Series:
    codes = rng.integers(-1, len(NAMES), n)  # -1: missing
    return pd.Series(pd.Categorical.from_codes(codes, categories=NAMES))


@pytest.mark.parametrize("kept", [0, 1, 3, 8, 9, 19, 20])
def test_cat_mask_matches_the_test_row_by_row(kept):
    # Up to 8 kept values compare codes, more gather a flag table: both must agree with the test.
    col = _column(np.random.default_rng(kept), 5000)
    keep = set(NAMES[:kept])
    expected = np.array([v in keep for v in col.astype(object)])  # NaN is never kept
    assert (cat_mask(col, keep.__contains__) == expected).all()


def _table(rng: np.random.Generator, n: int, span: int) -> pd.DataFrame:
    starts = rng.integers(0, span, n)
    # Mostly short events, some long enough to cross one or several steps, some of no length.
    durs = np.where(rng.random(n) < 0.05, rng.integers(0, span // 2, n), rng.integers(0, 50, n))
    durs[rng.random(n) < 0.02] = 0
    lines = np.array(["a", "b", "python"], dtype=object)[rng.integers(0, 3, n)]
    return build_events(host="h", plane=np.full(n, "/host:CPU", dtype=object), line=lines,
                        line_id=rng.integers(1, 4, n), name_codes=rng.integers(0, len(NAMES), n),
                        names=NAMES, start_ns=starts, dur_ns=durs, stats={})


def _context(events: pd.DataFrame, bounds: list[tuple[int, int]]) -> Context:
    w = pd.DataFrame(bounds, columns=["start_ns", "end_ns"])
    w["dur_ns"] = w["end_ns"] - w["start_ns"]
    w.insert(0, "step", range(len(w)))
    run = RunData(name="r", run_dir=Path("."), events=events, t0_unix_ns=0, hosts=["h"],
                  trace_files=[])
    return Context(run=run, steps=Steps(table=w, source="markers:test"))


def _naive_in_steps(ctx: Context, rows: np.ndarray) -> pd.DataFrame:
    """Every (event, step) overlap of positive length, in event order then step order."""
    ev = ctx.events
    s = ev["start_ns"].to_numpy()[rows, None]
    e = (ev["start_ns"] + ev["dur_ns"]).to_numpy()[rows, None]
    ws = ctx.steps.table["start_ns"].to_numpy()[None, :]
    we = ctx.steps.table["end_ns"].to_numpy()[None, :]
    cs, ce = np.maximum(s, ws), np.minimum(e, we)
    event, step = np.nonzero(ce > cs)
    return pd.DataFrame({"name": ev["name"].to_numpy()[rows][event].astype(str),
                         "step_idx": step, "start_ns": cs[event, step],
                         "end_ns": ce[event, step], "dur_ns": (ce - cs)[event, step]})


@pytest.mark.parametrize("bounds", [
    # Contiguous steps (markers), the trace reaching past both ends.
    [(10_000, 30_000), (30_000, 31_000), (31_000, 70_000), (70_000, 90_000)],
    # Gaps between steps, and one step only.
    [(5_000, 20_000), (25_000, 26_000), (60_000, 95_000)],
    [(40_000, 41_000)],
])
def test_in_steps_matches_clipping_every_event(bounds):
    rng = np.random.default_rng(len(bounds))
    ev = _table(rng, 2 * CHUNK + 777, 100_000)  # several row blocks
    ctx = _context(ev, bounds)
    queries = [
        ({}, np.ones(len(ev), bool)),
        ({"line": "python"}, ev["line"].to_numpy() == "python"),
        ({"name": lambda n: n in {"op3", "op7"}}, ev["name"].isin(["op3", "op7"]).to_numpy()),
        ({"line": "python", "thread": ("h", "/host:CPU", 2)},
         (ev["line"].to_numpy() == "python") & (ev["line_id"].to_numpy() == 2)),
        ({"thread": ("h", "/device:GPU:0", 2)}, np.zeros(len(ev), bool)),
    ]
    cols = ("name", "step_idx", "start_ns", "end_ns", "dur_ns")
    for query, rows in queries:
        got = ctx.in_steps(columns=cols, **query)
        want = _naive_in_steps(ctx, np.flatnonzero(rows))
        got = got.assign(name=got["name"].astype(str))
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want, check_dtype=False)
        assert (got["dur_ns"] > 0).all()


def test_in_steps_with_no_steps_is_empty():
    ev = _table(np.random.default_rng(0), 1000, 10_000)
    got = _context(ev, []).in_steps(columns=("name", "dur_ns"))
    assert got.empty and list(got.columns) == ["name", "dur_ns"]


def test_heaviest_events_by_total_time():
    names = pd.Categorical.from_codes([0, 1, 1, 2, -1, 3], categories=["a", "b", "c", "d", "e"])
    df = pd.DataFrame({"name": names, "dur_ns": [5_000_000, 2_000_000, 2_000_000, 1, 9e9, 0]})
    top = heaviest_events(df, n=10)
    # Missing names are no event's name; a name with no rows ("e") is not listed.
    assert top == [{"name": "a", "total_ms": 5.0, "count": 1},
                   {"name": "b", "total_ms": 4.0, "count": 2},
                   {"name": "c", "total_ms": 0.0, "count": 1},
                   {"name": "d", "total_ms": 0.0, "count": 1}]
    assert heaviest_events(df, n=2) == top[:2]
    # Plain string names (a derived column) give the same answer.
    plain = df.dropna().assign(name=lambda d: d["name"].astype(str))
    assert heaviest_events(plain, n=10) == top


def test_heaviest_events_of_some_rows_with_names_folded():
    names = pd.Categorical(["Interleave[1]::TFRecord", "Interleave[2]::TFRecord", "Root",
                            "op:Parse", "Interleave[3]::TFRecord"])
    df = pd.DataFrame({"name": names, "dur_ns": [1_000_000, 2_000_000, 50_000_000, 5_000_000,
                                                 1_000_000]})
    leaves = np.array([True, True, False, True, True])
    top = heaviest_events(df, where=leaves, fold=lambda n: n.replace("[1]", "").replace(
        "[2]", "").replace("[3]", ""))
    assert top == [{"name": "op:Parse", "total_ms": 5.0, "count": 1},
                   {"name": "Interleave::TFRecord", "total_ms": 4.0, "count": 3}]
    # Plain string names take the same path.
    assert heaviest_events(df.assign(name=df["name"].astype(str)), where=leaves, fold=lambda n: n
                           .replace("[1]", "").replace("[2]", "").replace("[3]", "")) == top


def test_heaviest_events_never_lets_absent_names_take_a_place():
    # A corrupt trace can carry negative durations: a name with rows still outranks names
    # without any.
    names = pd.Categorical(["a", "a"], categories=["a", "b", "c"])
    df = pd.DataFrame({"name": names, "dur_ns": [-5_000_000, 1_000_000]})
    assert heaviest_events(df, n=1) == [{"name": "a", "total_ms": -4.0, "count": 2}]
