"""The provider interface: a pure request builder, a pure response parser, a stream reader.

A streamed call is the same call: ``stream_request`` asks for events, the provider's
``StreamReader`` assembles them into the body a plain call returns, and that body goes
through the one parser (``parse_response``), so the cache stores one shape.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from wildtrace.core.records import Completion
from wildtrace.providers.batch import BatchAPI
from wildtrace.providers.sse import SSEDecoder, SSEEvent

#: Reasoning-effort levels ``Sampling.reasoning_effort`` takes (None = send nothing).
#: ``xhigh`` exists because OpenAI (GPT-5.2 and later), Anthropic's adaptive effort and
#: DeepSeek take it; formats with fewer levels map it to their highest.
REASONING_LEVELS = ("none", "minimal", "low", "medium", "high", "xhigh")

#: The one ``reasoning_format`` every wire format takes. Each provider class lists its own
#: (``Provider.reasoning_formats``, name -> what it sends); ``None`` in a spec means the class's
#: ``default_reasoning_format`` for the route.
NO_REASONING_CONTROL = "nothing: the endpoint has no reasoning control"

#: Thinking-token budgets for the formats that take a number (Anthropic, Qwen, Gemini 2.5).
#: Anthropic needs >= 1024; Gemini 2.5 Pro takes 128..32768 (it cannot switch thinking off).
THINKING_BUDGETS: dict[str, int] = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768}


@dataclass(frozen=True)
class Family:
    """A model family whose reasoning controls are narrower than its wire format's.

    ``levels``: the ``decoding.reasoning_effort`` values it can take (None = any);
    ``formats``: the ``reasoning_format`` values that can reach it (None = any)."""

    name: str
    pattern: re.Pattern[str]
    levels: tuple[str, ...] | None
    source: str
    formats: tuple[str, ...] | None = None


#: Families matched on the route (a provider path, a gateway prefix or a date suffix around it
#: changes nothing: the model is the same), first match wins. Each entry's source is the
#: provider's page or the provider's own error text as reported in public bug trackers.
FAMILIES: tuple[Family, ...] = (
    # ai.google.dev/gemini-api/docs/thinking: 2.5 Pro takes thinkingBudget 128..32768 and
    # "cannot turn off thinking" (0 is rejected); our budgets for minimal..xhigh are 1024..32768.
    Family("Gemini 2.5 Pro", re.compile(r"gemini-2\.5-pro(?![\w.-]*(?:flash|lite))"),
           ("minimal", "low", "medium", "high", "xhigh"),
           "ai.google.dev/gemini-api/docs/thinking: thinkingBudget 128-32768, thinking cannot be turned off"),
    # Gemini 3.1 Pro: thinkingLevel low/medium/high; minimal is not supported and thinking cannot
    # be turned off (ai.google.dev/gemini-api/docs/thinking; also docs.rs adk-model ThinkingLevel:
    # "Minimal ... Not supported on Gemini 3.1 Pro").
    Family("Gemini 3.1 Pro", re.compile(r"gemini-3\.1-pro"), ("low", "medium", "high"),
           "ai.google.dev/gemini-api/docs/thinking: thinkingLevel low, medium or high; thinking cannot be turned off"),
    # Gemini 3 Pro: low/high only (ai.google.dev/gemini-api/docs/thinking; gemini_ex ThinkingLevel docs).
    Family("Gemini 3 Pro", re.compile(r"gemini-3-pro"), ("low", "high"),
           "ai.google.dev/gemini-api/docs/thinking: thinkingLevel low or high; thinking cannot be turned off"),
    # OpenAI's own 400: "Unsupported value: 'minimal' is not supported with the 'gpt-5.1' model.
    # Supported values are: 'none', 'low', 'medium', and 'high'." (github.com/anomalyco/opencode/issues/4451)
    Family("GPT-5.1", re.compile(r"gpt-5\.1(?![\d])(?!-codex)"), ("none", "low", "medium", "high"),
           "OpenAI: \"Supported values are: 'none', 'low', 'medium', and 'high'\" for gpt-5.1"),
    # gpt-5.2: "Supported values are: 'none', 'low', 'medium', 'high', and 'xhigh'"
    # (github.com/CherryHQ/cherry-studio/issues/11864). 5.5: "reasoning effort levels (none, low, medium,
    # high, xhigh)" (docs.oxen.ai GPT 5.5 page); 5.4: bolna-ai/bolna#852 lists it without minimal. Not
    # confirmed on OpenAI's own pages.
    Family("GPT-5.2+", re.compile(r"gpt-5\.(?:[2-9]|\d\d)(?![\d])(?!-codex)"),
           ("none", "low", "medium", "high", "xhigh"),
           "OpenAI: \"Supported values are: 'none', 'low', 'medium', 'high', and 'xhigh'\" for gpt-5.2"),
    # Claude Opus 4.7 removed extended-thinking budgets: adaptive thinking only
    # (platform.claude.com migration guide for Opus 4.7; apidog.com/blog/claude-opus-4-7-api).
    Family("Claude Opus 4.7+", re.compile(r"claude-opus-(?:4[-.](?:[7-9]|\d\d)|[5-9])(?!\d)"), None,
           "platform.claude.com: Opus 4.7 takes adaptive thinking only (no budget_tokens)",
           formats=("anthropic-adaptive", "none")),
)

#: Claude Opus 4.7 and later have an ``xhigh`` effort of their own, between high and max.
CLAUDE_XHIGH = FAMILIES[-1].pattern


def family_of(route: str) -> Family | None:
    """The family a route belongs to, or None when its controls are the wire format's own."""
    ident = route.strip().lower()
    for family in FAMILIES:
        if family.pattern.search(ident):
            return family
    return None


