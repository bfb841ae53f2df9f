"""An incremental server-sent-events decoder (the WHATWG event-stream format), pure.

Bytes arrive in any split; events come out as soon as their blank line does. Each chunk
is decoded once (an incremental UTF-8 decoder keeps a character split across chunks) and
only the new text is scanned for line ends, so the work is linear in the bytes read.
The caller bounds how long one line may grow (the HTTP layer caps the bytes it reads).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_EOL = re.compile(r"\r\n|\r|\n")
_BOM = "\ufeff"


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event."""

    event: str  # the ``event:`` field, "message" when none was given
    data: str  # the ``data:`` lines joined by "\n"


class SSEDecoder:
    """Feed bytes, get events. ``close`` at EOF flushes a last event whose blank line never came."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._parts: list[str] = []  # the current, unfinished line, in pieces (never re-joined per chunk)
        self._skip_lf = False  # the last chunk ended in "\r": a "\n" starting the next one ends nothing
        self._started = False  # a BOM is stripped at the very start only
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by these bytes."""
        return self._text(self._decoder.decode(chunk))

    def close(self) -> list[SSEEvent]:
        """At EOF. An unterminated last line is a fragment of a cut stream and is dropped; a
        complete event that only lacks its blank line is dispatched (servers differ)."""
        self._decoder.decode(b"", final=True)
        self._parts = []
        events: list[SSEEvent] = []
        self._dispatch(events)
        return events

    def _text(self, text: str) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        if not text:
            return events
        if not self._started:
            self._started = True
            text = text[1:] if text.startswith(_BOM) else text
        start = 1 if self._skip_lf and text.startswith("\n") else 0
        for match in _EOL.finditer(text, start):
            self._parts.append(text[start:match.start()])
            line = "".join(self._parts)
            self._parts = []
            self._line(line, events)
            start = match.end()
        if start < len(text):
            self._parts.append(text[start:])
        self._skip_lf = text.endswith("\r")
        return events

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line.startswith(":"):  # a comment: ": keep-alive", ": OPENROUTER PROCESSING"
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        # "id", "retry" and unknown fields carry nothing a one-shot reader needs.

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._data:
            events.append(SSEEvent(self._event or "message", "\n".join(self._data)))
        self._event = ""
        self._data = []
