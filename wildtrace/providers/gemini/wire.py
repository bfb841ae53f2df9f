"""Google Gemini generateContent (the native API, as the paper's judge 3 used)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from wildtrace.core.records import Completion, Usage
from wildtrace.providers.gemini.batch import GeminiBatch
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
from wildtrace.providers.reasoning import gemini_format, gemini_thinking_config, join_reasoning
from wildtrace.providers.sse import SSEEvent

#: finishReason values that mean the answer was withheld by a safety or policy filter: every
#: blocked finish the google-genai types' ``FinishReason`` lists (Model Armor's among them); a
#: refusal also after streamed text.
BLOCKED = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
                     "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "MODEL_ARMOR"})
PLAIN_METHOD = ":generateContent"
STREAM_METHOD = ":streamGenerateContent?alt=sse"


def gemini_usage(meta: Mapping[str, Any]) -> Usage:
    """Token counts from ``usageMetadata``, counted as the other providers count them.

    ``candidatesTokenCount`` excludes thinking: ``thoughtsTokenCount`` is a bucket of its own
    (``totalTokenCount`` is "the sum of prompt_token_count, candidates_token_count,
    tool_use_prompt_token_count, and thoughts_token_count": the google-genai UsageMetadata
    reference, quoted in github.com/microsoft/agent-framework-go/pull/551). Completion tokens
    are therefore candidates + thoughts (OpenAI's completion_tokens include reasoning too), and
    the thoughts are also the reasoning tokens."""
    candidates, thoughts = as_int(meta.get("candidatesTokenCount")), as_int(meta.get("thoughtsTokenCount"))
    completion = None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0)
    return Usage(prompt_tokens=as_int(meta.get("promptTokenCount")), completion_tokens=completion,
                 reasoning_tokens=thoughts, cached_tokens=as_int(meta.get("cachedContentTokenCount")))


class GeminiProvider(Provider):
    """POST {base_url}/v1beta/models/{route}:generateContent with x-goog-api-key."""

    name = "gemini"
    batch_api: ClassVar[type[BatchAPI] | None] = GeminiBatch
    #: How thinking is asked for: a token budget for Gemini 1.x/2.x, a level from 3.x on (by route).
    reasoning_formats: ClassVar[Mapping[str, str]] = {
        "gemini-budget": "generationConfig.thinkingConfig: {thinkingBudget: N, includeThoughts: true} (Gemini 2.5)",
        "gemini-level": "generationConfig.thinkingConfig: {thinkingLevel: <level>, includeThoughts: true} "
                        "(Gemini 3.x)",
        "none": NO_REASONING_CONTROL,
    }

    def build_request(self, prompt: str, sampling: Sampling) -> WireRequest:
        """One user content; temperature, ``maxOutputTokens`` and thinkingConfig in ``generationConfig``."""
        config: dict[str, Any] = {"maxOutputTokens": sampling.max_tokens}
        temperature = self.temperature(sampling)
        if temperature is not None:
            config["temperature"] = temperature
        thinking = self._reasoning(sampling)
        if thinking is not None:
            config["thinkingConfig"] = thinking
        body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}], "generationConfig": config}
        url = f"{self.spec.base_url.rstrip('/')}/v1beta/models/{self.spec.route}{PLAIN_METHOD}"
        return WireRequest(url=url, body=merge_extra(body, self.spec.extra_body), headers=dict(self.api_headers))

    @classmethod
    def default_reasoning_format(cls, route: str) -> str:
        """A budget for Gemini 1.x/2.x, a level from 3.x on (``gemini_format``)."""
        return gemini_format(route)

    def _reasoning(self, sampling: Sampling) -> dict[str, Any] | None:
        level = sampling.reasoning_effort
        self.check_reasoning(self.spec.reasoning_format, level, self.spec.route)
        if level is None:
            return None
        return gemini_thinking_config(self.reasoning_format(), level, sampling.max_tokens)

    def stream_request(self, request: WireRequest) -> WireRequest:
        """The same body to ``:streamGenerateContent?alt=sse`` (events, not a JSON array)."""
        if not request.url.endswith(PLAIN_METHOD):
            raise ValueError(f"not a generateContent URL: {request.url}")
        url = request.url[: -len(PLAIN_METHOD)] + STREAM_METHOD
        return WireRequest(url=url, body=dict(request.body), headers={**request.headers, "Accept": "text/event-stream"})

    def stream_reader(self) -> StreamReader:
        """A reader of GenerateContentResponse chunks."""
        return GeminiStreamReader()

    def budget_path(self) -> tuple[str, ...]:
        """The budget lives in ``generationConfig`` here."""
        return ("generationConfig", "maxOutputTokens")

    def without_temperature(self, request: WireRequest) -> WireRequest:
        """Temperature lives in ``generationConfig`` here."""
        body = dict(request.body)
        config = body.get("generationConfig")
        if isinstance(config, Mapping):
            body["generationConfig"] = {k: v for k, v in config.items() if k != "temperature"}
        return WireRequest(url=request.url, body=body, headers=dict(request.headers))

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The key goes in x-goog-api-key (never in the URL, where logs would keep it)."""
        return {"x-goog-api-key": api_key}

    @classmethod
    def model_list(cls, token: str | None) -> tuple[str, dict[str, str]]:
        """``models.list``: ``/v1beta/models``, paged by ``pageToken``."""
        return "/v1beta/models", {"pageSize": "1000", **({"pageToken": token} if token else {})}

    @classmethod
    def model_page(cls, page: Mapping[str, Any]) -> tuple[Any, Any]:
        """``models`` and ``nextPageToken``; an empty page of models.list is ``{}``."""
        models = page.get("models")
        return ([] if models is None and not page else models), page.get("nextPageToken")

    @classmethod
    def model_id(cls, entry: Mapping[str, Any]) -> Any:
        """An entry's ``name`` (``models/<route>``)."""
        return entry.get("name")

    @classmethod
    def bare_route(cls, route: str) -> str:
        """Without the ``models/`` prefix the API takes on both sides."""
        return route[len("models/"):] if route.startswith("models/") else route

    def _parse(self, payload: Any) -> Completion:
        """First candidate's non-thought text parts (thought parts are reasoning); a block
        reason or SAFETY-like finish is a refusal; ``modelVersion`` is the served model."""
        if not isinstance(payload, Mapping):
            raise ValueError("response is not a JSON object")
        usage = gemini_usage(payload.get("usageMetadata") or {})
        served = as_str(payload.get("modelVersion"))
        blocked = (payload.get("promptFeedback") or {}).get("blockReason")
        candidates = payload.get("candidates") or []
        if not candidates:
            if blocked:
                return Completion(text=None, finish_reason=None, usage=usage, refusal=f"blockReason={blocked}",
                                  served_model=served)
            raise ValueError("response has no candidates")
        first = candidates[0]
        finish = first.get("finishReason")
        parts = [p for p in (first.get("content") or {}).get("parts") or [] if isinstance(p, Mapping)]
        text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
        thoughts = "".join(p.get("text", "") for p in parts if p.get("thought"))
        refusal = f"blockReason={blocked}" if blocked else (f"finishReason={finish}" if finish in BLOCKED else None)
        return Completion(text=text, finish_reason=finish, usage=usage, refusal=refusal,
                          reasoning=join_reasoning(thoughts), served_model=served)


class GeminiStreamReader(StreamReader):
    """Assembles GenerateContentResponse chunks into one response.

    Text parts are concatenated (thought parts apart, first), the last finishReason,
    usageMetadata, modelVersion and safetyRatings win. Gemini sends no terminal event:
    EOF after a chunk with a finishReason or a promptFeedback.blockReason is complete,
    EOF before one is IncompleteStream.
    """

    def __init__(self) -> None:
        super().__init__()
        self.top: dict[str, Any] = {}  # usageMetadata, modelVersion, responseId, promptFeedback
        self.models: list[str] = []  # every chunk's modelVersion, blank ones too (served_name)
        self.candidate: dict[str, Any] = {}  # finishReason, safetyRatings, ... of candidate 0
        self.role: str | None = None
        self.thoughts: list[str] = []
        self.texts: list[str] = []
        self.saw_parts = False
        self.chunks = 0

    def on_event(self, event: SSEEvent) -> None:
        """One chunk (or an error object)."""
        try:
            chunk = json.loads(event.data)
        except ValueError as exc:
            raise ValueError(f"unreadable stream chunk: {event.data[:200]!r}") from exc
        if isinstance(chunk, list) and len(chunk) == 1:  # an error sometimes arrives wrapped in a list
            chunk = chunk[0]
        if not isinstance(chunk, Mapping):
            raise ValueError(f"stream chunk is not an object: {event.data[:200]!r}")
        if chunk.get("error") is not None:
            raise stream_error(chunk)
        self.chunks += 1
        for key in ("usageMetadata", "modelVersion", "responseId", "promptFeedback"):
            if chunk.get(key) is not None:
                self.top[key] = chunk[key]
        if isinstance(chunk.get("modelVersion"), str):
            self.models.append(chunk["modelVersion"])
        for candidate in chunk.get("candidates") or []:
            if isinstance(candidate, Mapping) and candidate.get("index", 0) == 0:
                self._candidate(candidate)

    def _candidate(self, candidate: Mapping[str, Any]) -> None:
        for key, value in candidate.items():
            if key not in ("content", "index") and value is not None:
                self.candidate[key] = value
        content = candidate.get("content")
        if not isinstance(content, Mapping):
            return
        if isinstance(content.get("role"), str):
            self.role = content["role"]
        for part in content.get("parts") or []:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                self.saw_parts = True
                (self.thoughts if part.get("thought") else self.texts).append(part["text"])

    def plain(self, payload: Any) -> dict | None:
        """Plain JSON: an object is the body; an array (streamGenerateContent without
        ``alt=sse``) is the chunks, assembled as if they had been events."""
        if isinstance(payload, list):
            self._apply([SSEEvent("message", json.dumps(item)) for item in payload])
            return self.body() if self.complete() else None
        return super().plain(payload)

    def complete(self) -> bool:
        """A finishReason or a block reason was seen."""
        feedback = self.top.get("promptFeedback")
        blocked = isinstance(feedback, Mapping) and bool(feedback.get("blockReason"))
        return bool(self.candidate.get("finishReason")) or blocked

    def progress(self) -> str:
        """How far the stream got."""
        return f"{self.chunks} chunks, no finishReason"

    def body(self) -> dict:
        """The GenerateContentResponse a plain call returns."""
        body: dict[str, Any] = {}
        if self.candidate or self.saw_parts:
            candidate: dict[str, Any] = {}
            if self.saw_parts:
                parts: list[dict[str, Any]] = []
                if self.thoughts:
                    parts.append({"text": "".join(self.thoughts), "thought": True})
                if self.texts or not self.thoughts:
                    parts.append({"text": "".join(self.texts)})
                candidate["content"] = {"role": self.role or "model", "parts": parts}
            candidate.update(self.candidate)
            candidate["index"] = 0
            body["candidates"] = [candidate]
        body.update(self.top)
        if self.models:
            body["modelVersion"] = served_name(self.models)
        return body