def family_error(route: str, reasoning_format: str | None, level: str | None) -> str | None:
    """Why a reasoning setting cannot reach this model (naming the key and the allowed values), else None."""
    family = family_of(route)
    if family is None:
        return None
    if family.levels is not None and level is not None and level not in family.levels:
        return (f"reasoning_effort={level!r} is not possible on {family.name} (route {route}): "
                f"choose from {', '.join(family.levels)} ({family.source})")
    if family.formats is not None and reasoning_format is not None and reasoning_format not in family.formats:
        return (f"reasoning_format={reasoning_format!r} is not possible on {family.name} (route {route}): "
                f"choose from {', '.join(family.formats)} ({family.source})")
    return None


#: Error ``type`` / ``code`` strings (OpenAI, Anthropic, gateways) -> the HTTP status they stand for.
ERROR_TYPE_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "invalid_api_key": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "server_error": 500,
    "api_error": 500,
    "internal_error": 500,
    "service_unavailable": 503,
    "timeout_error": 504,
    "overloaded_error": 529,
}

#: Google RPC status names (Gemini error bodies) -> HTTP status.
RPC_STATUS: dict[str, int] = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ABORTED": 409,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "INTERNAL": 500,
    "UNKNOWN": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}


@dataclass(frozen=True)
class EndpointSpec:
    """One endpoint to call: the model under test, or one judge.

    ``label`` names it in records ("model", or the judge's key). ``api_key_env`` is the
    NAME of the variable that holds the key; the key itself never lives in a spec.
    """

    label: str
    name: str
    provider: str
    route: str
    base_url: str
    api_key_env: str | None
    max_concurrency: int
    timeout_s: float
    send_temperature: bool = True
    budget_field: str = "max_tokens"
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    reasoning_format: str | None = None  # how reasoning_effort is sent (Provider.reasoning_formats); None = by route
    stream: bool = True  # ask for server-sent events (transport only: never part of the cache key)
    max_call_s: float = 3600.0  # the longest a whole call may take (timeout_s bounds each silence)
    max_output_tokens: int | None = None  # the model's documented output limit (None: not known)
    max_output_tokens_source: str | None = None  # where that limit is documented
    #: Prompt-cache hints, sent but never part of the harness's cache key (``Provider.with_cache_hint``):
    prompt_cache_key: bool = False  # OpenAI: prompt_cache_key = the prompt's sha256
    prompt_cache_retention: str | None = None  # OpenAI: prompt_cache_retention (in_memory, 24h)


@dataclass(frozen=True)
class Sampling:
    """Decoding settings for one call: temperature, the token budget, the reasoning effort."""

    temperature: float | None  # None = omit it
    max_tokens: int  # the output budget, under the endpoint's budget field
    reasoning_effort: str | None = None  # a REASONING_LEVELS entry; None = send nothing (provider default)


@dataclass(frozen=True)
class WireRequest:
    """An HTTP POST to make: URL, JSON body and non-secret headers."""

    url: str  # where to POST
    body: dict  # the JSON body
    headers: Mapping[str, str] = field(default_factory=dict)  # non-secret headers (never the key)


