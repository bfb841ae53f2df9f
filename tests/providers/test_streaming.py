"""Streamed calls, provider side: the streamed request, the SSE decoder, the stream readers
(recorded event sequences in any chunking → the plain body → the same Completion), the
reasoning controls and the inline ``<think>`` split. All pure: no sockets here."""

from __future__ import annotations

import json
import random
import time

import pytest

from conftest import endpoint_spec

from wildtrace.core.records import Completion, Usage
from wildtrace.providers.base import (
    NO_REASONING_CONTROL,
    REASONING_LEVELS,
    IncompleteStream,
    Sampling,
    StreamError,
    WireRequest,
)
from wildtrace.providers.reasoning import anthropic_format, gemini_format, split_think
from wildtrace.providers.registry import PROVIDERS, make_provider
from wildtrace.providers.sse import SSEDecoder, SSEEvent

spec = endpoint_spec
PROMPT = "Question: 谁签署了报告?"
SAMPLING = Sampling(temperature=0.1, max_tokens=32768)


def provider(name: str, **overrides):
    return make_provider(spec(name, **overrides))


# --------------------------------------------------------------------------------------
# chunkings: the same bytes split every way must give the same result
# --------------------------------------------------------------------------------------


def whole(data: bytes) -> list[bytes]:
    return [data]


def bytewise(data: bytes) -> list[bytes]:
    return [data[i:i + 1] for i in range(len(data))]


def random_split(seed: int):
    def split(data: bytes) -> list[bytes]:
        rng = random.Random(seed)
        out, i = [], 0
        while i < len(data):
            n = rng.randint(1, 17)
            out.append(data[i:i + n])
            i += n
        return out
    split.__name__ = f"random{seed}"
    return split


CHUNKINGS = [whole, bytewise, *(random_split(s) for s in range(5))]


def read(name: str, data: bytes, chunking=whole) -> dict:
    reader = provider(name).stream_reader()
    for piece in chunking(data):
        reader.feed(piece)
    return reader.finish()


def events(data: bytes, chunking=whole) -> list[SSEEvent]:
    decoder = SSEDecoder()
    out: list[SSEEvent] = []
    for piece in chunking(data):
        out.extend(decoder.feed(piece))
    return out + decoder.close()


# --------------------------------------------------------------------------------------
# the SSE decoder
# --------------------------------------------------------------------------------------

SSE_CASES = [
    pytest.param(b"data: a\n\n", [SSEEvent("message", "a")], id="lf"),
    pytest.param(b"data: a\r\n\r\n", [SSEEvent("message", "a")], id="crlf"),
    pytest.param(b"data: a\r\rdata: b\r\r", [SSEEvent("message", "a"), SSEEvent("message", "b")], id="cr"),
    pytest.param(b"data: a\r\n\ndata: b\n\r\n", [SSEEvent("message", "a"), SSEEvent("message", "b")], id="mixed"),
    pytest.param(b"data: one\ndata: two\n\n", [SSEEvent("message", "one\ntwo")], id="multi-line-data"),
    pytest.param(b"event: ping\ndata: {}\n\n", [SSEEvent("ping", "{}")], id="event-name"),
    pytest.param(b": keep-alive\n\n: OPENROUTER PROCESSING\n\ndata: x\n\n", [SSEEvent("message", "x")],
                 id="comments-ignored"),
    pytest.param(b"data:x\n\ndata:  y\n\n", [SSEEvent("message", "x"), SSEEvent("message", " y")],
                 id="one-space-stripped"),
    pytest.param(b"data\n\n", [SSEEvent("message", "")], id="field-without-colon"),
    pytest.param(b"id: 7\nretry: 10\nfoo: bar\ndata: z\n\n", [SSEEvent("message", "z")], id="other-fields"),
    pytest.param(b"event: x\n\ndata: y\n\n", [SSEEvent("message", "y")], id="event-without-data-not-dispatched"),
    pytest.param("\ufeffdata: b\n\n".encode(), [SSEEvent("message", "b")], id="bom"),
    pytest.param(b"data: last\n", [SSEEvent("message", "last")], id="eof-without-blank-line"),
    pytest.param(b"data: ok\n\ndata: {\"cut", [SSEEvent("message", "ok")], id="eof-fragment-dropped"),
    pytest.param("data: 中文🙂\n\n".encode(), [SSEEvent("message", "中文🙂")], id="utf8"),
    pytest.param(b"data: \xff\n\n", [SSEEvent("message", "\ufffd")], id="invalid-utf8-replaced"),
]


@pytest.mark.parametrize(("data", "expected"), SSE_CASES)
@pytest.mark.parametrize("chunking", CHUNKINGS, ids=lambda c: c.__name__)
def test_sse_decoder(data, expected, chunking):
    assert events(data, chunking) == expected


def test_sse_utf8_split_inside_a_character():
    text = "data: 报告🔥\n\n".encode()
    cut = text.index("🔥".encode()) + 2  # in the middle of the emoji's four bytes
    decoder = SSEDecoder()
    assert decoder.feed(text[:cut]) == []
    assert decoder.feed(text[cut:]) == [SSEEvent("message", "报告🔥")]


def test_sse_cr_then_lf_in_the_next_chunk_is_one_line_end():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == [SSEEvent("message", "a")]
    assert decoder.feed(b"\n") == []  # the \r\n already ended the blank line


class _CountingEOL:
    """Stands in for the decoder's line-end pattern and counts the characters each search covers."""

    def __init__(self, pattern) -> None:
        self.pattern, self.scanned = pattern, 0

    def finditer(self, text: str, start: int = 0):
        self.scanned += len(text) - start
        return self.pattern.finditer(text, start)


