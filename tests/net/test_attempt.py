"""One attempt (runtime/net/attempt.py): a request's bytes in, an ``Attempt`` out.

``httpx.MockTransport`` stands in for the server, through the one client factory
(``make_client(..., transport=...)``): the wire is not the point here, what each reply becomes is.
Statuses, headers, bodies, encodings, streams and transport failures, each mapped to its outcome;
the retry rule over these outcomes is tested in test_next_step.py, the endpoint over real
sockets in test_http_faults.py.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from conftest import endpoint_spec
from wildtrace.providers.base import Sampling
from wildtrace.providers.openai.wire import FAULT_STATUS
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.net.attempt import ERROR_BODY_LIMIT, Attempt, Sender, encode_body
from wildtrace.runtime.net.client import make_client

ANSWER = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "The seal."}, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
EVENTS = [{"model": "m-1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "The "}}]},
          {"model": "m-1", "choices": [{"index": 0, "delta": {"content": "seal."}, "finish_reason": "stop"}]},
          {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}]
Handler = Callable[[httpx.Request], httpx.Response]


def sse_bytes(events: list, done: bool = True) -> bytes:
    body = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)
    return body + (b"data: [DONE]\n\n" if done else b"")


async def pieces(*chunks: bytes, delay_s: float = 0.0) -> AsyncIterator[bytes]:
    """A body sent in pieces (a stream as it arrives), ``delay_s`` before each."""
    for chunk in chunks:
        await asyncio.sleep(delay_s)
        yield chunk


def attempt_of(handler, max_response_bytes: int = 1 << 20, streaming: bool = False,
               **spec: float) -> tuple[Attempt, list[tuple[int, dict]]]:
    """One attempt against ``handler``; the heads ``on_head`` was told."""
    heads: list[tuple[int, dict]] = []

    async def go() -> Attempt:
        provider = make_provider(endpoint_spec("openai", route="m", base_url="https://api.example.test/v1", **spec))
        one = Sender(provider, {"authorization": "Bearer sk-layer"}, make_client(5.0, 2, httpx.MockTransport(handler)),
                     streaming=streaming, max_response_bytes=max_response_bytes)
        request = provider.build_request("What failed?", Sampling(0.0, 16))
        try:
            return await one.send(request, encode_body(request.body), lambda s, h: heads.append((s, h)))
        finally:
            await one.aclose()

    return asyncio.run(go()), heads


def reply(status: int, content: bytes | AsyncIterator[bytes] = b"", **headers: str) -> Handler:
    """A reply of ``content`` as sent (bytes are not decoded on the way, whatever the headers say)."""
    stream = httpx.ByteStream(content) if isinstance(content, bytes) else None
    return lambda request: httpx.Response(status, headers=headers, stream=stream, content=None if stream else content)


def raises(exc: Exception) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc
    return handler


# ---------------------------------------------------------------------- what is sent


def test_one_attempt_sends_the_bytes_it_is_given_with_the_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=ANSWER)

    attempt, _ = attempt_of(handler)
    assert attempt.success and len(seen) == 1
    assert (seen[0].method, str(seen[0].url)) == ("POST", "https://api.example.test/v1/chat/completions")
    assert seen[0].headers["authorization"] == "Bearer sk-layer" and seen[0].headers["accept-encoding"] == "identity"
    assert seen[0].headers["content-type"] == "application/json"
    assert json.loads(seen[0].content)["messages"][-1]["content"] == "What failed?"


# ---------------------------------------------------------------------- statuses and headers


@pytest.mark.parametrize(("status", "body", "success", "payload"), [
    (200, json.dumps(ANSWER).encode(), True, ANSWER),
    (201, json.dumps(ANSWER).encode(), True, ANSWER),
    (429, b'{"error":{"message":"slow down"}}', False, {"error": {"message": "slow down"}}),
    (500, b'{"error":{"message":"boom"}}', False, {"error": {"message": "boom"}}),
    (503, b"<html>busy</html>", False, {"non_json_body": "<html>busy</html>"}),
    (400, b"", False, {"non_json_body": ""}),
])
def test_a_status_and_its_body_become_the_attempt(status, body, success, payload) -> None:
    attempt, heads = attempt_of(reply(status, body))
    assert (attempt.status, attempt.success, attempt.payload, attempt.failure) == (status, success, payload, None)
    assert attempt.size == len(body) and attempt.head == body[:1024]
    assert [s for s, _ in heads] == [status]


def test_headers_are_told_first_and_kept_in_lower_case() -> None:
    attempt, heads = attempt_of(reply(429, b"{}", **{"Retry-After": "7", "X-RateLimit-Remaining-Requests": "0"}))
    assert heads[0][1]["retry-after"] == "7" and attempt.headers["x-ratelimit-remaining-requests"] == "0"
    assert heads[0][1] == attempt.headers


def test_a_non_finite_number_in_a_body_is_noted_and_nulled() -> None:
    attempt, _ = attempt_of(reply(200, b'{"choices":[],"score":NaN}'))
    assert attempt.payload == {"choices": [], "score": None} and attempt.notes


@pytest.mark.parametrize(("body", "status"), [
    ({"choices": [{"index": 0, "message": {"content": ""}, "finish_reason": "network_error"}]}, FAULT_STATUS),  # GLM
    ({"choices": [], "base_resp": {"status_code": 1002, "status_msg": "rate limit"}}, 429),  # MiniMax
])
def test_a_200_that_is_an_error_in_disguise_counts_as_its_status(body, status) -> None:
    attempt, heads = attempt_of(lambda request: httpx.Response(200, json=body))
    assert attempt.status == status and not attempt.success and heads[0][0] == 200


# ---------------------------------------------------------------------- size bounds


def test_a_body_past_its_bound_is_refused() -> None:
    attempt, _ = attempt_of(lambda r: httpx.Response(200, json=ANSWER), max_response_bytes=64)
    assert attempt.too_large and not attempt.success and attempt.payload is None


def test_an_error_body_is_kept_to_its_first_megabyte() -> None:
    body = b'{"error":"' + b"x" * (2 * ERROR_BODY_LIMIT) + b'"}'
    attempt, _ = attempt_of(reply(500, body), max_response_bytes=64)
    assert attempt.status == 500 and not attempt.too_large and attempt.size == ERROR_BODY_LIMIT
    assert attempt.payload["non_json_body"].startswith('{"error":"xxx')


# ---------------------------------------------------------------------- encodings


def test_a_gzip_body_is_decoded_and_its_head_told_first() -> None:
    body = gzip.compress(json.dumps(ANSWER).encode())
    attempt, heads = attempt_of(reply(200, body, **{"content-encoding": "gzip"}))
    assert attempt.success and attempt.payload == ANSWER and attempt.size == len(json.dumps(ANSWER))
    assert [status for status, _ in heads] == [200] and heads[0][1]["content-encoding"] == "gzip"


def _raw_deflate(data: bytes) -> bytes:
    z = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return z.compress(data) + z.flush()


@pytest.mark.parametrize(("encoding", "encode"), [
    ("deflate", zlib.compress),  # RFC 9110's zlib stream
    ("deflate", _raw_deflate),  # raw deflate, as some servers send
    ("x-gzip", gzip.compress),
    ("gzip, gzip", lambda data: gzip.compress(gzip.compress(data))),  # two layers, undone in order
    ("gzip", lambda data: gzip.compress(data[:40]) + gzip.compress(data[40:])),  # two gzip members
])
def test_every_encoding_decoded_here(encoding, encode) -> None:
    attempt, _ = attempt_of(reply(200, encode(json.dumps(ANSWER).encode()), **{"content-encoding": encoding}))
    assert attempt.success and attempt.payload == ANSWER


@pytest.mark.parametrize(("encoding", "body", "bad"), [
    ("br", b"\x0b\x02\x80", "Content-Encoding br is not decoded here"),
    ("gzip", b"\x1f\x8b\x08\x00garbage-not-deflate", "the gzip body does not decode"),
    ("gzip", gzip.compress(json.dumps(ANSWER).encode())[:-12], "the gzip body ends before its compressed stream does"),
    ("gzip, gzip, gzip, gzip, gzip", b"", "Content-Encoding of 5 layers is not decoded here"),
])
def test_a_2xx_body_that_does_not_decode_is_bad_not_parsed(encoding, body, bad) -> None:
    attempt, _ = attempt_of(reply(200, body, **{"content-encoding": encoding}))
    assert attempt.status == 200 and not attempt.success and attempt.payload is None
    assert attempt.bad is not None and attempt.bad.startswith(bad)


def test_an_error_body_in_an_encoding_not_decoded_is_kept_as_sent() -> None:
    attempt, _ = attempt_of(reply(503, b"\x0b\x02\x80", **{"content-encoding": "br"}))
    assert attempt.status == 503 and attempt.bad is None and attempt.size == 3


def test_a_gzip_bomb_stops_at_the_bound() -> None:
    bomb = gzip.compress(b'{"a":"' + b"0" * (64 << 20) + b'"}')
    attempt, _ = attempt_of(reply(200, bomb, **{"content-encoding": "gzip"}), max_response_bytes=1 << 20)
    assert attempt.too_large and attempt.payload is None


# ---------------------------------------------------------------------- streams


def test_a_stream_is_assembled_into_the_body_a_plain_call_returns() -> None:
    attempt, _ = attempt_of(reply(200, pieces(sse_bytes(EVENTS)[:30], sse_bytes(EVENTS)[30:]),
                                  **{"content-type": "text/event-stream"}), streaming=True)
    assert attempt.success and attempt.size == len(sse_bytes(EVENTS))
    message = attempt.payload["choices"][0]
    assert (message["message"]["content"], message["finish_reason"]) == ("The seal.", "stop")
    assert attempt.payload["usage"] == {"prompt_tokens": 3, "completion_tokens": 2}


def test_events_sent_to_a_plain_request_are_read_as_events() -> None:
    attempt, _ = attempt_of(reply(200, sse_bytes(EVENTS), **{"content-type": "text/event-stream"}))
    assert attempt.success and attempt.payload["choices"][0]["message"]["content"] == "The seal."


def test_events_mislabelled_as_json_are_read_as_events() -> None:
    attempt, _ = attempt_of(reply(200, sse_bytes(EVENTS), **{"content-type": "application/json"}))
    assert attempt.success and attempt.payload["choices"][0]["message"]["content"] == "The seal."


def test_a_gzip_stream_is_decoded_event_by_event() -> None:
    attempt, _ = attempt_of(reply(200, gzip.compress(sse_bytes(EVENTS)),
                                  **{"content-type": "text/event-stream", "content-encoding": "gzip"}), streaming=True)
    assert attempt.success and attempt.payload["choices"][0]["message"]["content"] == "The seal."


def test_an_error_event_mid_stream_counts_as_the_status_it_stands_for() -> None:
    events = [EVENTS[0], {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}}]
    attempt, heads = attempt_of(reply(200, sse_bytes(events, done=False), **{"content-type": "text/event-stream"}),
                                streaming=True)
    assert heads[0][0] == 200 and attempt.status == 429 and not attempt.success
    assert attempt.payload["error"]["message"] == "Rate limit reached"


def test_a_stream_cut_before_its_end_is_a_transport_failure() -> None:
    attempt, _ = attempt_of(reply(200, sse_bytes(EVENTS[:1], done=False), **{"content-type": "text/event-stream"}),
                            streaming=True)
    assert attempt.status is None and attempt.failure is not None
    assert attempt.failure.startswith("transport_error: stream cut short") and not attempt.unsent


def test_malformed_events_are_a_bad_response_kept_for_its_text() -> None:
    attempt, _ = attempt_of(reply(200, b"data: {not json\n\n", **{"content-type": "text/event-stream"}),
                            streaming=True)
    assert attempt.status == 200 and "unreadable stream chunk" in attempt.payload["malformed_stream"]
    assert attempt.head == b"data: {not json\n\n"


def test_a_stream_past_its_bound_is_refused() -> None:
    attempt, _ = attempt_of(reply(200, pieces(*[sse_bytes(EVENTS[:1], done=False)] * 50),
                                  **{"content-type": "text/event-stream"}), max_response_bytes=1024, streaming=True)
    assert attempt.too_large and attempt.payload is None


# ---------------------------------------------------------------------- transport failures and time


@pytest.mark.parametrize(("exc", "failure", "unsent"), [
    (httpx.ConnectError("connection refused"), "transport_error: ConnectError: connection refused", True),
    (httpx.ConnectTimeout("connect"), "timeout: ConnectTimeout: no byte for timeout_s=30.0s", True),
    (httpx.PoolTimeout("pool"), "timeout: PoolTimeout: no byte for timeout_s=30.0s", True),
    (httpx.ReadTimeout("read"), "timeout: ReadTimeout: no byte for timeout_s=30.0s", False),  # sent: may be billed
    (httpx.WriteTimeout("write"), "timeout: WriteTimeout: no byte for timeout_s=30.0s", False),
    (httpx.RemoteProtocolError("peer closed"), "transport_error: RemoteProtocolError: peer closed", False),
    (httpx.ReadError("reset"), "transport_error: ReadError: reset", False),
])
def test_a_transport_failure_is_named_and_says_whether_the_request_left(exc, failure, unsent) -> None:
    attempt, heads = attempt_of(raises(exc))
    assert (attempt.status, attempt.failure, attempt.unsent, attempt.success) == (None, failure, unsent, False)
    assert heads == []


def test_a_reply_slower_than_timeout_s_is_a_timeout_of_the_whole_response() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return httpx.Response(200, json=ANSWER)

    attempt, _ = attempt_of(slow, timeout_s=0.05, max_call_s=600.0)
    assert attempt.failure == "timeout: the whole response took longer than timeout_s=0.05s"


def test_a_trickled_body_is_bounded_by_timeout_s_when_not_streamed() -> None:
    attempt, heads = attempt_of(reply(200, pieces(*[b" "] * 1000, delay_s=0.01)), timeout_s=0.05, max_call_s=600.0)
    assert heads[0][0] == 200 and attempt.failure == "timeout: the whole response took longer than timeout_s=0.05s"


def test_a_stream_is_bounded_by_max_call_s() -> None:
    body = pieces(*[sse_bytes(EVENTS[:1], done=False)] * 1000, delay_s=0.01)
    attempt, _ = attempt_of(reply(200, body, **{"content-type": "text/event-stream"}), streaming=True,
                            timeout_s=30.0, max_call_s=0.05)
    assert attempt.failure == "timeout: the call took longer than max_call_s=0.05s"
