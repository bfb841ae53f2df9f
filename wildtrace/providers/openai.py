"""OpenAI chat completions — and every OpenAI-compatible route (DeepSeek, Qwen compatible
mode, Kimi, GLM, Doubao, MiniMax, and gateways such as the paper's ``mr.`` routes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wildtrace.core.records import Completion, Usage
from wildtrace.providers.base import Provider, Sampling, WireRequest, as_int, merge_extra


def _text_of(content: Any) -> str | None:
    """Message content as text: a string, or a list of text parts (some compatible servers)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") in (None, "text"))
    raise ValueError(f"unexpected message content of type {type(content).__name__}")


class OpenAIProvider(Provider):
    """POST {base_url}/chat/completions with a bearer token."""

    name = "openai"

    def build_request(self, prompt: str, sampling: Sampling) -> WireRequest:
        """``model``, one user message, the budget under ``budget_field``, temperature if sent."""
        body: dict[str, Any] = {"model": self.spec.route, "messages": [{"role": "user", "content": prompt}]}
        body[self.spec.budget_field] = sampling.max_tokens
        temperature = self.temperature(sampling)
        if temperature is not None:
            body["temperature"] = temperature
        return WireRequest(url=self.spec.base_url.rstrip("/") + "/chat/completions", body=merge_extra(body, self.spec.extra_body))

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """Bearer token."""
        return {"Authorization": f"Bearer {api_key}"}

    def _parse(self, payload: Any) -> Completion:
        """``choices[0].message``: content, refusal, finish_reason; usage with reasoning tokens."""
        if not isinstance(payload, Mapping) or not isinstance(payload.get("choices"), list):
            raise ValueError("response has no 'choices' list")
        usage = payload.get("usage") or {}
        details = usage.get("completion_tokens_details") or {}
        counts = Usage(
            prompt_tokens=as_int(usage.get("prompt_tokens")),
            completion_tokens=as_int(usage.get("completion_tokens")),
            reasoning_tokens=as_int(details.get("reasoning_tokens")),
        )
        if not payload["choices"]:
            return Completion(text=None, finish_reason=None, usage=counts)
        choice = payload["choices"][0]
        message = choice.get("message") or {}
        finish = choice.get("finish_reason")
        refusal = message.get("refusal")
        if not refusal and finish == "content_filter":
            refusal = "finish_reason=content_filter"
        return Completion(text=_text_of(message.get("content")), finish_reason=finish, usage=counts, refusal=refusal or None)
