"""The call loop (runtime/net/call.py: attempts under the retry rule, no cache), on its own. One
attempt under it is tested in test_attempt.py; the endpoint over both (runtime/net/endpoint.py)
end to end in test_http_retry.py and test_http_faults.py.
``httpx.MockTransport`` stands in for the server: the wire is not the point here.
"""

from __future__ import annotations

import asyncio

import httpx

from conftest import endpoint_spec
from wildtrace.core.records import FailReason
from wildtrace.providers.base import Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.net.attempt import Sender, encode_body
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
