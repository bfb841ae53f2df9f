"""Loopback responders that cache prompt prefixes as OpenAI, Anthropic and Gemini document it.

- OpenAI: automatic for prompts of 1,024 tokens or more, in 128-token steps, no extra cost for a write;
  a repeat within the lifetime reports ``prompt_tokens_details.cached_tokens``.
- Anthropic: only content marked with ``cache_control`` (1,024 tokens or more) is cached; the first
  call reports ``cache_creation_input_tokens``, a repeat within the TTL (5 minutes, or ``ttl: 1h``,
  refreshed on each read) ``cache_read_input_tokens``; ``input_tokens`` is the rest.
- Gemini: implicit, for prompts of 1,024 tokens or more; a repeat reports ``cachedContentTokenCount``.

A token is 4 bytes of the prompt.
The answer never depends on the cache (an uncached run answers the same), and names the temperature
it was asked at (an answer filed under another point's key shows).
``hold=False`` caches nothing: every call a miss, as a provider without a prompt cache.
A prompt is held once its first call has been answered (``latency_s`` after it arrived): a call that
arrives while the first is still in flight misses, as at the providers.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

from servers.loopback import Call, Reply

MIN_TOKENS = 1024
OPENAI_STEP = 128
LIFETIME_S = {"5m": 300.0, "1h": 3600.0}
ANSWER = "The seal was worn and the pump failed at 03:14."
GRADE = '{"points_awarded":[50],"total":50}'


def tokens_of(text: str) -> int:
    """The loopback's token count: 4 bytes a token."""
    return math.ceil(len(text.encode("utf-8")) / 4)


def answer_to(body: dict) -> str:
    """The answer, naming the temperature the request asked for (OpenAI, Anthropic, Gemini bodies)."""
    config = body.get("generationConfig")
    temperature = body.get("temperature", config.get("temperature") if isinstance(config, dict) else None)
    return ANSWER if temperature is None else f"{ANSWER} (temperature {temperature})"


@dataclass
class PrefixCache:
    """One provider's prompt cache: prompt → when it expires."""

    shape: str  # openai | anthropic | gemini
    latency_s: float = 0.0  # how long each reply takes
    clock: float = 0.0  # added to time.monotonic() (a test may age the cache)
    hold: bool = True  # False: nothing is ever held (an uncached provider)
    held: dict[str, tuple[float, float]] = field(default_factory=dict)  # prompt -> (held from, until)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() + self.clock

    def lookup(self, prompt: str, lifetime_s: float) -> bool:
        """Whether the prompt is held now; (re)holds it for ``lifetime_s`` from when this call is answered."""
        if not self.hold:
            return False
        with self.lock:
            now = self.now()
            start, until = self.held.get(prompt, (0.0, -1.0))
            hit = start <= now < until
            self.held[prompt] = (start if hit else now + self.latency_s, now + self.latency_s + lifetime_s)
            return hit

    def __call__(self, call: Call) -> Reply:
        text = answer_to(call.body) if call.route == "bench-model" or "Question" in call.prompt else GRADE
        tokens = tokens_of(call.prompt)
        if self.shape == "anthropic":
            return Reply(200, self._anthropic(call, tokens, text), delay_s=self.latency_s)
        if self.shape == "gemini":
            hit = tokens >= MIN_TOKENS and self.lookup(call.prompt, LIFETIME_S["5m"])
            usage = {"promptTokenCount": tokens, "candidatesTokenCount": 12, "totalTokenCount": tokens + 12,
                     **({"cachedContentTokenCount": tokens} if hit else {})}
            return Reply(200, {"candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                                               "finishReason": "STOP"}], "usageMetadata": usage,
                               "modelVersion": call.path.split("/models/")[-1].split(":")[0]}, delay_s=self.latency_s)
        hit = tokens >= MIN_TOKENS and self.lookup(call.prompt, LIFETIME_S["5m"])
        cached = tokens // OPENAI_STEP * OPENAI_STEP if hit else 0
        return Reply(200, {"id": "x", "object": "chat.completion", "model": call.route,
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                        "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": tokens, "completion_tokens": 12, "total_tokens": tokens + 12,
                                     "prompt_tokens_details": {"cached_tokens": cached}}}, delay_s=self.latency_s)

    def _anthropic(self, call: Call, tokens: int, text: str) -> dict:
        content = call.body["messages"][-1]["content"]
        control = content[-1].get("cache_control") if isinstance(content, list) else None
        usage = {"input_tokens": tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                 "output_tokens": 12}
        if isinstance(control, dict) and control.get("type") == "ephemeral" and tokens >= MIN_TOKENS:
            ttl = control.get("ttl", "5m")
            read = self.lookup(call.prompt, LIFETIME_S[ttl])
            usage.update(input_tokens=0, **{"cache_read_input_tokens" if read else "cache_creation_input_tokens":
                                            tokens})
            if not read:
                usage["cache_creation"] = {"ephemeral_5m_input_tokens": tokens if ttl == "5m" else 0,
                                           "ephemeral_1h_input_tokens": tokens if ttl == "1h" else 0}
        return {"id": "m", "type": "message", "role": "assistant", "model": call.route,
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": usage}
