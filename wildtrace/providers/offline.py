"""The offline provider: the OpenAI wire format, answered in-process.

Routes: ``extractive-bm25`` (the baseline model), ``lexical-judge`` (the default panel's
deterministic judge) and the offline panel's three judges of different strictness
(``lexical-judge-lenient``, ``-balanced``, ``-strict``). The request still goes through
runtime/http.py — over an in-process transport instead of a socket — so the offline
default exercises the same path as a paid run: request body, retry layer, cache and
response parser.

Sampling is seeded from (replicate index, sha256 of the request body): the same request
at the same replicate gets the same reply (so the cache and a rerun agree), a new
replicate or another temperature gets a fresh draw.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Callable
from typing import Any

from wildtrace.providers.base import WireRequest

from wildtrace.offline.extractive import answer_from_prompt
from wildtrace.offline.lexical_judge import STRICTNESS, judge_reply
from wildtrace.providers.openai import OpenAIProvider

#: route → f(prompt, temperature, rng) → reply text. ``lexical-judge`` ignores the
#: temperature so the default run (one judge at t=0.1) stays deterministic.
Answer = Callable[[str, "float | None", random.Random], str]
ROUTES: dict[str, Answer] = {
    "extractive-bm25": lambda prompt, t, rng: answer_from_prompt(prompt, t, rng),
    "lexical-judge": lambda prompt, t, rng: judge_reply(prompt),
    **{route: functools.partial(lambda prompt, t, rng, threshold: judge_reply(prompt, threshold, t, rng),
                                threshold=threshold) for route, threshold in STRICTNESS.items()},
}


def _reply(route: str, text: str) -> dict:
    return {
        "id": "offline",
        "object": "chat.completion",
        "model": route,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {},
    }


def seed_of(body: Any, replicate: int) -> int:
    """The sampling seed for one request: sha256 of the replicate index and of the body's canonical JSON."""
    body_sha = hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
    material = f"{int(replicate)}:{body_sha.hexdigest()}".encode("ascii")
    return int.from_bytes(hashlib.sha256(material).digest()[:8], "big")


def _temperature(body: dict) -> float | None:
    value = body.get("temperature")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class OfflineProvider(OpenAIProvider):
    """OpenAI-shaped requests answered by the offline algorithms (seeded where they sample)."""

    name = "offline"
    streams = False  # answered in-process, whole: there is nothing to stream
    local = True
    batch_api = None

    def stream_request(self, request: WireRequest) -> WireRequest:
        """Unchanged: the offline algorithms answer at once, so ``stream`` has no effect here."""
        return request

    def answer_locally(self, body: Any, replicate: int = 0) -> tuple[int, dict]:
        """(HTTP status, JSON body) for one request, as a server would answer it."""
        route = body.get("model") if isinstance(body, dict) else None
        answer = ROUTES.get(route) if isinstance(route, str) else None
        if answer is None or not isinstance(route, str):
            return 404, {"error": {"message": f"unknown offline route {route!r}; known: {sorted(ROUTES)}"}}
        try:
            rng = random.Random(seed_of(body, replicate))
            return 200, _reply(route, answer(body["messages"][-1]["content"], _temperature(body), rng))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            return 400, {"error": {"message": f"offline route {route!r} cannot read this request: {exc}"}}
