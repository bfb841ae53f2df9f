"""Reading a judge's reply and reducing a panel to a task score (spec §4).

A reply with no usable total makes that judge *unavailable* for the task — recorded with
the raw text and a reason — and is never counted as 0: "unscored" is not "wrong".

Which object is the grade: the judge is told to reply with one JSON object, but its reply
quotes the answer it grades, and the answer is the contestant's text — it can plant a
``{"total": 100}`` for the judge to echo. Taking the first or the last object lets the
plant win in one order or the other, so neither is taken: the *grades* of a reply are its
objects with a numeric top-level ``total`` that are not inside another grade, and when
they disagree the reply is ambiguous and the judge unavailable (``ambiguous_total``, kept
with its text), never a guess. A grade repeated (fenced and in prose) agrees and is read.

A reply is hostile input: only its last ``MAX_REPLY_CHARS`` characters are examined, in
time linear in their length, and no reply makes the parser raise. Every ``{`` that starts a
JSON object is found (inside code fences, after prose, nested) by one memoised scan: a JSON
value starting at a given position ends at the same place whatever surrounds it, so each
value is parsed once however many objects contain it or however often a scan passes it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from wildtrace.core import jsonsafe

#: Only the tail of a longer reply is read: a grade comes last, and the bound keeps a
#: runaway reply (megabytes of braces) from costing more than a normal one.
MAX_REPLY_CHARS = 200_000

#: Objects nested deeper than this are not read as grades (none is; Python's own parser
#: would overflow its stack on them).
MAX_DEPTH = jsonsafe.MAX_DEPTH

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")  # ASCII digits, as json's C scanner
_CANDIDATE = re.compile(r"\{[ \t\n\r]*[\"}]")  # an object starts with a key or is empty
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")  # what json.loads accepts
_FAIL = -1


class ReplyReason(StrEnum):
    """Why a judge's reply (it came back) gave no score: a judgment row's ``reason``."""

    EMPTY_REPLY = "empty_reply"  # nothing but whitespace
    NO_NUMERIC_TOTAL = "no_numeric_total"  # no JSON object with a numeric top-level ``total``
    AMBIGUOUS_TOTAL = "ambiguous_total"  # grades with different totals (a plant the judge quoted)


@dataclass(frozen=True)
class JudgeVerdict:
    """What one judge reply yields: a score in [0, 1], or why there is none."""

    total: float | None  #: the ``total`` read, as a float
    score: float | None  #: ``min(total / 100, 1)`` floored at 0; None when unavailable
    parsed: dict | None  #: the JSON object the total came from
    reason: ReplyReason | None  #: None when a score was read

    @property
    def available(self) -> bool:
        """True when this judge contributes to the task mean."""
        return self.score is not None


@dataclass
class _Found:
    """One JSON object the scan found: where it ends, how deep it goes, its ``total`` token."""

    end: int
    depth: int
    total: tuple[int, int] | None  # span of the last top-level "total" member's value


class _Scanner:
    """Memoised, iterative JSON recogniser over one text (see the module docstring)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.values: dict[int, tuple[int, int]] = {}  # start → (end or _FAIL, depth)
        self.objects: dict[int, _Found] = {}  # start of each object found
        self.strings: dict[int, tuple[int, bool]] = {}  # start → (end or _FAIL, is "total")

    def ws(self, pos: int) -> int:
        match = _WS.match(self.text, pos)  # white space may be empty: it always matches
        return match.end() if match else pos

    def string(self, pos: int) -> tuple[int, bool]:
        """End of the JSON string starting at ``pos`` (a quote) and whether it reads "total"."""
        if pos in self.strings:
            return self.strings[pos]
        try:
            # json.decoder.scanstring is public (C or Python) but typeshed leaves it out
            value, end = json.decoder.scanstring(self.text, pos + 1, True)  # type: ignore[attr-defined]
            result = (end, value == "total")
        except ValueError:
            result = (_FAIL, False)
        self.strings[pos] = result
        return result

    def scalar(self, pos: int) -> int:
        """End of the string, number or literal at ``pos``; _FAIL if none starts there."""
        text = self.text
        if pos >= len(text):
            return _FAIL
        if text[pos] == '"':
            return self.string(pos)[0]
        match = _NUMBER.match(text, pos)
        if match:
            return match.end()
        for literal in _LITERALS:
            if text.startswith(literal, pos):
                return pos + len(literal)
        return _FAIL

    def member_key(self, pos: int) -> tuple[int, bool]:
        """After ``{`` or ``,`` in an object: the key, the colon; → (value start or _FAIL, is total)."""
        if pos >= len(self.text) or self.text[pos] != '"':
            return _FAIL, False
        end, is_total = self.string(pos)
        if end == _FAIL:
            return _FAIL, False
        colon = self.ws(end)
        if colon >= len(self.text) or self.text[colon] != ":":
            return _FAIL, False
        return self.ws(colon + 1), is_total

    def value(self, start: int) -> int:
        """End of the JSON value at ``start`` (_FAIL if none), with an explicit stack, no recursion."""
        text, n = self.text, len(self.text)
        # A frame: [start, is_object, depth, total_span, current member is "total"]
        stack: list[list[Any]] = []
        pos = start
        while True:
            # Descend: find (end, depth) of the value at pos, opening containers as needed.
            if pos in self.values:
                end, depth = self.values[pos]
            elif pos < n and text[pos] in "{[":
                is_object = text[pos] == "{"
                inner = self.ws(pos + 1)
                if inner < n and text[inner] == ("}" if is_object else "]"):
                    end, depth = inner + 1, 1
                    self._finish(pos, end, depth, None, is_object)
                else:
                    frame: list[Any] = [pos, is_object, 1, None, False]
                    if is_object:
                        inner, frame[4] = self.member_key(inner)
                    if inner != _FAIL:
                        stack.append(frame)
                        pos = inner
                        continue
                    end, depth = _FAIL, 0
                    self.values[pos] = (end, depth)
            else:
                end, depth = self.scalar(pos), 0
                self.values[pos] = (end, depth)
            # Ascend: hand the value to the enclosing containers until one needs another value.
            while True:
                if not stack:
                    return end
                frame = stack[-1]
                if end == _FAIL:  # a JSON value's end does not depend on context: all fail
                    for failed in stack:
                        self.values[failed[0]] = (_FAIL, 0)
                    return _FAIL
                frame[2] = max(frame[2], depth + 1)
                if frame[4]:
                    frame[3] = (pos, end)  # a later duplicate "total" wins, as in json.loads
                after = self.ws(end)
                char = text[after] if after < n else ""
                if char == ",":
                    nxt = self.ws(after + 1)
                    if frame[1]:
                        nxt, frame[4] = self.member_key(nxt)
                    if nxt == _FAIL:
                        end = _FAIL
                        continue
                    pos = nxt
                    break
                if char == ("}" if frame[1] else "]"):
                    stack.pop()
                    pos, end, depth = frame[0], after + 1, frame[2]
                    self._finish(pos, end, depth, frame[3], frame[1])
                    continue
                end = _FAIL

    def _finish(self, start: int, end: int, depth: int, total: tuple[int, int] | None, is_object: bool) -> None:
        self.values[start] = (end, depth)
        if is_object:
            self.objects[start] = _Found(end, depth, total)