class StreamError(Exception):
    """An error event inside a 2xx stream, mapped to the HTTP status it stands for."""

    def __init__(self, status: int, message: str, payload: Any) -> None:
        super().__init__(f"HTTP {status} (in stream): {message}")
        self.status = status  # the HTTP status the event stands for (529 for overloaded_error, ...)
        self.message = message  # the provider's own words
        self.payload = payload  # the event's JSON, as received


class IncompleteStream(Exception):
    """The stream ended (EOF) before its terminal event: a transport error, never a complete answer."""


class StreamReader(ABC):
    """Incremental reader of one streamed response: bytes in, the plain-shape body out.

    ``feed`` takes the bytes in any split (one byte at a time gives the same body);
    ``finish`` is called at EOF. Work per chunk is proportional to the chunk. Malformed
    events raise ValueError (never another type), error events StreamError. A server that
    answers a streamed request with plain JSON (LiteLLM on /v1/messages does) is read as
    that plain body: the bytes are kept only until the first event proves it is a stream.
    """

    def __init__(self) -> None:
        self._sse = SSEDecoder()
        self._head: list[bytes] | None = []  # the bytes before the first event (None once one came)
        self.done = False  # the terminal event was seen

    def feed(self, chunk: bytes) -> None:
        """Read some bytes; raise StreamError when they complete an error event."""
        if self._head is not None:
            self._head.append(chunk)
        self._apply(self._sse.feed(chunk))

    def finish(self) -> dict:
        """At EOF: the assembled body; IncompleteStream when the terminal event never came."""
        self._apply(self._sse.close())
        if self._head is not None:
            plain = self._plain_json(b"".join(self._head))
            if plain is not None:
                return plain
        if not self.complete():
            raise IncompleteStream(f"stream ended before its terminal event ({self.progress()})")
        return self.body()

    def _apply(self, events: list[SSEEvent]) -> None:
        for event in events:
            self._head = None
            if self.done:  # anything after the terminal event is not part of the answer
                continue
            try:
                self.on_event(event)
            except (TypeError, AttributeError, KeyError, IndexError) as exc:  # a wrong shape deep inside
                raise ValueError(f"unexpected stream event shape: {type(exc).__name__}: {exc}") from exc

    def _plain_json(self, raw: bytes) -> dict | None:
        """A body that was never a stream: the JSON object itself (None when it is not JSON)."""
        try:
            payload = json.loads(raw.decode("utf-8-sig"))  # a BOM before JSON is still JSON
        except ValueError:  # UnicodeDecodeError and JSONDecodeError are both ValueErrors
            return None
        if isinstance(payload, Mapping) and payload.get("error") is not None:
            raise stream_error(payload)
        return self.plain(payload)

    def plain(self, payload: Any) -> dict | None:
        """The body for a plain-JSON answer (an object as it is; formats override for arrays)."""
        return dict(payload) if isinstance(payload, Mapping) else None

    @abstractmethod
    def on_event(self, event: SSEEvent) -> None:
        """Apply one event (raise StreamError for an error event)."""

    def complete(self) -> bool:
        """Whether what was read so far is a whole answer."""
        return self.done

    def progress(self) -> str:
        """A short description of what was read, for the IncompleteStream message."""
        return "no terminal event"

    @abstractmethod
    def body(self) -> dict:
        """The body a plain (non-streamed) call would have returned."""


def merge_extra(body: dict, extra: Mapping[str, Any]) -> dict:
    """Merge ``extra_body`` into a request body (nested mappings merge, the rest replaces)."""
    out = dict(body)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_extra(dict(out[key]), value)
        else:
            out[key] = value
    return out


