"""What every provider's batch format shares: the item, the status, a result line, the error,
and the control object a format speaks through.

A batch format is pure: it says what a batch's body is (bytes around each item's exact request
bytes, as a list of ``Piece``), which URLs to ask and how to read the answers. The control
(runtime/batch/base.py's ``Control``) does every request and every file: the HTTP client, the
retries, the spooled bodies, the bounded reads.
"""

from __future__ import annotations

import string
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from wildtrace.core.records import Verdict

#: A batch object, an upload's answer or an error body is kept to this many bytes.
CONTROL_LIMIT = 4 << 20


class Stored(Protocol):
    """Where an item's bytes are kept (runtime/batch's spooled file): the control reads them, a format never does."""

    def read_bytes(self) -> bytes:
        """The bytes."""


@dataclass(frozen=True)
class Item:
    """One request in a batch: its custom_id (the cache key) and the file holding its exact bytes."""

    custom_id: str
    path: Stored  #: the plain request body, exactly as a synchronous call sends it (and its key hashes)
    size: int


#: A batch body in order: bytes as they are, an item as its request's exact bytes.
Piece = bytes | Item


@dataclass
class Status:
    """A batch as the provider last described it."""

    state: str  #: the provider's own status word
    terminal: bool  #: no further change will come: collect what it holds
    counts: dict[str, int] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)  #: output/error file ids, results_url
    problem: str | None = None  #: why the whole batch failed (OpenAI's ``errors``), when it did


@dataclass(frozen=True)
class Line:
    """One item's result: a response (status + body) or an error, or nothing (unfinished)."""

    custom_id: str
    status: int | None  #: the item's HTTP status (None: expired, cancelled, unreadable)
    payload: Any  #: the response body, or the error object
    unfinished: bool = False  #: expired or cancelled before it ran: send it again
    error: str | None = None  #: the provider's words, when it is an error


class BatchError(Exception):
    """A control request that failed for good: its status, the provider's words and the verdict.

    The control redacts the message before raising (a key never reaches a log)."""

    def __init__(self, message: str, status: int | None = None, verdict: Verdict = Verdict.FAIL) -> None:
        super().__init__(message)
        self.status, self.verdict = status, verdict


class Control(Protocol):
    """The requests a batch format asks for, made by runtime/batch (one client per endpoint, its key)."""

    base_url: str

    def same_origin(self, url: str) -> bool:
        """Whether ``url`` is on the endpoint's own scheme, host and port (the key goes nowhere else)."""

    async def json(self, method: str, url: str, limit: int = CONTROL_LIMIT, **kwargs: Any) -> Any:
        """A JSON answer (at most ``limit`` bytes), retried while transient; BatchError otherwise."""

    def lines(self, url: str, max_line: int, max_total: int) -> AsyncIterator[bytes | None]:
        """A JSONL download's lines (None for one longer than ``max_line``), at most ``max_total`` bytes."""

    async def post(self, url: str, name: str, body: Iterable[Piece]) -> Any:
        """POST the body as JSON (spooled to a file called ``name``, streamed from there); its JSON answer."""

    async def upload(self, url: str, name: str, body: Iterable[Piece], data: dict[str, str]) -> Any:
        """POST the body as a multipart file called ``name`` beside the form ``data``; its JSON answer."""


#: The characters a URL path segment carries as they are (RFC 3986's unreserved set).
UNRESERVED = frozenset(string.ascii_letters + string.digits + "_.-~")


def segment(value: str) -> str:
    """``value`` as one URL path segment (a batch or file id): every other byte percent-encoded,
    as ``urllib.parse.quote(value, safe="")`` spells it."""
    return "".join(chr(b) if chr(b) in UNRESERVED else f"%{b:02X}" for b in value.encode("utf-8"))


def int_counts(value: Any) -> dict[str, int]:
    """A batch's request counts, the integers only."""
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)}


class BatchAPI(ABC):
    """One provider's batch API: made with the control, the synchronous call's URL and the longest result line."""

    provider: str
    #: The provider's limits on one batch (requests, bytes of input).
    max_items: int
    max_bytes: int

    def __init__(self, control: Control, endpoint_url: str, max_line: int) -> None:
        self.control = control
        self.max_line = max_line

    @abstractmethod
    async def create(self, items: list[Item]) -> tuple[str, str | None]:
        """Send the items as one batch: (batch id, input file id or None)."""

    @abstractmethod
    async def status(self, batch_id: str) -> Status:
        """The batch's current state."""

    @abstractmethod
    def results(self, batch_id: str, status: Status, wanted: set[str], max_line: int) -> AsyncIterator[Line]:
        """Each wanted item's result line (items it holds nothing for are not yielded)."""

    def item_bytes(self, item: Item) -> int:
        """What an item adds to the batch's size (its body plus the line around it)."""
        return item.size + 256
