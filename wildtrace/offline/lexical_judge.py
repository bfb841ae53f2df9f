"""A deterministic lexical judge, replying in the spec's JSON shape.

It awards an item's points when at least THRESHOLD of the item's content words occur in
the response. Crude by design: it exists so the offline default exercises the same judge
prompt, reply parser and panel mean as the paper's LLM judges.

The offline panel's judges (``STRICTNESS``) differ in that threshold and, at a temperature
above 0, wobble like a sampled LLM judge: each item's threshold moves by a seeded normal
draw, so borderline items are sometimes awarded, sometimes not.
"""

from __future__ import annotations

import json
import random
import re

from wildtrace.core.prompts import JUDGE_RESPONSE, JUDGE_RUBRIC, JUDGE_TAIL
from wildtrace.offline.text import tokens

THRESHOLD = 0.5
#: The offline panel: route → share of an item's content words the response must contain.
STRICTNESS = {"lexical-judge-lenient": 0.35, "lexical-judge-balanced": 0.5, "lexical-judge-strict": 0.65}
#: Standard deviation of an item's threshold per unit of temperature (0.05 at the spec's 0.1).
JITTER_PER_TEMPERATURE = 0.5
_ITEM = re.compile(r"^P(\d+) \((.+?)pts\): (.*)$")


def split_judge_prompt(prompt: str) -> tuple[list[tuple[float, str]], str]:
    """Recover ([(points, criterion)], response) from the spec's judge prompt."""
    _head, sep, rest = prompt.partition(JUDGE_RUBRIC)
    if not sep or not prompt.endswith(JUDGE_TAIL):
        raise ValueError("not a WildTrace judge prompt")
    rubric_text, sep, response = rest.partition(JUDGE_RESPONSE)
    if not sep:
        raise ValueError("judge prompt has no RESPONSE section")
    response = response[: len(response) - len(JUDGE_TAIL)]
    items = []
    for line in rubric_text.splitlines():
        match = _ITEM.match(line)
        if match:
            items.append((float(match.group(2)), match.group(3)))
        elif items:  # a criterion that itself held a newline
            items[-1] = (items[-1][0], items[-1][1] + "\n" + line)
    return items, response


def award(criterion: str, response: str, threshold: float = THRESHOLD) -> bool:
    """True when enough of the criterion's distinct content words appear in the response."""
    wanted = set(tokens(criterion))
    if not wanted:
        return False
    have = set(tokens(response))
    return len(wanted & have) / len(wanted) >= threshold


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _jittered(threshold: float, spread: float, rng: random.Random | None) -> float:
    """The threshold moved by a seeded normal draw, kept within [0.05, 1] so that an item
    with no word in the response is never awarded and a full match always is."""
    if not spread or rng is None:
        return threshold
    return min(1.0, max(0.05, threshold + rng.gauss(0.0, spread)))


def judge_reply(prompt: str, threshold: float = THRESHOLD, temperature: float | None = None,
                rng: random.Random | None = None) -> str:
    """The judge's reply text for one judge prompt: ``{"points_awarded":[…],"total":…}``.

    With an ``rng`` and a temperature above 0, each item's threshold is jittered (seeded).
    """
    items, response = split_judge_prompt(prompt)
    spread = JITTER_PER_TEMPERATURE * temperature if rng is not None and temperature else 0.0
    points = [_number(p) if award(c, response, _jittered(threshold, spread, rng)) else 0 for p, c in items]
    return json.dumps({"points_awarded": points, "total": _number(sum(points))})