class Provider(ABC):
    """A wire format, and every fact the rest of the harness asks about it.

    Subclasses are pure: no sockets, no clocks, no environment. The class attributes and
    classmethods are the provider's facts (config, preflight, the model lists and batch mode
    read them here, never by comparing names), so a new provider is one package (this class,
    its batch format if it has one) and one line in registry.py. The defaults are the OpenAI-compatible conventions.
    """

    name: ClassVar[str]
    #: Whether the wire format can stream (the HTTP layer streams only when this and spec.stream hold).
    streams: ClassVar[bool] = True
    #: The temperatures the API accepts; config refuses one outside it before any request.
    temperature_range: ClassVar[tuple[float, float]] = (0.0, 2.0)
    #: The ``reasoning_format`` values it takes (name -> what it sends), in the order errors list them.
    reasoning_formats: ClassVar[Mapping[str, str]] = {"none": NO_REASONING_CONTROL}
    #: Answered in-process (``answer_locally``): no socket and no key, so no model list to ask, no
    #: served-model rule (nothing can re-route it), no retired routes, and a gateway leaves it alone.
    local: ClassVar[bool] = False
    #: Its batch format (``providers/<name>/batch.py``; runtime/batch does the I/O), None for none.
    batch_api: ClassVar[type[BatchAPI] | None] = None
    #: Headers every request to the API carries besides the key (an API version): calls, model lists, batches.
    api_headers: ClassVar[Mapping[str, str]] = {}

    def __init__(self, spec: EndpointSpec) -> None:
        self.spec = spec

    @classmethod
    def default_reasoning_format(cls, route: str) -> str:
        """The format a spec without ``reasoning_format`` gets: the first listed (formats override by route)."""
        return next(iter(cls.reasoning_formats))

    @classmethod
    def check_reasoning(cls, reasoning_format: str | None, level: str | None, route: str | None = None) -> None:
        """Raise ValueError (naming the choices) for an unknown level, a format this wire format lacks,
        or (given the route) a level or format the model family cannot take (``family_error``)."""
        check_level(level)
        if reasoning_format is not None and reasoning_format not in cls.reasoning_formats:
            raise ValueError(f"reasoning_format {reasoning_format!r} does not apply to provider {cls.name!r} "
                             f"(choose from {', '.join(cls.reasoning_formats)})")
        check_family(route, reasoning_format, level)

    def reasoning_format(self) -> str:
        """The format this endpoint sends reasoning in: the spec's, else the default for its route."""
        return self.spec.reasoning_format or self.default_reasoning_format(self.spec.route)

    @classmethod
    def model_list(cls, token: str | None) -> tuple[str, dict[str, str]]:
        """(path under base_url, query) of the model list (a free GET) at page ``token``: ``/models``, one page."""
        return "/models", {}

    @classmethod
    def model_page(cls, page: Mapping[str, Any]) -> tuple[Any, Any]:
        """(entries, the next page's token) of one model-list page, as found (the caller checks types)."""
        return page.get("data"), None

    @classmethod
    def model_id(cls, entry: Mapping[str, Any]) -> Any:
        """The route one model-list entry names, as found (the caller checks it is a string)."""
        return entry.get("id")

    @classmethod
    def bare_route(cls, route: str) -> str:
        """A route as the model list spells it (a prefix the API also takes dropped)."""
        return route

    def temperature(self, sampling: Sampling) -> float | None:
        """The temperature to send, or None when the endpoint must not get one."""
        return sampling.temperature if self.spec.send_temperature else None

    @abstractmethod
    def build_request(self, prompt: str, sampling: Sampling) -> WireRequest:
        """The request for one single-turn user prompt."""

    def with_cache_hint(self, request: WireRequest, ttl: str | None = None) -> WireRequest:
        """The request as sent, with the provider's prompt-cache hint (default: none; the provider caches on
        its own or not at all). ``ttl`` is the lifetime the run's schedule asks for where a write costs
        extra ("5m", "1h"; None: no repeat will come, nothing to write: runtime/run/prompt_cache.py).
        Applied after the cache key is made: a hint changes neither the answer nor the key, so outcomes
        stored before hints existed keep serving."""
        return request

    @abstractmethod
    def stream_request(self, request: WireRequest) -> WireRequest:
        """The streamed form of ``build_request``'s request (same content, events asked for)."""

    @abstractmethod
    def stream_reader(self) -> StreamReader:
        """A fresh reader for one streamed response."""

    def without_temperature(self, request: WireRequest) -> WireRequest:
        """The same request with temperature removed (for an endpoint that rejects it)."""
        body = {k: v for k, v in request.body.items() if k != "temperature"}
        return WireRequest(url=request.url, body=body, headers=dict(request.headers))

    def budget_path(self) -> tuple[str, ...]:
        """Where the output budget sits in a request body: the endpoint's budget field by default."""
        return (self.spec.budget_field,)

    def budget(self, request: WireRequest) -> int | None:
        """The output budget a request carries (None when it carries none)."""
        node: Any = request.body
        for key in self.budget_path():
            node = node.get(key) if isinstance(node, Mapping) else None
        return node if isinstance(node, int) and not isinstance(node, bool) else None

    def with_budget(self, request: WireRequest, budget: int) -> WireRequest:
        """The same request with its output budget set to ``budget`` (for an endpoint that rejects more)."""
        *parents, last = self.budget_path()
        body = dict(request.body)
        node = body
        for key in parents:
            inner = node.get(key)
            node[key] = dict(inner) if isinstance(inner, Mapping) else {}
            node = node[key]
        node[last] = budget
        return WireRequest(url=request.url, body=body, headers=dict(request.headers))

    def temperature_sent(self, request: WireRequest) -> bool | str:
        """What the record says of temperature: True (sent), False (not sent), or ``"ignored"``
        where the provider documents that it takes the field and ignores it (dialects override)."""
        return self.without_temperature(request).body != request.body

    def failure_status(self, payload: Any) -> int | None:
        """The HTTP status a 2xx body stands for when it is an error in disguise, else None.

        Some vendors answer a failure with 200: GLM ends a faulted generation with
        ``finish_reason: "network_error"``, MiniMax puts its error code in ``base_resp``.
        The HTTP layer then treats the attempt as that status (retry, quota, fail)."""
        return None

    @abstractmethod
    def auth_headers(self, api_key: str) -> dict[str, str]:
        """Headers that carry the key (kept apart so the key never enters a cache key or log)."""

    def parse_response(self, payload: Any) -> Completion:
        """Parse a 2xx JSON body; raise ValueError when it is not the expected shape.

        Subclasses write ``_parse`` for the happy shape; a body of the wrong shape deep inside
        (a list where an object belongs, a null text) surfaces here as one error type.
        """
        try:
            return self._parse(payload)
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            raise ValueError(f"unexpected {self.name} response shape: {type(exc).__name__}: {exc}") from exc

    @abstractmethod
    def _parse(self, payload: Any) -> Completion:
        """Parse a well-formed body (may raise on a malformed one; parse_response normalises)."""

    def error_message(self, payload: Any) -> str:
        """The provider's own words from an error body."""
        if isinstance(payload, Mapping):
            err = payload.get("error", payload)
            if isinstance(err, Mapping) and err.get("message"):
                return str(err["message"])
            if isinstance(err, str):
                return err
        return str(payload)[:2000]


