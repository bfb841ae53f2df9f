"""Anthropic Messages API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wildtrace.core.records import Completion, Usage
from wildtrace.providers.base import Provider, Sampling, WireRequest, as_int, merge_extra

ANTHROPIC_VERSION = "2023-06-01"


class AnthropicProvider(Provider):
    """POST {base_url}/v1/messages with x-api-key and anthropic-version."""

    name = "anthropic"

    def build_request(self, prompt: str, sampling: Sampling) -> WireRequest:
        """``model``, ``max_tokens`` (always required here), one user message, temperature if sent."""
        body: dict[str, Any] = {
            "model": self.spec.route,
            "max_tokens": sampling.max_tokens,
            "messages": [{"role": "user", "content": prompt}],
        }
        temperature = self.temperature(sampling)
        if temperature is not None:
            body["temperature"] = temperature
        return WireRequest(
            url=self.spec.base_url.rstrip("/") + "/v1/messages",
            body=merge_extra(body, self.spec.extra_body),
            headers={"anthropic-version": ANTHROPIC_VERSION},
        )

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The key goes in x-api-key."""
        return {"x-api-key": api_key}

    def _parse(self, payload: Any) -> Completion:
        """Join the ``text`` blocks (thinking blocks are not the answer); stop_reason refusal."""
        if not isinstance(payload, Mapping) or not isinstance(payload.get("content"), list):
            raise ValueError("response has no 'content' list")
        text = "".join(b.get("text", "") for b in payload["content"] if isinstance(b, Mapping) and b.get("type") == "text")
        usage = payload.get("usage") or {}
        stop = payload.get("stop_reason")
        return Completion(
            text=text,
            finish_reason=stop,
            usage=Usage(prompt_tokens=as_int(usage.get("input_tokens")), completion_tokens=as_int(usage.get("output_tokens"))),
            refusal="stop_reason=refusal" if stop == "refusal" else None,
        )
