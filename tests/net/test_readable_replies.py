"""Replies that can be read are read, and timeouts bound what the reference says: against
``tests/servers/loopback.py``'s real server on 127.0.0.1 through the endpoint's real client.

- a gateway that answers a request not streamed with events (``text/event-stream``) is read
  as the stream it is, not a bad response retried six times;
- every blocked finish the google-genai types list (Model Armor's among them) is a refusal,
  also when it ends a stream that already carried text;
- ``timeout_s`` bounds the whole response of a request not streamed: a body trickled a few
  bytes at a time stops there, not at ``max_call_s``.
"""

from __future__ import annotations

import asyncio

import pytest

from conftest import endpoint_spec
from servers.loopback import LoopbackServer, Reply, chat_stream, sse
from wildtrace.core.records import CallResult, FailReason
from wildtrace.providers.base import Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.net.endpoint import Endpoint
from wildtrace.runtime.net.retry import RetryPolicy

ONCE = RetryPolicy(max_retries=0)


def call(server: LoopbackServer, provider: str = "openai", retry: RetryPolicy = ONCE, **spec) -> CallResult:
    base_url = server.url + ("/v1" if provider == "openai" else "")
    p = make_provider(endpoint_spec(provider, route="m", base_url=base_url, **spec))

    async def go() -> CallResult:
        endpoint = Endpoint(p, "sk-readable", retry)
        try:
            return await endpoint.call(p.build_request("What failed?", Sampling(0.0, 64)))
        finally:
            await endpoint.aclose()

    return asyncio.run(go())


def test_an_sse_body_to_a_request_not_streamed_is_read_as_the_stream() -> None:
    with LoopbackServer(lambda c: chat_stream("The pump failed.")) as server:
        result = call(server, stream=False, retry=RetryPolicy(max_retries=2, backoff_base_s=0.001,
                                                              backoff_max_s=0.002))
        assert len(server.calls) == 1 and server.calls[0].body.get("stream") is None
    assert result.ok and result.text == "The pump failed." and result.attempts == 1


def _gemini_stream(finish: str) -> Reply:
    return sse({"candidates": [{"content": {"role": "model", "parts": [{"text": "The pump "}]}, "index": 0}],
                "modelVersion": "m"},
               {"candidates": [{"content": {"role": "model", "parts": [{"text": "failed."}]}, "index": 0,
                                "finishReason": finish}],
                "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 5}, "modelVersion": "m"})


def _gemini_plain(finish: str) -> Reply:
    return Reply(200, {"candidates": [{"content": {"role": "model", "parts": [{"text": "The pump failed."}]},
                                       "finishReason": finish, "index": 0}],
                       "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 5}, "modelVersion": "m"})


BLOCKED = ["SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
           "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "MODEL_ARMOR"]


@pytest.mark.parametrize("stream", [True, False], ids=["after-streamed-text", "plain"])
@pytest.mark.parametrize("finish", BLOCKED)
def test_every_blocked_gemini_finish_is_a_refusal(finish: str, stream: bool) -> None:
    reply = _gemini_stream(finish) if stream else _gemini_plain(finish)
    with LoopbackServer(lambda c: reply) as server:
        result = call(server, "gemini", stream=stream)
    assert (result.ok, result.reason, result.error) == (False, FailReason.REFUSAL, f"finishReason={finish}")
    assert result.text == "The pump failed."  # kept as evidence, never judged


@pytest.mark.parametrize("finish", ["STOP", "MAX_TOKENS"])
def test_a_finish_that_is_not_a_block_is_an_answer(finish: str) -> None:
    with LoopbackServer(lambda c: _gemini_stream(finish)) as server:
        result = call(server, "gemini", stream=True)
    assert result.ok and result.text == "The pump failed." and result.finish_reason == finish


def test_timeout_s_bounds_the_whole_body_of_a_request_not_streamed() -> None:
    body = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"The pump failed."}}]}'
    trickle = Reply(200, chunks=[body[i:i + 2] for i in range(0, len(body), 2)], chunk_delay_s=0.5)
    with LoopbackServer(lambda c: trickle) as server:
        result = call(server, stream=False, timeout_s=1.0, max_call_s=20.0)
    assert result.reason == FailReason.RETRIES_EXHAUSTED
    assert result.error == "timeout: the whole response took longer than timeout_s=1.0s"
