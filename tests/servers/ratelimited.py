"""A loopback endpoint that limits tokens per window, as providers do, and answers 429 past it.

``Limit`` is the responder: ``capacity`` tokens a ``window_s`` window, in fixed windows or a bucket
that refills continuously, with OpenAI's ``x-ratelimit-*`` headers, Anthropic's
``anthropic-ratelimit-*`` ones (RFC 3339 resets; input and output windows apart) or none at all.
Answers stream: status and headers at once, the body after the latency. It counts what it
admitted and refused, and how long a client that knew the limit exactly would have taken.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from servers.loopback import Call, Reply

from wildtrace.runtime.net.ratelimit import estimate_tokens

#: The output window Anthropic reports beside the input one: wide enough never to bind here.
OUTPUT_LIMIT = 10**7


def _sse(data: dict | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def streamed_answer(latency_s: float) -> Reply:
    """Status and headers at once, the first event with them, the rest after the latency."""
    first = _sse({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]})
    rest = (_sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            + _sse({"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 1}}) + _sse("[DONE]"))
    return Reply(200, chunks=[first, rest], chunk_delay_s=latency_s, content_type="text/event-stream")


@dataclass
class Limit:
    """The endpoint's rule: ``capacity`` tokens a ``window_s`` window, fixed or refilling continuously."""

    capacity: float
    window_s: float
    bucket: bool
    dialect: str  # openai, anthropic, none
    latency_s: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: float | None = None
    level: float = 0.0  # a bucket's tokens, or a fixed window's used tokens
    at: float = 0.0  # when ``level`` was last brought up to date
    admitted: int = 0
    rejected: int = 0
    costs: list[int] = field(default_factory=list)

    def cost(self, call: Call) -> int:
        """What a request takes: its prompt's tokens (and, at OpenAI, its max_tokens)."""
        tokens = estimate_tokens(len(call.prompt), False)
        return tokens + int(call.body.get("max_tokens") or 0) if self.dialect == "openai" else tokens

    def _left(self, now: float) -> tuple[float, float]:
        """Tokens left now and seconds until the limit is whole again."""
        assert self.started is not None
        if self.bucket:
            rate = self.capacity / self.window_s
            self.level = min(self.capacity, self.level + (now - self.at) * rate)
            self.at = now
            return self.level, (self.capacity - self.level) / rate
        window = math.floor((now - self.started) / self.window_s)
        if window != self.at or self.at == self.started:
            self.at, self.level = window, 0.0
        return self.capacity - self.level, (window + 1) * self.window_s - (now - self.started)

    def headers(self, left: float, reset_s: float) -> dict[str, str]:
        if self.dialect == "openai":
            return {"x-ratelimit-limit-tokens": str(int(self.capacity)), "x-ratelimit-remaining-tokens": str(int(left)),
                    "x-ratelimit-reset-tokens": f"{max(1, math.ceil(reset_s * 1000))}ms"}
        if self.dialect == "anthropic":
            reset = (datetime.now(UTC) + timedelta(seconds=reset_s)).isoformat(timespec="milliseconds")
            return {"anthropic-ratelimit-input-tokens-limit": str(int(self.capacity)),
                    "anthropic-ratelimit-input-tokens-remaining": str(int(left)),
                    "anthropic-ratelimit-input-tokens-reset": reset.replace("+00:00", "Z"),
                    "anthropic-ratelimit-output-tokens-limit": str(OUTPUT_LIMIT),
                    "anthropic-ratelimit-output-tokens-remaining": str(OUTPUT_LIMIT),
                    "anthropic-ratelimit-output-tokens-reset": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
        return {}

    def __call__(self, call: Call) -> Reply:
        cost = self.cost(call)
        with self.lock:
            now = time.monotonic()
            if self.started is None:
                self.started = self.at = now
                self.level = self.capacity if self.bucket else 0.0
            left, reset_s = self._left(now)
            if cost > left:
                self.rejected += 1
                headers = self.headers(left, reset_s)
                if self.dialect == "openai":
                    headers["retry-after-ms"] = str(max(1, math.ceil(reset_s * 1000)))
                elif self.dialect == "anthropic":
                    headers["retry-after"] = str(max(1, math.ceil(reset_s)))
                return Reply(429, {"error": {"message": "Rate limit reached for tokens per min (TPM)",
                                             "type": "tokens", "code": "rate_limit_exceeded"}}, headers)
            self.level += -cost if self.bucket else cost
            self.admitted += 1
            self.costs.append(cost)
            headers = self.headers(left - cost, reset_s if not self.bucket else (self.capacity - self.level)
                                   / (self.capacity / self.window_s))
        reply = streamed_answer(self.latency_s)
        reply.headers.update(headers)
        return reply

    def ideal_s(self) -> float:
        """A client that knew the limit: every request the moment it is admitted, in order, then one latency."""
        if not self.bucket:
            window, used = 0, 0.0
            for cost in self.costs:
                if used + cost > self.capacity:
                    window, used = window + 1, 0.0
                used += cost
            return window * self.window_s + self.latency_s
        rate, level, t = self.capacity / self.window_s, self.capacity, 0.0
        for cost in self.costs:
            if level < cost:
                t += (cost - level) / rate
                level = cost
            level -= cost
        return t + self.latency_s
