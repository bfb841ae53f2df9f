"""Reading a judge's reply and reducing a panel to a task score (spec §4).

A reply with no usable total makes that judge *unavailable* for the task — recorded with
the raw text and a reason — and is never counted as 0: "unscored" is not "wrong".
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class JudgeVerdict:
    """What one judge reply yields: a score in [0, 1], or why there is none."""

    total: float | None
    score: float | None
    parsed: dict | None
    reason: str | None  # None when a score was read

    @property
    def available(self) -> bool:
        """True when this judge contributes to the task mean."""
        return self.score is not None


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def json_objects(text: str) -> list[tuple[int, int, dict]]:
    """Every JSON object that decodes from some ``{`` in ``text``, as (start, end, obj).

    Scanning every brace finds objects inside code fences, after prose, and nested ones;
    invalid JSON is skipped rather than fatal.
    """
    found = []
    pos = text.find("{")
    while pos != -1:
        try:
            obj, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            pass
        else:
            if isinstance(obj, dict):
                found.append((pos, end, obj))
        pos = text.find("{", pos + 1)
    return found


def score_from_total(total: float) -> float:
    """``min(total / 100, 1.0)``, and never below 0."""
    return max(0.0, min(total / 100.0, 1.0))


def parse_judge_reply(text: str | None) -> JudgeVerdict:
    """Take the last JSON object in the reply that has a numeric ``total``.

    "Last" is by where the object ends, so a judge that corrects itself is read at its
    final word; between an object and one nested in it (same end), the outer one wins.
    """
    if text is None or not text.strip():
        return JudgeVerdict(total=None, score=None, parsed=None, reason="empty_reply")
    candidates = [(end, -start, obj) for start, end, obj in json_objects(text) if _numeric(obj.get("total"))]
    if not candidates:
        return JudgeVerdict(total=None, score=None, parsed=None, reason="no_numeric_total")
    _, _, obj = max(candidates, key=lambda c: (c[0], c[1]))
    total = float(obj["total"])
    return JudgeVerdict(total=total, score=score_from_total(total), parsed=obj, reason=None)


def panel_mean(scores: Iterable[float | None]) -> float | None:
    """Mean of the available judges' scores; None (unscored) when no judge is available."""
    available = [s for s in scores if s is not None]
    return sum(available) / len(available) if available else None
