"""Anthropic Messages API."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from wildtrace.core.records import Completion, Usage
from wildtrace.providers.anthropic.batch import AnthropicBatch
from wildtrace.providers.batch import BatchAPI
from wildtrace.providers.base import (
    Provider,
    Sampling,
    StreamReader,
    WireRequest,
    as_int,
    NO_REASONING_CONTROL,
    as_str,
    merge_extra,
    stream_error,
)
from wildtrace.providers.reasoning import anthropic_fields, anthropic_format, join_reasoning
from wildtrace.providers.sse import SSEEvent

ANTHROPIC_VERSION = "2023-06-01"
#: What a redacted_thinking block is recorded as (its data is encrypted: nothing to read).
REDACTED_THINKING = "[redacted thinking]"


def _reasoning_of(blocks: list[Any]) -> str | None:
    """Thinking blocks' text, and a marker per redacted_thinking block."""
    pieces: list[str | None] = []
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "thinking":
            pieces.append(as_str(block.get("thinking")))
        elif block.get("type") == "redacted_thinking":
            pieces.append(REDACTED_THINKING)
    return join_reasoning(*pieces)


class AnthropicProvider(Provider):
    """POST {base_url}/v1/messages with x-api-key and anthropic-version."""

    name = "anthropic"
    batch_api: ClassVar[type[BatchAPI] | None] = AnthropicBatch
    temperature_range = (0.0, 1.0)  # the Messages API takes 0-1
    api_headers: ClassVar[Mapping[str, str]] = {"anthropic-version": ANTHROPIC_VERSION}
    #: How thinking is asked for: a token budget before Claude 4.6, adaptive from 4.6 on (by route).
    reasoning_formats: ClassVar[Mapping[str, str]] = {
        "anthropic-budget": "thinking: {type: enabled, budget_tokens: N}; none sends no thinking (Claude before 4.6)",
        "anthropic-adaptive": "thinking: {type: adaptive} + output_config: {effort: <level>}; none sends no thinking "
                              "(Claude 4.6+)",
        "none": NO_REASONING_CONTROL,
    }

    def build_request(self, prompt: str, sampling: Sampling) -> WireRequest:
        """``model``, ``max_tokens`` (always required here), one user message, temperature if
        sent and thinking is off (the API rejects it with thinking on), thinking for the level."""
        body: dict[str, Any] = {
            "model": self.spec.route,
            "max_tokens": sampling.max_tokens,
            "messages": [{"role": "user", "content": prompt}],
        }
        thinking = self._reasoning(sampling)
        temperature = self.temperature(sampling)
        if temperature is not None and not thinking:
            body["temperature"] = temperature
        body.update(thinking)
        return WireRequest(
            url=self.spec.base_url.rstrip("/") + "/v1/messages",
            body=merge_extra(body, self.spec.extra_body),
            headers=dict(self.api_headers),
        )

    @classmethod
    def default_reasoning_format(cls, route: str) -> str:
        """Adaptive from Claude 4.6 on, else a budget (``anthropic_format``)."""
        return anthropic_format(route)

    def budget_path(self) -> tuple[str, ...]:
        """Always ``max_tokens`` here, whatever the endpoint's budget field."""
        return ("max_tokens",)

    def _reasoning(self, sampling: Sampling) -> dict[str, Any]:
        level = sampling.reasoning_effort
        self.check_reasoning(self.spec.reasoning_format, level, self.spec.route)
        if level is None:
            return {}
        return anthropic_fields(self.reasoning_format(), level, sampling.max_tokens, self.spec.route)

    def with_cache_hint(self, request: WireRequest, ttl: str | None = None) -> WireRequest:
        """The prompt marked with ``cache_control: {"type": "ephemeral", "ttl": ttl}`` when the run's schedule
        sends it again within ``ttl`` ("5m" or "1h", sent explicitly: the lifetime billed is the one asked
        for); a write costs 1.25x input for 5 minutes, 2x for an hour, a read 0.1x, and the hour needs no
        beta header (docs.anthropic.com/en/docs/build-with-claude/prompt-caching; the SDK's
        ``CacheControlEphemeralParam``). The text is the same string, as the content's one text block;
        ``ttl`` None: no mark, no write."""
        messages = request.body.get("messages")
        if ttl is None or not isinstance(messages, list) or not messages or \
                not isinstance(messages[-1].get("content"), str):
            return request
        last = {**messages[-1], "content": [{"type": "text", "text": messages[-1]["content"],
                                             "cache_control": {"type": "ephemeral", "ttl": ttl}}]}
        body = {**request.body, "messages": [*messages[:-1], last]}
        return WireRequest(url=request.url, body=body, headers=dict(request.headers))

    def stream_request(self, request: WireRequest) -> WireRequest:
        """``stream: true``."""
        body = merge_extra(request.body, {"stream": True})
        return WireRequest(url=request.url, body=body, headers={**request.headers, "Accept": "text/event-stream"})

    def stream_reader(self) -> StreamReader:
        """A reader of Messages API stream events."""
        return AnthropicStreamReader()

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The key goes in x-api-key."""
        return {"x-api-key": api_key}

    @classmethod
    def model_list(cls, token: str | None) -> tuple[str, dict[str, str]]:
        """``/v1/models``, paged by ``after_id``."""
        return "/v1/models", {"limit": "1000", **({"after_id": token} if token else {})}

    @classmethod
    def model_page(cls, page: Mapping[str, Any]) -> tuple[Any, Any]:
        """``data``; the next page starts after ``last_id`` while ``has_more`` is true."""
        return page.get("data"), page.get("last_id") if page.get("has_more") is True else None

    def _parse(self, payload: Any) -> Completion:
        """Join the ``text`` blocks (thinking blocks are reasoning, not the answer); stop_reason refusal."""
        if not isinstance(payload, Mapping) or not isinstance(payload.get("content"), list):
            raise ValueError("response has no 'content' list")
        blocks = payload["content"]
        text = "".join(b.get("text", "") for b in blocks if isinstance(b, Mapping) and b.get("type") == "text")
        usage = payload.get("usage") or {}
        stop = payload.get("stop_reason")
        return Completion(
            text=text,
            finish_reason=stop,
            usage=_usage(usage),
            refusal="stop_reason=refusal" if stop == "refusal" else None,
            reasoning=_reasoning_of(blocks),
            served_model=as_str(payload.get("model")),
        )


#: Where each delta type's text goes in its block.
_DELTA_FIELDS = {"text_delta": ("text", "text"), "thinking_delta": ("thinking", "thinking"),
                 "signature_delta": ("signature", "signature")}


class AnthropicStreamReader(StreamReader):
    """Assembles message_start / content_block_* / message_delta / message_stop into a Message.

    ``ping`` is ignored, ``input_json_delta`` (tool input) too; an ``error`` event raises
    StreamError with the status its type stands for (overloaded_error -> 529, ...).
    Complete only at ``message_stop``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.message: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.events = 0

    def on_event(self, event: SSEEvent) -> None:
        """One event: its JSON ``type`` decides (the ``event:`` name when it has none)."""
        try:
            data = json.loads(event.data)
        except ValueError as exc:
            raise ValueError(f"unreadable stream event {event.event!r}: {event.data[:200]!r}") from exc
        if not isinstance(data, Mapping):
            raise ValueError(f"stream event {event.event!r} is not an object")
        self.events += 1
        kind = data.get("type") or event.event
        if kind == "error" or data.get("error") is not None:
            raise stream_error(data)
        handler = self._handlers().get(str(kind))  # ping and unknown events carry nothing to keep
        if handler is not None:
            handler(data)

    def _handlers(self) -> dict[str, Any]:
        return {"message_start": self._message_start, "content_block_start": self._content_block_start,
                "content_block_delta": self._content_block_delta, "message_delta": self._message_delta,
                "message_stop": self._message_stop}

    def _message_start(self, data: Mapping[str, Any]) -> None:
        message = data.get("message")
        if isinstance(message, Mapping):
            self.message = {k: v for k, v in message.items() if k not in ("content", "usage")}
            if isinstance(message.get("usage"), Mapping):
                self.usage.update(message["usage"])

    def _content_block_start(self, data: Mapping[str, Any]) -> None:
        block = data.get("content_block")
        if isinstance(block, Mapping):
            self.blocks[self._index(data)] = dict(block)

    def _content_block_delta(self, data: Mapping[str, Any]) -> None:
        delta = data.get("delta")
        if not isinstance(delta, Mapping) or delta.get("type") not in _DELTA_FIELDS:
            return  # input_json_delta and anything new: not part of the answer text
        field, key = _DELTA_FIELDS[delta["type"]]
        piece = delta.get(key)
        if not isinstance(piece, str):
            return
        default_type = "text" if field == "text" else "thinking"
        block = self.blocks.setdefault(self._index(data), {"type": default_type})
        block[field] = (block.get(field) or "") + piece

    def _message_delta(self, data: Mapping[str, Any]) -> None:
        delta = data.get("delta")
        if isinstance(delta, Mapping):
            for key in ("stop_reason", "stop_sequence"):
                if key in delta:
                    self.message[key] = delta[key]
        if isinstance(data.get("usage"), Mapping):
            self.usage.update(data["usage"])  # output_tokens is cumulative: the last one wins

    def _message_stop(self, data: Mapping[str, Any]) -> None:
        self.done = True

    @staticmethod
    def _index(data: Mapping[str, Any]) -> int:
        index = data.get("index", 0)
        return index if isinstance(index, int) else 0

    def progress(self) -> str:
        """How far the stream got."""
        return f"{self.events} events, no message_stop"

    def body(self) -> dict:
        """The Message a plain call returns (content blocks in index order)."""
        content = [self.blocks[i] for i in sorted(self.blocks)]
        return {**self.message, "content": content, "usage": dict(self.usage)}


def _usage(usage: Mapping) -> Usage:
    """Anthropic's counts: ``input_tokens`` excludes cache reads and writes, so the input is their sum;
    the writes for an hour are ``cache_creation.ephemeral_1h_input_tokens``."""
    base, read, write = (as_int(usage.get(k)) for k in ("input_tokens", "cache_read_input_tokens",
                                                          "cache_creation_input_tokens"))
    prompt = None if base is None else base + (read or 0) + (write or 0)
    creation = usage.get("cache_creation")
    hour = as_int(creation.get("ephemeral_1h_input_tokens")) if isinstance(creation, Mapping) else None
    return Usage(prompt_tokens=prompt, completion_tokens=as_int(usage.get("output_tokens")), cached_tokens=read,
                 cache_write_tokens=write, cache_write_1h_tokens=hour)
