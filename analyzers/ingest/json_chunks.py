"""A Chrome trace's JSON text parsed a chunk of events at a time, as it is read.

`json.loads` of a whole trace holds its text and every event as a dict at once: ~800 bytes an
event, 1.3 GB for a 344 MB PyTorch trace (docs/trace-signals.md, "Reading Chrome traces"). Here
the text comes in pieces (decompressed as it is read) and the `traceEvents` array is cut into
runs of about CHUNK_CHARS characters, each parsed by the standard library's parser (or the
caller's decoder: msgspec's, into typed records): the reader turns one run into columns before
the next is made, and the text before it is dropped.

A run ends where two of the array's elements meet (`}`, a comma, `{`). A string or a nested
array can hold that text too, but a run cut there does not parse: within a string, its quotes do
not pair; within a nested array, its brackets do not close. So a run that parses was cut between
two elements, and a cut that fails is moved on to the next match (a few times; then a run is
read one element at a time, the slower way that needs no cut). The last run ends at the first
`}]` after which its elements parse: the array's own `]` (what follows the array, such as
Kineto's log lines, may hold any number of `]`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

CHUNK_CHARS = 1 << 20
# Failed cuts tried before the rest is read element by element.
_TRIES = 3
# Elements per run when reading element by element.
_ITEMS = 50_000
_WS = re.compile(r"[ \t\n\r]*")
_MEET = re.compile(r"\}[ \t\n\r]*,[ \t\n\r]*\{")
_CLOSE = re.compile(r"\}[ \t\n\r]*\]")
_DECODER = json.JSONDecoder()
# A run of elements (as the decoder gives them), the position after it, and whether that is
# after the array's `]`.
_Run = tuple[Any, int, bool]


class NotATrace(ValueError):
    """Readable JSON that is not a trace (a config or hyperparameter file beside the traces)."""


class TraceJsonError(ValueError):
    """The text is not JSON (corrupt or cut short); the message says where, in the whole text."""


class TraceText:
    """The JSON text of a Chrome trace, given whole or in pieces: a `{"traceEvents": [...], ...}`
    object or a bare array of events. `chunks()` yields the events in runs; the object's other
    members are in `members` once it is done. Raises TraceJsonError on text that is not JSON,
    NotATrace on JSON that is not a trace.

    A run is a list of the elements as `json.loads` gives them, or what `decode` makes of the
    text of a JSON array (`[...]`) of them (None where that text is not JSON); `convert` makes
    the same of a list of elements already decoded (the runs read element by element)."""

    def __init__(self, pieces: str | Iterable[str], chunk_chars: int | None = None,
                 decode: Callable[[str], Any] | None = None,
                 convert: Callable[[list], Any] | None = None) -> None:
        self._pieces = iter([pieces] if isinstance(pieces, str) else pieces)
        self.chunk_chars = chunk_chars or CHUNK_CHARS
        self._decode = decode or _json_elements
        self._convert = convert or _same
        self.members: dict[str, object] = {}
        # What is read and not yet parsed; positions below index it.
        self.buf = ""
        self._eof = False
        # The text dropped before buf, for error positions.
        self._dropped = self._dropped_lines = self._dropped_col = 0

    def chunks(self) -> Iterator[Any]:
        try:
            pos = self._skip(0)
            if self._char(pos) == "[":
                pos = yield from self._bare_array(pos)
            else:
                pos = yield from self._object(pos)
            pos = self._skip(pos)
            if pos != len(self.buf):
                raise json.JSONDecodeError("Extra data", self.buf, pos)
        except json.JSONDecodeError as e:
            line = self._dropped_lines + e.lineno
            column = e.colno + (self._dropped_col if e.lineno == 1 else 0)
            raise TraceJsonError(f"{e.msg}: line {line} column {column} "
                                 f"(char {self._dropped + e.pos})") from None

    def _bare_array(self, pos: int) -> Generator[Any, None, int]:
        first = self._skip(pos + 1)
        if self._char(first) != "]":
            # A bare array is a trace when its first element is an event (parsed twice: once
            # here, once in its run).
            event, _ = self._value(first)
            if not (isinstance(event, dict) and "ph" in event):
                raise NotATrace
        return (yield from self._array(pos))

    def _object(self, pos: int) -> Generator[Any, None, int]:
        if self._char(pos) != "{":
            self._value(pos)  # raises on anything but a JSON scalar
            raise NotATrace
        found = False
        pos = self._skip(pos + 1)
        if self._char(pos) == "}":
            raise NotATrace
        while True:
            if self._char(pos) != '"':
                raise json.JSONDecodeError(
                    "Expecting property name enclosed in double quotes", self.buf, pos)
            key, pos = self._value(pos)
            pos = self._skip(pos)
            if self._char(pos) != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", self.buf, pos)
            pos = self._skip(pos + 1)
            if key == "traceEvents" and not found and self._char(pos) == "[":
                found = True
                pos = yield from self._array(pos)
            else:
                self.members[key], pos = self._value(pos)
            pos = self._skip(pos)
            if self._char(pos) == "}":
                break
            if self._char(pos) != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", self.buf, pos)
            pos = self._skip(pos + 1)
        if not found:
            raise NotATrace
        return pos + 1

    def _array(self, start: int) -> Generator[Any, None, int]:
        """Yield the elements of the array at `start` in runs; return the index after it."""
        pos = self._skip(start + 1)
        while True:
            # Two runs' worth of text ahead, or all that is left.
            while len(self.buf) - pos <= 2 * self.chunk_chars and self._more():
                pass
            last = len(self.buf) - pos <= 2 * self.chunk_chars
            got = self._last(pos) if last else self._middle(pos)
            run, pos, closed = got or self._one_by_one(pos)
            if closed:
                if run:
                    yield run
                return pos
            pos = self._drop(pos)
            yield run

    def _middle(self, pos: int) -> _Run | None:
        """The elements from `pos` to a cut about chunk_chars on."""
        start, tries = pos + self.chunk_chars, 0
        while tries < _TRIES:
            meet = _MEET.search(self.buf, start)
            if meet is None:
                if self._more():
                    continue
                # No two elements meet past a run from here: the array ends within reach (what
                # follows it is long), or its elements are not objects.
                return self._last(pos) if tries == 0 else None
            run = self._elements(pos, meet.start() + 1)
            if run is not None:
                return run, meet.end() - 1, False
            start, tries = meet.end(), tries + 1
        return None

    def _last(self, pos: int) -> _Run | None:
        """The elements from `pos` to the array's `]`, all the text being read. The first `}]`
        after which the elements parse is that `]`: after an element of the array, only its
        `]` or a comma may come."""
        if self._char(pos) == "]":
            return self._convert([]), pos + 1, True
        start = pos
        for _ in range(_TRIES):
            close = _CLOSE.search(self.buf, start)
            if close is None:
                return None
            run = self._elements(pos, close.start() + 1)
            if run is not None:
                return run, close.end(), True
            start = close.end()
        return None

    def _one_by_one(self, pos: int) -> _Run:
        """Up to _ITEMS elements from `pos`, parsed one at a time (where no cut parsed)."""
        run: list = []
        pos = self._skip(pos)
        if self._char(pos) == "]":
            return self._convert(run), pos + 1, True
        while len(run) < _ITEMS:
            item, pos = self._value(pos)
            run.append(item)
            pos = self._skip(pos)
            if self._char(pos) == "]":
                return self._convert(run), pos + 1, True
            if self._char(pos) != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", self.buf, pos)
            pos = self._skip(pos + 1)
        return self._convert(run), pos, False

    def _elements(self, start: int, end: int) -> Any:
        """The decoded elements `buf[start:end]` holds, or None when it is not a run of them."""
        return self._decode("[" + self.buf[start:end] + "]")

    def _more(self) -> bool:
        """Read the next piece of text into buf; False when there is none."""
        if not self._eof:
            for piece in self._pieces:
                if piece:
                    self.buf += piece
                    return True
            self._eof = True
        return False

    def _drop(self, pos: int) -> int:
        """Forget the text before `pos`; the position it had is now 0."""
        newline = self.buf.rfind("\n", 0, pos)
        self._dropped_col = pos - newline - 1 if newline >= 0 else self._dropped_col + pos
        self._dropped_lines += self.buf.count("\n", 0, pos)
        self._dropped += pos
        self.buf = self.buf[pos:]
        return 0

    def _char(self, pos: int) -> str:
        """The character at `pos`, reading on to it; "" past the end of the text."""
        while pos >= len(self.buf):
            if not self._more():
                return ""
        return self.buf[pos]

    def _skip(self, pos: int) -> int:
        """The first position from `pos` that is not whitespace (or the end of the text)."""
        while True:
            pos = _WS.match(self.buf, pos).end()
            if pos < len(self.buf) or not self._more():
                return pos

    def _value(self, pos: int) -> tuple[object, int]:
        """The JSON value at `pos`, reading on until it is whole: it must end before the text
        read so far does (a number at its end may go on in the next piece)."""
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, pos)
                if end < len(self.buf) or not self._more():
                    return value, end
            except json.JSONDecodeError:
                if not self._more():
                    raise


def _json_elements(text: str) -> list | None:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _same(elements: list) -> list:
    return elements
