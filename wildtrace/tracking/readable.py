"""Numbers rounded where a person reads them: MLflow's run metrics and trace attributes.

Only what MLflow shows is rounded. The run's files (responses.json, judgments.json,
scores.json, run_stats.json) keep full precision, and so do MLflow's artifacts, which are
those files; anything computed again (the report, ``upload``) starts from them.

The digits follow the unit: a score in % to 2 decimals (61.54), a 0–1 score or rate to 4
(0.6154, the same two decimals as a percentage), seconds to the millisecond, dollars to the
cent and to at least 4 significant digits (a call that cost $0.0001234 never reads as $0).
Anything that is not a number (None, a bool, a string) is passed through untouched.
"""

from __future__ import annotations

import math
from typing import Any

PERCENT_DIGITS = 2
FRACTION_DIGITS = 4
SECONDS_DIGITS = 3
USD_SIGNIFICANT = 4
USD_MIN_DIGITS = 2


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def percent(value: Any) -> Any:
    """A score in % as read: 2 decimals."""
    return round(float(value), PERCENT_DIGITS) if _number(value) else value


def fraction(value: Any) -> Any:
    """A 0–1 score, rate or difference as read: 4 decimals."""
    return round(float(value), FRACTION_DIGITS) if _number(value) else value


def seconds(value: Any) -> Any:
    """A duration in seconds as read: to the millisecond."""
    return round(float(value), SECONDS_DIGITS) if _number(value) else value


def usd(value: Any) -> Any:
    """A cost in dollars as read: to the cent, and never fewer than 4 significant digits."""
    if not _number(value) or value == 0:
        return float(value) if _number(value) else value
    magnitude = math.floor(math.log10(abs(float(value))))
    return round(float(value), max(USD_MIN_DIGITS, USD_SIGNIFICANT - 1 - magnitude))