def _finite_total(text: str, span: tuple[int, int] | None) -> float | None:
    """The total token as a finite float (numbers only: not strings, booleans, NaN, 1e400)."""
    if span is None:
        return None
    token = text[span[0]:span[1]]
    if not _NUMBER.fullmatch(token):
        return None
    value = float(token)  # linear in the digits; never raises on a JSON number
    return value if math.isfinite(value) else None


def graded_objects(text: str) -> list[tuple[int, int, float]]:
    """Every JSON object in ``text`` with a finite numeric top-level ``total``, as (start, end, total).

    Objects nested deeper than MAX_DEPTH are left out. Linear in ``len(text)``.
    """
    scanner = _Scanner(text)
    for match in _CANDIDATE.finditer(text):
        scanner.value(match.start())
    graded = []
    for start, found in scanner.objects.items():
        if found.end != _FAIL and found.depth <= MAX_DEPTH:
            total = _finite_total(text, found.total)
            if total is not None:
                graded.append((start, found.end, total))
    return graded


def score_from_total(total: float) -> float:
    """``min(total / 100, 1.0)``, and never below 0."""
    return max(0.0, min(total / 100.0, 1.0))


def _unavailable(reason: ReplyReason) -> JudgeVerdict:
    return JudgeVerdict(total=None, score=None, parsed=None, reason=reason)


def outermost(graded: list[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    """The graded objects not inside another graded object, in order (a nested total is part of its grade).

    Objects found in one text nest or are disjoint, so one sweep by start suffices.
    """
    out: list[tuple[int, int, float]] = []
    for start, end, total in sorted(graded, key=lambda g: (g[0], -g[1])):
        if out and start < out[-1][1]:
            continue  # inside the previous grade
        out.append((start, end, total))
    return out


def parse_judge_reply(text: str | None) -> JudgeVerdict:
    """Read the reply's grade: the one total its grades agree on (see the module docstring).

    The grades are the JSON objects with a numeric top-level ``total`` not nested in another
    grade. None → ``no_numeric_total``; grades with different totals → ``ambiguous_total``
    (a plant the judge quoted cannot steer the score, in either order); else the last of them.
    Only the last MAX_REPLY_CHARS characters are read. Never raises.
    """
    if not isinstance(text, str) or not text.strip():
        return _unavailable(ReplyReason.EMPTY_REPLY)
    tail = text[-MAX_REPLY_CHARS:]
    grades = outermost(graded_objects(tail))
    if not grades:
        return _unavailable(ReplyReason.NO_NUMERIC_TOTAL)
    if len({total for _, _, total in grades}) > 1:
        return _unavailable(ReplyReason.AMBIGUOUS_TOTAL)
    start, end, total = grades[-1]
    try:
        parsed = jsonsafe.loads(tail[start:end])
    except ValueError:  # not reachable for an object the scan accepted; never trust that
        return _unavailable(ReplyReason.NO_NUMERIC_TOTAL)
    return JudgeVerdict(total=total, score=score_from_total(total), parsed=parsed, reason=None)


def panel_mean(scores: Iterable[float | None]) -> float | None:
    """Mean of the available judges' scores; None (unscored) when no judge is available."""
    available = [s for s in scores if s is not None]
    return sum(available) / len(available) if available else None
