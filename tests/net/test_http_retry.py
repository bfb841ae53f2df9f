"""The one shared HTTP call: retry rule, exact wire bytes, concurrency bound, outcome cache.

Every test drives ``Endpoint`` through ``httpx.MockTransport`` with scripted responses;
no sockets. Backoff is shrunk to milliseconds, or the delays asked for are recorded instead of
slept (``sleeps``), so no test measures time.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import endpoint_spec

from wildtrace.core import records as R
from wildtrace.core.records import CallResult, Usage
from wildtrace.providers.base import Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.net import call as call_mod
from wildtrace.runtime.net.attempt import encode_body
from wildtrace.runtime.store.cache import Cache
from wildtrace.runtime.net.endpoint import Endpoint, is_storable, local_transport
from wildtrace.runtime.net.retry import RetryPolicy, parse_retry_after

FAST = RetryPolicy(backoff_base_s=0.001, backoff_max_s=0.01)
SECRET = "sk-test-SECRET-0123456789abcdef"
PROMPT = "UNIQUE-PROMPT-MARKER: Answer using ONLY the document. 文档里的问题是什么？ café"
SAMPLING = Sampling(temperature=0.2, max_tokens=256)


spec = functools.partial(endpoint_spec, route="gpt-test", base_url="https://api.example.test/v1",
                         api_key_env="TEST_KEY", timeout_s=5.0)


def ok_body(text: str = "The answer is 42.") -> dict:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7},
    }


def refusal_body() -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "I can't help with that."},
                         "finish_reason": "stop"}]}


def error_body(message: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "code": code}}


Step = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


class Script:
    """A MockTransport handler that plays scripted steps; the last step repeats forever."""

    def __init__(self, *steps: Step) -> None:
        assert steps
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, Exception):
            if isinstance(step, httpx.RequestError):
                step = type(step)(str(step), request=request)
            raise step
        if callable(step) and not isinstance(step, httpx.Response):
            return step(request)
        # A fresh Response per request (a Response object cannot be returned twice).
        return httpx.Response(step.status_code, headers=step.headers, content=step.content)

    @property
    def count(self) -> int:
        return len(self.requests)


def resp(status: int, body: Any = None, headers: dict | None = None, text: str | None = None) -> httpx.Response:
    if text is not None:
        return httpx.Response(status, text=text, headers=headers)
    return httpx.Response(status, json=ok_body() if body is None else body, headers=headers)


async def _call(script: Any, provider: str = "openai", policy: RetryPolicy = FAST, api_key: str | None = SECRET,
                prompt: str = PROMPT, seed: int | None = 7, **spec_overrides) -> tuple[CallResult, Endpoint]:
    p = make_provider(spec(provider, **spec_overrides))
    endpoint = Endpoint(p, api_key, policy, transport=httpx.MockTransport(script), seed=seed)
    try:
        return await endpoint.call(p.build_request(prompt, SAMPLING)), endpoint
    finally:
        await endpoint.aclose()


def call(script: Any, **kwargs) -> tuple[CallResult, Endpoint]:
    return asyncio.run(_call(script, **kwargs))


# --------------------------------------------------------------------------------------
# the retry rule
# --------------------------------------------------------------------------------------


def test_success_first_try():
    script = Script(resp(200))
    result, endpoint = call(script)
    assert result.ok and result.reason is None and result.error is None
    assert result.text == "The answer is 42."
    assert result.attempts == 1 and result.http_status == 200
    assert result.usage == Usage(11, 7, None)
    assert result.raw == ok_body()
    assert endpoint.requests_sent == 1 and endpoint.retries == 0
    assert script.count == 1


def test_429_then_200():
    script = Script(resp(429, error_body("Rate limit reached"), {"Retry-After": "0"}), resp(200))
    seen: list[str] = []

    async def run():
        p = make_provider(spec(label="judge_1"))
        ep = Endpoint(p, SECRET, FAST, transport=httpx.MockTransport(script), on_retry=seen.append)
        try:
            return await ep.call(p.build_request(PROMPT, SAMPLING)), ep
        finally:
            await ep.aclose()

    result, endpoint = asyncio.run(run())
    assert result.ok and result.attempts == 2
    assert script.count == 2
    assert endpoint.retries == 1 and endpoint.requests_sent == 2
    assert seen == ["judge_1"]


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """Record the delays Endpoint asks for instead of sleeping."""
    recorded: list[float] = []

    async def fake_sleep(delay: float, *args, **kwargs) -> None:
        recorded.append(delay)

    monkeypatch.setattr(call_mod.asyncio, "sleep", fake_sleep)
    return recorded


def test_retry_after_value_is_the_delay_used(sleeps):
    script = Script(resp(503, error_body("busy"), {"Retry-After": "7"}), resp(429, error_body("rl"),
                    {"retry-after": "2.5"}), resp(200))
    result, _ = call(script)
    assert result.ok and result.attempts == 3
    assert sleeps == [7.0, 2.5]


def test_retry_after_is_capped_by_retry_after_max_s(sleeps):
    policy = RetryPolicy(backoff_base_s=0.001, backoff_max_s=0.01, retry_after_max_s=0.05)
    script = Script(resp(429, error_body("rl"), {"Retry-After": "3600"}), resp(200))
    result, _ = call(script, policy=policy)
    assert result.ok and result.attempts == 2
    assert sleeps == [0.05]


def test_backoff_delays_without_retry_after(sleeps):
    policy = RetryPolicy(backoff_base_s=1.0, backoff_max_s=5.0)
    script = Script(resp(503, error_body("busy")))
    result, _ = call(script, policy=policy, seed=123)
    assert result.attempts == 6
    # No sleep after the last attempt: 5 retries, 5 waits.
    rng = random.Random(123)
    ceilings = [1.0, 2.0, 4.0, 5.0, 5.0]
    assert sleeps == pytest.approx([c * (0.5 + 0.5 * rng.random()) for c in ceilings])
    for delay, ceiling in zip(sleeps, ceilings, strict=True):
        assert 0.5 * ceiling <= delay <= ceiling


def test_unparseable_retry_after_falls_back_to_backoff(sleeps):
    policy = RetryPolicy(backoff_base_s=1.0, backoff_max_s=5.0)
    script = Script(resp(429, error_body("rl"), {"Retry-After": "soon-ish"}), resp(200))
    result, _ = call(script, policy=policy)
    assert result.ok and result.attempts == 2
    assert len(sleeps) == 1 and 0.5 <= sleeps[0] <= 1.0


def test_500_then_200():
    script = Script(resp(500, error_body("internal")), resp(200))
    result, _ = call(script)
    assert result.ok and result.attempts == 2 and script.count == 2


def test_503_forever_exhausts_after_six_attempts():
    script = Script(resp(503, error_body("The server is overloaded")))
    result, endpoint = call(script)
    assert not result.ok
    assert result.attempts == 6 and script.count == 6
    assert result.reason == R.FailReason.RETRIES_EXHAUSTED
    assert "503" in result.error and "The server is overloaded" in result.error
    assert result.http_status == 503
    assert result.text is None
    assert result.raw == error_body("The server is overloaded")
    assert endpoint.retries == 5 and endpoint.requests_sent == 6


@pytest.mark.parametrize(("max_retries", "attempts"), [(0, 1), (1, 2), (2, 3)])
def test_max_retries_bounds_attempts(max_retries, attempts):
    policy = RetryPolicy(max_retries=max_retries, backoff_base_s=0.001, backoff_max_s=0.01)
    script = Script(resp(503, error_body("busy")))
    result, _ = call(script, policy=policy)
    assert result.attempts == attempts and script.count == attempts
    assert result.reason == R.FailReason.RETRIES_EXHAUSTED


def test_400_fails_at_once_with_the_providers_message():
    msg = "Invalid value for 'temperature': must be between 0 and 2."
    script = Script(resp(400, error_body(msg)), resp(200))
    result, endpoint = call(script)
    assert not result.ok
    assert result.attempts == 1 and script.count == 1
    assert result.reason == R.FailReason.HTTP_ERROR
    assert msg in result.error and "400" in result.error
    assert result.http_status == 400
    assert endpoint.retries == 0


@pytest.mark.parametrize("status", [401, 403, 404, 422, 405, 413])
def test_non_transient_statuses_are_not_retried(status):
    script = Script(resp(status, error_body(f"nope {status}")), resp(200))
    result, _ = call(script)
    assert result.attempts == 1 and script.count == 1
    assert not result.ok and result.reason == R.FailReason.HTTP_ERROR
    assert f"nope {status}" in result.error
    assert result.http_status == status


def test_non_json_error_body_is_kept_as_text():
    script = Script(resp(404, text="<html>Not Found</html>"))
    result, _ = call(script)
    assert result.attempts == 1 and result.reason == R.FailReason.HTTP_ERROR
    assert "Not Found" in result.error
    assert result.raw == {"non_json_body": "<html>Not Found</html>"}


def test_400_context_length_has_its_own_reason():
    body = {"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages "
                                 "resulted in 200000 tokens.", "code": "context_length_exceeded"}}
    script = Script(resp(400, body))
    result, _ = call(script)
    assert result.attempts == 1
    assert result.reason == R.FailReason.CONTEXT_LENGTH
    assert "maximum context length is 128000 tokens" in result.error


@pytest.mark.parametrize(
    ("provider", "status", "body"),
    [
        ("anthropic", 400, {"type": "error",
                            "error": {"type": "invalid_request_error",
                                      "message": "prompt is too long: 250000 tokens > 200000 maximum"}}),
        ("gemini", 400, {"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                   "message": "The input token count (2000000) exceeds the maximum number of tokens "
                                              "allowed (1048576)."}}),
        ("openai", 413, {"error": {"message": "Request too large: too many tokens"}}),
    ],
)
def test_context_length_other_providers(provider, status, body):
    result, _ = call(Script(resp(status, body)), provider=provider)
    assert result.attempts == 1 and result.reason == R.FailReason.CONTEXT_LENGTH


def test_plain_400_is_not_context_length():
    result, _ = call(Script(resp(400, error_body("Unrecognized request argument supplied: foo"))))
    assert result.reason == R.FailReason.HTTP_ERROR


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 504, 529])
def test_each_transient_status_is_retried(status):
    script = Script(resp(status, error_body(f"transient {status}")), resp(200))
    result, _ = call(script)
    assert result.ok and result.attempts == 2 and script.count == 2


def test_transient_html_body_from_a_proxy_is_retried():
    script = Script(resp(502, text="<html><body>502 Bad Gateway</body></html>"), resp(200))
    result, _ = call(script)
    assert result.ok and result.attempts == 2


def test_connect_error_then_200():
    script = Script(httpx.ConnectError("connection refused"), resp(200))
    result, endpoint = call(script)
    assert result.ok and result.attempts == 2 and script.count == 2
    assert endpoint.retries == 1


def test_transport_error_forever_exhausts():
    script = Script(httpx.RemoteProtocolError("server disconnected"))
    result, _ = call(script)
    assert result.attempts == 6
    assert result.reason == R.FailReason.RETRIES_EXHAUSTED
    assert "transport_error" in result.error and "RemoteProtocolError" in result.error
    assert result.http_status is None and result.raw is None


def test_read_timeout_forever_exhausts():
    script = Script(httpx.ReadTimeout("read timed out"))
    result, _ = call(script)
    assert not result.ok
    assert result.attempts == 6 and script.count == 6
    assert result.reason == R.FailReason.RETRIES_EXHAUSTED
    assert "timeout" in result.error.lower() and "ReadTimeout" in result.error
    assert result.http_status is None


@pytest.mark.parametrize("exc", [httpx.ConnectTimeout("c"), httpx.WriteTimeout("w"), httpx.PoolTimeout("p")])
def test_other_timeouts_then_200(exc):
    result, _ = call(Script(exc, resp(200)))
    assert result.ok and result.attempts == 2


def test_200_refusal_is_never_retried():
    script = Script(resp(200, refusal_body()), resp(200))
    result, endpoint = call(script)
    assert result.attempts == 1 and script.count == 1
    assert not result.ok and result.reason == R.FailReason.REFUSAL
    assert result.error == "I can't help with that."
    assert endpoint.retries == 0


@pytest.mark.parametrize("content", ["", "   \n", None])
def test_200_empty_output_is_never_retried(content):
    script = Script(resp(200, ok_body(content)), resp(200))
    result, _ = call(script)
    assert result.attempts == 1 and script.count == 1
    assert not result.ok and result.reason == R.FailReason.EMPTY_OUTPUT


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "plain"])
def test_200_unreadable_body_is_a_transient_bad_response(stream):
    """Not an answer of the wire format: retried like a transient error, never cached."""
    script = Script(resp(200, text="not json at all"), resp(200))
    result, _ = call(script, stream=stream)
    assert result.ok and result.attempts == 2 and script.count == 2
    script = Script(resp(200, text="not json at all"))
    result, _ = call(script, stream=stream)
    assert result.reason == R.FailReason.BAD_RESPONSE and result.attempts == script.count == FAST.max_retries + 1
    assert result.error.startswith("HTTP 200 text/plain; charset=utf-8, 15 bytes: not json at all (")


def test_transient_then_refusal_counts_both_attempts():
    script = Script(resp(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
                    resp(200, {"content": [], "stop_reason": "refusal"}))
    result, _ = call(script, provider="anthropic", base_url="https://api.anthropic.test")
    assert result.attempts == 2 and result.reason == R.FailReason.REFUSAL


# --------------------------------------------------------------------------------------
# what goes on the wire
# --------------------------------------------------------------------------------------


OK_BODIES = {
    "openai": ok_body(),
    "anthropic": {"content": [{"type": "text", "text": "The answer is 42."}], "stop_reason": "end_turn"},
    "gemini": {"candidates": [{"content": {"parts": [{"text": "The answer is 42."}]}, "finishReason": "STOP"}]},
}


@pytest.mark.parametrize(
    ("provider", "auth"),
    [
        ("openai", ("authorization", f"Bearer {SECRET}")),
        ("anthropic", ("x-api-key", SECRET)),
        ("gemini", ("x-goog-api-key", SECRET)),
    ],
)
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "plain"])
def test_exact_bytes_and_headers_on_the_wire(provider, auth, stream):
    script = Script(lambda request: httpx.Response(200, json=OK_BODIES[provider]))
    p = make_provider(spec(provider, stream=stream))
    request = p.build_request(PROMPT, SAMPLING)
    if stream:
        request = p.stream_request(request)
    call(script, provider=provider, stream=stream)
    assert script.count == 1
    sent = script.requests[0]
    expected = json.dumps(request.body, ensure_ascii=False, separators=(",", ":")).encode()
    assert sent.content == expected
    assert sent.content == encode_body(request.body)
    assert "文档里的问题是什么" in sent.content.decode("utf-8")  # UTF-8, not \u-escaped
    assert sent.method == "POST"
    assert str(sent.url) == request.url
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["accept-encoding"] == "identity"
    assert sent.headers[auth[0]] == auth[1]
    for name, value in request.headers.items():
        assert sent.headers[name] == value
    assert SECRET not in str(sent.url)
    assert SECRET.encode() not in sent.content


def test_anthropic_version_on_the_wire():
    script = Script(resp(200, {"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}))
    result, _ = call(script, provider="anthropic", base_url="https://api.anthropic.test")
    assert result.ok
    assert script.requests[0].headers["anthropic-version"] == "2023-06-01"
    assert str(script.requests[0].url) == "https://api.anthropic.test/v1/messages"


def test_every_retry_resends_identical_bytes():
    script = Script(resp(503, error_body("busy")), httpx.ConnectError("x"), resp(200))
    result, _ = call(script)
    assert result.attempts == 3
    assert len({r.content for r in script.requests}) == 1
    assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in script.requests)


def test_no_key_means_no_auth_header():
    script = Script(resp(200))
    result, _ = call(script, api_key=None)
    assert result.ok
    headers = script.requests[0].headers
    assert "authorization" not in headers and "x-api-key" not in headers and "x-goog-api-key" not in headers


def test_local_transport_runs_the_offline_provider_end_to_end():
    from wildtrace.core.prompts import answer_prompt

    async def run():
        p = make_provider(spec("offline", route="extractive-bm25", base_url="http://offline.local/v1"))
        ep = Endpoint(p, None, FAST, transport=local_transport(p.answer_locally))
        try:
            doc = "The bridge was completed in 1932. It is painted red."
            return await ep.call(p.build_request(answer_prompt("When was the bridge completed?", doc), SAMPLING))
        finally:
            await ep.aclose()

    result = asyncio.run(run())
    assert result.ok and result.attempts == 1
    assert result.text == "The bridge was completed in 1932."


# --------------------------------------------------------------------------------------
# the concurrency bound
# --------------------------------------------------------------------------------------


def test_concurrency_bound_is_respected_and_reached():
    state = {"in_flight": 0, "peak": 0, "total": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        state["in_flight"] += 1
        state["total"] += 1
        state["peak"] = max(state["peak"], state["in_flight"])
        try:
            await asyncio.sleep(0.05)
        finally:
            state["in_flight"] -= 1
        return httpx.Response(200, json=ok_body())

    async def run():
        # plain: a streamed endpoint's first sends are clocked by their heads for a second at most
        p = make_provider(spec(max_concurrency=3, stream=False))
        ep = Endpoint(p, SECRET, FAST, transport=httpx.MockTransport(handler))
        try:
            return await asyncio.gather(*(ep.call(p.build_request(f"{PROMPT} #{i}", SAMPLING)) for i in range(12)))
        finally:
            await ep.aclose()

    results = asyncio.run(run())
    assert len(results) == 12 and all(r.ok for r in results)
    assert state["total"] == 12
    assert state["peak"] == 3
    assert state["in_flight"] == 0


# --------------------------------------------------------------------------------------
# RetryPolicy.delay and parse_retry_after
# --------------------------------------------------------------------------------------

HTTP_DATE = "Wed, 21 Oct 2015 07:28:00 GMT"
HTTP_DATE_TS = datetime(2015, 10, 21, 7, 28, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("value", "now", "expected"),
    [
        (None, None, None),
        ("", None, None),
        ("   ", None, None),
        ("0", None, 0.0),
        ("5", None, 5.0),
        (" 120 ", None, 120.0),
        ("0.2", None, 0.2),
        ("-3", None, 0.0),
        ("garbage", None, None),
        ("soon", HTTP_DATE_TS, None),
        ("Wed, 32 Foo 2015 99:99:99 GMT", HTTP_DATE_TS, None),
        (HTTP_DATE, HTTP_DATE_TS - 30, 30.0),
        (HTTP_DATE, HTTP_DATE_TS - 0.5, 0.5),
        (HTTP_DATE, HTTP_DATE_TS, 0.0),
        (HTTP_DATE, HTTP_DATE_TS + 3600, 0.0),  # a date in the past means "now"
        ("Wed, 21 Oct 2015 09:28:00 +0200", HTTP_DATE_TS - 10, 10.0),
    ],
)
def test_parse_retry_after(value, now, expected):
    got = parse_retry_after(value, now=now)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


@pytest.fixture
def non_utc_local_time(monkeypatch):
    """Run with the process's local time zone at UTC-5 (a POSIX TZ string: no tzdata needed)."""
    monkeypatch.setenv("TZ", "EST5")
    time.tzset()
    assert time.timezone == 5 * 3600
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("value", [HTTP_DATE, "Wednesday, 21-Oct-15 07:28:00 GMT", "Wed, 21 Oct 2015 02:28:00 -0500"])
def test_parse_retry_after_zoned_dates_ignore_local_time(non_utc_local_time, value):
    assert parse_retry_after(value, now=HTTP_DATE_TS - 30) == pytest.approx(30.0)


