"""The chunked JSON parser of Chrome traces (analyzers/ingest/json_chunks.py): whatever the run
length and however the text is split into pieces, it gives what json.loads gives."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from analyzers.ingest import chrome_trace, json_chunks
from analyzers.ingest.chrome_trace import read_chrome_trace
from analyzers.ingest.json_chunks import NotATrace, TraceJsonError, TraceText
from recadvisor.cli import main

DATA = Path(__file__).parent / "data"

# Events whose text holds what a cut looks for (`}, {`) inside strings and nested arrays, and
# members before and after the array with `]` in them.
TRICKY_EVENTS = [
    {"ph": "X", "name": "a}, {b", "ts": 1, "dur": 2, "args": {"s": "x\"}, {\"y"}},
    {"ph": "X", "name": "nested", "ts": 3, "dur": 1,
     "args": {"list": [{"x": 1}, {"y": [{"z": "]"}, {}]}], "end": "]"}},
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU ü"}},
    *({"ph": "X", "name": f"op{i}", "ts": 10 + i, "dur": 0.5, "pid": 1, "tid": i % 3,
       "args": {"Input Dims": [[1, i], []], "text": "}, {" * (i % 4)}} for i in range(40)),
    {"ph": "X", "name": "last", "ts": 1e15, "dur": 1},
]
TRICKY = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "]}"}],
          "traceEvents": TRICKY_EVENTS,
          "traceName": "/tmp/x]", "after": [[1, 2], {"k": "]"}], "base": 1700000000000000123}


def _read(text: str, chunk_chars: int | None = None, piece: int | None = None):
    pieces = text if piece is None else [text[i:i + piece] for i in range(0, len(text), piece)]
    doc = TraceText(pieces, chunk_chars)
    runs = list(doc.chunks())
    return runs, doc.members


@pytest.mark.parametrize("dump", [
    dict(), dict(indent=2), dict(separators=(",", ":")), dict(ensure_ascii=False)])
@pytest.mark.parametrize("chunk_chars", [1, 7, 64, 300, None])
@pytest.mark.parametrize("piece", [1, 5, 97, None])
def test_runs_are_what_json_loads_gives(dump, chunk_chars, piece):
    text = json.dumps(TRICKY, **dump)
    runs, members = _read(text, chunk_chars, piece)
    assert [e for run in runs for e in run] == TRICKY_EVENTS
    assert members == {k: v for k, v in TRICKY.items() if k != "traceEvents"}


@pytest.mark.parametrize("piece", [3, 1000, None])
def test_runs_are_about_chunk_chars_long(piece):
    events = [{"ph": "X", "name": f"op{i}", "ts": i, "dur": 1, "args": {"n": [i, {}]}}
              for i in range(500)]
    text = json.dumps({"traceEvents": events}, indent=1)
    runs, _ = _read(text, 1000, piece)
    assert [e for run in runs for e in run] == events
    lengths = [len(json.dumps(run, indent=1)) for run in runs]
    assert len(runs) > 10 and all(900 < n < 3500 for n in lengths[:-1]), lengths


def test_cuts_inside_strings_are_not_taken(monkeypatch):
    # Every place a cut could go lies inside a string but those between events: each run still
    # holds whole events, read one by one where the first tries all failed.
    monkeypatch.setattr(json_chunks, "_ITEMS", 3)
    events = [{"ph": "X", "name": "}, {" * 20, "ts": i} for i in range(30)]
    runs, _ = _read(json.dumps({"traceEvents": events}), chunk_chars=10)
    assert [e for run in runs for e in run] == events
    assert len(runs) > 1


def test_element_by_element_when_no_cut_parses(monkeypatch):
    monkeypatch.setattr(json_chunks, "_TRIES", 0)
    monkeypatch.setattr(json_chunks, "_ITEMS", 4)
    runs, members = _read(json.dumps(TRICKY), chunk_chars=50, piece=13)
    assert [e for run in runs for e in run] == TRICKY_EVENTS
    assert members["base"] == TRICKY["base"]
    assert max(len(run) for run in runs) == 4


@pytest.mark.parametrize("piece", [7, None])
def test_kineto_trailer_is_not_read_element_by_element(monkeypatch, piece):
    # Kineto writes its log lines after the array, each with a `]` ("...cpp:976] Enabling GPU
    # tracing"): the array's end is found by the `}]` that closes it, not the text's last `]`.
    def slow(*_):
        raise AssertionError("read element by element")

    monkeypatch.setattr(TraceText, "_one_by_one", slow)
    events = [{"ph": "X", "name": f"op{i}", "ts": i, "args": {"Input Dims": [[1, 2], []]}}
              for i in range(200)]
    info = [f"INFO:2024-05-22 CuptiActivityProfiler.cpp:{i}] line {i}" for i in range(30)]
    doc = {"traceEvents": events, "INFO": info, "traceName": "/tmp/t.json",
           "baseTimeNanoseconds": 1711964646000000000}
    runs, members = _read(json.dumps(doc, indent=1), 500, piece)
    assert [e for run in runs for e in run] == events and members["INFO"] == info


def test_bare_array_and_empty_arrays():
    assert [e for run in _read(json.dumps(TRICKY_EVENTS), 64, 10)[0] for e in run] == \
        TRICKY_EVENTS
    assert _read("[]")[0] == []
    assert _read(' { "traceEvents" : [ ] , "x": [1] } ', 1, 1) == ([], {"x": [1]})


def test_a_number_split_between_pieces_is_read_whole():
    text = json.dumps({"traceEvents": [], "baseTimeNanoseconds": 1700000000000000123})
    for piece in range(1, 12):
        assert _read(text, piece=piece)[1]["baseTimeNanoseconds"] == 1700000000000000123


@pytest.mark.parametrize("text", [
    '{"a": 1}', "{}", '{"traceEvents": {"a": []}}', "5", '"traceEvents"', "[1, 2]",
    '[{"name": "no ph"}]', '{"traceEvents": 3, "x": []}'])
def test_json_that_is_not_a_trace(text):
    with pytest.raises(NotATrace):
        _read(text, 1, 2)


@pytest.mark.parametrize("cut", [1, 15, 200, 777, -300, -40, -2])
def test_cut_short_text_is_an_error_at_json_loads_position(cut):
    text = json.dumps(TRICKY, indent=1)[:cut]
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    for chunk_chars, piece in ((None, None), (30, 7)):
        with pytest.raises(TraceJsonError) as got:
            _read(text, chunk_chars, piece)
        # Where the text stops being a trace, counted in the whole text, whatever was dropped.
        assert f"line {expected.value.lineno} " in str(got.value)
        assert f"(char {expected.value.pos})" in str(got.value)


@pytest.mark.parametrize("text", ["", "   ", '{"traceEvents": []} x', '{"traceEvents": [1,]}',
                                  '{"traceEvents": [] "a": 1}', '{"traceEvents" [] }',
                                  "{'traceEvents': []}"])
def test_text_that_is_not_json(text):
    with pytest.raises(TraceJsonError):
        _read(text, 1, 3)


@pytest.mark.parametrize("name", [
    "pytorch-gpu/ddp_cnn_rank0.json.gz", "pytorch-cpu-gloo/straggler_rank1.json.gz",
    "kineto-2021/resnet50_num_workers_0.json.gz",
    "tf2.15/profiler_hook_per_example/timeline-20.json.gz"])
def test_traces_read_in_small_runs_give_the_whole_parse_table(name, monkeypatch):
    path = DATA / name
    monkeypatch.setattr(json_chunks, "CHUNK_CHARS", 1 << 40)
    monkeypatch.setattr(chrome_trace, "_PIECE_BYTES", 64 << 20)  # more than any of them
    whole, t0 = read_chrome_trace(path, "h")
    monkeypatch.setattr(json_chunks, "CHUNK_CHARS", 4096)
    monkeypatch.setattr(chrome_trace, "_PIECE_BYTES", 1000)
    events, t0_runs = read_chrome_trace(path, "h")
    pd.testing.assert_frame_equal(whole, events)
    assert t0 == t0_runs and len(events) > 100


def test_ids_that_are_lists_are_read_not_crashed_on(tmp_path):
    path = tmp_path / "odd.trace.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": [1], "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "thread_name", "pid": [1], "tid": {"t": 2}, "args": {"name": "io"}},
        {"ph": "X", "name": "op", "pid": [1], "tid": {"t": 2}, "ts": 1, "dur": 2},
        {"ph": "X", "name": "kernel", "cat": "kernel", "pid": 0, "tid": 7, "ts": 2, "dur": 1,
         "args": {"device": [3]}}]}))
    events, _ = read_chrome_trace(path, "h")
    rows = events.set_index("name")
    assert rows.loc["op", "plane"] == "/host:CPU" and rows.loc["op", "line"] == "io"
    assert rows.loc["kernel", "plane"] == "/device:GPU:[3]"


def _gzip_trace() -> bytes:
    events = [{"ph": "X", "name": f"op{i}", "ts": i, "dur": 1, "pid": 1, "tid": 1}
              for i in range(5000)]
    return gzip.compress(json.dumps({"traceEvents": events}).encode())


@pytest.mark.parametrize("content", [
    _gzip_trace()[:3000],  # the gzip stream cut short
    _gzip_trace()[:40] + bytes(b ^ 0x5A for b in _gzip_trace()[40:400]) + _gzip_trace()[400:],
    gzip.compress(gzip.decompress(_gzip_trace())[:-5000]),  # the JSON cut short
    b'{"traceEvents": [{"ph": "X", "name": "\xff\xfe"}]}',  # not UTF-8
])
def test_unreadable_json_trace_is_one_line_exit_2(tmp_path, capsys, content):
    run = tmp_path / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    (run / "vm.trace.json.gz").write_bytes(content)
    assert main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a readable JSON trace" in err and len(err.splitlines()) == 1, err
    assert "internal error" not in err
