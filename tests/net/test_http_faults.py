"""The faults of the HTTP call layer, on loopback.

Compressed replies (and a gzip bomb), a key echoed in a 200 reply, 200s that hold no
answer, 3xx redirects, absurd retry settings and backoff at huge attempt numbers, and a
request prepared before the temperature rule was learned. Every test talks to
``tests/servers/loopback.py``'s real server on 127.0.0.1 through the harness's real transport.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import os
import random
import subprocess
import sys
import threading
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest

from conftest import TEST_KEY_ENV, endpoint_spec, make_task, openai_judge, settings, tracked_run, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat, error, sse
from wildtrace.config import ConfigError
from wildtrace.core import records as R
from wildtrace.core.records import CallResult
from wildtrace.providers.base import Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.net import secrets
from wildtrace.runtime.store.cache import Cache
from wildtrace.runtime.net.endpoint import Endpoint
from wildtrace.runtime.net.retry import MAX_RETRIES, RetryPolicy
from wildtrace.runtime.run.execute import run

ROOT = Path(__file__).resolve().parents[2]
TEXT = "The seal was worn; the pump failed at 03:14. 密封圈磨损 ✅"
SAMPLING = Sampling(temperature=0.1, max_tokens=256)
FAST_RETRIES = 2
DOC = "The pump failed at 03:14 because the seal was worn. " * 10
JUDGE_OK = '{"points_awarded":[60,40],"total":100}'
FAST = ["retry.backoff_base_s=0.001", "retry.backoff_max_s=0.005"]
WAIT_S = 60.0  # a safety net only: every wait below is on an event


# ---------------------------------------------------------------------- the three wire formats


def plain_body(provider: str, text: str = TEXT) -> dict:
    """A well-formed 2xx body of each wire format, as the providers document them."""
    if provider == "openai":
        return {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7}}
    if provider == "anthropic":
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 11, "output_tokens": 7}}
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP",
                            "index": 0}], "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 7},
            "modelVersion": "m"}


def stream_bytes(provider: str, text: str = TEXT) -> bytes:
    """The same answer as each format's server-sent events."""
    half = len(text) // 2
    if provider == "openai":
        events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": text[:half]}}]},
                  {"choices": [{"index": 0, "delta": {"content": text[half:]}, "finish_reason": "stop"}]},
                  {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 7}}]
        return b"".join(f"data: {json.dumps(e, ensure_ascii=False)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
    if provider == "anthropic":
        events = [("message_start", {"type": "message_start", "message": {"id": "msg_1", "type": "message",
                                                                           "role": "assistant", "model": "m",
                                                                           "usage": {"input_tokens": 11}}}),
                  ("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}),
                  ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": text[:half]}}),
                  ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": text[half:]}}),
                  ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                     "usage": {"output_tokens": 7}}),
                  ("message_stop", {"type": "message_stop"})]
        return b"".join(f"event: {n}\ndata: {json.dumps(e, ensure_ascii=False)}\n\n".encode() for n, e in events)
    chunks = [{"candidates": [{"content": {"role": "model", "parts": [{"text": text[:half]}]}, "index": 0}]},
              {"candidates": [{"content": {"role": "model", "parts": [{"text": text[half:]}]}, "finishReason": "STOP",
                               "index": 0}], "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 7}}]
    return b"".join(f"data: {json.dumps(c, ensure_ascii=False)}\n\n".encode() for c in chunks)


def base_url(server: LoopbackServer, provider: str) -> str:
    return server.url + "/v1" if provider == "openai" else server.url


async def _call(server: LoopbackServer, provider: str = "openai", stream: bool = False, retries: int = FAST_RETRIES,
                cache: Cache | None = None, max_bytes: int = 64 << 20, key: str = "sk-http-faults-key-0123456789",
                ) -> tuple[CallResult, Endpoint]:
    spec = endpoint_spec(provider, route="m", base_url=base_url(server, provider), stream=stream, timeout_s=30.0,
                         max_concurrency=1)
    p = make_provider(spec)
    endpoint = Endpoint(p, key, RetryPolicy(max_retries=retries, backoff_base_s=0.001, backoff_max_s=0.002),
                        cache=cache, max_response_bytes=max_bytes)
    try:
        return await endpoint.call(p.build_request("What failed?", SAMPLING)), endpoint
    finally:
        await endpoint.aclose()


def call(server: LoopbackServer, **kwargs: Any) -> CallResult:
    return asyncio.run(_call(server, **kwargs))[0]


def pieces(data: bytes, size: int = 7) -> list[bytes]:
    """``data`` cut into small HTTP chunks (so every decoder sees splits mid-token)."""
    return [data[i:i + size] for i in range(0, len(data), size)]


def raw_deflate(data: bytes) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return z.compress(data) + z.flush()


ENCODERS = {
    "gzip": ("gzip", gzip.compress),
    "x-gzip": ("x-gzip", gzip.compress),
    "deflate-zlib": ("deflate", zlib.compress),  # RFC 9110's deflate: the zlib format
    "deflate-raw": ("deflate", raw_deflate),  # what some servers send as "deflate"
    "gzip-twice": ("gzip, gzip", lambda data: gzip.compress(gzip.compress(data))),
    "gzip-two-members": ("gzip", lambda data: gzip.compress(data[:10]) + gzip.compress(data[10:])),
    "identity-then-gzip": ("identity, gzip", gzip.compress),
}


def compressed_reply(provider: str, stream: bool, encoding: str, encode: Any) -> Reply:
    if stream:
        return Reply(200, chunks=pieces(encode(stream_bytes(provider))), content_type="text/event-stream",
                     headers={"content-encoding": encoding})
    return Reply(200, encode(json.dumps(plain_body(provider)).encode()), headers={"content-encoding": encoding})


# ---------------------------------------------------------------------- Content-Encoding


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_every_request_asks_for_an_uncompressed_reply(provider, stream):
    with LoopbackServer(lambda c: Reply(200, plain_body(provider))) as server:
        result = call(server, provider=provider, stream=stream)
    assert result.ok and result.text == TEXT
    assert [c.headers.get("accept-encoding") for c in server.calls] == ["identity"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("name", list(ENCODERS))
def test_a_compressed_reply_sent_anyway_is_decoded(name, stream):
    encoding, encode = ENCODERS[name]
    with LoopbackServer(lambda c: compressed_reply("openai", stream, encoding, encode)) as server:
        result = call(server, stream=stream)
    assert (result.ok, result.text, result.attempts, result.usage.prompt_tokens) == (True, TEXT, 1, 11)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
def test_a_gzip_reply_is_decoded_in_every_wire_format(provider, stream):
    with LoopbackServer(lambda c: compressed_reply(provider, stream, "gzip", gzip.compress)) as server:
        result = call(server, provider=provider, stream=stream)
    assert (result.ok, result.text, result.attempts) == (True, TEXT, 1)


def test_a_compressed_error_body_is_read_too():
    body = gzip.compress(json.dumps({"error": {"message": "Invalid model name", "type": "invalid_request_error"}})
                         .encode())
    with LoopbackServer(lambda c: Reply(404, body, headers={"content-encoding": "gzip"})) as server:
        result = call(server)
    assert (result.reason, result.error, result.attempts) == (R.FailReason.HTTP_ERROR, "HTTP 404: Invalid model name",
                                                              1)


BOMB_MB = 256


@functools.cache
def bomb(stream: bool) -> bytes:
    """A gzip body of about 256 KB that expands to 256 MB (an answer, or one huge event)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = b'data: {"choices":[{"delta":{"content":"' if stream else b'{"choices":[{"message":{"content":"'
    out = [z.compress(head)]
    block = b"A" * (1 << 20)
    out.extend(z.compress(block) for _ in range(BOMB_MB))
    out.append(z.compress(b'"}}]}\n\n' if stream else b'"},"finish_reason":"stop"}]}'))
    out.append(z.flush())
    return b"".join(out)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_gzip_bomb_stops_at_max_response_mb_without_inflating_it(stream):
    data = bomb(stream)
    assert len(data) < (2 << 20)
    reply = (Reply(200, chunks=pieces(data, 65536), content_type="text/event-stream",
                   headers={"content-encoding": "gzip"}) if stream
             else Reply(200, data, headers={"content-encoding": "gzip"}))
    with LoopbackServer(lambda c: reply) as server:
        tracemalloc.start()
        try:
            result = call(server, stream=stream, max_bytes=1 << 20)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert (result.ok, result.reason, result.attempts) == (False, R.FailReason.RESPONSE_TOO_LARGE, 1)
    assert "1048576 bytes" in result.error and "after decoding" in result.error
    assert peak < 24 << 20, f"peak {peak} bytes: the bomb was inflated past the bound"


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, br"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_encoding_that_cannot_be_decoded_is_named_not_parsed(encoding, stream):
    reply = Reply(200, b"\x1b\x2e\x00\xf8\x25\x00\x02garbage", content_type="text/event-stream" if stream
                  else "application/json", headers={"content-encoding": encoding})
    with LoopbackServer(lambda c: reply) as server:
        result = call(server, stream=stream)
    assert (result.ok, result.reason) == (False, R.FailReason.BAD_RESPONSE)
    assert f"Content-Encoding {encoding.split(', ')[-1]}" in result.error, result.error
    assert "choices" not in result.error
    assert result.attempts == len(server.calls) == FAST_RETRIES + 1  # a bad response: transient, retried


@pytest.mark.parametrize("damage", ["flipped", "truncated"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_corrupt_gzip_body_is_a_bad_response_and_the_retry_gets_the_answer(stream, damage):
    good = compressed_reply("openai", stream, "gzip", gzip.compress)
    corrupt = bytearray(gzip.compress(stream_bytes("openai") if stream else json.dumps(plain_body("openai")).encode()))
    if damage == "flipped":
        corrupt[20:30] = b"\xff" * 10
    else:
        del corrupt[-6:]  # the CRC and length trailer: the body ends inside the gzip stream

    def responder(c: Call) -> Reply:
        if c.seen == 0:
            return Reply(200, bytes(corrupt), content_type="text/event-stream" if stream else "application/json",
                         headers={"content-encoding": "gzip"})
        return good

    with LoopbackServer(responder) as server:
        result = call(server, stream=stream)
    assert (result.ok, result.text, result.attempts) == (True, TEXT, 2)


# ---------------------------------------------------------------------- 200s that hold no answer

HTML = (b"<!doctype html>\n<html><head><title>Sign in - Corporate Gateway</title></head><body>"
        + b"<p>Your session has expired.</p>" * 20)[:512]
#: (wire format, body, content type, how the preview of the body starts; "" for no preview).
BAD_BODIES = [
    pytest.param("openai", b'{"choices":[]}', "application/json", '{"choices":[]} (', id="openai-choices-empty"),
    pytest.param("openai", b"", "application/json", "", id="openai-empty-body"),
    pytest.param("openai", HTML, "text/html; charset=utf-8", "<!doctype html>\\n<html><head><title>Sign in",
                 id="openai-html"),
    pytest.param("openai", b'{"id":"chatcmpl-1","object":"chat.completion"}', "application/json",
                 '{"id":"chatcmpl-1","object":"chat.completion"} (', id="openai-no-choices"),
    pytest.param("anthropic", b'{"id":"msg_1","type":"message","role":"assistant"}', "application/json",
                 '{"id":"msg_1","type":"message","role":"assistant"} (', id="anthropic-no-content"),
    pytest.param("anthropic", b"", "application/json", "", id="anthropic-empty"),
    pytest.param("anthropic", HTML, "text/html", "<!doctype html>", id="anthropic-html"),
    pytest.param("gemini", b'{"modelVersion":"gemini-x"}', "application/json", '{"modelVersion":"gemini-x"} (',
                 id="gemini-no-candidates"),
    pytest.param("gemini", b'{"candidates":[]}', "application/json", '{"candidates":[]} (',
                 id="gemini-candidates-empty"),
    pytest.param("gemini", HTML, "text/html", "<!doctype html>", id="gemini-html"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize(("provider", "body", "content_type", "preview"), BAD_BODIES)
def test_a_200_without_an_answer_is_a_transient_bad_response_never_cached(tmp_path, provider, body, content_type,
                                                                          preview, stream):
    cache = Cache(tmp_path / "cache")
    arrived = f"HTTP 200 {content_type}, {len(body)} bytes" + (f": {preview}" if preview else " (")
    with LoopbackServer(lambda c: Reply(200, body, content_type=content_type)) as server:
        result = call(server, provider=provider, stream=stream, cache=cache)
        assert (result.ok, result.reason) == (False, R.FailReason.BAD_RESPONSE)
        assert result.attempts == len(server.calls) == FAST_RETRIES + 1
        assert result.error.startswith(arrived), result.error
        assert len(result.error) < 600
        call(server, provider=provider, stream=stream, cache=cache)  # nothing was cached: it is asked again
        assert len(server.calls) == 2 * (FAST_RETRIES + 1)


@pytest.mark.parametrize("events", [
    pytest.param(b"data: [DONE]\n\n", id="done-only"),
    pytest.param(b'data: {"choices":[],"usage":{"prompt_tokens":11}}\n\ndata: [DONE]\n\n', id="usage-only"),
])
def test_a_stream_without_a_choice_is_a_bad_response_not_an_empty_answer(tmp_path, events):
    with LoopbackServer(lambda c: Reply(200, chunks=[events], content_type="text/event-stream")) as server:
        result = call(server, stream=True, cache=Cache(tmp_path / "cache"))
    assert (result.reason, result.attempts) == (R.FailReason.BAD_RESPONSE, FAST_RETRIES + 1)
    assert result.error.startswith(f"HTTP 200 text/event-stream, {len(events)} bytes: data: ")
    assert "empty 'choices' list" in result.error


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_a_bad_200_then_a_good_one_is_answered_at_the_second_attempt(tmp_path, provider):
    with LoopbackServer(lambda c: Reply(200, HTML, content_type="text/html") if c.seen == 0
                        else Reply(200, plain_body(provider))) as server:
        result = call(server, provider=provider, cache=Cache(tmp_path / "cache"))
    assert (result.ok, result.text, result.attempts) == (True, TEXT, 2)


def test_the_preview_is_bounded_and_its_control_characters_escaped():
    body = b"\x1b[2J\x00<html>\r\n\x7f" + "é".encode() * 5000
    with LoopbackServer(lambda c: Reply(200, body, content_type="text/plain")) as server:
        result = call(server, retries=0)
    assert result.error.startswith(f"HTTP 200 text/plain, {len(body)} bytes: \\x1b[2J\\x00<html>\\r\\n\\x7féééé")
    assert "…" in result.error and len(result.error) < 600
    assert not any(ord(ch) < 32 or ord(ch) == 127 for ch in result.error)


def test_a_gemini_prompt_block_without_candidates_stays_a_refusal(tmp_path):
    blocked = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "modelVersion": "gemini-x"}
    with LoopbackServer(lambda c: Reply(200, blocked)) as server:
        result = call(server, provider="gemini", cache=Cache(tmp_path / "cache"))
        assert (result.reason, result.error, result.attempts) == (R.FailReason.REFUSAL,
                                                                  "blockReason=PROHIBITED_CONTENT", 1)
        again = call(server, provider="gemini", cache=Cache(tmp_path / "cache"))
        assert again.cached and len(server.calls) == 1  # a refusal is a real outcome: cached


def test_a_cached_empty_choices_entry_from_an_older_run_is_asked_again(tmp_path):
    cache = Cache(tmp_path / "cache")
    with LoopbackServer(lambda c: Reply(200, plain_body("openai"))) as server:
        # The old rule cached ``choices: []`` as an empty answer: such an entry, stored by hand.
        p = make_provider(endpoint_spec("openai", route="m", base_url=base_url(server, "openai"), stream=False))
        prepared = Endpoint(p, "k", RetryPolicy(), cache=cache).prepare(p.build_request("What failed?", SAMPLING))
        cache.put(prepared.key, prepared.material, {"payload": {"choices": []}, "http_status": 200, "attempts": 1,
                                                    "latency_s": 0.1, "started_at": 0.0, "notes": []})
        result = call(server, cache=cache)
        assert len(server.calls) == 1
    assert (result.ok, result.text, result.cached) == (True, TEXT, False)


@pytest.mark.parametrize(("status", "location", "expected"), [
    (302, "https://login.example.test/sso?next=/v1/chat/completions",
     "HTTP 302: a redirect to https://login.example.test/sso?next=/v1/chat/completions (not followed"),
    (301, "/v2/chat/completions", "HTTP 301: a redirect to /v2/chat/completions (not followed"),
    (307, None, "HTTP 307: a redirect without a Location header (not followed"),
    (308, "https://x.test/" + "a" * 5000, "HTTP 308: a redirect to https://x.test/aaaa"),
])
def test_a_redirect_says_so_and_where_to(status, location, expected):
    headers = {"location": location} if location else {}
    with LoopbackServer(lambda c: Reply(status, b"<html>Moved</html>", headers=headers,
                                        content_type="text/html")) as server:
        result = call(server)
    assert (result.reason, result.attempts, len(server.calls)) == (R.FailReason.HTTP_ERROR, 1, 1)
    assert result.error.startswith(expected), result.error
    assert len(result.error) < 700


# ---------------------------------------------------------------------- a key echoed in a 200


@pytest.mark.parametrize(("value", "expected", "changed"), [
    ("no key here", "no key here", False),
    ("Bearer {k}", "Bearer [REDACTED]", True),
    ({"a": ["x", {"{k}": "{k}{k}"}], "n": 3, "f": None}, {"a": ["x", {"[REDACTED]": "[REDACTED][REDACTED]"}], "n": 3,
                                                           "f": None}, True),
    (["masked {k12}****"], ["masked [REDACTED]****"], True),
    ({"deep": [[[[[["{k}"]]]]]]}, {"deep": [[[[[["[REDACTED]"]]]]]]}, True),
])
def test_scrub_replaces_only_where_a_key_occurs(value, expected, changed):
    key = "sk-scrub-" + "41c0de" * 5
    secrets.register(key)

    def fill(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace("{k12}", key[:12]).replace("{k}", key)
        if isinstance(v, dict):
            return {fill(k): fill(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fill(x) for x in v]
        return v

    payload = fill(value)
    scrubbed, did = secrets.scrub(payload)
    assert (scrubbed, did) == (expected, changed)
    if not changed:
        assert scrubbed is payload  # nothing copied when there is nothing to hide


def test_scrub_walks_any_depth_without_recursion():
    key = "sk-scrub-" + "d33p00" * 5
    secrets.register(key)
    deep: Any = key
    for _ in range(5000):
        deep = [deep]
    scrubbed, did = secrets.scrub({"x": deep})
    node = scrubbed["x"]
    for _ in range(5000):
        node = node[0]
    assert (node, did) == ("[REDACTED]", True)


def echo_release(tmp_path: Path) -> tuple[Path, Path]:
    tasks = [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(2)]
    return write_release(tmp_path / "data", tasks, {"doc.txt": DOC})


def echoing_gateway() -> Any:
    """A gateway that writes the caller's bearer token into everything it returns."""

    def responder(call: Call) -> Reply:
        bearer = call.headers["authorization"]  # "Bearer <key>"
        key = bearer.removeprefix("Bearer ")
        if call.route == "test-model":
            text = f"Worn seal, at 03:14. (debug: {bearer}; key={key})"
        else:
            text = JUDGE_OK + f" graded for {bearer}"
        extra = {"system_fingerprint": f"fp_{key}", "x_debug": {"headers": {"authorization": bearer}, key: [key]}}
        if not call.body.get("stream"):
            return Reply(200, {**chat(text).body, **extra})
        half = len(text) // 2
        return sse({"choices": [{"index": 0, "delta": {"content": text[:half]}}], **extra},
                   {"choices": [{"index": 0, "delta": {"content": text[half:]}, "finish_reason": "stop"}],
                    "system_fingerprint": f"fp_{key}"},
                   {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 7}}, done=True)

    return responder


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_key_echoed_in_a_200_is_written_nowhere_and_never_forwarded(tmp_path, test_key, stream, capfd):
    tasks, corpus = echo_release(tmp_path)
    with LoopbackServer(echoing_gateway()) as server:
        overrides = ["model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
                     f"model.api_key_env={TEST_KEY_ENV}", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}",
                     f"model.stream={stream}", "mlflow.enabled=true", *FAST]
        cfg = settings(tmp_path, overrides, judges={"judge_a": openai_judge(server.url, "judge-a")})
        result = tracked_run(cfg)
        judge_requests = [c for c in server.calls if c.route == "judge-a"]
        rerun = tracked_run(settings(tmp_path, overrides, judges={"judge_a": openai_judge(server.url, "judge-a")}))
        assert len(server.calls) == 4  # the rerun came from the (redacted) cache
    assert result.exit_code == 0 and rerun.exit_code == 0
    assert len(judge_requests) == 2
    for c in judge_requests:  # the judge prompt embeds the answer: the key is not in it
        assert test_key.encode() not in c.raw and test_key[:12].encode() not in c.raw
        assert "Bearer [REDACTED]; key=[REDACTED]" in c.prompt
    rows = json.loads((result.out_dir / "responses.json").read_text())
    assert [r["response"] for r in rows] == ["Worn seal, at 03:14. (debug: Bearer [REDACTED]; key=[REDACTED])"] * 2
    assert all("redacted an echoed credential" in r["notes"] for r in rows)
    assert rows[0]["raw"]["system_fingerprint"] == "fp_[REDACTED]"
    judged = json.loads((result.out_dir / "judgments.json").read_text())
    assert [j["status"] for j in judged] == [R.JudgmentStatus.SCORED] * 2
    assert all("redacted an echoed credential" in j["notes"] for j in judged)
    stored = [p for root in (tmp_path / "outputs", result.out_dir, rerun.out_dir) for p in root.rglob("*")
              if p.is_file()]
    assert any(p.name == "mlflow.db" for p in stored) and any("mlartifacts" in p.parts for p in stored)
    assert any("cache" in p.parts for p in stored)
    for path in stored:
        data = path.read_bytes()
        assert test_key.encode() not in data and test_key[:12].encode() not in data, path
    out, err = capfd.readouterr()
    assert test_key not in out + err


def test_answers_read_from_a_responses_file_are_scrubbed_before_the_judge_sees_them(tmp_path, monkeypatch):
    test_key = "sk-judge-stage-" + os.urandom(12).hex()  # registered by this run only, once its keys are read
    monkeypatch.setenv(TEST_KEY_ENV, test_key)
    tasks, corpus = echo_release(tmp_path)
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps([{"question_id": f"q{i}", "response": f"Worn seal. Bearer {test_key}"}
                                   for i in range(2)]))
    with LoopbackServer(lambda c: chat(JUDGE_OK)) as server:
        cfg = settings(tmp_path, ["model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
                                  f"model.api_key_env={TEST_KEY_ENV}", f"dataset.tasks={tasks}",
                                  f"dataset.corpus={corpus}", "stage=judge", f"responses={earlier}", *FAST],
                       judges={"judge_a": openai_judge(server.url, "judge-a")})
        result = run(cfg)
        assert len(server.calls) == 2
        assert all(test_key.encode() not in c.raw for c in server.calls)
        assert all("Worn seal. Bearer [REDACTED]" in c.prompt for c in server.calls)
    rows = json.loads((result.out_dir / "responses.json").read_text())
    assert all("redacted an echoed credential" in r["notes"] for r in rows)
    for path in result.out_dir.rglob("*"):
        if path.is_file():
            assert test_key.encode() not in path.read_bytes(), path


