"""OpenAI chat completions — and every OpenAI-compatible route (DeepSeek, Qwen compatible
mode, Kimi, GLM, Doubao, MiniMax, and gateways such as the paper's ``mr.`` routes)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, ClassVar

from wildtrace.core.records import Completion, Usage
from wildtrace.providers.openai.batch import OpenAIBatch
from wildtrace.providers.batch import BatchAPI
from wildtrace.providers.base import (
    served_name,
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
from wildtrace.providers.reasoning import join_reasoning, openai_fields, split_think
from wildtrace.providers.sse import SSEEvent

#: Message fields that carry reasoning apart from the answer (DeepSeek, Qwen, Kimi, GLM: the
#: first; OpenRouter, some vLLM builds: the second).
REASONING_KEYS = ("reasoning_content", "reasoning")
DONE = "[DONE]"
#: finish_reason values that mean the provider's filter withheld the answer: OpenAI's
#: ``content_filter``; GLM's ``sensitive`` ("内容被安全审核接口拦截", docs.bigmodel.cn, 对话补全).
BLOCKED_FINISH = frozenset({"content_filter", "sensitive"})
#: GLM's ``network_error``: "模型推理异常" (a fault in inference, docs.bigmodel.cn): not an answer, retried.
FAULT_FINISH = "network_error"
#: The status a faulted 2xx generation is treated as (transient: retried with backoff).
FAULT_STATUS = 503
#: MiniMax ``base_resp.status_code`` -> the HTTP status it stands for. 1000 unknown error, 1001
#: timeout, 1002 rate limit ("please retry later") and 1004 not authorized: platform.minimax.io/docs/
#: api-reference/errorcode. 1008 "insufficient balance": github.com/MiniMax-AI/MiniMax-M2/issues/62.
#: 1026 "input new_sensitive" (input flagged: github.com/esengine/DeepSeek-Reasonix/issues/6818) is
#: final: the same prompt is flagged again. Any other code is taken as a 500 (retried). 0 is success.
MINIMAX_STATUS = {1000: 500, 1001: 504, 1002: 429, 1004: 401, 1008: 402, 1026: 400}


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


def _thinking_disabled(body: Mapping[str, Any]) -> bool:
    """The request turns thinking off (``thinking: {type: disabled}``)."""
    thinking = body.get("thinking")
    return isinstance(thinking, Mapping) and thinking.get("type") == "disabled"


def _choice_usage(choices: list[Any]) -> Mapping[str, Any] | None:
    """Usage inside ``choices[0]`` (Moonshot's place for it), when the body has none at the top."""
    first = choices[0] if choices else None
    usage = first.get("usage") if isinstance(first, Mapping) else None
    return usage if isinstance(usage, Mapping) else None


def _base_resp_code(payload: Any) -> int:
    """MiniMax's ``base_resp.status_code`` (0 = success, also when absent or not a number)."""
    base = payload.get("base_resp") if isinstance(payload, Mapping) else None
    code = as_int(base.get("status_code")) if isinstance(base, Mapping) else None
    return code or 0


class OpenAIProvider(Provider):
    """POST {base_url}/chat/completions with a bearer token."""

    name = "openai"
    batch_api: ClassVar[type[BatchAPI] | None] = OpenAIBatch
    #: The OpenAI-compatible dialects of reasoning effort (``openai_fields`` builds each); openai first (the default).
    reasoning_formats: ClassVar[Mapping[str, str]] = {
        "openai": "reasoning_effort: <level> (OpenAI; the openai wire format's default)",
        "openrouter": "reasoning: {effort: <level>} (OpenRouter's unified field)",
        "qwen": "enable_thinking: false for none, else enable_thinking: true + thinking_budget (DashScope / Qwen)",
        "thinking": "thinking: {type: disabled} for none, else {type: enabled} (GLM, Kimi K2.x)",
        "deepseek": "thinking: {type: disabled} for none, else {type: enabled} + reasoning_effort: <level> (DeepSeek)",
        "doubao": "thinking: {type: disabled} for none, else {type: enabled} + reasoning_effort "
                  "(Doubao Seed, Volcengine Ark)",
        "minimax": "reasoning_split: true (reasoning out of the content); none adds thinking: {type: disabled} "
                   "(MiniMax)",
        "none": NO_REASONING_CONTROL,
    }

    def build_request(self, prompt: str, sampling: Sampling) -> WireRequest:
        """``model``, one user message, the budget under ``budget_field``, temperature if sent,
        the reasoning fields of the endpoint's dialect, then ``extra_body`` (which wins)."""
        body: dict[str, Any] = {"model": self.spec.route, "messages": [{"role": "user", "content": prompt}]}
        body[self.spec.budget_field] = sampling.max_tokens
        temperature = self.temperature(sampling)
        if temperature is not None:
            body["temperature"] = temperature
        body.update(self._reasoning(sampling))
        url = self.spec.base_url.rstrip("/") + "/chat/completions"
        return WireRequest(url=url, body=merge_extra(body, self.spec.extra_body), headers=dict(self.api_headers))

    def _reasoning(self, sampling: Sampling) -> dict[str, Any]:
        level = sampling.reasoning_effort
        self.check_reasoning(self.spec.reasoning_format, level, self.spec.route)
        if level is None:
            return {}
        return openai_fields(self.reasoning_format(), level, sampling.max_tokens)

    def with_cache_hint(self, request: WireRequest, ttl: str | None = None) -> WireRequest:
        """OpenAI caches a prompt of 1,024 tokens or more on its own, at no extra cost; ``prompt_cache_key``
        (the prompt's sha256, where ``spec.prompt_cache_key``) routes a prompt's repeats to the server
        holding its prefix, ``prompt_cache_retention`` asks for a longer lifetime where the model offers it
        (platform.openai.com/docs/guides/prompt-caching). The compatible providers cache on their own.
        ``ttl`` is not OpenAI's: its writes cost nothing extra."""
        hint: dict[str, Any] = {}
        if self.spec.prompt_cache_key:
            prompt = _text_of(request.body["messages"][0]["content"]) or ""
            hint["prompt_cache_key"] = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
        if self.spec.prompt_cache_retention is not None:
            hint["prompt_cache_retention"] = self.spec.prompt_cache_retention
        if not hint:
            return request
        return WireRequest(url=request.url, body={**request.body, **hint}, headers=dict(request.headers))

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

    def temperature_sent(self, request: WireRequest) -> bool | str:
        """DeepSeek in thinking mode takes temperature and ignores it ("Thinking mode does not support
        the temperature … setting these parameters will not trigger an error but will also not take
        effect"; thinking is on unless disabled: api-docs.deepseek.com/guides/thinking_mode)."""
        sent = super().temperature_sent(request)
        if sent and self.spec.reasoning_format == "deepseek" and not _thinking_disabled(request.body):
            return "ignored"
        return sent

    def failure_status(self, payload: Any) -> int | None:
        """GLM's ``finish_reason: network_error`` (transient), MiniMax's non-zero ``base_resp`` code."""
        base = _base_resp_code(payload)
        if base:
            return MINIMAX_STATUS.get(base, 500)
        if isinstance(payload, Mapping) and isinstance(payload.get("choices"), list) and payload["choices"]:
            first = payload["choices"][0]
            if isinstance(first, Mapping) and first.get("finish_reason") == FAULT_FINISH:
                return FAULT_STATUS
        return None

    def error_message(self, payload: Any) -> str:
        """MiniMax's ``base_resp.status_msg`` (with its code), GLM's faulted finish, else the usual."""
        code = _base_resp_code(payload)
        if code:
            return f"{payload['base_resp'].get('status_msg') or 'error'} (base_resp.status_code {code})"
        if self.failure_status(payload) == FAULT_STATUS:
            return f"finish_reason={FAULT_FINISH} (the provider's inference faulted)"
        return super().error_message(payload)

    def _parse(self, payload: Any) -> Completion:
        """``choices[0].message``: content (a leading ``<think>`` block split off), reasoning,
        refusal, finish_reason; usage with reasoning tokens; the served ``model``."""
        if not isinstance(payload, Mapping) or not isinstance(payload.get("choices"), list):
            raise ValueError("response has no 'choices' list")
        usage = payload.get("usage") or _choice_usage(payload["choices"]) or {}
        details = usage.get("completion_tokens_details") or {}
        counts = Usage(
            prompt_tokens=as_int(usage.get("prompt_tokens")),
            completion_tokens=as_int(usage.get("completion_tokens")),
            reasoning_tokens=as_int(details.get("reasoning_tokens")),
            cached_tokens=cached_tokens(usage),
        )
        served = as_str(payload.get("model"))
        if not payload["choices"]:  # not an empty answer: no answer at all (a bad response, retried)
            raise ValueError("response has an empty 'choices' list")
        choice = payload["choices"][0]
        message = choice.get("message") or {}
        finish = choice.get("finish_reason")
        refusal = message.get("refusal")
        if not refusal and finish in BLOCKED_FINISH:
            refusal = f"finish_reason={finish}"
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
        self.models: list[str] = []  # every chunk's model, blank ones too (served_name)
        self.usage: Any = None
        self.usage_on_top = False  # a top-level usage was seen (it wins over a per-choice one)
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
        if isinstance(chunk.get("model"), str):
            self.models.append(chunk["model"])
        if chunk.get("usage"):
            self.usage = chunk["usage"]
            self.usage_on_top = True
        for choice in chunk.get("choices") or []:
            if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
                self.saw_choice = True
                self._choice(choice)

    def _choice(self, choice: Mapping[str, Any]) -> None:
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        # Moonshot (Kimi) sends the stream's usage inside the final chunk's choices[0].usage, not
        # at the top (github.com/higress-group/higress/pull/1568, northes/go-moonshot#17 quote the
        # chunk; earendil-works/pi#2017). A top-level usage, where one comes, wins.
        if isinstance(choice.get("usage"), Mapping) and choice["usage"] and not self.usage_on_top:
            self.usage = choice["usage"]
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
        if self.models:
            body["model"] = served_name(self.models)
        if self.usage is not None:
            body["usage"] = self.usage
        return body


def cached_tokens(usage: Mapping[str, Any]) -> int | None:
    """The prompt-cache reads an OpenAI-compatible usage block reports, wherever its provider puts them:
    ``prompt_tokens_details.cached_tokens`` (OpenAI; Qwen/DashScope, GLM, Doubao and MiniMax in their
    OpenAI-compatible modes), ``prompt_cache_hit_tokens`` (DeepSeek: api-docs.deepseek.com/guides/kv_cache),
    ``cached_tokens`` at the top (Moonshot/Kimi)."""
    details = as_int(_mapping(usage.get("prompt_tokens_details")).get("cached_tokens"))
    if details is not None:
        return details
    hit = as_int(usage.get("prompt_cache_hit_tokens"))
    return hit if hit is not None else as_int(usage.get("cached_tokens"))


def _mapping(value: Any) -> Mapping:
    """A usage sub-block, or an empty one when it is absent or not an object."""
    return value if isinstance(value, Mapping) else {}