@pytest.mark.parametrize("value", ["Wed Oct 21 07:28:00 2015", "Wed, 21 Oct 2015 07:28:00 -0000"])
def test_parse_retry_after_asctime_date_is_gmt(non_utc_local_time, value):
    assert parse_retry_after(value, now=HTTP_DATE_TS - 30) == pytest.approx(30.0)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "Infinity"])
def test_parse_retry_after_non_finite_is_garbage(value):
    assert parse_retry_after(value) is None


def test_parse_retry_after_http_date_uses_the_clock_by_default():
    future = time.time() + 100
    value = datetime.fromtimestamp(future, tz=UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
    got = parse_retry_after(value)
    assert 95 <= got <= 100


@pytest.mark.parametrize(
    ("policy", "retry_after", "expected"),
    [
        (RetryPolicy(), 0.0, 0.0),
        (RetryPolicy(), 12.5, 12.5),
        (RetryPolicy(), 300.0, 300.0),
        (RetryPolicy(), 301.0, 300.0),
        (RetryPolicy(), float("inf"), 300.0),
        (RetryPolicy(retry_after_max_s=10.0), 86400.0, 10.0),
        (RetryPolicy(), -5.0, 0.0),
    ],
)
def test_delay_honours_and_caps_retry_after(policy, retry_after, expected):
    rng = random.Random(0)
    state = rng.getstate()
    for n in (1, 3, 10):
        assert policy.delay(n, retry_after, rng) == expected
    assert rng.getstate() == state  # Retry-After consumes no jitter


@pytest.mark.parametrize(
    ("policy", "retry_number", "ceiling"),
    [
        (RetryPolicy(), 1, 1.0),
        (RetryPolicy(), 2, 2.0),
        (RetryPolicy(), 3, 4.0),
        (RetryPolicy(), 6, 32.0),
        (RetryPolicy(), 7, 60.0),
        (RetryPolicy(), 20, 60.0),
        (RetryPolicy(backoff_base_s=0.5, backoff_max_s=3.0), 1, 0.5),
        (RetryPolicy(backoff_base_s=0.5, backoff_max_s=3.0), 3, 2.0),
        (RetryPolicy(backoff_base_s=0.5, backoff_max_s=3.0), 4, 3.0),
        (FAST, 1, 0.001),
        (FAST, 5, 0.01),
    ],
)
def test_delay_exponential_with_jitter(policy, retry_number, ceiling):
    rng = random.Random(42)
    mirror = random.Random(42)
    for _ in range(50):
        delay = policy.delay(retry_number, None, rng)
        assert delay == pytest.approx(ceiling * (0.5 + 0.5 * mirror.random()))
        assert 0.5 * ceiling <= delay <= ceiling


def test_delay_jitter_spans_the_range():
    policy = RetryPolicy()
    rng = random.Random(1)
    delays = [policy.delay(4, None, rng) for _ in range(500)]
    assert min(delays) >= 4.0 and max(delays) <= 8.0
    assert min(delays) < 4.4 and max(delays) > 7.6


def test_default_policy():
    policy = RetryPolicy()
    assert (policy.max_retries, policy.backoff_base_s, policy.backoff_max_s, policy.retry_after_max_s) == (
        5, 1.0, 60.0, 300.0)


# --------------------------------------------------------------------------------------
# the outcome cache inside Endpoint.call
# --------------------------------------------------------------------------------------


def cache_text(directory: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in sorted(directory.rglob("*")) if p.is_file())


async def _cached_calls(script: Script, cache: Cache, calls: list[tuple[str, int]], provider: str = "openai",
                        **spec_overrides) -> tuple[list[CallResult], Endpoint]:
    p = make_provider(spec(provider, **spec_overrides))
    endpoint = Endpoint(p, SECRET, FAST, cache=cache, transport=httpx.MockTransport(script))
    try:
        results = [await endpoint.call(p.build_request(prompt, SAMPLING), replicate) for prompt, replicate in calls]
    finally:
        await endpoint.aclose()
    return results, endpoint


def cached_calls(script, cache, calls, **kw):
    return asyncio.run(_cached_calls(script, cache, calls, **kw))


def test_cache_serves_the_second_identical_call(tmp_path):
    cache = Cache(tmp_path / "cache")
    script = Script(resp(200))
    (first, second), cached = cached_calls(script, cache, [(PROMPT, 0), (PROMPT, 0)])
    assert script.count == 1
    assert first.ok and second.ok
    assert second.text == first.text == "The answer is 42."
    assert second.usage == first.usage
    assert second.http_status == 200 and second.attempts == first.attempts
    assert cached.hits == 1 and cache.stores == 1
    assert cached.label == "model"


def test_cache_survives_a_new_endpoint(tmp_path):
    cache_dir = tmp_path / "cache"
    script = Script(resp(200))
    cached_calls(script, Cache(cache_dir), [(PROMPT, 0)])
    second_script = Script(resp(500, error_body("should not be called")))
    (again,), cached = cached_calls(second_script, Cache(cache_dir), [(PROMPT, 0)])
    assert second_script.count == 0
    assert again.ok and again.text == "The answer is 42."
    assert cached.hits == 1


def test_cache_distinguishes_replicates_and_prompts(tmp_path):
    cache = Cache(tmp_path / "cache")
    script = Script(resp(200))
    results, cached = cached_calls(script, cache, [(PROMPT, 0), (PROMPT, 1), (PROMPT, 1), (PROMPT + "!", 0)])
    assert script.count == 3
    assert all(r.ok for r in results)
    assert cached.hits == 1 and cache.stores == 3


def test_cache_distinguishes_routes(tmp_path):
    cache = Cache(tmp_path / "cache")
    script = Script(resp(200))
    cached_calls(script, cache, [(PROMPT, 0)], route="model-a")
    cached_calls(script, cache, [(PROMPT, 0)], route="model-b")
    assert script.count == 2


def test_retries_exhausted_is_not_stored(tmp_path):
    cache = Cache(tmp_path / "cache")
    script = Script(resp(503, error_body("busy")))
    (first, second), cached = cached_calls(script, cache, [(PROMPT, 0), (PROMPT, 0)])
    assert first.reason == second.reason == R.FailReason.RETRIES_EXHAUSTED
    assert script.count == 12  # 6 attempts, twice: nothing was served from the cache
    assert cached.hits == 0 and cache.stores == 0
    assert cache_text(tmp_path / "cache") == ""


def test_exhausted_then_success_is_stored_on_the_rerun(tmp_path):
    cache = Cache(tmp_path / "cache")
    script = Script(*([resp(503, error_body("busy"))] * 6), resp(200))
    results, _ = cached_calls(script, cache, [(PROMPT, 0), (PROMPT, 0), (PROMPT, 0)])
    assert [r.reason for r in results] == [R.FailReason.RETRIES_EXHAUSTED, None, None]
    assert script.count == 7


@pytest.mark.parametrize(
    "script_steps",
    [
        [resp(400, error_body("bad request"))],
        [resp(400, {"error": {"message": "maximum context length exceeded", "code": "context_length_exceeded"}})],
        [httpx.ReadTimeout("t")],
        [resp(200, text="<html>gateway</html>")],
    ],
    ids=["http_error", "context_length", "timeout", "bad_response"],
)
def test_failures_that_are_not_outcomes_are_not_stored(tmp_path, script_steps):
    cache = Cache(tmp_path / "cache")
    script = Script(*script_steps)
    (first, second), _ = cached_calls(script, cache, [(PROMPT, 0), (PROMPT, 0)])
    assert not first.ok and first.reason == second.reason
    assert cache.stores == 0
    assert script.count == 2 * first.attempts


def test_refusal_is_stored(tmp_path):
    cache = Cache(tmp_path / "cache")
    script = Script(resp(200, refusal_body()), resp(200))
    (first, second), cached = cached_calls(script, cache, [(PROMPT, 0), (PROMPT, 0)])
    assert script.count == 1
    assert first.reason == second.reason == R.FailReason.REFUSAL
    assert second.error == "I can't help with that."
    assert cached.hits == 1 and cache.stores == 1


def test_empty_output_is_stored(tmp_path):
    cache = Cache(tmp_path / "cache")
    script = Script(resp(200, ok_body("  ")), resp(200))
    (first, second), _ = cached_calls(script, cache, [(PROMPT, 0), (PROMPT, 0)])
    assert script.count == 1
    assert first.reason == second.reason == R.FailReason.EMPTY_OUTPUT


def test_disabled_cache_always_calls(tmp_path):
    cache = Cache(tmp_path / "cache", enabled=False)
    script = Script(resp(200))
    cached_calls(script, cache, [(PROMPT, 0), (PROMPT, 0)])
    assert script.count == 2
    assert not (tmp_path / "cache").exists() or cache_text(tmp_path / "cache") == ""


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_cache_file_never_holds_the_key_or_the_prompt(tmp_path, provider):
    cache = Cache(tmp_path / "cache")
    script = Script(resp(429, error_body("rl"), {"Retry-After": "0"}), resp(200, OK_BODIES[provider]))
    (result,), _ = cached_calls(script, cache, [(PROMPT, 0)], provider=provider)
    assert result.ok and result.attempts == 2
    files = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and "pacing" not in p.parts]
    assert len(files) == 1  # the outcome (the pacing state beside it holds times and token counts)
    text = files[0].read_text(encoding="utf-8")
    assert SECRET not in text
    assert "UNIQUE-PROMPT-MARKER" not in text
    assert "文档里的问题是什么" not in text
    entry = json.loads(text)
    assert set(entry) == {"key", "material", "outcome"}
    assert set(entry["material"]) == {"v", "provider", "url", "route", "body_sha256", "replicate"}
    assert entry["outcome"]["payload"] == OK_BODIES[provider]
    assert entry["outcome"]["attempts"] == 2
    assert not list((tmp_path / "cache").rglob(".tmp-*"))


