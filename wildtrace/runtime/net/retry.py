"""The spec's retry rule: transient HTTP and transport errors retry up to 5×, with backoff.

Only transient conditions are retried; a refusal or an empty answer is a real outcome
and is never retried ("no retries on content").

Everything here is pure (no socket, no clock unless one is passed): ``retry_hint`` reads
how long the server asks us to wait, ``classify`` says whether a failed attempt is worth
another (``Verdict.RETRY``), can never succeed until someone pays or waits a day
(``Verdict.QUOTA``), or is final (``Verdict.FAIL``), ``temperature_rejected`` and
``budget_rejected`` recognise the 400 a model gives when it does not take a temperature or
so large an output budget, and ``next_step`` puts them together: the whole rule for an
attempt that brought no answer, as one of ``Retry``, ``Resend``, ``Fail`` or ``Quota``
(``CallLoop.fetch`` in runtime/net/call.py is a loop around it).
Bytes from outside are read within fixed bounds and never make these functions raise.
"""

from __future__ import annotations

import datetime
import email.utils
import itertools
import json
import math
import random
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from wildtrace.core.records import FailReason, Verdict

#: 4xx statuses a retry can cure: request timeout, conflict/lock, too early, rate limit.
RETRY_4XX = frozenset({408, 409, 425, 429})

#: A server's wait longer than this (a day) is taken as garbage, not as an instruction.
MAX_HINT_S = 86_400.0

#: At most this many characters of an error body are examined (bodies are hostile input).
TEXT_BUDGET = 65_536

#: Substrings (lower case) of an error body that mean "no retry will work": OpenAI's
#: ``insufficient_quota`` (code or type), Moonshot/Kimi's ``exceeded_current_quota_error``,
#: Anthropic's credit, spend-limit and long-context billing messages and its
#: ``enforced_spend_limit_reached`` / ``billing_error``, DeepSeek's 402 "Insufficient Balance",
#: DashScope's ``Arrearage``.
QUOTA_MARKERS = (
    "insufficient_quota",
    "exceeded_current_quota_error",
    "credit balance is too low",
    "reached your specified api usage limits",
    "enforced_spend_limit_reached",
    "billing_error",
    "extra usage is required",
    "insufficient balance",
    "arrearage",
    "余额不足",  # Zhipu: "余额不足或无可用资源包,请充值。" (insufficient balance or no resource package)
    # Zhipu's older 1113 wording: "您的账户已欠费，请充值后重试。" (github.com/langgenius/dify/issues/5850)
    "您的账户已欠费",
)

#: Vendor error codes for an empty balance, matched in the error object whatever the HTTP
#: status (they come with 429 or even 500): Zhipu/Z.ai ``error.code`` "1113" (HTTP 429:
#: dify#5850 above; zai-org/feedback#789 "[1113][Insufficient balance or no resource package.
#: Please recharge.]"); MiniMax ``base_resp.status_code`` 1008 and ``error.type``
#: ``insufficient_balance_error`` (HTTP 429: github.com/modelscope/modelscope/issues/1691).
QUOTA_ERROR_CODES = frozenset({"1113"})
QUOTA_ERROR_TYPES = frozenset({"insufficient_balance_error"})
QUOTA_BASE_RESP_CODES = frozenset({1008})
#: MiniMax's text with its code, answered as HTTP 500 {"type":"error","error":{"type":"api_error",
#: "message":"insufficient balance (1008)"}} (github.com/MiniMax-AI/MiniMax-M2/issues/62): the code
#: in the text is what makes a 500 a quota stop.
QUOTA_CODED_TEXT = ("insufficient balance (1008)",)

#: Gemini's per-day quotas (quotaId ``…PerDay…``, old-style "per day" limits) and a tier
#: with no allowance at all ("limit: 0") only reset the next day, whatever RetryInfo says.
_GEMINI_DAILY = re.compile(r"perday|per day|per_day|limit: 0(?![\d.])")

#: How each provider says "this model takes no temperature" (body text, quotes and
#: backticks removed, lower case). OpenAI: "Unsupported value: 'temperature' does not support
#: 0.1 with this model…" / "Unsupported parameter: 'temperature' is not supported with this
#: model."; Kimi: "invalid temperature: only 1 is allowed for this model" (0.6 for others);
#: Anthropic: "`temperature` is deprecated for this model.", "`temperature` may only be set
#: to 1 when thinking is enabled…", "temperature is not supported when thinking is enabled";
#: Gemini (a field the route does not know): 'Unknown name "temperature"'; LiteLLM's
#: UnsupportedParamsError (litellm/llms/openai/chat/gpt_5_transformation.py and o_series_transformation.py):
#: "gpt-5 models (including gpt-5-codex) don't support temperature=0.1. Only temperature=1 is
#: supported. …" and "O-series models don't support temperature=0.1. …" (quotes removed: "dont").
_TEMPERATURE_REJECTED = re.compile(
    r"unsupported (?:value|parameter): temperature"
    r"|temperature (?:is|does) not support"
    r"|temperature is deprecated"
    r"|temperature may only be set to"
    r"|invalid temperature: only"
    r"|unknown name temperature"
    r"|(?:dont|do not) support temperature="
)
_QUOTES = str.maketrans("", "", "`'\"\\")

