"""The spec's retry rule: transient HTTP and transport errors retry up to 5×, with backoff.

Only transient conditions are retried; a refusal or an empty answer is a real outcome
and is never retried ("no retries on content").
"""

from __future__ import annotations

import datetime
import email.utils
import math
import random
import time
from dataclasses import dataclass

#: Statuses a retry can cure: timeout, conflict, too early, rate limit, server trouble,
#: and Anthropic's 529 overloaded.
TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` retries after the first attempt (6 attempts at most by default)."""

    max_retries: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 300.0

    def delay(self, retry_number: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds before retry ``retry_number`` (1-based).

        A server's Retry-After is honoured (bounded by retry_after_max_s, so a bogus value
        cannot hang a run); otherwise exponential backoff with jitter in [50%, 100%].
        """
        if retry_after is not None:
            return max(0.0, min(retry_after, self.retry_after_max_s))
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2 ** (retry_number - 1))
        return ceiling * (0.5 + 0.5 * rng.random())


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date; None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # asctime and "-0000" forms come back naive; HTTP dates are GMT
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


RETRY, QUOTA, FAIL = "retry", "quota", "fail"  # STUB


def classify(status, headers, payload):  # STUB
    return RETRY if status in TRANSIENT_STATUS else FAIL


def retry_hint(headers, payload, now=None):  # STUB
    return parse_retry_after(headers.get("retry-after"), now)


def temperature_rejected(status, payload):  # STUB
    return status == 400 and "temperature" in str(payload).lower()
