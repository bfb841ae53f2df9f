"""The endpoint's layers, each on its own: one attempt (runtime/net/attempt.py: bytes in, an Attempt
out) and the call loop (runtime/net/call.py: attempts under the retry rule, no cache). The endpoint
over both (runtime/net/endpoint.py) is tested end to end in test_http_retry.py and test_http_faults.py.
``httpx.MockTransport`` stands in for the server: the wire is not the point here.
"""

from __future__ import annotations

import asyncio
import gzip
import json

import httpx

from conftest import endpoint_spec
from wildtrace.core.records import FailReason
from wildtrace.providers.base import Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.net.attempt import Attempt, Sender, encode_body
from wildtrace.runtime.net.call import CallLoop
from wildtrace.runtime.net.client import make_client
from wildtrace.runtime.net.ratelimit import Cost
from wildtrace.runtime.net.retry import RetryPolicy

ANSWER = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "The seal."}, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


def sender(handler, max_response_bytes: int = 1 << 20) -> Sender:
    provider = make_provider(endpoint_spec("openai", route="m", base_url="https://api.example.test/v1"))
    return Sender(provider, {"authorization": "Bearer sk-layer"}, make_client(5.0, 2, httpx.MockTransport(handler)),
                  streaming=False, max_response_bytes=max_response_bytes)


def attempt_of(handler, **kwargs) -> tuple[Attempt, list[tuple[int, dict]]]:
    heads: list[tuple[int, dict]] = []

    async def go() -> Attempt:
        one = sender(handler, **kwargs)
        request = one.provider.build_request("What failed?", Sampling(0.0, 16))
        try:
            return await one.send(request, encode_body(request.body), lambda s, h: heads.append((s, h)))
        finally:
            await one.aclose()

    return asyncio.run(go()), heads


def test_one_attempt_decodes_a_gzip_body_and_tells_its_head_first() -> None:
    body = gzip.compress(json.dumps(ANSWER).encode())
    attempt, heads = attempt_of(lambda r: httpx.Response(200, content=body, headers={"content-encoding": "gzip"}))
    assert attempt.success and attempt.payload == ANSWER and attempt.size == len(json.dumps(ANSWER))
    assert [status for status, _ in heads] == [200] and heads[0][1]["content-encoding"] == "gzip"


def test_one_attempt_refuses_a_body_past_its_bound() -> None:
    attempt, _ = attempt_of(lambda r: httpx.Response(200, json=ANSWER), max_response_bytes=64)
    assert attempt.too_large and not attempt.success and attempt.payload is None


def test_one_attempt_sends_the_bytes_it_is_given_with_the_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=ANSWER)

    attempt, _ = attempt_of(handler)
    assert attempt.success and len(seen) == 1
    assert seen[0].headers["authorization"] == "Bearer sk-layer" and seen[0].headers["accept-encoding"] == "identity"
    assert json.loads(seen[0].content)["messages"][-1]["content"] == "What failed?"


def test_the_call_loop_retries_a_503_then_returns_the_answer_without_a_cache() -> None:
    statuses = iter([503, 200])

    def handler(request: httpx.Request) -> httpx.Response:
        status = next(statuses)
        return httpx.Response(status, json=ANSWER if status == 200 else {"error": {"message": "busy"}})

    async def go():
        one = sender(handler)
        retried: list[str] = []
        loop = CallLoop(one.provider, one, RetryPolicy(backoff_base_s=0.001, backoff_max_s=0.002),
                        on_retry=retried.append, seed=1)
        request = one.provider.build_request("What failed?", Sampling(0.0, 16))
        try:
            return await loop.fetch(request, encode_body(request.body), Cost(), 0), loop, retried
        finally:
            await one.aclose()

    result, loop, retried = asyncio.run(go())
    assert result.ok and result.text == "The seal." and result.attempts == 2
    assert (loop.retries, retried, loop.sender.requests_sent) == (1, ["model"], 2)


def test_the_call_loop_latches_a_quota_refusal_for_every_later_call() -> None:
    sent: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(1)
        return httpx.Response(429, json={"error": {"message": "You exceeded your current quota",
                                                   "code": "insufficient_quota"}})

    async def go():
        one = sender(handler)
        loop = CallLoop(one.provider, one, RetryPolicy(backoff_base_s=0.001, backoff_max_s=0.002))
        request = one.provider.build_request("What failed?", Sampling(0.0, 16))
        try:
            first = await loop.fetch(request, encode_body(request.body), Cost(), 0)
            second = await loop.fetch(request, encode_body(request.body), Cost(), 0)
            return first, second
        finally:
            await one.aclose()

    first, second = asyncio.run(go())
    assert first.reason == second.reason == FailReason.QUOTA_EXHAUSTED
    assert len(sent) == 1 and second.attempts == 0 and second.error is not None and "not sent" in second.error