def test_sse_long_line_in_small_chunks_is_linear(monkeypatch):
    # 4 MB in 256-byte chunks: re-scanning (or re-joining) the pending line per chunk would touch ~32 GB.
    # The work is counted, not timed: every character is searched for a line end exactly once.
    import wildtrace.providers.sse as sse

    counting = _CountingEOL(sse._EOL)
    monkeypatch.setattr(sse, "_EOL", counting)
    payload = b"x" * (4 << 20)
    decoder = SSEDecoder()
    decoder.feed(b"data: ")
    for i in range(0, len(payload), 256):
        assert decoder.feed(payload[i:i + 256]) == []
    out = decoder.feed(b"\n\n")
    assert len(out) == 1 and len(out[0].data) == len(payload)
    assert counting.scanned == len(b"data: ") + len(payload) + 2


# --------------------------------------------------------------------------------------
# the streamed request
# --------------------------------------------------------------------------------------

OPENAI_MSGS = [{"role": "user", "content": PROMPT}]


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        pytest.param(
            spec("openai", route="gpt-4.1"),
            {"url": "https://api.example.com/v1/chat/completions",
             "body": {"model": "gpt-4.1", "messages": OPENAI_MSGS, "max_tokens": 32768, "temperature": 0.1,
                      "stream": True, "stream_options": {"include_usage": True}},
             "headers": {"Accept": "text/event-stream"}},
            id="openai"),
        pytest.param(
            spec("anthropic", route="claude-sonnet-4-5", base_url="https://api.anthropic.com"),
            {"url": "https://api.anthropic.com/v1/messages",
             "body": {"model": "claude-sonnet-4-5", "max_tokens": 32768, "messages": OPENAI_MSGS,
                      "temperature": 0.1, "stream": True},
             "headers": {"anthropic-version": "2023-06-01", "Accept": "text/event-stream"}},
            id="anthropic"),
        pytest.param(
            spec("gemini", route="gemini-2.5-pro", base_url="https://generativelanguage.googleapis.com"),
            {"url": "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro"
                    ":streamGenerateContent?alt=sse",
             "body": {"contents": [{"role": "user", "parts": [{"text": PROMPT}]}],
                      "generationConfig": {"maxOutputTokens": 32768, "temperature": 0.1}},
             "headers": {"Accept": "text/event-stream"}},
            id="gemini"),
    ],
)
def test_stream_request_golden(endpoint, expected):
    p = make_provider(endpoint)
    plain = p.build_request(PROMPT, SAMPLING)
    before = json.dumps(plain.body)
    streamed = p.stream_request(plain)
    assert {"url": streamed.url, "body": streamed.body, "headers": dict(streamed.headers)} == expected
    assert json.dumps(plain.body) == before  # the plain request (the cache key's source) is untouched


def test_openai_stream_options_merge_with_extra_body():
    p = provider("openai", extra_body={"stream_options": {"continuous_usage_stats": True}})
    body = p.stream_request(p.build_request(PROMPT, SAMPLING)).body
    assert body["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}


def test_offline_does_not_stream():
    p = provider("offline", route="extractive-bm25")
    request = p.build_request(PROMPT, SAMPLING)
    assert p.streams is False and p.stream_request(request) == request
    assert all(provider(n).streams for n in ("openai", "anthropic", "gemini"))


@pytest.mark.parametrize(
    ("name", "where"),
    [("openai", ()), ("anthropic", ()), ("gemini", ("generationConfig",)), ("offline", ())],
)
def test_without_temperature(name, where):
    p = provider(name, extra_body={"top_p": 0.9})
    request = p.build_request(PROMPT, SAMPLING)
    stripped = p.without_temperature(request)
    inner = stripped.body
    original = request.body
    for key in where:
        inner, original = inner[key], original[key]
    assert "temperature" in original and "temperature" not in inner
    assert {k: v for k, v in original.items() if k != "temperature"} == inner
    assert stripped.url == request.url and dict(stripped.headers) == dict(request.headers)
    assert "temperature" in (request.body.get("generationConfig") or request.body)  # input not mutated


# --------------------------------------------------------------------------------------
# OpenAI chat.completion.chunk streams
# --------------------------------------------------------------------------------------

OPENAI_STREAM = (
    b'data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1764547200,"model":"gpt-5.1-2025-11-13",'
    b'"system_fingerprint":"fp_a1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},'
    b'"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
    b'data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1764547200,"model":"gpt-5.1-2025-11-13",'
    b'"system_fingerprint":"fp_a1","choices":[{"index":0,"delta":{"content":"The fire began "},"logprobs":null,'
    b'"finish_reason":null}],"usage":null}\n\n'
    + 'data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1764547200,"model":"gpt-5.1-2025-11-13",'
      '"system_fingerprint":"fp_a1","choices":[{"index":0,"delta":{"content":"在仓库 🔥."},"logprobs":null,'
      '"finish_reason":null}],"usage":null}\n\n'.encode()
    + b'data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1764547200,"model":"gpt-5.1-2025-11-13",'
    b'"system_fingerprint":"fp_a1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],'
    b'"usage":null}\n\n'
    b'data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1764547200,"model":"gpt-5.1-2025-11-13",'
    b'"system_fingerprint":"fp_a1","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":340,'
    b'"total_tokens":1540,"completion_tokens_details":{"reasoning_tokens":256}}}\n\n'
    b"data: [DONE]\n\n"
)
OPENAI_USAGE = {"prompt_tokens": 1200, "completion_tokens": 340, "total_tokens": 1540,
                "completion_tokens_details": {"reasoning_tokens": 256}}
OPENAI_PLAIN = {
    "id": "chatcmpl-9x", "object": "chat.completion", "created": 1764547200, "model": "gpt-5.1-2025-11-13",
    "system_fingerprint": "fp_a1",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "The fire began 在仓库 🔥.", "refusal": None},
                 "finish_reason": "stop"}],
    "usage": OPENAI_USAGE,
}


