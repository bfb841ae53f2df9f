"""Retry hints, failure classes and the temperature rule, on the bodies and headers real APIs send."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from wildtrace.runtime.net.retry import (
    RetryPolicy, Verdict, classify, error_text, parse_duration, retry_hint, temperature_rejected,
)

OK, RETRY, QUOTA, FAIL = Verdict.OK, Verdict.RETRY, Verdict.QUOTA, Verdict.FAIL  # the tables' columns, short

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC).timestamp()
IN_30_S = "Tue, 01 Dec 2026 12:00:30 GMT"


def gemini_retry_info(delay: object) -> dict:
    return {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "You exceeded your current quota",
                      "details": [{"@type": "type.googleapis.com/google.rpc.Help", "links": []},
                                  {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}]}}


# --------------------------------------------------------------------------------------
# retry_hint
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("headers", "payload", "expected"),
    [
        ({}, None, None),
        ({"retry-after": "7"}, None, 7.0),
        ({"Retry-After": "2.5"}, None, 2.5),
        ({"RETRY-AFTER": " 120 "}, None, 120.0),
        ({"retry-after": "0"}, None, 0.0),
        ({"retry-after": IN_30_S}, None, 30.0),
        ({"retry-after": "Tue, 01 Dec 2026 11:00:00 GMT"}, None, 0.0),  # a date past means now
        ({"retry-after-ms": "1500"}, None, 1.5),
        ({"Retry-After-Ms": "250", "retry-after": "9"}, None, 0.25),  # ms first, as the SDKs
        ({"retry-after-ms": "soon", "retry-after": "9"}, None, 9.0),  # unreadable ms: next one
        ({"llm_provider-retry-after": "4"}, None, 4.0),
        ({"llm_provider-retry-after-ms": "4500", "llm_provider-retry-after": "9"}, None, 4.5),
        ({"retry-after": "3", "llm_provider-retry-after": "9"}, None, 3.0),  # this hop before upstream
        ({"llm_provider-retry-after": IN_30_S}, None, 30.0),
        ({}, gemini_retry_info("13s"), 13.0),
        ({}, gemini_retry_info("1.5s"), 1.5),
        ({}, gemini_retry_info("0.250s"), 0.25),
        ({}, gemini_retry_info("25.465784708s"), 25.465784708),
        ({}, [gemini_retry_info("5s")], 5.0),  # streamed errors come as a list
        ({"retry-after": "2"}, gemini_retry_info("13s"), 2.0),  # headers before the body
        # Garbage is skipped, never trusted, never raised on:
        ({"retry-after": "-3"}, None, None),
        ({"retry-after": "+3"}, None, None),
        ({"retry-after": "nan"}, None, None),
        ({"retry-after": "inf"}, None, None),
        ({"retry-after": "Infinity"}, None, None),
        ({"retry-after": "1e400"}, None, None),
        ({"retry-after": "9" * 10_000}, None, None),
        ({"retry-after": "1_000"}, None, None),
        ({"retry-after": "86401"}, None, None),  # longer than a day: absurd
        ({"retry-after-ms": "-100", "retry-after": "6"}, None, 6.0),
        ({"retry-after-ms": "NaN"}, None, None),
        ({"retry-after": "Wed, 32 Foo 2015 99:99:99 GMT"}, None, None),
        ({}, gemini_retry_info("-1s"), None),
        ({}, gemini_retry_info("13"), None),
        ({}, gemini_retry_info("13m"), None),
        ({}, gemini_retry_info(13), None),
        ({}, gemini_retry_info("1" * 40 + "s"), None),
        ({}, {"error": {"details": "not a list"}}, None),
        ({}, {"error": "a string"}, None),
        ({}, "plain text", None),
        ({}, {"non_json_body": "<html>"}, None),
    ],
)
def test_retry_hint(headers, payload, expected):
    got = retry_hint(headers, payload, now=NOW)
    assert got == (None if expected is None else pytest.approx(expected))


def test_retry_hint_tolerates_broken_header_mappings():
    class Broken(dict):
        def items(self):
            raise RuntimeError("boom")

    assert retry_hint(Broken(), None) is None
    assert retry_hint({"retry-after": None, 3: "4"}, None) is None  # type: ignore[dict-item]


@pytest.mark.parametrize(("value", "expected"), [("13s", 13.0), ("0s", 0.0), ("0.5s", 0.5),
                                                 ("1.000000001s", 1.000000001), ("", None), ("s", None),
                                                 (".5s", None), ("1.s", None), (None, None)])
def test_parse_duration(value, expected):
    assert parse_duration(value) == expected


# --------------------------------------------------------------------------------------
# classify
# --------------------------------------------------------------------------------------

OPENAI_QUOTA = {"error": {"message": "You exceeded your current quota, please check your plan and billing details. "
                                     "For more information on this error, read the docs: https://platform.openai.com/"
                                     "docs/guides/error-codes/api-errors.",
                          "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}
OPENAI_QUOTA_TYPE_ONLY = {"error": {"message": "You exceeded your current quota, please check your plan and billing "
                                               "details.", "type": "insufficient_quota", "param": None, "code": None}}
OPENAI_RATE = {"error": {"message": "Rate limit reached for gpt-4.1 in organization org-x on tokens per min (TPM): "
                                    "Limit 30000, Used 29000, Requested 2000. Please try again in 2s.",
                         "type": "tokens", "param": None, "code": "rate_limit_exceeded"}}
ANTHROPIC_RATE = {"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has "
                                             "exceeded your per-minute rate limit"}, "request_id": "req_1"}
ANTHROPIC_SPEND_429 = {"type": "error", "error": {"type": "rate_limit_error", "message": "You have reached your "
                                                  "monthly spend limit.", "details": {"error_code":
                                                                                      "enforced_spend_limit_reached"}}}
ANTHROPIC_LIMITS_400 = {"type": "error", "error": {"type": "invalid_request_error", "message": "You have reached your "
                                                   "specified API usage limits. You will regain access on 2026-04-01 "
                                                   "at 00:00 UTC."}, "request_id": "req_2"}
ANTHROPIC_CREDIT_400 = {"type": "error", "error": {"type": "invalid_request_error", "message": "Your credit balance "
                                                   "is too low to access the Anthropic API. Please go to Plans & "
                                                   "Billing to upgrade or purchase credits."}}
ANTHROPIC_BILLING_402 = {"type": "error", "error": {"type": "billing_error", "message": "Billing issue"}}
ANTHROPIC_LONG_CONTEXT = {"type": "error", "error": {"type": "rate_limit_error",
                                                     "message": "Extra usage is required for long context requests."}}
ANTHROPIC_OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
KIMI_QUOTA = {"error": {"message": "You exceeded your current quota, please check your plan and billing details",
                        "type": "exceeded_current_quota_error"}}
DEEPSEEK_BALANCE = {"error": {"message": "Insufficient Balance", "type": "unknown_error", "param": None,
                              "code": "invalid_request_error"}}
DASHSCOPE_ARREARS = {"error": {"code": "Arrearage", "message": "Access denied, please make sure your account is in "
                                                               "good standing.", "type": "Arrearage"}}


def gemini_429(*quota_ids: str, message: str = "You exceeded your current quota, please check your plan and billing "
                                               "details.") -> dict:
    metric = "generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count"
    violations = [{"quotaMetric": metric, "quotaId": q,
                   "quotaDimensions": {"location": "global", "model": "gemini-2.5-pro"}} for q in quota_ids]
    return {"error": {"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED",
                      "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": violations},
                                  {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "20s"}]}}


GEMINI_PER_MINUTE = gemini_429("GenerateContentInputTokensPerModelPerMinute-PaidTier")
GEMINI_PER_DAY = gemini_429("GenerateContentInputTokensPerModelPerMinute-FreeTier",
                            "GenerateRequestsPerDayPerProjectPerModel-FreeTier")
GEMINI_LIMIT_0 = gemini_429("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", message=(
    "You exceeded your current quota.\n* Quota exceeded for metric: generativelanguage.googleapis.com/"
    "generate_content_free_tier_requests, limit: 0, model: gemini-3.1-pro\nPlease retry in 5.2s."))
GEMINI_OLD_PER_DAY = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota exceeded for quota "
                                "metric 'Gemini 2.5 Pro Requests' and limit 'Gemini 2.5 Pro Requests per day per user "
                                "per tier'"}}
# LiteLLM wraps the upstream body as text inside its own message:
LITELLM_WRAPPED_QUOTA = {"error": {"message": "litellm.RateLimitError: RateLimitError: OpenAIException - "
                                              + json.dumps(OPENAI_QUOTA), "type": None, "param": None, "code": "429"}}


@pytest.mark.parametrize(
    ("status", "headers", "payload", "expected"),
    [
        (None, {}, None, RETRY),  # timeout / transport error
        (200, {}, {}, OK),
        (204, {"x-should-retry": "true"}, None, OK),
        (408, {}, None, RETRY),
        (409, {}, None, RETRY),
        (425, {}, None, RETRY),
        (429, {}, OPENAI_RATE, RETRY),
        (429, {}, ANTHROPIC_RATE, RETRY),
        (429, {}, GEMINI_PER_MINUTE, RETRY),
        (429, {}, None, RETRY),
        (500, {}, None, RETRY),
        (501, {}, None, RETRY),  # the SDKs retry every 5xx
        (502, {}, None, RETRY),
        (503, {}, None, RETRY),
        (504, {}, None, RETRY),
        (520, {}, {"non_json_body": "<html>cloudflare</html>"}, RETRY),
        (522, {}, None, RETRY),
        (524, {}, None, RETRY),
        (529, {}, ANTHROPIC_OVERLOADED, RETRY),
        (599, {}, None, RETRY),
        (400, {}, {"error": {"message": "Invalid value for 'temperature'"}}, FAIL),
        (401, {}, None, FAIL),
        (403, {}, None, FAIL),
        (404, {}, None, FAIL),
        (413, {}, None, FAIL),
        (422, {}, None, FAIL),
        (302, {}, None, FAIL),
        (600, {}, None, FAIL),
        # x-should-retry overrides the status rule, either way:
        (400, {"x-should-retry": "true"}, None, RETRY),
        (503, {"x-should-retry": "false"}, None, FAIL),
        (429, {"X-Should-Retry": "FALSE"}, OPENAI_RATE, FAIL),
        (409, {"x-should-retry": "maybe"}, None, RETRY),
        # Quotas, spend limits, billing: never retried, whatever the headers say:
        (429, {}, OPENAI_QUOTA, QUOTA),
        (429, {"x-should-retry": "true", "retry-after": "1"}, OPENAI_QUOTA_TYPE_ONLY, QUOTA),
        (429, {}, ANTHROPIC_SPEND_429, QUOTA),
        (400, {}, ANTHROPIC_LIMITS_400, QUOTA),
        (400, {}, ANTHROPIC_CREDIT_400, QUOTA),
        (402, {}, ANTHROPIC_BILLING_402, QUOTA),
        (429, {}, ANTHROPIC_LONG_CONTEXT, QUOTA),
        (429, {}, KIMI_QUOTA, QUOTA),
        (402, {}, DEEPSEEK_BALANCE, QUOTA),
        (400, {}, DASHSCOPE_ARREARS, QUOTA),
        (429, {}, GEMINI_PER_DAY, QUOTA),
        (429, {}, GEMINI_LIMIT_0, QUOTA),
        (429, {}, GEMINI_OLD_PER_DAY, QUOTA),
        (429, {}, LITELLM_WRAPPED_QUOTA, QUOTA),
        (403, {}, {"error": {"code": 403, "status": "RESOURCE_EXHAUSTED", "message": "limit: 0"}}, QUOTA),
        # One request above the whole TPM budget: waiting cannot help.
        (429, {"retry-after": "1"}, {"error": {"message": "Request too large for gpt-4.1 in organization org-x on "
                                               "tokens per min (TPM): Limit 30000, Requested 850000. The input or "
                                               "output tokens must be reduced in order to run successfully.",
                                               "type": "tokens", "param": None, "code": "rate_limit_exceeded"}}, FAIL),
        (500, {}, OPENAI_QUOTA, RETRY),  # a quota word in a 5xx body is not a quota refusal
        (429, {}, {"error": {"message": "per day", "status": "UNAVAILABLE"}}, RETRY),  # daily words, not Gemini's
    ],
)
def test_classify(status, headers, payload, expected):
    assert classify(status, headers, payload) == expected


@pytest.mark.parametrize(
    "payload",
    ["{" * 100_000, [[[[[]]]]], {"error": {"message": "x" * 1_000_000}}, {"k" * 100: None}, 12, None,
     {"error": {"details": [{"@type": 3}]}}],
)
def test_classify_never_raises_on_hostile_bodies(payload):
    assert classify(429, {"x-should-retry": "\x00"}, payload) == RETRY


def test_error_text_is_bounded_on_wide_and_deep_bodies():
    deep: list = []
    node = deep
    for _ in range(100_000):
        node.append([])
        node = node[0]
    assert error_text(deep) == ""
    assert len(error_text({"a": ["x" * 100_000] * 50})) <= 65_536 + 1


# --------------------------------------------------------------------------------------
# temperature_rejected
# --------------------------------------------------------------------------------------

OPENAI_UNSUPPORTED_VALUE = {"error": {"message": "Unsupported value: 'temperature' does not support 0.1 with this "
                                                 "model. Only the default (1) value is supported.",
                                      "type": "invalid_request_error", "param": "temperature",
                                      "code": "unsupported_value"}}
OPENAI_UNSUPPORTED_PARAMETER = {"error": {"message": "Unsupported parameter: 'temperature' is not supported with "
                                                     "this model.", "type": "invalid_request_error",
                                          "param": "temperature", "code": "unsupported_parameter"}}


@pytest.mark.parametrize(
    ("status", "payload", "expected"),
    [
        (400, OPENAI_UNSUPPORTED_VALUE, True),
        (400, OPENAI_UNSUPPORTED_PARAMETER, True),
        (400, {"error": {"param": "temperature", "code": "unsupported_value", "message": ""}}, True),
        (400, {"error": {"message": "Unsupported parameter: 'temperature' is not supported with this model.",
                         "type": "invalid_request_error", "param": "temperature", "code": None}}, True),
        (400, {"error": {"message": "invalid temperature: only 1 is allowed for this model",
                         "type": "invalid_request_error"}}, True),  # Kimi K2.6 thinking
        (400, {"message": "invalid temperature: only 0.6 is allowed for this model",
               "type": "invalid_request_error"}, True),  # Kimi non-thinking
        (400, {"type": "error", "error": {"type": "invalid_request_error",
                                          "message": "`temperature` is deprecated for this model."}}, True),
        (400, {"type": "error", "error": {"type": "invalid_request_error", "message": "`temperature` may only be set "
               "to 1 when thinking is enabled. Please consult our documentation at https://docs.anthropic.com/en/docs/"
               "build-with-claude/extended-thinking"}}, True),
        (400, {"error": {"message": "temperature is not supported when thinking is enabled"}}, True),
        (400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "Invalid JSON payload received. "
                         "Unknown name \"temperature\": Cannot find field."}}, True),  # Gemini
        # A gateway wrapping the upstream body as a string:
        (400, {"error": {"cause": json.dumps(OPENAI_UNSUPPORTED_VALUE), "code": 400, "message": "upstream failed"}},
         True),
        (422, {"detail": "Unsupported value: 'temperature' does not support 0.1 with this model."}, True),
        (400, {"non_json_body": "Unsupported value: 'temperature' does not support 0.1 with this model."}, True),
        # Not a rejection of temperature as such:
        (400, {"error": {"message": "Invalid value for 'temperature': must be between 0 and 2.",
                         "param": "temperature", "code": "invalid_value"}}, False),
        (400, {"error": {"message": "`temperature` and `top_p` cannot both be specified for this model."}}, False),
        (400, {"error": {"message": "Unsupported value: 'top_p' does not support 0.5 with this model."}}, False),
        (400, {"error": {"message": "This model's maximum context length is 128000 tokens."}}, False),
        (429, OPENAI_UNSUPPORTED_VALUE, False),
        (500, OPENAI_UNSUPPORTED_VALUE, False),
        (400, None, False),
        (400, "{" * 100_000, False),
    ],
)
def test_temperature_rejected(status, payload, expected):
    assert temperature_rejected(status, payload) is expected


# --------------------------------------------------------------------------------------
# RetryPolicy validation
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": 1.5}, "max_retries"),
        ({"max_retries": True}, "max_retries"),
        ({"max_retries": "5"}, "max_retries"),
        ({"backoff_base_s": -0.1}, "backoff_base_s"),
        ({"backoff_base_s": float("nan")}, "backoff_base_s"),
        ({"backoff_max_s": float("inf")}, "backoff_max_s"),
        ({"retry_after_max_s": -1}, "retry_after_max_s"),
        ({"retry_after_max_s": None}, "retry_after_max_s"),
    ],
)
def test_retry_policy_rejects_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"retry\.{field}\b"):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"max_retries": 0}, {"backoff_base_s": 0, "backoff_max_s": 0},
                                    {"retry_after_max_s": 0.0}, {"backoff_base_s": 2}])
def test_retry_policy_accepts_boundaries(kwargs):
    RetryPolicy(**kwargs)
