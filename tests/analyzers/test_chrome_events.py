"""Chrome trace events decoded into typed records (analyzers/ingest/chrome_events.py): the event
table is the one Python's parser gives, on real traces and on values the records do not allow."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import msgspec
import pandas as pd
import pytest

from analyzers.ingest import chrome_events, json_chunks
from analyzers.ingest.chrome_events import RunDecoder
from analyzers.ingest.chrome_trace import read_chrome_trace

DATA = Path(__file__).parent / "data"


class _NoTypedDecoder:
    """Stands in for msgspec's decoder: every run goes to the standard library's parser."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def decode(self, text: str):
        raise msgspec.DecodeError("not used")


def _python_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chrome_events.msgspec.json, "Decoder", _NoTypedDecoder)


@pytest.mark.parametrize("name", [
    "pytorch-gpu/ddp_cnn_rank0.json.gz", "pytorch-cpu-gloo/straggler_rank1.json.gz",
    "kineto-2021/resnet50_num_workers_4.json.gz",
    "tf2.15/profiler_hook_per_example/timeline-20.json.gz"])
def test_typed_records_give_the_table_python_parsing_gives(name, monkeypatch):
    path = DATA / name
    typed, t0 = read_chrome_trace(path, "h")
    _python_parse(monkeypatch)
    python, t0_python = read_chrome_trace(path, "h")
    pd.testing.assert_frame_equal(typed, python)
    assert t0 == t0_python and len(typed) > 100


# Values of every kind a writer may put where the reader looks; each event alone in a run
# (runs of one element), so runs the records take and runs they do not are mixed.
ODD_EVENTS = [
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "worker"}},
    {"ph": "X", "name": "plain", "pid": 1, "tid": 2, "ts": 10, "dur": 2,
     "args": {"correlation": 7, "External id": 99, "Input Dims": [[1, 2]]}},
    {"ph": "X", "name": "float_id", "pid": 1, "tid": 2, "ts": 11.5, "dur": 1,
     "args": {"correlation": 8.9, "tf_op": 5}},
    {"ph": "X", "name": "digits", "pid": 1, "tid": 2, "ts": 12, "dur": 1,
     "args": {"correlation": "12", "tf_op": None}},
    {"ph": "X", "name": "not_a_number", "pid": 1, "tid": 2, "ts": 13, "dur": 1,
     "args": {"correlation": "x1", "step_num": -1}},
    {"ph": "X", "name": "null_args", "pid": 1, "tid": 2, "ts": 14, "dur": 1, "args": None},
    {"ph": "X", "name": "list_args", "pid": 1, "tid": 2, "ts": 15, "dur": 1, "args": [1, 2]},
    7,
    {"ph": "X", "name": "short", "pid": 1, "tid": 2, "ts": 16, "dur": 1,
     "args": {"long_name": "scope/op:Short", "group_id": 3}},
    {"ph": "X", "name": "null_long_name", "pid": 1, "tid": 2, "ts": 17, "dur": 1,
     "args": {"long_name": None}},
    {"ph": "X", "name": "nan_dur", "pid": 1, "tid": 2, "ts": 18, "dur": math.nan},
    {"ph": "X", "name": "huge_dur", "pid": 1, "tid": 2, "ts": 19, "dur": 1e400},
    {"ph": "X", "name": "lone \ud800 surrogate", "pid": 1, "tid": 2, "ts": 20, "dur": 1},
    {"ph": "X", "name": "kernel", "cat": "kernel", "pid": 0, "tid": 7, "ts": 21, "dur": 1,
     "args": {"device": 3, "correlation": 7}},
    {"ph": "B", "name": "span", "pid": 1, "tid": 2, "ts": 22, "args": {"step_num": 4}},
    {"ph": "E", "pid": 1, "tid": 2, "ts": 25, "args": {"group_id": 9}},
]