def chunk(delta: dict | None = None, finish: str | None = None, model: str = "deepseek-v4", **extra) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model, "choices": choices, **extra}


def sse(*items, terminal: bytes = b"data: [DONE]\n\n", comment: bytes = b"") -> bytes:
    """Events as a server writes them (compact JSON, UTF-8), optional comments between them."""
    out = b""
    for item in items:
        out += comment + b"data: " + json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
    return out + terminal


DEEPSEEK_STREAM = sse(
    chunk({"role": "assistant", "content": None, "reasoning_content": ""}),
    chunk({"reasoning_content": "先读报告，"}),
    chunk({"reasoning_content": "再找签名。"}),
    chunk({"content": "签署人是"}),
    chunk({"content": "林岚。"}, "stop"),
    chunk(None, usage={"prompt_tokens": 50, "completion_tokens": 20,
                       "completion_tokens_details": {"reasoning_tokens": 12}}),
    comment=b": keep-alive\n\n",
)
OPENROUTER_STREAM = sse(
    chunk({"role": "assistant", "content": "", "reasoning": "Check the log."}, model="moonshotai/kimi-k2.6"),
    chunk({"content": "Answer."}, "stop", model="moonshotai/kimi-k2.6"),
    comment=b": OPENROUTER PROCESSING\n\n",
)
MINIMAX_STREAM = sse(
    chunk({"role": "assistant", "content": "", "reasoning_details": [{"type": "reasoning.text", "text": "Hmm, "}]},
          model="MiniMax-M2.7"),
    chunk({"reasoning_details": [{"type": "reasoning.text", "text": "the log."}]}, model="MiniMax-M2.7"),
    chunk({"content": "It was the pump."}, "stop", model="MiniMax-M2.7"),
)
INLINE_THINK_STREAM = sse(
    chunk({"role": "assistant", "content": "<thi"}, model="MiniMax-M2.7"),
    chunk({"content": "nk>scan</th"}, model="MiniMax-M2.7"),
    chunk({"content": "ink>\n\nThe pump."}, "stop", model="MiniMax-M2.7"),
)
REFUSAL_STREAM = sse(
    chunk({"role": "assistant", "content": None, "refusal": ""}, model="gpt-4.1"),
    chunk({"refusal": "I can't help "}, model="gpt-4.1"),
    chunk({"refusal": "with that."}, "stop", model="gpt-4.1"),
)
CONTENT_FILTER_STREAM = sse(
    chunk({"role": "assistant", "content": "Part"}, model="gpt-4.1"),
    chunk({}, "content_filter", model="gpt-4.1"),
)
NO_DONE_STREAM = sse(chunk({"role": "assistant", "content": "Done."}, "stop"), terminal=b"")

OPENAI_STREAMS = [
    pytest.param(OPENAI_STREAM, Completion("The fire began 在仓库 🔥.", "stop", Usage(1200, 340, 256),
                                           served_model="gpt-5.1-2025-11-13"), id="openai-usage-reasoning-tokens"),
    pytest.param(DEEPSEEK_STREAM, Completion("签署人是林岚。", "stop", Usage(50, 20, 12),
                                             reasoning="先读报告，再找签名。", served_model="deepseek-v4"),
                 id="deepseek-reasoning-content"),
    pytest.param(OPENROUTER_STREAM, Completion("Answer.", "stop", Usage(), reasoning="Check the log.",
                                               served_model="moonshotai/kimi-k2.6"), id="openrouter-reasoning"),
    pytest.param(MINIMAX_STREAM, Completion("It was the pump.", "stop", Usage(), reasoning="Hmm, the log.",
                                            served_model="MiniMax-M2.7"), id="minimax-reasoning-details"),
    pytest.param(INLINE_THINK_STREAM, Completion("The pump.", "stop", Usage(), reasoning="scan",
                                                 served_model="MiniMax-M2.7"), id="inline-think-split-across-chunks"),
    pytest.param(REFUSAL_STREAM, Completion(None, "stop", Usage(), refusal="I can't help with that.",
                                            served_model="gpt-4.1"), id="delta-refusal"),
    pytest.param(CONTENT_FILTER_STREAM, Completion("Part", "content_filter", Usage(),
                                                   refusal="finish_reason=content_filter", served_model="gpt-4.1"),
                 id="content-filter"),
    pytest.param(NO_DONE_STREAM, Completion("Done.", "stop", Usage(), served_model="deepseek-v4"),
                 id="finish-reason-then-eof-without-done"),
]


@pytest.mark.parametrize(("data", "expected"), OPENAI_STREAMS)
def test_openai_streams_parse(data, expected):
    p = provider("openai")
    assert p.parse_response(read("openai", data)) == expected


@pytest.mark.parametrize("data", [p.values[0] for p in OPENAI_STREAMS], ids=[p.id for p in OPENAI_STREAMS])
@pytest.mark.parametrize("chunking", CHUNKINGS[1:], ids=lambda c: c.__name__)
def test_openai_streams_any_chunking_same_body(data, chunking):
    assert read("openai", data, chunking) == read("openai", data)


def test_openai_assembled_body_is_the_plain_body():
    assert read("openai", OPENAI_STREAM) == OPENAI_PLAIN
    p = provider("openai")
    assert p.parse_response(read("openai", OPENAI_STREAM)) == p.parse_response(OPENAI_PLAIN)