def check_level(level: str | None) -> None:
    """Raise ValueError (naming the choices) for a reasoning level no wire format knows."""
    if level is not None and level not in REASONING_LEVELS:
        raise ValueError(f"unknown reasoning_effort {level!r} (choose from {', '.join(REASONING_LEVELS)})")


def check_family(route: str | None, reasoning_format: str | None, level: str | None) -> None:
    """Raise ValueError when the route's model family cannot take the level or format (``family_error``)."""
    problem = family_error(route, reasoning_format, level) if route is not None else None
    if problem is not None:
        raise ValueError(problem)


def error_status(error: Any, default: int = 500) -> int:
    """The HTTP status an error object stands for: a numeric code, else its type/code/status name."""
    if not isinstance(error, Mapping):
        return default
    code = error.get("code")
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return code
    if isinstance(code, str) and code.isdigit() and 400 <= int(code) <= 599:
        return int(code)
    for key in ("type", "code"):
        name = error.get(key)
        if isinstance(name, str) and name in ERROR_TYPE_STATUS:
            return ERROR_TYPE_STATUS[name]
    status = error.get("status")
    if isinstance(status, str) and status in RPC_STATUS:
        return RPC_STATUS[status]
    return default


def stream_error(payload: Mapping[str, Any], default: int = 500) -> StreamError:
    """A StreamError from an event carrying ``{"error": {...}}`` (or a bare error string)."""
    error = payload.get("error")
    message = error.get("message") if isinstance(error, Mapping) else error
    return StreamError(error_status(error, default), str(message or "error event in stream")[:2000], payload)


#: How a stream whose chunks name several models records them: each name once, in order of arrival.
SERVED_SEPARATOR = " | "


def served_name(names: Sequence[str]) -> str | None:
    """The model a streamed reply names, from every chunk's name (``""`` included; absent ones left out).

    One name when every chunk names the same; else each distinct name once, in order, joined by
    SERVED_SEPARATOR, a blank one as ``""`` — so the served-model rule sees every name the reply
    held, and a blank after a named one is a name of its own, never "names no model"."""
    distinct = list(dict.fromkeys(name.strip() for name in names))
    if not distinct or distinct == [""]:
        return None
    if len(distinct) == 1:
        return distinct[0]
    return SERVED_SEPARATOR.join(name or '""' for name in distinct)


def as_str(value: Any) -> str | None:
    """A string field, or None when absent or not a string."""
    return value if isinstance(value, str) else None


def as_int(value: Any) -> int | None:
    """A token count from a usage block, or None when absent or not a number."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