def test_corrupt_cache_file_is_a_miss(tmp_path):
    cache = Cache(tmp_path / "cache")
    script = Script(resp(200))
    cached_calls(script, cache, [(PROMPT, 0)])
    (path,) = [p for p in (tmp_path / "cache").rglob("*.json")]
    path.write_text("{truncated", encoding="utf-8")
    (result,), cached = cached_calls(script, cache, [(PROMPT, 0)])
    assert result.ok and script.count == 2 and cached.hits == 0


def test_cache_hits_do_not_wait_for_the_concurrency_bound(tmp_path):
    cache = Cache(tmp_path / "cache")

    async def run():
        release = asyncio.Event()
        calls = {"n": 0}

        async def handler(request: httpx.Request) -> httpx.Response:
            calls["n"] += 1
            if calls["n"] > 1:
                await release.wait()
            return httpx.Response(200, json=ok_body())

        p = make_provider(spec(max_concurrency=1))
        endpoint = Endpoint(p, SECRET, FAST, cache=cache, transport=httpx.MockTransport(handler))
        try:
            await endpoint.call(p.build_request(PROMPT, SAMPLING), 0)  # fills the cache
            blocked = asyncio.create_task(endpoint.call(p.build_request("another prompt", SAMPLING), 0))
            await asyncio.sleep(0.01)  # the miss now holds the only slot
            hit = await asyncio.wait_for(endpoint.call(p.build_request(PROMPT, SAMPLING), 0), timeout=0.5)
            assert not blocked.done()
            release.set()
            miss = await blocked
            return hit, miss, calls["n"]
        finally:
            await endpoint.aclose()

    hit, miss, n = asyncio.run(run())
    assert hit.ok and miss.ok and n == 2