# OpenAI, OpenRouter and LiteLLM put an error object in a data chunk of a 2xx stream.
OPENAI_ERRORS = [
    pytest.param({"error": {"message": "The server had an error", "type": "server_error", "code": None}}, 500,
                 "The server had an error", id="server-error"),
    pytest.param({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}},
                 429, "Rate limit reached", id="rate-limit-code"),
    pytest.param({"id": "gen-1", "object": "chat.completion.chunk", "error": {"code": 502, "message": "Provider down"},
                  "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]}, 502, "Provider down",
                 id="openrouter-numeric-code"),
    pytest.param({"error": {"message": "Overloaded", "type": "overloaded_error"}}, 529, "Overloaded",
                 id="overloaded"),
    pytest.param({"error": "upstream closed"}, 500, "upstream closed", id="bare-string"),
    pytest.param({"error": {"message": "odd", "type": "something_new"}}, 500, "odd", id="unknown-type-500"),
]


@pytest.mark.parametrize(("payload", "status", "message"), OPENAI_ERRORS)
def test_openai_error_chunk_mid_stream(payload, status, message):
    data = sse(chunk({"role": "assistant", "content": "Part "}), payload, terminal=b"")
    reader = provider("openai").stream_reader()
    with pytest.raises(StreamError) as info:
        for piece in bytewise(data):
            reader.feed(piece)
    assert (info.value.status, info.value.message, info.value.payload) == (status, message, payload)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="nothing"),
        pytest.param(b": keep-alive\n\n", id="only-keep-alive"),
        pytest.param(sse(chunk({"role": "assistant", "content": "The fire"}), terminal=b""), id="no-finish"),
        pytest.param(OPENAI_STREAM[:OPENAI_STREAM.index(b'"finish_reason":"stop"')], id="cut-inside-finish-chunk"),
    ],
)
def test_openai_cut_short_is_incomplete(data):
    with pytest.raises(IncompleteStream):
        read("openai", data)


def test_openai_events_after_done_are_ignored():
    data = OPENAI_STREAM + sse(chunk({"content": " extra"}), terminal=b"")
    assert read("openai", data) == OPENAI_PLAIN


def test_openai_unreadable_chunk_is_value_error():
    with pytest.raises(ValueError):
        read("openai", b"data: {not json\n\n")


# --------------------------------------------------------------------------------------
# Anthropic Messages streams
# --------------------------------------------------------------------------------------

ANTHROPIC_STREAM = (
    b'event: message_start\n'
    b'data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","content":[],'
    b'"model":"claude-opus-4-6","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":2048,'
    b'"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"thinking","thinking":"","signature":""}}\n\n'
    b'event: ping\n'
    b'data: {"type": "ping"}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The log says"}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" 03:10."}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAh"}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\n'
    + 'data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"At 03:10, "}}\n\n'
      'event: content_block_delta\n'
      'data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"值班员 🙂."}}\n\n'.encode()
    + b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":1}\n\n'
    b'event: message_delta\n'
    b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
    b'"usage":{"output_tokens":412}}\n\n'
    b'event: message_stop\n'
    b'data: {"type":"message_stop"}\n\n'
)
ANTHROPIC_PLAIN = {
    "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-opus-4-6",
    "content": [{"type": "thinking", "thinking": "The log says 03:10.", "signature": "EqQBCgIYAh"},
                {"type": "text", "text": "At 03:10, 值班员 🙂."}],
    "stop_reason": "end_turn", "stop_sequence": None,
    "usage": {"input_tokens": 2048, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
              "output_tokens": 412},
}


def anthropic_events(*items: tuple[str, dict], stop: bool = True) -> bytes:
    out = b""
    for name, data in (*items, *((("message_stop", {"type": "message_stop"}),) if stop else ())):
        out += f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()
    return out


