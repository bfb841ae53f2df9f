"""The retry and outcome rule as one pure function: ``retry.next_step``, at every boundary.

Each row is one attempt that brought no answer (``Seen``) and the step the rule takes. The
HTTP tests (test_http_retry.py, test_http_faults.py, test_real_endpoints.py) check that
``CallLoop.fetch`` (runtime/net/call.py) acts on these steps against real servers; these pin the decision itself.
"""

from __future__ import annotations

import pytest

from wildtrace.core.records import FailReason as FR
from wildtrace.runtime.net.retry import (Fail, Quota, Resend, Retry, RetryPolicy, Seen, budget_rejected, failure_reason,
                                     next_step)

POLICY = RetryPolicy()  # 5 retries: attempts 1..5 may retry, attempt 6 is the last


def err(message: str, **extra) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", **extra}}


OPENAI_TEMPERATURE = err("Unsupported value: 'temperature' does not support 0.1 with this model.",
                         param="temperature", code="unsupported_value")
OPENAI_BUDGET = err("max_tokens is too large: 32768. This model supports at most 2048 completion tokens, whereas you "
                    "provided 32768.", param="max_tokens", code="invalid_value")
ANTHROPIC_BUDGET = {"type": "error", "error": {"type": "invalid_request_error", "message": (
    "max_tokens: 32768 > 8192, which is the maximum allowed number of output tokens for claude-test")}}
CONTEXT = err("This model's maximum context length is 128000 tokens.", code="context_length_exceeded")
QUOTA_BODY = err("You exceeded your current quota", code="insufficient_quota")


def seen(attempt_no: int = 1, status: int | None = 500, payload=None, **kw) -> Seen:
    return Seen(attempt_no, status, kw.pop("headers", {}), payload, kw.pop("error", "the error"), **kw)


@pytest.mark.parametrize(("facts", "step"), [
    # transient statuses and transport failures retry while retries are left, with the server's wait
    pytest.param(seen(1, 500), Retry(None), id="500-first"),
    pytest.param(seen(5, 503, retry_after=2.0), Retry(2.0), id="503-last-retry-with-hint"),
    pytest.param(seen(6, 503), Fail(FR.RETRIES_EXHAUSTED, "the error"), id="503-out-of-retries"),
    pytest.param(seen(1, None, retry_after=9.0), Retry(None), id="transport-ignores-a-hint"),
    pytest.param(seen(6, None), Fail(FR.RETRIES_EXHAUSTED, "the error"), id="transport-out-of-retries"),
    *(pytest.param(seen(1, s), Retry(None), id=f"transient-{s}") for s in (408, 409, 425, 429, 500, 502, 503, 504,
                                                                          520, 529, 599)),
    *(pytest.param(seen(1, s), Fail(FR.HTTP_ERROR, "the error"), id=f"final-{s}") for s in (400, 401, 403, 404, 413,
                                                                                           422, 499)),
    # what the server says decides over the status
    pytest.param(seen(1, 500, headers={"x-should-retry": "false"}), Fail(FR.HTTP_ERROR, "the error"), id="told-no"),
    pytest.param(seen(1, 400, headers={"x-should-retry": "true"}), Retry(None), id="told-yes"),
    pytest.param(seen(6, 400, headers={"x-should-retry": "true"}), Fail(FR.RETRIES_EXHAUSTED, "the error"),
                 id="told-yes-out-of-retries"),
    # quota: whatever the headers say, at once
    pytest.param(seen(1, 429, QUOTA_BODY, headers={"x-should-retry": "true"}), Quota("the error"), id="quota-429"),
    pytest.param(seen(1, 402), Quota("the error"), id="quota-402"),
    # the prompt does not fit: its own reason, at 400/413/422 only
    pytest.param(seen(1, 400, CONTEXT), Fail(FR.CONTEXT_LENGTH, "the error"), id="context-400"),
    pytest.param(seen(1, 413, err("prompt is too long")), Fail(FR.CONTEXT_LENGTH, "the error"), id="context-413"),
    pytest.param(seen(1, 404, CONTEXT), Fail(FR.HTTP_ERROR, "the error"), id="context-words-on-404"),
    # a 2xx that is not an answer: retried, and out of retries it keeps its own reason
    pytest.param(seen(1, 200, bad=True), Retry(None), id="bad-2xx"),
    pytest.param(seen(5, 200, bad=True, retry_after=1.0), Retry(1.0), id="bad-2xx-last-retry"),
    pytest.param(seen(6, 200, bad=True), Fail(FR.BAD_RESPONSE, "the error"), id="bad-2xx-out-of-retries"),
    pytest.param(seen(1, 200, bad=True, too_large=True), Retry(None), id="bad-wins-over-size"),
    # the size bound: final at once, never retried
    pytest.param(seen(1, 200, too_large=True), Fail(FR.RESPONSE_TOO_LARGE, "the error"), id="too-large"),
    # a request prepared before a rule was learned: rebuilt, whatever else
    pytest.param(seen(1, None, stale=True), Resend(), id="stale"),
    pytest.param(seen(6, None, stale=True), Resend(), id="stale-on-the-last-attempt"),
    # temperature: only when the request carries one, and only at 400/422
    pytest.param(seen(1, 400, OPENAI_TEMPERATURE, temperature=True), Resend(drop_temperature=True), id="temp-400"),
    pytest.param(seen(6, 422, OPENAI_TEMPERATURE, temperature=True), Resend(drop_temperature=True),
                 id="temp-422-last-attempt"),
    pytest.param(seen(1, 400, OPENAI_TEMPERATURE), Fail(FR.HTTP_ERROR, "the error"), id="temp-words-none-sent"),
    pytest.param(seen(1, 500, OPENAI_TEMPERATURE, temperature=True), Retry(None), id="temp-words-on-500"),
    # the output budget: resent with the documented limit only when the budget sent is above it
    pytest.param(seen(1, 400, OPENAI_BUDGET, budget=32768, output_limit=2048), Resend(lower_budget_to=2048),
                 id="budget-openai"),
    pytest.param(seen(1, 400, ANTHROPIC_BUDGET, budget=32768, output_limit=8192), Resend(lower_budget_to=8192),
                 id="budget-anthropic"),
    pytest.param(seen(1, 422, OPENAI_BUDGET, budget=2049, output_limit=2048), Resend(lower_budget_to=2048),
                 id="budget-one-above"),
    pytest.param(seen(1, 400, OPENAI_BUDGET, budget=2048, output_limit=2048), Fail(FR.HTTP_ERROR, "the error"),
                 id="budget-at-the-limit-already"),
    pytest.param(seen(1, 400, OPENAI_BUDGET, budget=32768), Fail(FR.HTTP_ERROR, "the error"), id="budget-no-limit"),
    pytest.param(seen(1, 400, OPENAI_BUDGET, output_limit=2048), Fail(FR.HTTP_ERROR, "the error"),
                 id="budget-none-sent"),
    pytest.param(seen(1, 500, OPENAI_BUDGET, budget=32768, output_limit=2048), Retry(None), id="budget-words-on-500"),
    pytest.param(seen(1, 400, err("Invalid 'max_tokens'"), budget=32768, output_limit=2048),
                 Fail(FR.HTTP_ERROR, "the error"), id="budget-other-400"),
])
def test_next_step(facts, step):
    assert next_step(facts, POLICY) == step