#: Phrases providers use when the prompt does not fit the window (a 400, not a crash).
CONTEXT_LENGTH_MARKERS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "exceeds the maximum number of tokens",
    "input token count",
)

#: The names an output budget goes by in a request (lower case, as ``error_text`` reads them).
_BUDGET = r"(?:max_tokens|max_completion_tokens|max_output_tokens|maxoutputtokens|max_new_tokens)"
#: How each provider says "this output budget is more than the model can give" (body text,
#: quotes and backticks removed, lower case). OpenAI: "max_tokens is too large: 8192. This model
#: supports at most 4096 completion tokens, whereas you provided 8192." (param max_tokens, code
#: invalid_value; NextChat#3195, forgecode#1185); vLLM: "'max_tokens' or 'max_completion_tokens' is
#: too large: 64000. …"; Anthropic: "max_tokens: 128001 > 64000, which is the maximum allowed number of
#: output tokens for claude-opus-4-5-20251101" (claude-code#24451); Gemini: "Unable to submit request
#: because it has a maxOutputTokens value of 65536 but the supported range is from 1 (inclusive) to
#: 65536 (exclusive)." (litellm#10548); DeepSeek: "Invalid max_tokens value, the valid range of
#: max_tokens is [1, 8192]" (DeepSeek-V3#69); DashScope (Qwen): "Range of max_tokens should be
#: [1, 8192]" (open-webui#10507); Ark (Doubao): "The parameter `max_tokens` specified in the request
#: are not valid: integer above maximum value, expected a value <= 32768, but got 64000 instead.";
#: Groq-served Kimi: "max_tokens must be less than or equal to 16384, …"; Zhipu: "max_tokens参数非法。
#: 请检查文档。" (lobehub#1398: an illegal value; only acted on when the budget sent is above the limit).
_BUDGET_REJECTED = re.compile("|".join((
    rf"{_BUDGET}(?: or {_BUDGET})? is too large",
    rf"{_BUDGET}: \d+ > \d+",
    r"maximum allowed number of output tokens",
    rf"{_BUDGET} value of \d+ but the supported range",
    rf"valid range of {_BUDGET}",
    rf"range of {_BUDGET} should be",
    rf"parameter {_BUDGET} specified in the request (?:is|are) not valid: integer above maximum",
    rf"{_BUDGET} must be (?:less than or equal to|at most|between)",
    rf"{_BUDGET} ?参数非法",
)))

#: The most ``max_retries`` a config may set. The spec's rule is 5; more is allowed for a flaky
#: gateway, but a million would retry a dead endpoint for days (and once overflowed the backoff).
MAX_RETRIES = 100
#: Backoff doubles up to this exponent only: ``backoff_base_s * 2 ** 2047`` overflowed a float,
#: ``2 ** (10 ** 9)`` never finished; 2**63 times any base is past every sensible ``backoff_max_s``.
MAX_BACKOFF_EXPONENT = 63