START = ("message_start", {"type": "message_start", "message": {
    "id": "msg_02", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5-20250929",
    "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 30, "output_tokens": 1}}})


def block_start(index: int, block: dict) -> tuple[str, dict]:
    return "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, body: dict) -> tuple[str, dict]:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": body}


def message_delta(stop: str, output_tokens: int) -> tuple[str, dict]:
    return "message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                             "usage": {"output_tokens": output_tokens}}


ANTHROPIC_REFUSAL = anthropic_events(START, message_delta("refusal", 0))
ANTHROPIC_TOOL_AND_REDACTED = anthropic_events(
    START,
    block_start(0, {"type": "redacted_thinking", "data": "EmwKAhgB"}),
    block_start(1, {"type": "tool_use", "id": "t1", "name": "lookup", "input": {}}),
    delta(1, {"type": "input_json_delta", "partial_json": "{\"q\": "}),
    block_start(2, {"type": "text", "text": ""}),
    delta(2, {"type": "text_delta", "text": "Partial"}),
    message_delta("max_tokens", 9),
)

ANTHROPIC_STREAMS = [
    pytest.param(ANTHROPIC_STREAM, Completion("At 03:10, 值班员 🙂.", "end_turn", Usage(2048, 412, cached_tokens=0,
                                                                                       cache_write_tokens=0),
                                              reasoning="The log says 03:10.", served_model="claude-opus-4-6"),
                 id="thinking-then-text"),
    pytest.param(ANTHROPIC_REFUSAL, Completion("", "refusal", Usage(30, 0), refusal="stop_reason=refusal",
                                               served_model="claude-sonnet-4-5-20250929"), id="refusal"),
    pytest.param(ANTHROPIC_TOOL_AND_REDACTED, Completion("Partial", "max_tokens", Usage(30, 9),
                                                         reasoning="[redacted thinking]",
                                                         served_model="claude-sonnet-4-5-20250929"),
                 id="redacted-and-input-json-ignored"),
]


@pytest.mark.parametrize(("data", "expected"), ANTHROPIC_STREAMS)
def test_anthropic_streams_parse(data, expected):
    assert provider("anthropic").parse_response(read("anthropic", data)) == expected


@pytest.mark.parametrize("data", [p.values[0] for p in ANTHROPIC_STREAMS], ids=[p.id for p in ANTHROPIC_STREAMS])
@pytest.mark.parametrize("chunking", CHUNKINGS[1:], ids=lambda c: c.__name__)
def test_anthropic_streams_any_chunking_same_body(data, chunking):
    assert read("anthropic", data, chunking) == read("anthropic", data)


def test_anthropic_assembled_body_is_the_plain_body():
    assert read("anthropic", ANTHROPIC_STREAM) == ANTHROPIC_PLAIN
    p = provider("anthropic")
    assert p.parse_response(read("anthropic", ANTHROPIC_STREAM)) == p.parse_response(ANTHROPIC_PLAIN)


@pytest.mark.parametrize(
    ("error_type", "status"),
    [("overloaded_error", 529), ("rate_limit_error", 429), ("api_error", 500), ("invalid_request_error", 400),
     ("authentication_error", 401), ("permission_error", 403), ("not_found_error", 404),
     ("request_too_large", 413), ("timeout_error", 504), ("billing_error", 402), ("brand_new_error", 500)],
)
def test_anthropic_error_event_mid_stream(error_type, status):
    error = {"type": "error", "error": {"type": error_type, "message": "Overloaded"}}
    data = anthropic_events(START, block_start(0, {"type": "text", "text": ""}),
                            delta(0, {"type": "text_delta", "text": "Half"}), ("error", error), stop=False)
    with pytest.raises(StreamError) as info:
        read("anthropic", data, random_split(3))
    assert (info.value.status, info.value.message, info.value.payload) == (status, "Overloaded", error)


@pytest.mark.parametrize(
    "cut",
    [pytest.param(ANTHROPIC_STREAM[:ANTHROPIC_STREAM.index(b"event: message_stop")], id="before-message-stop"),
     pytest.param(ANTHROPIC_STREAM[:ANTHROPIC_STREAM.index(b"event: message_delta")], id="before-message-delta"),
     pytest.param(ANTHROPIC_STREAM[:-5], id="inside-message-stop")],
)
def test_anthropic_cut_short_is_incomplete(cut):
    with pytest.raises(IncompleteStream):
        read("anthropic", cut)


# --------------------------------------------------------------------------------------
# Gemini streamGenerateContent?alt=sse
# --------------------------------------------------------------------------------------

GEMINI_STREAM = (
    b'data: {"candidates": [{"content": {"parts": [{"text": "Weighing the two logs","thought": true}],'
    b'"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 900,"totalTokenCount": 900},'
    b'"modelVersion": "gemini-2.5-pro","responseId": "r-1"}\r\n\r\n'
    + 'data: {"candidates": [{"content": {"parts": [{"text": "The keeper "}],"role": "model"},"index": 0}],'
      '"usageMetadata": {"promptTokenCount": 900,"totalTokenCount": 950},"modelVersion": "gemini-2.5-pro",'
      '"responseId": "r-1"}\r\n\r\n'
      'data: {"candidates": [{"content": {"parts": [{"text": "守夜人 ✅."}],"role": "model"},'
      '"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 900,"candidatesTokenCount": 40,'
      '"totalTokenCount": 1240,"thoughtsTokenCount": 300},"modelVersion": "gemini-2.5-pro",'
      '"responseId": "r-1"}\r\n\r\n'.encode()
)
GEMINI_USAGE = {"promptTokenCount": 900, "candidatesTokenCount": 40, "totalTokenCount": 1240,
                "thoughtsTokenCount": 300}
GEMINI_PLAIN = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "Weighing the two logs", "thought": True},
                                                           {"text": "The keeper 守夜人 ✅."}]},
                    "finishReason": "STOP", "index": 0}],
    "usageMetadata": GEMINI_USAGE, "modelVersion": "gemini-2.5-pro", "responseId": "r-1",
}


def gemini_chunk(text: str | None = None, finish: str | None = None, **top) -> dict:
    candidate: dict = {"index": 0}
    if text is not None:
        candidate["content"] = {"parts": [{"text": text}], "role": "model"}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-3.1-pro-preview", **top}


GEMINI_SAFETY = sse(gemini_chunk("I will "), gemini_chunk(None, "SAFETY", usageMetadata={"promptTokenCount": 8}),
                    terminal=b"")
GEMINI_BLOCKED = sse({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
                      "usageMetadata": {"promptTokenCount": 5}, "modelVersion": "gemini-2.5-pro"}, terminal=b"")

GEMINI_STREAMS = [
    pytest.param(GEMINI_STREAM, Completion("The keeper 守夜人 ✅.", "STOP", Usage(900, 340, 300),
                                           reasoning="Weighing the two logs", served_model="gemini-2.5-pro"),
                 id="thoughts-then-text"),
    pytest.param(GEMINI_SAFETY, Completion("I will ", "SAFETY", Usage(8), refusal="finishReason=SAFETY",
                                           served_model="gemini-3.1-pro-preview"), id="safety-finish"),
    pytest.param(GEMINI_BLOCKED, Completion(None, None, Usage(5), refusal="blockReason=PROHIBITED_CONTENT",
                                            served_model="gemini-2.5-pro"), id="prompt-blocked"),
]


