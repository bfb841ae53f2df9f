"""The provider interface: a pure request builder and a pure response parser."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from wildtrace.core.records import Completion


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
    stream: bool = True
    max_call_s: float = 3600.0
    reasoning_format: str | None = None


@dataclass(frozen=True)
class Sampling:
    """Decoding settings for one call: temperature (None = omit it) and the token budget."""

    temperature: float | None
    max_tokens: int
    reasoning_effort: str | None = None


@dataclass(frozen=True)
class WireRequest:
    """An HTTP POST to make: URL, JSON body and non-secret headers."""

    url: str
    body: dict
    headers: Mapping[str, str] = field(default_factory=dict)


REASONING_FORMATS: dict[str, str] = {}  # STUB until the stream branch lands


class StreamError(Exception):
    """STUB"""

    def __init__(self, status: int, message: str, payload: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.payload = status, message, payload


class IncompleteStream(Exception):
    """STUB"""


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
    """A wire format. Subclasses are pure: no sockets, no clocks, no environment."""

    name: ClassVar[str]

    def __init__(self, spec: EndpointSpec) -> None:
        self.spec = spec

    def temperature(self, sampling: Sampling) -> float | None:
        """The temperature to send, or None when the endpoint must not get one."""
        return sampling.temperature if self.spec.send_temperature else None

    def stream_request(self, request: WireRequest) -> WireRequest:
        """STUB"""
        return request

    def stream_reader(self) -> Any:
        """STUB"""
        raise NotImplementedError

    def without_temperature(self, request: WireRequest) -> WireRequest:
        """STUB"""
        body = dict(request.body)
        body.pop("temperature", None)
        return WireRequest(request.url, body, request.headers)

    @abstractmethod
    def build_request(self, prompt: str, sampling: Sampling) -> WireRequest:
        """The request for one single-turn user prompt."""

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


def as_int(value: Any) -> int | None:
    """A token count from a usage block, or None when absent or not a number."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