_DURATION = re.compile(r"(\d{1,12})(?:\.(\d{1,9}))?s")  # google.protobuf.Duration JSON: "13s", "0.250s"
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` retries after the first attempt (6 attempts at most by default)."""

    max_retries: int = 5  #: retries after the first attempt (the spec: 5)
    backoff_base_s: float = 1.0  #: the first backoff ceiling; doubles each retry
    backoff_max_s: float = 60.0  #: the largest backoff ceiling
    retry_after_max_s: float = 300.0  #: a server's wait is honoured up to this many seconds

    def __post_init__(self) -> None:
        """Reject values that would hang or break the loop, naming the field."""
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) \
                or not 0 <= self.max_retries <= MAX_RETRIES:
            raise ValueError(f"retry.max_retries must be an integer between 0 and {MAX_RETRIES}, "
                             f"got {self.max_retries!r}")
        for f in fields(self)[1:]:
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"retry.{f.name} must be a finite number >= 0, got {value!r}")

    def delay(self, retry_number: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds before retry ``retry_number`` (1-based).

        A server's Retry-After is honoured (bounded by retry_after_max_s, so a bogus value
        cannot hang a run); otherwise exponential backoff with jitter in [50%, 100%]. The
        exponent is capped, so any ``retry_number`` gives a finite delay at once (never an
        OverflowError, never a huge integer).
        """
        if retry_after is not None:
            return max(0.0, min(retry_after, self.retry_after_max_s))
        exponent = min(max(retry_number - 1, 0), MAX_BACKOFF_EXPONENT)
        ceiling = min(self.backoff_max_s, self.backoff_base_s * float(2 ** exponent))
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
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


# --------------------------------------------------------------------------------------
# Reading hostile headers and bodies
# --------------------------------------------------------------------------------------


def lower_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A plain dict with lower-cased names (HTTP names are case-insensitive); bad entries dropped."""
    out: dict[str, str] = {}
    try:
        for name, value in headers.items():
            if isinstance(name, str) and isinstance(value, str):
                out[name.lower()] = value
    except Exception:  # noqa: BLE001 - a broken mapping is read as "no headers"
        return {}
    return out


def _plausible(seconds: float) -> float | None:
    return seconds if math.isfinite(seconds) and 0.0 <= seconds <= MAX_HINT_S else None


def _number(value: str | None) -> float | None:
    """A plain decimal number (no sign games, no underscores, bounded length) or None."""
    if value is None:
        return None
    value = value.strip()
    if not 0 < len(value) <= 32 or not re.fullmatch(r"\d+(?:\.\d+)?", value):
        return None
    return float(value)


def _seconds_header(value: str | None, now: float | None) -> float | None:
    """Retry-After: delta-seconds (fractions allowed, as the SDKs do) or an HTTP date."""
    if value is None or len(value) > 64:
        return None
    seconds = _number(value)
    if seconds is not None:
        return _plausible(seconds)
    if value.strip()[:1] in ("-", "+") or not any(c.isalpha() for c in value):
        return None  # a negative or signed number, not a date
    delay = parse_retry_after(value, now)
    return None if delay is None else _plausible(delay)


def _ms_header(value: str | None) -> float | None:
    ms = _number(value)
    return None if ms is None else _plausible(ms / 1000.0)


def parse_duration(value: Any) -> float | None:
    """A protobuf Duration string ("13s", "1.5s", "0.250s") as seconds; None if malformed."""
    if not isinstance(value, str) or len(value) > 32:
        return None
    match = _DURATION.fullmatch(value.strip())
    if match is None:
        return None
    return _plausible(int(match.group(1)) + float("0." + (match.group(2) or "0")))


def _error_objects(payload: Any) -> Iterator[Mapping[str, Any]]:
    """The ``error`` objects of a body: ``{"error": …}`` or a list of them (Gemini streams)."""
    items = payload if isinstance(payload, list) else [payload]
    for item in items[:8]:
        if isinstance(item, Mapping) and isinstance(item.get("error"), Mapping):
            yield item["error"]


def _gemini_retry_delay(payload: Any) -> float | None:
    for error in _error_objects(payload):
        details = error.get("details")
        if not isinstance(details, list):
            continue
        for detail in details[:32]:
            if isinstance(detail, Mapping) and detail.get("@type") == _RETRY_INFO:
                delay = parse_duration(detail.get("retryDelay"))
                if delay is not None:
                    return delay
    return None


def retry_hint(headers: Mapping[str, str], payload: Any, now: float | None = None) -> float | None:
    """Seconds to wait before the next attempt, as the server says; None if it says nothing usable.

    Precedence (first readable wins; milliseconds before seconds, as the official SDKs read them;
    the hop we talk to before what a gateway relays from upstream; headers before the body):
    ``retry-after-ms``, ``retry-after`` (seconds or an HTTP date, ``now`` = epoch seconds),
    ``llm_provider-retry-after-ms``, ``llm_provider-retry-after`` (LiteLLM's relay of upstream
    headers), then Gemini's ``error.details[]`` RetryInfo ``retryDelay``. Non-finite,
    negative, longer than a day and malformed values are skipped.
    """
    h = lower_headers(headers)
    for hint in (
        lambda: _ms_header(h.get("retry-after-ms")),
        lambda: _seconds_header(h.get("retry-after"), now),
        lambda: _ms_header(h.get("llm_provider-retry-after-ms")),
        lambda: _seconds_header(h.get("llm_provider-retry-after"), now),
        lambda: _gemini_retry_delay(payload),
    ):
        seconds = hint()
        if seconds is not None:
            return seconds
    return None


def error_text(payload: Any, budget: int = TEXT_BUDGET) -> str:
    """Every string in a body (keys and values), lower case, joined, at most ``budget`` characters.

    Walks iteratively with a node bound, so any nesting or size is read in bounded time;
    gateways that wrap an upstream error as a JSON string inside a message are covered too.
    """
    parts: list[str] = []
    used = 0
    stack: list[Any] = [payload]
    nodes = 0
    while stack and used < budget and nodes < 20_000:
        item = stack.pop()
        nodes += 1
        if isinstance(item, str):
            piece = item[: budget - used]
            parts.append(piece)
            used += len(piece) + 1
        elif isinstance(item, Mapping):
            for key, value in itertools.islice(item.items(), 256):
                stack.append(value)
                stack.append(key)
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item[:256]))
    return " ".join(parts).lower()


# --------------------------------------------------------------------------------------
# Classes of failure
# --------------------------------------------------------------------------------------


def vendor_quota(payload: Any) -> bool:
    """An empty balance said by a vendor's own error code (Zhipu 1113, MiniMax 1008), at any status."""
    for error in _error_objects(payload):
        if str(error.get("code")) in QUOTA_ERROR_CODES or error.get("type") in QUOTA_ERROR_TYPES:
            return True
    base = payload.get("base_resp") if isinstance(payload, Mapping) else None
    if isinstance(base, Mapping) and base.get("status_code") in QUOTA_BASE_RESP_CODES:
        return True
    text = error_text(payload)
    return any(marker in text for marker in QUOTA_CODED_TEXT)


def is_quota(status: int | None, payload: Any) -> bool:
    """A quota, spend-limit or billing refusal: no retry within a run will get through."""
    if status == 402:  # Payment Required: DeepSeek's balance, Anthropic's billing_error
        return True
    if status is not None and 400 <= status < 600 and vendor_quota(payload):
        return True
    if status not in (400, 403, 429):
        return False
    text = error_text(payload)
    if any(marker in text for marker in QUOTA_MARKERS):
        return True
    return "resource_exhausted" in text and _GEMINI_DAILY.search(text) is not None


def is_too_large_for_rate_limit(status: int | None, payload: Any) -> bool:
    """OpenAI's (and Groq's) 429 "Request too large for … on tokens per min (TPM): Limit 30000,
    Requested 850000": one request above the whole per-minute budget never gets through."""
    return status == 429 and "request too large for" in error_text(payload)


def _should_retry_header(headers: Mapping[str, str]) -> bool | None:
    value = lower_headers(headers).get("x-should-retry", "").strip().lower()
    return {"true": True, "false": False}.get(value)


def classify(status: int | None, headers: Mapping[str, str], payload: Any) -> Verdict:
    """The ``Verdict`` on one attempt's outcome.

    No status (a timeout or transport error) retries. A quota or spend-limit refusal is
    ``QUOTA`` whatever the headers say; a 429 for one request larger than the whole
    tokens-per-minute budget is ``FAIL`` (waiting cannot shrink it). Otherwise ``x-should-retry: true|false``
    decides, as in the official OpenAI and Anthropic SDKs; without it 408, 409, 425, 429 and every 5xx
    (CDNs answer 520–524, Anthropic 529) retry and everything else fails.
    """
    if status is None:
        return Verdict.RETRY
    if 200 <= status < 300:
        return Verdict.OK
    if is_quota(status, payload):
        return Verdict.QUOTA
    if is_too_large_for_rate_limit(status, payload):
        return Verdict.FAIL
    told = _should_retry_header(headers)
    if told is not None:
        return Verdict.RETRY if told else Verdict.FAIL
    return Verdict.RETRY if status in RETRY_4XX or 500 <= status < 600 else Verdict.FAIL


def temperature_rejected(status: int, payload: Any) -> bool:
    """True for a 400 (or a gateway's 422) saying this model takes no (such) temperature.

    OpenAI's ``param: temperature`` with code ``unsupported_value`` / ``unsupported_parameter``,
    or any provider's wording (see ``_TEMPERATURE_REJECTED``), also when a gateway wraps the
    upstream body in its own message. A temperature out of range ("must be between 0 and 2")
    is not a rejection: the config is wrong and is reported, not silently changed.
    """
    if status not in (400, 422):
        return False
    for error in _error_objects(payload):
        if error.get("param") == "temperature" and error.get("code") in ("unsupported_value", "unsupported_parameter"):
            return True
    return _TEMPERATURE_REJECTED.search(error_text(payload).translate(_QUOTES)) is not None


def budget_rejected(status: int | None, payload: Any) -> bool:
    """True for a 400 (or a gateway's 422) saying the output budget is above what the model takes.

    Matches each provider's wording (``_BUDGET_REJECTED``), also when a gateway wraps the upstream
    body in its own message. Acted on only with a documented limit below the budget sent
    (``next_step``): anything else stays the failure the provider said it was.
    """
    if status not in (400, 422):
        return False
    return _BUDGET_REJECTED.search(error_text(payload).translate(_QUOTES)) is not None


def failure_reason(status: int | None, payload: Any) -> FailReason:
    """A final failure's reason: ``context_length`` when the provider says the prompt does not fit."""
    text = json.dumps(payload, default=str).lower() if payload is not None else ""
    if status in (400, 413, 422) and any(m in text for m in CONTEXT_LENGTH_MARKERS):
        return FailReason.CONTEXT_LENGTH
    return FailReason.HTTP_ERROR


# --------------------------------------------------------------------------------------
# The rule for one attempt: next_step
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """What ``next_step`` knows of one attempt that brought no answer: plain data, read already.

    The HTTP layer fills it: ``error`` is the attempt's failure in words (a transport error, the
    provider's message, what arrived instead of an answer), ``retry_after`` the server's wait
    (``retry_hint``, read with the clock there), ``budget`` the output budget the request carried
    and ``output_limit`` the model's documented limit (None: not known).
    """

    attempt_no: int  #: 1-based: the first attempt is 1
    status: int | None = None  #: None: a timeout or transport failure
    headers: Mapping[str, str] = field(default_factory=dict)
    payload: Any = None  #: the decoded error body
    error: str = ""
    bad: bool = False  #: a 2xx that holds no answer of the wire format (or whose bytes did not decode)
    too_large: bool = False  #: the body passed the size bound
    stale: bool = False  #: not sent: prepared before the endpoint learned a rule that changes it
    temperature: bool = False  #: the request carries a temperature
    budget: int | None = None
    output_limit: int | None = None
    retry_after: float | None = None


@dataclass(frozen=True)
class Retry:
    """Try the same bytes again after ``RetryPolicy.delay(attempt_no, retry_after, rng)``."""

    retry_after: float | None = None  #: the server's wait, if it named one


@dataclass(frozen=True)
class Resend:
    """Send the logical request again, rebuilt; not an attempt of the task.

    Both fields unset: rebuild it with what the endpoint already knows (a stale request).
    """

    drop_temperature: bool = False  #: the endpoint rejects temperature: omit it from now on
    lower_budget_to: int | None = None  #: the endpoint rejects the budget: send the documented limit


@dataclass(frozen=True)
class Fail:
    """A final outcome: the call failed with ``reason`` and ``error``."""

    reason: FailReason
    error: str


@dataclass(frozen=True)
class Quota:
    """A quota or spend-limit refusal: this call and every later one of the endpoint fail at once."""

    error: str


Step = Retry | Resend | Fail | Quota


def next_step(seen: Seen, policy: RetryPolicy) -> Step:
    """What to do after an attempt that brought no answer; pure (no I/O, clock or randomness).

    In order: a stale request is rebuilt; a bad 2xx is retried (and keeps its own reason when the
    retries run out); a body past the size bound fails; a rejected temperature, and a rejected
    budget above a documented limit, resend; then ``classify``: a quota stops the endpoint, a
    final status fails (``context_length`` when the prompt does not fit), anything transient
    retries until ``policy.max_retries`` retries are spent.
    """
    if seen.stale:
        return Resend()
    if seen.too_large and not seen.bad:
        return Fail(FailReason.RESPONSE_TOO_LARGE, seen.error)
    if not seen.bad and seen.status is not None:
        resend = _resend(seen)
        if resend is not None:
            return resend
        verdict = classify(seen.status, seen.headers, seen.payload)
        if verdict == Verdict.QUOTA:
            return Quota(seen.error)
        if verdict == Verdict.FAIL:
            return Fail(failure_reason(seen.status, seen.payload), seen.error)
    if seen.attempt_no > policy.max_retries:
        return Fail(FailReason.BAD_RESPONSE if seen.bad else FailReason.RETRIES_EXHAUSTED, seen.error)
    return Retry(seen.retry_after if seen.status is not None else None)


def _resend(seen: Seen) -> Resend | None:
    """A 400/422 the request itself can cure: the endpoint takes no temperature, or less budget."""
    if seen.temperature and temperature_rejected(seen.status or 0, seen.payload):
        return Resend(drop_temperature=True)
    if seen.output_limit is not None and seen.budget is not None and seen.budget > seen.output_limit \
            and budget_rejected(seen.status, seen.payload):
        return Resend(lower_budget_to=seen.output_limit)
    return None
