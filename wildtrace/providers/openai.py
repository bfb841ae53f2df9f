"""OpenAI chat completions — and every OpenAI-compatible route (DeepSeek, Qwen compatible
mode, Kimi, GLM, Doubao, MiniMax, and gateways such as the paper's ``mr.`` routes)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from wildtrace.core.records import Completion, Usage
from wildtrace.providers.base import (
    Provider,
    Sampling,
    StreamReader,
    WireRequest,
    as_int,
    as_str,
    check_reasoning,
    merge_extra,
    stream_error,
)
from wildtrace.providers.reasoning import join_reasoning, openai_fields, split_think
from wildtrace.providers.sse import SSEEvent

#: Message fields that carry reasoning apart from the answer (DeepSeek, Qwen, Kimi, GLM: the
#: first; OpenRouter, some vLLM builds: the second).
REASONING_KEYS = ("reasoning_content", "reasoning")
DONE = "[DONE]"


def _text_of(content: Any) -> str | None:
    """Message content as text: a string, or a list of text parts (some compatible servers)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") in (None, "text"))
    raise ValueError(f"unexpected message content of type {type(content).__name__}")


def _details_text(details: Any) -> str | None:
    """MiniMax's ``reasoning_details`` (with reasoning_split): a list of ``{text}`` items."""
    if not isinstance(details, list):
        return None
    return "".join(d["text"] for d in details if isinstance(d, Mapping) and isinstance(d.get("text"), str)) or None


def _reasoning_of(message: Mapping[str, Any]) -> str | None:
    """The separate reasoning of a message: the first reasoning field present, else reasoning_details."""
    for key in REASONING_KEYS:
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return _details_text(message.get("reasoning_details"))


class OpenAIProvider(Provider):
    """POST {base_url}/chat/completions with a bearer token."""

    name = "openai"

    def build_request(self, prompt: str, sampling: Sampling) -> WireRequest:
        """``model``, one user message, the budget under ``budget_field``, temperature if sent,
        the reasoning fields of the endpoint's dialect, then ``extra_body`` (which wins)."""
        body: dict[str, Any] = {"model": self.spec.route, "messages": [{"role": "user", "content": prompt}]}
        body[self.spec.budget_field] = sampling.max_tokens
        temperature = self.temperature(sampling)
        if temperature is not None:
            body["temperature"] = temperature
        body.update(self._reasoning(sampling))
        return WireRequest(url=self.spec.base_url.rstrip("/") + "/chat/completions", body=merge_extra(body, self.spec.extra_body))

    def _reasoning(self, sampling: Sampling) -> dict[str, Any]:
        level = sampling.reasoning_effort
        check_reasoning(self.name, self.spec.reasoning_format, level)
        if level is None:
            return {}
        return openai_fields(self.spec.reasoning_format or "openai", level, sampling.max_tokens)

    def stream_request(self, request: WireRequest) -> WireRequest:
        """``stream: true`` and ``stream_options.include_usage`` (so the last chunk carries usage)."""
        body = merge_extra(request.body, {"stream": True, "stream_options": {"include_usage": True}})
        return WireRequest(url=request.url, body=body, headers={**request.headers, "Accept": "text/event-stream"})

    def stream_reader(self) -> StreamReader:
        """A reader of ``chat.completion.chunk`` events."""
        return OpenAIStreamReader()

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """Bearer token."""
        return {"Authorization": f"Bearer {api_key}"}

    def _parse(self, payload: Any) -> Completion:
        """``choices[0].message``: content (a leading ``<think>`` block split off), reasoning,
        refusal, finish_reason; usage with reasoning tokens; the served ``model``."""
        if not isinstance(payload, Mapping) or not isinstance(payload.get("choices"), list):
            raise ValueError("response has no 'choices' list")
        usage = payload.get("usage") or {}
        details = usage.get("completion_tokens_details") or {}
        counts = Usage(
            prompt_tokens=as_int(usage.get("prompt_tokens")),
            completion_tokens=as_int(usage.get("completion_tokens")),
            reasoning_tokens=as_int(details.get("reasoning_tokens")),
        )
        served = as_str(payload.get("model"))
        if not payload["choices"]:  # not an empty answer: no answer at all (a bad response, retried)
            raise ValueError("response has an empty 'choices' list")
        choice = payload["choices"][0]
        message = choice.get("message") or {}
        finish = choice.get("finish_reason")
        refusal = message.get("refusal")
        if not refusal and finish == "content_filter":
            refusal = "finish_reason=content_filter"
        inline, text = split_think(_text_of(message.get("content")))
        return Completion(text=text, finish_reason=finish, usage=counts, refusal=refusal or None,
                          reasoning=join_reasoning(_reasoning_of(message), inline), served_model=served)


