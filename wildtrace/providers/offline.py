"""The offline provider: the OpenAI wire format, answered in-process.

Routes: ``extractive-bm25`` (the baseline model) and ``lexical-judge`` (the offline
judge). The request still goes through runtime/http.py — over an in-process transport
instead of a socket — so the offline default exercises the same path as a paid run:
request body, retry layer, cache and response parser.
"""

from __future__ import annotations

from typing import Any

from wildtrace.providers.base import WireRequest

from wildtrace.offline.extractive import answer_from_prompt
from wildtrace.offline.lexical_judge import judge_reply
from wildtrace.providers.openai import OpenAIProvider

ROUTES = {"extractive-bm25": answer_from_prompt, "lexical-judge": judge_reply}


def _reply(route: str, text: str) -> dict:
    return {
        "id": "offline",
        "object": "chat.completion",
        "model": route,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {},
    }


class OfflineProvider(OpenAIProvider):
    """OpenAI-shaped requests answered by the deterministic offline algorithms."""

    name = "offline"
    streams = False  # answered in-process, whole: there is nothing to stream

    def stream_request(self, request: WireRequest) -> WireRequest:
        """Unchanged: the offline algorithms answer at once, so ``stream`` has no effect here."""
        return request

    def answer_locally(self, body: Any, replicate: int = 0) -> tuple[int, dict]:
        """(HTTP status, JSON body) for one request, as a server would answer it."""
        route = body.get("model") if isinstance(body, dict) else None
        answer = ROUTES.get(route)
        if answer is None:
            return 404, {"error": {"message": f"unknown offline route {route!r}; known: {sorted(ROUTES)}"}}
        try:
            return 200, _reply(route, answer(body["messages"][-1]["content"]))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            return 400, {"error": {"message": f"offline route {route!r} cannot read this request: {exc}"}}
