"""The offline provider: the OpenAI wire format, answered in-process.

Routes: ``extractive-bm25`` and ``extractive-brief`` (the baseline models), ``lexical-judge`` (the default panel's
deterministic judge) and the offline panel's three judges of different strictness
(``lexical-judge-lenient``, ``-balanced``, ``-strict``). The request still goes through
runtime/net/endpoint.py — over an in-process transport instead of a socket — so the offline
default exercises the same path as a paid run: request body, retry layer, cache and
response parser.

Sampling is seeded from (replicate index, sha256 of the request body without its budget):
the same request at the same replicate gets the same reply (so the cache and a rerun
agree), a new replicate or another temperature gets a fresh draw, and another
``max_tokens`` only cuts the same draw where it is too long (a budget that cuts nothing
changes nothing).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Callable
from typing import Any

from wildtrace.providers.base import WireRequest

from wildtrace.offline.extractive import BRIEF_CHARS, answer_from_prompt
from wildtrace.offline.lexical_judge import STRICTNESS, judge_reply
from wildtrace.providers.openai import OpenAIProvider

#: route → f(prompt, temperature, rng, max_tokens) → (reply text, finish reason). ``lexical-judge``
#: ignores the temperature so the default run (one judge at t=0.1) stays deterministic.
Answer = Callable[[str, "float | None", random.Random, "int | None"], tuple[str, str]]
ROUTES: dict[str, Answer] = {
    "extractive-bm25": answer_from_prompt,
    "extractive-brief": lambda prompt, t, rng, budget: answer_from_prompt(prompt, t, rng, budget, chars=BRIEF_CHARS),
    "lexical-judge": lambda prompt, t, rng, budget: (judge_reply(prompt), "stop"),
    **{route: functools.partial(lambda prompt, t, rng, budget, threshold:
                                (judge_reply(prompt, threshold, t, rng), "stop"), threshold=threshold)
       for route, threshold in STRICTNESS.items()},
}
#: The request fields a completion budget goes under (``budget_field`` of an endpoint).
BUDGET_FIELDS = ("max_tokens", "max_completion_tokens")


def _reply(route: str, text: str, finish_reason: str) -> dict:
    return {
        "id": "offline",
        "object": "chat.completion",
        "model": route,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
        "usage": {},
    }


def seed_of(body: Any, replicate: int) -> int:
    """The sampling seed for one request: sha256 of the replicate index and of the body's canonical JSON,
    its budget left out (``max_tokens`` only cuts an answer, it never draws another)."""
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in BUDGET_FIELDS}
    body_sha = hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
    material = f"{int(replicate)}:{body_sha.hexdigest()}".encode("ascii")
    return int.from_bytes(hashlib.sha256(material).digest()[:8], "big")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _temperature(body: dict) -> float | None:
    return _number(body.get("temperature"))


def _budget(body: dict) -> int | None:
    """The request's completion budget (under either field), None when it sets none."""
    value = _number(next((body[f] for f in BUDGET_FIELDS if f in body), None))
    return None if value is None else int(value)


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
            text, finish_reason = answer(body["messages"][-1]["content"], _temperature(body), rng, _budget(body))
            return 200, _reply(route, text, finish_reason)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            return 400, {"error": {"message": f"offline route {route!r} cannot read this request: {exc}"}}