class OpenAIStreamReader(StreamReader):
    """Assembles ``chat.completion.chunk`` events into a ``chat.completion`` body.

    Complete at ``data: [DONE]``, or at EOF after a chunk that carried a finish_reason:
    gateways differ on sending [DONE] (and the usage chunk), but a finish_reason is the
    model saying it stopped, so the text is whole. EOF before either is IncompleteStream.
    """

    def __init__(self) -> None:
        super().__init__()
        self.head: dict[str, Any] = {}  # id, created, model, system_fingerprint: the last seen
        self.usage: Any = None
        self.finish_reason: str | None = None
        self.role = "assistant"
        self.fields: dict[str, list[str]] = {}  # content, refusal, reasoning_content, reasoning -> pieces
        self.details: list[str] = []  # reasoning_details texts (MiniMax)
        self.chunks = 0
        self.saw_choice = False  # no choice at all is ``choices: []`` (a bad response), not an empty answer

    def on_event(self, event: SSEEvent) -> None:
        """One ``data:`` payload: [DONE], an error, or a chunk."""
        if event.data.strip() == DONE:
            self.done = True
            return
        try:
            chunk = json.loads(event.data)
        except ValueError as exc:
            raise ValueError(f"unreadable stream chunk: {event.data[:200]!r}") from exc
        if not isinstance(chunk, Mapping):
            raise ValueError(f"stream chunk is not an object: {event.data[:200]!r}")
        if chunk.get("error") is not None:  # OpenAI, OpenRouter and LiteLLM mid-stream errors
            raise stream_error(chunk)
        self.chunks += 1
        self._chunk(chunk)

    def _chunk(self, chunk: Mapping[str, Any]) -> None:
        for key in ("id", "created", "model", "system_fingerprint"):
            if chunk.get(key) is not None:
                self.head[key] = chunk[key]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
                self.saw_choice = True
                self._choice(choice)

    def _choice(self, choice: Mapping[str, Any]) -> None:
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, Mapping):
            return
        if isinstance(delta.get("role"), str):
            self.role = delta["role"]
        for key in ("content", "refusal", *REASONING_KEYS):
            value = delta.get(key)
            if isinstance(value, str):
                self.fields.setdefault(key, []).append(value)
        text = _details_text(delta.get("reasoning_details"))
        if text:
            self.details.append(text)

    def complete(self) -> bool:
        """[DONE] seen, or a finish_reason (see the class docstring)."""
        return self.done or self.finish_reason is not None

    def progress(self) -> str:
        """How far the stream got."""
        return f"{self.chunks} chunks, no finish_reason, no [DONE]"

    def body(self) -> dict:
        """The ``chat.completion`` a plain call returns."""
        message: dict[str, Any] = {"role": self.role, "content": None, "refusal": None}
        for key, pieces in self.fields.items():
            message[key] = "".join(pieces)
        if self.details:
            message["reasoning_details"] = [{"type": "reasoning.text", "text": "".join(self.details)}]
        choices = [{"index": 0, "message": message, "finish_reason": self.finish_reason}] if self.saw_choice else []
        body: dict[str, Any] = {**self.head, "object": "chat.completion", "choices": choices}
        if self.usage is not None:
            body["usage"] = self.usage
        return body