@pytest.mark.parametrize(("data", "expected"), GEMINI_STREAMS)
def test_gemini_streams_parse(data, expected):
    assert provider("gemini").parse_response(read("gemini", data)) == expected


@pytest.mark.parametrize("data", [p.values[0] for p in GEMINI_STREAMS], ids=[p.id for p in GEMINI_STREAMS])
@pytest.mark.parametrize("chunking", CHUNKINGS[1:], ids=lambda c: c.__name__)
def test_gemini_streams_any_chunking_same_body(data, chunking):
    assert read("gemini", data, chunking) == read("gemini", data)


def test_gemini_assembled_body_is_the_plain_body():
    assert read("gemini", GEMINI_STREAM) == GEMINI_PLAIN
    p = provider("gemini")
    assert p.parse_response(read("gemini", GEMINI_STREAM)) == p.parse_response(GEMINI_PLAIN)


@pytest.mark.parametrize(
    ("payload", "status"),
    [({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}, 503),
     ([{"error": {"code": 429, "message": "Quota", "status": "RESOURCE_EXHAUSTED"}}], 429),
     ({"error": {"message": "Internal", "status": "INTERNAL"}}, 500)],
)
def test_gemini_error_chunk_mid_stream(payload, status):
    with pytest.raises(StreamError) as info:
        read("gemini", sse(gemini_chunk("Half "), payload, terminal=b""))
    assert info.value.status == status


@pytest.mark.parametrize(
    "data",
    [pytest.param(GEMINI_STREAM[:GEMINI_STREAM.index('守夜人'.encode())], id="cut-in-last-chunk"),
     pytest.param(sse(gemini_chunk("The keeper"), terminal=b""), id="no-finish-reason"),
     pytest.param(b"", id="nothing")],
)
def test_gemini_cut_short_is_incomplete(data):
    with pytest.raises(IncompleteStream):
        read("gemini", data)


# --------------------------------------------------------------------------------------
# reasoning controls: exact request fields per format and level
# --------------------------------------------------------------------------------------

OPENAI_REASONING = [
    ("openai", "none", {"reasoning_effort": "none"}),
    ("openai", "high", {"reasoning_effort": "high"}),
    ("openai", "xhigh", {"reasoning_effort": "xhigh"}),
    ("openrouter", "minimal", {"reasoning": {"effort": "minimal"}}),
    ("qwen", "none", {"enable_thinking": False}),
    ("qwen", "low", {"enable_thinking": True, "thinking_budget": 2048}),
    ("qwen", "xhigh", {"enable_thinking": True, "thinking_budget": 32768}),
    ("thinking", "none", {"thinking": {"type": "disabled"}}),
    ("thinking", "medium", {"thinking": {"type": "enabled"}}),
    ("deepseek", "none", {"thinking": {"type": "disabled"}}),
    ("deepseek", "high", {"thinking": {"type": "enabled"}, "reasoning_effort": "high"}),
    ("doubao", "none", {"thinking": {"type": "disabled"}}),
    ("doubao", "xhigh", {"thinking": {"type": "enabled"}, "reasoning_effort": "high"}),
    ("doubao", "minimal", {"thinking": {"type": "enabled"}, "reasoning_effort": "minimal"}),
    ("minimax", "none", {"reasoning_split": True, "thinking": {"type": "disabled"}}),
    ("minimax", "high", {"reasoning_split": True}),
    ("none", "high", {}),
    (None, "low", {"reasoning_effort": "low"}),  # the openai wire format's own convention
]


@pytest.mark.parametrize(("fmt", "level", "fields"), OPENAI_REASONING)
def test_openai_reasoning_request(fmt, level, fields):
    p = provider("openai", route="r", reasoning_format=fmt, send_temperature=False)
    body = p.build_request(PROMPT, Sampling(None, 8192, level)).body
    assert body == {"model": "r", "messages": OPENAI_MSGS, "max_tokens": 8192, **fields}


def test_reasoning_none_effort_sends_nothing_and_extra_body_wins():
    p = provider("openai", route="r", reasoning_format="deepseek", extra_body={"reasoning_effort": "max"})
    assert "thinking" not in p.build_request(PROMPT, Sampling(0.1, 64)).body
    body = p.build_request(PROMPT, Sampling(0.1, 64, "high")).body
    assert body["reasoning_effort"] == "max" and body["thinking"] == {"type": "enabled"}