@pytest.mark.parametrize(("max_retries", "attempt_no", "retries"), [(0, 1, False), (1, 1, True), (1, 2, False),
                                                                    (100, 100, True), (100, 101, False)])
def test_the_last_attempt_is_max_retries_plus_one(max_retries, attempt_no, retries):
    step = next_step(seen(attempt_no, 503), RetryPolicy(max_retries=max_retries))
    assert isinstance(step, Retry) is retries and (retries or step == Fail(FR.RETRIES_EXHAUSTED, "the error"))


def test_next_step_is_pure():
    facts = seen(3, 429, QUOTA_BODY, headers={"Retry-After": "5"}, retry_after=5.0)
    assert {next_step(facts, POLICY) for _ in range(3)} == {Quota("the error")}
    with pytest.raises(AttributeError):
        facts.status = 200  # type: ignore[misc]  # frozen: a step cannot change what it decided on


@pytest.mark.parametrize(("status", "message", "rejected"), [
    (400, "max_tokens is too large: 8192. This model supports at most 4096 completion tokens, whereas you provided "
          "8192.", True),  # OpenAI (NextChat#3195)
    (400, "'max_tokens' or 'max_completion_tokens' is too large: 64000. This model's maximum context length is 64001 "
          "tokens", True),  # vLLM
    (400, "max_tokens: 128001 > 64000, which is the maximum allowed number of output tokens for "
          "claude-opus-4-5-20251101", True),  # Anthropic (claude-code#24451)
    (400, "Unable to submit request because it has a maxOutputTokens value of 65536 but the supported range is from "
          "1 (inclusive) to 65536 (exclusive). Update the value and try again.", True),  # Gemini (litellm#10548)
    (400, "Invalid max_tokens value, the valid range of max_tokens is [1, 8192]", True),  # DeepSeek
    (400, "<400> InternalError.Algo.InvalidParameter: Range of max_tokens should be [1, 8192]", True),  # DashScope
    (400, "The parameter `max_completion_tokens` specified in the request are not valid: integer above maximum "
          "value, expected a value <= 12288, but got 32000 instead.", True),  # Ark
    (400, "max_tokens must be less than or equal to 16384, the maximum value for max_tokens is less than the "
          "context_window for this model", True),  # Groq-served Kimi
    (400, "max_tokens参数非法。请检查文档。", True),  # Zhipu
    (422, "litellm.BadRequestError: OpenAIException - max_tokens is too large: 32000.", True),  # a gateway's 422
    (400, "Invalid 'max_tokens'", False),
    (400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
          "instead.", False),
    (400, "This model's maximum context length is 8192 tokens.", False),
    (429, "max_tokens is too large: 8192.", False),
    (500, "max_tokens is too large: 8192.", False),
])
def test_budget_rejected(status, message, rejected):
    assert budget_rejected(status, err(message)) is rejected


def test_budget_rejected_reads_hostile_bodies_without_raising():
    deep: dict = {}
    node = deep
    for _ in range(10_000):
        node["error"] = {}
        node = node["error"]
    assert budget_rejected(400, deep) is False
    assert budget_rejected(400, {"error": {"message": "x" * 10_000_000}}) is False
    assert budget_rejected(400, None) is False and budget_rejected(400, [1, "max_tokens is too large"]) is True


@pytest.mark.parametrize(("status", "payload", "reason"), [
    (400, CONTEXT, FR.CONTEXT_LENGTH), (413, CONTEXT, FR.CONTEXT_LENGTH), (422, CONTEXT, FR.CONTEXT_LENGTH),
    (401, CONTEXT, FR.HTTP_ERROR), (None, CONTEXT, FR.HTTP_ERROR), (400, None, FR.HTTP_ERROR),
    (400, err("plain"), FR.HTTP_ERROR),
])
def test_failure_reason(status, payload, reason):
    assert failure_reason(status, payload) == reason
