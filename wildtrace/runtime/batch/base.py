"""What both batch APIs share: the item, the status, the control-plane HTTP and bounded JSONL.

Control requests (upload, create, poll, download) are not items: they are retried under
the run's retry rule (transient statuses and transport failures, with backoff) and fail
with a ``BatchError`` carrying the verdict (final, quota) otherwise. Every byte read back
is bounded: a JSON answer by ``CONTROL_LIMIT``, a results file line by line, each line by
the endpoint's ``max_response_mb`` and the whole file by its items' count, so a hostile or
broken server can neither exhaust memory nor make a run raise past this package.
"""

from __future__ import annotations

import asyncio
import random
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from wildtrace.runtime.client import make_client
from wildtrace.runtime.attempt import decode_json
from wildtrace.runtime.retry import (
    RetryPolicy,
    Verdict,
    classify,
    retry_hint,
)
from wildtrace.runtime.secrets import redact

#: A batch object, an upload's answer or an error body is kept to this many bytes.
CONTROL_LIMIT = 4 << 20
#: Bytes a results line may hold beyond the response body itself (ids, status, headers).
LINE_OVERHEAD = 64 << 10
#: A download is read in pieces of this size.
CHUNK = 1 << 20


@dataclass(frozen=True)
class Item:
    """One request in a batch: its custom_id (the cache key) and the file holding its exact bytes."""

    custom_id: str
    path: Path  #: the plain request body, exactly as a synchronous call sends it (and its key hashes)
    size: int


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
    """A control request that failed for good: its status, the provider's words and the verdict."""

    def __init__(self, message: str, status: int | None = None, verdict: Verdict = Verdict.FAIL) -> None:
        super().__init__(redact(message))
        self.status, self.verdict = status, verdict