ANTHROPIC_REASONING = [
    ("claude-sonnet-4-5", None, "low", 32768, {"thinking": {"type": "enabled", "budget_tokens": 2048}}),
    ("claude-sonnet-4-5", None, "xhigh", 32768, {"thinking": {"type": "enabled", "budget_tokens": 16384}}),
    ("claude-sonnet-4-5", None, "high", 8192, {"thinking": {"type": "enabled", "budget_tokens": 4096}}),
    ("claude-sonnet-4-5", None, "high", 1500, {"thinking": {"type": "enabled", "budget_tokens": 1024}}),
    ("claude-opus-4-6", None, "medium", 32768,
     {"thinking": {"type": "adaptive"}, "output_config": {"effort": "medium"}}),
    ("claude-opus-4.8", None, "minimal", 32768, {"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}),
    # Opus 4.7+ has an xhigh effort of its own (between high and max); 4.6 tops out at max.
    ("claude-opus-4-7", None, "xhigh", 32768, {"thinking": {"type": "adaptive"}, "output_config": {"effort": "xhigh"}}),
    ("claude-opus-4-6", None, "xhigh", 32768, {"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}),
    ("mr.claude-opus-4.6", "anthropic-budget", "minimal", 32768,
     {"thinking": {"type": "enabled", "budget_tokens": 1024}}),
]


@pytest.mark.parametrize(("route", "fmt", "level", "max_tokens", "fields"), ANTHROPIC_REASONING)
def test_anthropic_reasoning_request_drops_temperature(route, fmt, level, max_tokens, fields):
    p = provider("anthropic", route=route, reasoning_format=fmt, base_url="https://api.anthropic.com")
    body = p.build_request(PROMPT, Sampling(0.1, max_tokens, level)).body
    assert body == {"model": route, "max_tokens": max_tokens, "messages": OPENAI_MSGS, **fields}


def test_anthropic_reasoning_none_keeps_temperature_and_sends_no_thinking():
    body = provider("anthropic", route="claude-opus-4-6").build_request(PROMPT, Sampling(0.1, 512, "none")).body
    assert body == {"model": "claude-opus-4-6", "max_tokens": 512, "messages": OPENAI_MSGS, "temperature": 0.1}


def test_anthropic_budget_needs_room_below_max_tokens():
    with pytest.raises(ValueError, match="max_tokens"):
        provider("anthropic", route="claude-sonnet-4-5").build_request(PROMPT, Sampling(0.1, 1024, "low"))


GEMINI_REASONING = [
    ("gemini-2.5-pro", None, "low", {"thinkingBudget": 2048, "includeThoughts": True}),
    ("gemini-2.5-flash", None, "none", {"thinkingBudget": 0}),
    ("gemini-2.5-pro", None, "xhigh", {"thinkingBudget": 16384, "includeThoughts": True}),
    ("gemini-3.1-pro-preview", None, "high", {"thinkingLevel": "high", "includeThoughts": True}),
    ("gemini-3-flash", None, "xhigh", {"thinkingLevel": "high", "includeThoughts": True}),
    ("gemini-3-flash", None, "none", {"thinkingLevel": "minimal"}),
    ("gemini-2.5-pro", "gemini-level", "low", {"thinkingLevel": "low", "includeThoughts": True}),
]


@pytest.mark.parametrize(("route", "fmt", "level", "thinking"), GEMINI_REASONING)
def test_gemini_reasoning_request(route, fmt, level, thinking):
    p = provider("gemini", route=route, reasoning_format=fmt)
    body = p.build_request(PROMPT, Sampling(0.1, 32768, level)).body
    assert body["generationConfig"] == {"maxOutputTokens": 32768, "temperature": 0.1, "thinkingConfig": thinking}


def test_gemini_reasoning_format_none_sends_no_thinking_config():
    body = provider("gemini", reasoning_format="none").build_request(PROMPT, Sampling(0.1, 64, "high")).body
    assert body["generationConfig"] == {"maxOutputTokens": 64, "temperature": 0.1}


@pytest.mark.parametrize(
    ("name", "fmt", "level", "match"),
    [("openai", None, "extreme", "unknown reasoning_effort"), ("openai", "anthropic-budget", "low", "does not apply"),
     ("anthropic", "qwen", "low", "does not apply"), ("gemini", "openai", "low", "does not apply"),
     ("openai", "nonsense", None, "does not apply")],
)
def test_reasoning_config_errors_name_the_choices(name, fmt, level, match):
    with pytest.raises(ValueError, match=match):
        PROVIDERS[name].check_reasoning(fmt, level)
    with pytest.raises(ValueError, match=match):
        provider(name, reasoning_format=fmt).build_request(PROMPT, Sampling(0.1, 8192, level))


def test_reasoning_tables_are_consistent():
    assert REASONING_LEVELS == ("none", "minimal", "low", "medium", "high", "xhigh")
    for cls in PROVIDERS.values():
        assert cls.reasoning_formats["none"] == NO_REASONING_CONTROL  # every wire format can send nothing
        assert all(cls.reasoning_formats.values())  # and says what each format sends


@pytest.mark.parametrize(
    ("route", "expected"),
    [("claude-opus-4-6", "anthropic-adaptive"), ("claude-opus-4.8", "anthropic-adaptive"),
     ("claude-sonnet-5", "anthropic-adaptive"), ("claude-sonnet-4-20250514", "anthropic-budget"),
     ("claude-sonnet-4-5-20250929", "anthropic-budget"), ("claude-3-7-sonnet-latest", "anthropic-budget")],
)
def test_anthropic_default_format_by_route(route, expected):
    assert anthropic_format(route) == expected


@pytest.mark.parametrize(
    ("route", "expected"),
    [("gemini-2.5-pro", "gemini-budget"), ("gemini-2.5-flash-lite", "gemini-budget"),
     ("gemini-3.1-pro-preview", "gemini-level"), ("gemini-3-flash", "gemini-level")],
)
def test_gemini_default_format_by_route(route, expected):
    assert gemini_format(route) == expected


# --------------------------------------------------------------------------------------
# inline <think> blocks
# --------------------------------------------------------------------------------------

THINK_CASES = [
    ("<think>plan</think>\n\nAnswer.", "plan", "Answer."),
    ("  \n<think>\nplan\n</think>Answer.", "plan", "Answer."),
    ("<think></think>Answer.", "", "Answer."),
    ("<think>still thinking when cut", "still thinking when cut", ""),  # unclosed: no answer at all
    ("plan only</think>\nAnswer.", "plan only", "Answer."),  # template put <think> in the prompt
    ("Answer with <think>tags</think> inside.", None, "Answer with <think>tags</think> inside."),
    ("Plain answer.", None, "Plain answer."),
    ("", None, ""),
    (None, None, None),
    ("<THINK>x</THINK>y", None, "<THINK>x</THINK>y"),  # the tag is lower-case in every server we know
    ("<think>a</think>b</think>c", "a", "b</think>c"),
]


@pytest.mark.parametrize(("content", "reasoning", "text"), THINK_CASES)
def test_split_think(content, reasoning, text):
    assert split_think(content) == (reasoning, text)


def test_inline_think_with_reasoning_content_keeps_both():
    payload = {"model": "qwen3.7-plus", "choices": [{"message": {
        "role": "assistant", "reasoning_content": "first", "content": "<think>second</think>Final."},
        "finish_reason": "stop"}]}
    assert provider("openai").parse_response(payload) == Completion(
        "Final.", "stop", Usage(), reasoning="first\n\nsecond", served_model="qwen3.7-plus")


def test_unclosed_think_is_an_empty_answer_not_judged():
    from wildtrace.runtime.net.call import interpret

    payload = {"choices": [{"message": {"content": "<think>long reasoning..."}, "finish_reason": "length"}]}
    result = interpret(provider("openai"), payload, 200, 1, 0.0)
    assert (result.ok, result.reason, result.text) == (False, "empty_output", "")


def test_request_body_round_trips_as_json():
    for name in ("openai", "anthropic", "gemini"):
        p = provider(name)
        request: WireRequest = p.stream_request(p.build_request(PROMPT, Sampling(0.1, 4096, "low")))
        assert json.loads(json.dumps(request.body, ensure_ascii=False)) == request.body


# --------------------------------------------------------------------------------------
# a 2xx that is not a stream, and wrong shapes inside events
# --------------------------------------------------------------------------------------

PLAIN_REPLIES = [
    pytest.param("openai", OPENAI_PLAIN, id="openai-object"),
    pytest.param("anthropic", ANTHROPIC_PLAIN, id="anthropic-object"),  # LiteLLM's /v1/messages does this
    pytest.param("gemini", GEMINI_PLAIN, id="gemini-object"),
]


@pytest.mark.parametrize(("name", "plain"), PLAIN_REPLIES)
@pytest.mark.parametrize("chunking", [whole, bytewise, random_split(9)], ids=lambda c: c.__name__)
def test_plain_json_reply_to_a_streamed_request_is_the_plain_body(name, plain, chunking):
    raw = json.dumps(plain, ensure_ascii=False, indent=2).encode()  # pretty-printed: lines like "data": …
    assert read(name, raw, chunking) == plain


def test_plain_json_reply_with_a_bom():
    assert read("openai", b"\xef\xbb\xbf" + json.dumps(OPENAI_PLAIN).encode()) == OPENAI_PLAIN


def test_gemini_json_array_reply_is_assembled_like_events():
    chunks = [json.loads(line[len(b"data: "):]) for line in GEMINI_STREAM.split(b"\r\n\r\n") if line]
    assert read("gemini", json.dumps(chunks).encode()) == GEMINI_PLAIN


@pytest.mark.parametrize("name", ["openai", "anthropic", "gemini"])
def test_plain_json_error_reply_is_a_stream_error(name):
    with pytest.raises(StreamError) as info:
        read(name, b'{"error": {"type": "overloaded_error", "message": "Overloaded"}}')
    assert info.value.status == 529


@pytest.mark.parametrize(
    ("name", "data"),
    [("openai", b'data: {"choices": 5}\n\n'),
     ("openai", b'data: {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}], '
                b'"usage": 3}\n\ndata: [DONE]\n\n'),
     ("openai", b"data: [1, 2]\n\n"),
     ("anthropic", b'data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": 5}}'
                   b'\n\ndata: {"type": "message_stop"}\n\n'),
     ("anthropic", b'data: "just a string"\n\n'),
     ("gemini", b'data: {"candidates": 7}\n\n'),
     ("gemini", b'data: {"candidates": [{"content": {"parts": 3}}]}\n\n')],
)
def test_wrong_shapes_inside_events_are_value_errors(name, data):
    p = provider(name)
    with pytest.raises(ValueError):
        p.parse_response(read(name, data))


# --------------------------------------------------------------------------------------
# over a real socket: a loopback server that trickles the recorded events
# --------------------------------------------------------------------------------------


class TrickleServer:
    """Answers each POST with ``data`` written in small pieces with pauses (chunked encoding)."""

    def __init__(self, data: bytes, piece: int = 7, pause_s: float = 0.002) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # http.server's naming
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for i in range(0, len(data), piece):
                    part = data[i:i + piece]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.flush()
                    time.sleep(pause_s)
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "data", "plain"),
    [("openai", OPENAI_STREAM, OPENAI_PLAIN), ("anthropic", ANTHROPIC_STREAM, ANTHROPIC_PLAIN),
     ("gemini", GEMINI_STREAM, GEMINI_PLAIN)],
)
def test_streams_read_over_a_real_socket(name, data, plain):
    import httpx

    server = TrickleServer(data)
    with server as url:
        p = provider(name, base_url=url, route="gemini-2.5-pro" if name == "gemini" else "route-x")
        request = p.stream_request(p.build_request(PROMPT, SAMPLING))
        reader = p.stream_reader()
        with httpx.Client() as client, client.stream("POST", request.url, json=request.body,
                                                     headers=dict(request.headers)) as response:
            assert response.status_code == 200
            pieces = 0
            for raw in response.iter_raw():
                reader.feed(raw)
                pieces += 1
        assert pieces > 1  # it really arrived in pieces
        assert reader.finish() == plain
    assert server.bodies == [request.body]  # the streamed body is what went over the wire