# ---------------------------------------------------------------------- retry bounds


@pytest.mark.parametrize(("value", "accepted"), [(0, True), (5, True), (MAX_RETRIES, True), (MAX_RETRIES + 1, False),
                                                 (1_000_000, False), (-1, False)])
def test_max_retries_is_bounded_at_config_load(tmp_path, value, accepted):
    overrides = ["model=custom", "model.route=m", "model.base_url=http://127.0.0.1:9/v1", f"retry.max_retries={value}"]
    if accepted:
        assert settings(tmp_path, overrides).retry.max_retries == value
        assert RetryPolicy(max_retries=value).max_retries == value
        return
    with pytest.raises(ConfigError) as info:
        settings(tmp_path, overrides)
    assert "retry.max_retries" in str(info.value) and f"0 and {MAX_RETRIES}" in str(info.value)
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=value)


@pytest.mark.slow
def test_the_app_refuses_a_million_retries_before_any_request(tmp_path):
    with LoopbackServer(lambda c: chat("an answer")) as server:
        cmd = [sys.executable, "-m", "wildtrace", "retry.max_retries=1000000", "model=custom", "model.route=m",
               f"model.base_url={server.url}/v1", "model.api_key_env=WT_RETRY_KEY", "progress=false"]
        env = {**os.environ, "WT_RETRY_KEY": "k", "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert server.calls == []
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"retry.max_retries must be between 0 and {MAX_RETRIES}" in proc.stderr
    assert "1000000" in proc.stderr and "Traceback" not in proc.stderr


class Fixed(random.Random):
    """A random source whose ``random()`` is a fixed number (the jitter's top or bottom)."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.parametrize(("base", "cap", "retry_number", "ceiling"), [
    (1.0, 60.0, 1, 1.0),
    (1.0, 60.0, 2, 2.0),
    (1.0, 60.0, 6, 32.0),
    (1.0, 60.0, 7, 60.0),
    (1.0, 60.0, 64, 60.0),
    (1.0, 60.0, 1024, 60.0),
    (1.0, 60.0, 1025, 60.0),
    (1.0, 60.0, 2047, 60.0),  # where 1.0 * 2 ** 2046 raised OverflowError
    (1.0, 60.0, 1_000_000, 60.0),
    (1.0, 60.0, 10 ** 18, 60.0),
    (0.001, 0.005, 10 ** 9, 0.005),
    (0.0, 60.0, 10 ** 9, 0.0),
    (1e300, 1e308, 10 ** 6, 1e308),  # the product overflows a float: the cap still holds
    (1.0, 60.0, 0, 1.0),  # below the first retry: the first ceiling
])
@pytest.mark.parametrize("jitter", [0.0, 0.999999])
def test_backoff_never_overflows(base, cap, retry_number, ceiling, jitter):
    policy = RetryPolicy(backoff_base_s=base, backoff_max_s=cap)
    delay = policy.delay(retry_number, None, Fixed(jitter))
    assert delay == pytest.approx(ceiling * (0.5 + 0.5 * jitter))
    assert 0.0 <= delay <= cap


# ---------------------------------------------------------------------- temperature learned mid-flight


def test_a_request_prepared_before_the_temperature_rule_is_rebuilt_before_it_is_sent(tmp_path, test_key):
    """Concurrency 4. q1's first request (with temperature) is held until the first request without
    temperature arrives, then answered 503; its retry must go without temperature."""
    q1_arrived, resent, first_wave = threading.Event(), threading.Event(), threading.Event()
    with_temperature: list[Call] = []
    lock = threading.Lock()

    def responder(call: Call) -> Reply:
        if "temperature" not in call.body:
            resent.set()
            return chat("Worn seal.")
        with lock:
            with_temperature.append(call)
            if len(with_temperature) >= 4:
                first_wave.set()
        if "[q1]" in call.prompt and not q1_arrived.is_set():
            q1_arrived.set()
            assert resent.wait(WAIT_S)
            return error(503, "upstream busy")
        # No rejection goes back before the whole first wave (4 in flight) has arrived: on a busy
        # machine a request sent early could otherwise arrive after the first resend.
        assert first_wave.wait(WAIT_S)
        return error(400, "Unsupported value: 'temperature' does not support 0.1 with this model.")

    tasks = [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(6)]
    tasks_file, corpus = write_release(tmp_path / "data", tasks, {"doc.txt": DOC})
    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path, ["model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
                                  f"model.api_key_env={TEST_KEY_ENV}", f"dataset.tasks={tasks_file}",
                                  f"dataset.corpus={corpus}", "model.max_concurrency=4", "model.stream=false",
                                  "stage=answer", *FAST])
        result = run(cfg)
    bodies = [c.body for c in server.calls]
    first_resend = next(i for i, b in enumerate(bodies) if "temperature" not in b)
    late = [i for i, b in enumerate(bodies) if i > first_resend and "temperature" in b]
    assert late == [], f"requests {late} carried temperature after the first resend {first_resend}"
    rows = json.loads((result.out_dir / "responses.json").read_text())
    assert [r["status"] for r in rows] == [R.AnswerStatus.ANSWERED] * 6
    assert all(r["temperature_sent"] is False for r in rows)
    assert sum("[q1]" in json.dumps(b, ensure_ascii=False) for b in bodies) == 2  # the held one, then its rebuild


def test_a_deeply_nested_error_body_is_recorded_not_raised():
    """The raw failure body is scrubbed iteratively: the recursive redaction raised RecursionError at ~900 levels."""
    secrets.register("sk-http-faults-key-0123456789")
    nested = b"[" * 900 + b"]" * 900
    with LoopbackServer(lambda c: Reply(400, nested)) as server:
        result = call(server)
    assert (result.reason, result.attempts) == (R.FailReason.HTTP_ERROR, 1)
    assert result.raw is not None


@pytest.mark.parametrize(("key", "text", "want"), [
    ("k", "max 128000 tokens; k", "max 128000 tokens; [REDACTED]"),           # a short key: never inside a word
    ("EMPTY", "Bearer EMPTY, EMPTYING", "Bearer [REDACTED], EMPTYING"),         # vLLM's customary placeholder key
    ("sk-1234", "key=sk-1234.", "key=[REDACTED]."),
    ("sk-12345678", "xsk-12345678x", "x[REDACTED]x"),                          # 8 characters and more: anywhere
])
def test_a_short_key_is_redacted_only_where_it_stands_alone(monkeypatch, key, text, want):
    """A one-letter test key once turned every "k" of "tokens" into [REDACTED] in later runs' texts."""
    monkeypatch.setattr(secrets, "_secrets", set())
    monkeypatch.setattr(secrets, "_fragments", [])
    monkeypatch.setattr(secrets, "_short", None)
    secrets.register(key)
    assert secrets.redact(text) == want
    assert secrets.scrub({"a": [text]}) == ({"a": [want]}, text != want)