class Control:
    """The batch API's HTTP: one client per endpoint, the key in headers, the run's retry rule."""

    def __init__(self, base_url: str, auth: dict[str, str], headers: dict[str, str], retry: RetryPolicy,
                 timeout_s: float, on_request: Any = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry
        self._rng = random.Random()
        self._headers = {**headers, **auth}
        self.on_request = on_request or (lambda: None)
        self.client = make_client(timeout_s)

    def same_origin(self, url: str) -> bool:
        """Whether ``url`` is on the endpoint's own scheme, host and port (the key goes nowhere else)."""
        try:
            mine, theirs = httpx.URL(self.base_url), httpx.URL(url)
        except (httpx.InvalidURL, TypeError):
            return False
        return (mine.scheme, mine.host, mine.port) == (theirs.scheme, theirs.host, theirs.port)

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self.client.aclose()

    async def json(self, method: str, url: str, limit: int = CONTROL_LIMIT, **kwargs: Any) -> Any:
        """A JSON answer to a control request (at most ``limit`` bytes), retried while transient;
        BatchError otherwise."""
        for attempt_no in range(1, self.retry.max_retries + 2):
            status, headers, payload, failure = await self._once(method, url, kwargs, limit)
            if failure is None and status is not None and 200 <= status < 300:
                return payload
            verdict = Verdict.RETRY if failure is not None else classify(status, headers, payload)
            error = failure or f"HTTP {status}: {_message(payload)}"
            if verdict in (Verdict.FAIL, Verdict.QUOTA) or attempt_no > self.retry.max_retries:
                final = verdict if verdict != Verdict.RETRY else Verdict.FAIL
                raise BatchError(f"{method} {url}: {error}", status, final)
            hint = retry_hint(headers, payload) if status is not None else None
            await asyncio.sleep(self.retry.delay(attempt_no, hint, self._rng))
        raise AssertionError("unreachable: the loop returns or raises")

    async def _once(self, method: str, url: str, kwargs: dict,
                    limit: int) -> tuple[int | None, dict, Any, str | None]:
        self.on_request()
        content = kwargs.get("content")
        if callable(content):  # a body made afresh for each attempt (an upload read from its file)
            kwargs = {**kwargs, "content": content()}
        files = kwargs.pop("files", None)
        opened = None
        try:
            if files is not None:  # (field, path, content type): reopened per attempt, streamed from disk
                name, path, kind = files
                opened = open(path, "rb")  # noqa: SIM115 - closed below, after the request
                kwargs["files"] = {name: (Path(path).name, opened, kind)}
            headers = {**self._headers, **kwargs.pop("headers", {})}
            async with self.client.stream(method, url, headers=headers, **kwargs) as response:
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > limit:
                        break
                if len(body) > limit:
                    return response.status_code, {}, None, f"transport_error: answer larger than {limit} bytes"
                payload, _ = decode_json(bytes(body))
                return response.status_code, {k.lower(): v for k, v in response.headers.items()}, payload, None
        except httpx.TimeoutException as exc:
            return None, {}, None, f"timeout: {type(exc).__name__}"
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:  # also a body that will not decode
            return None, {}, None, f"transport_error: {type(exc).__name__}: {exc}"
        finally:
            if opened is not None:
                opened.close()

    async def lines(self, url: str, max_line: int, max_total: int) -> AsyncIterator[bytes | None]:
        """The lines of a JSONL download, each at most ``max_line`` bytes (None stands for a longer
        one, skipped), the whole at most ``max_total``; retried while transient before the first byte."""
        for attempt_no in range(1, self.retry.max_retries + 2):
            self.on_request()
            failure: str | None = None
            try:
                async with self.client.stream("GET", url, headers=self._headers) as response:
                    if 200 <= response.status_code < 300:
                        async for line in _split(response.aiter_bytes(CHUNK), max_line, max_total):
                            yield line
                        return
                    raw = bytearray()
                    async for chunk in response.aiter_bytes():
                        raw += chunk
                        if len(raw) > CONTROL_LIMIT:
                            break
                    payload, _ = decode_json(bytes(raw[:CONTROL_LIMIT]))
                    status, headers = response.status_code, {k.lower(): v for k, v in response.headers.items()}
            except httpx.TimeoutException as exc:
                failure, status, headers, payload = f"timeout: {type(exc).__name__}", None, {}, None
            except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
                failure, status, headers, payload = f"transport_error: {type(exc).__name__}: {exc}", None, {}, None
            verdict = Verdict.RETRY if failure else classify(status, headers, payload)
            if verdict != Verdict.RETRY or attempt_no > self.retry.max_retries:
                raise BatchError(f"GET {url}: {failure or f'HTTP {status}: {_message(payload)}'}", status,
                                 verdict if verdict != Verdict.RETRY else Verdict.FAIL)
            await asyncio.sleep(self.retry.delay(attempt_no, retry_hint(headers, payload) if status else None,
                                                 self._rng))


async def _split(chunks: AsyncIterator[bytes], max_line: int, max_total: int) -> AsyncIterator[bytes | None]:
    """Split a byte stream at newlines in linear time; an over-long line yields None once."""
    buffer = bytearray()
    total = 0
    skipping = False
    async for chunk in chunks:
        total += len(chunk)
        if total > max_total:
            raise BatchError(f"results file larger than {max_total} bytes; not read further")
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not skipping:
                buffer += piece
                if len(buffer) > max_line:
                    buffer.clear()
                    skipping = True
                    yield None
            if end < 0:
                break
            if not skipping and buffer.strip():
                yield bytes(buffer)
            buffer.clear()
            skipping = False
            start = end + 1
    if not skipping and buffer.strip():
        yield bytes(buffer)


def _message(payload: Any) -> str:
    """The provider's words from an error body."""
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, dict):
            inner = err.get("error")  # Anthropic: {"type": "error", "error": {...}}
            if isinstance(inner, dict) and inner.get("message"):
                return str(inner["message"])[:2000]
            if err.get("message"):
                return str(err["message"])[:2000]
    return str(payload)[:2000]


async def file_chunks(path: Path, prefix: bytes = b"", suffix: bytes = b"") -> AsyncIterator[bytes]:
    """A file's bytes as an upload body (read in a thread, a piece at a time)."""
    if prefix:
        yield prefix
    with open(path, "rb") as fh:
        while piece := await asyncio.to_thread(fh.read, CHUNK):
            yield piece
    if suffix:
        yield suffix


async def post_spooled(control: Any, url: str, path: Path, items: list[Any],
                       write: Callable[[Path, list[Any]], None]) -> Any:
    """POST a JSON body of the items: written to the spool off the event loop (it may be
    hundreds of MB), streamed from there with its length, and removed whatever the answer."""
    await asyncio.to_thread(write, path, items)
    size = path.stat().st_size
    try:
        return await control.json("POST", url, content=lambda: file_chunks(path),
                                  headers={"content-type": "application/json", "content-length": str(size)})
    finally:
        path.unlink(missing_ok=True)


class BatchAPI(ABC):
    """One provider's batch API."""

    provider: str
    #: The provider's limits on one batch (requests, bytes of input).
    max_items: int
    max_bytes: int

    def __init__(self, control: Control) -> None:
        self.control = control

    @abstractmethod
    async def create(self, items: list[Item], spool: Path) -> tuple[str, str | None]:
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