@pytest.mark.parametrize("content", ["{}", '{"key": "k"}', '{"outcome": null}'])
def test_cache_entry_without_outcome_is_a_miss(tmp_path, content):
    cache = Cache(tmp_path / "cache")
    script = Script(resp(200))
    cached_calls(script, cache, [(PROMPT, 0)])
    (path,) = list((tmp_path / "cache").rglob("*.json"))
    path.write_text(content, encoding="utf-8")
    (result,), _ = cached_calls(script, cache, [(PROMPT, 0)])
    assert result.ok and script.count == 2


@pytest.mark.parametrize("content", ["null", "[]", "42"])
def test_cache_non_object_entry_is_a_miss(tmp_path, content):
    cache = Cache(tmp_path / "cache")
    key = "ab" + "0" * 62
    path = tmp_path / "cache" / "ab" / f"{key}.json"
    path.parent.mkdir(parents=True)
    path.write_text(content, encoding="utf-8")
    assert cache.get(key) is None


@pytest.mark.parametrize(
    ("reason", "ok", "storable"),
    [
        (None, True, True),
        (R.FailReason.REFUSAL, False, True),
        (R.FailReason.EMPTY_OUTPUT, False, True),
        (R.FailReason.RETRIES_EXHAUSTED, False, False),
        (R.FailReason.HTTP_ERROR, False, False),
        (R.FailReason.CONTEXT_LENGTH, False, False),
        (R.FailReason.BAD_RESPONSE, False, False),
        (R.FailReason.TRANSPORT_ERROR, False, False),
    ],
)
def test_is_storable_table(reason, ok, storable):
    result = CallResult(ok, None, reason, None, None, Usage(), 1, 0.0, 200, None)
    assert is_storable(result) is storable