@pytest.fixture
def odd_trace(tmp_path) -> Path:
    path = tmp_path / "odd.trace.json.gz"
    # json.dumps writes NaN and Infinity, which Python's parser reads and msgspec does not.
    text = json.dumps({"traceEvents": ODD_EVENTS}).replace("1e400", "Infinity")
    path.write_bytes(gzip.compress(text.encode("utf-8", "surrogatepass")))
    return path


@pytest.mark.parametrize("chunk_chars", [1, None])
def test_values_the_records_do_not_take_read_as_python_reads_them(odd_trace, monkeypatch,
                                                                   chunk_chars):
    monkeypatch.setattr(json_chunks, "CHUNK_CHARS", chunk_chars or json_chunks.CHUNK_CHARS)
    events, _ = read_chrome_trace(odd_trace, "h")
    rows = events.set_index("name")

    def stat(name: str, col: str):
        return rows.loc[name, col]

    assert stat("plain", "correlation_id") == 7
    assert stat("float_id", "correlation_id") == 8  # whole part, as int() takes it
    assert stat("float_id", "tf_op") == "5"
    assert stat("digits", "correlation_id") == 12
    assert pd.isna(stat("digits", "tf_op"))  # a null is no value, not the text "None"
    assert stat("not_a_number", "correlation_id") == -1
    assert stat("not_a_number", "step_num") == -1
    assert "scope/op:Short" in rows.index and stat("scope/op:Short", "group_id") == 3
    assert "null_long_name" in rows.index
    for name in ("null_args", "list_args", "nan_dur", "huge_dur", "lone \ud800 surrogate"):
        assert name in rows.index, name
    assert stat("nan_dur", "dur_ns") == 0 and stat("huge_dur", "dur_ns") == 0
    assert stat("plain", "line") == "worker" and stat("plain", "plane") == "/host:CPU"
    assert stat("kernel", "plane") == "/device:GPU:3" and stat("kernel", "correlation_id") == 7
    # A B/E pair is one event, with the opening's and the closing's args.
    assert stat("span", "dur_ns") == 3000
    assert stat("span", "step_num") == 4 and stat("span", "group_id") == 9
    assert len(events) == len([e for e in ODD_EVENTS if isinstance(e, dict)
                               and e["ph"] == "X"]) + 1

    _python_parse(monkeypatch)
    python, _ = read_chrome_trace(odd_trace, "h")
    pd.testing.assert_frame_equal(events, python)


def test_runs_that_are_not_json_are_refused_by_both_parsers():
    decoder = RunDecoder(["correlation"])
    assert decoder.decode('[{"ph": "X", "name": "cut inside a str') is None
    assert decoder.decode('[{"ph": "X"}, {"ph": "X", "args": {"list": [1, 2}}]') is None
    got = decoder.decode('[{"ph": "X", "args": {"correlation": 4, "other": {"a": [1]}}}]')
    assert [decoder.column([e.args for e in got], "correlation")] == [[4]]
    assert decoder.args_dict(got[0].args) == {"correlation": 4}


def test_one_stat_under_several_keys_is_one_value_per_event(tmp_path):
    """`Bytes`, `bytes` and `num_bytes` all fill the bytes column: events carrying one of them,
    in any mix within a run, and one carrying two, give one row each, in row order."""
    events = [{"ph": "X", "name": f"copy{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1,
               "args": {key: 100 + i}} for i, key in enumerate(["Bytes", "bytes", "num_bytes",
                                                                   "bytes", "Bytes"])]
    events.append({"ph": "X", "name": "both", "pid": 1, "tid": 1, "ts": 9, "dur": 1,
                   "args": {"num_bytes": 1, "Bytes": 2}})
    path = tmp_path / "t.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    got, _ = read_chrome_trace(path, "h")
    rows = got.set_index("name")["bytes"]
    assert [rows[f"copy{i}"] for i in range(5)] == [100, 101, 102, 103, 104]
    # Both keys on one event: the later in the alias table (`Bytes`, one of PyTorch's).
    assert rows["both"] == 2
