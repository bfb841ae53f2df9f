"""The batch APIs' I/O: the control-plane HTTP, the spooled bodies and bounded JSONL.

A provider's batch format (``providers/<name>/batch.py``, on ``providers/batch.py``'s types)
says what to send and how to read it; ``Control`` here is the object it speaks through.

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
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import httpx

from wildtrace.core.jsonsafe import decode_json
from wildtrace.core.records import Verdict
from wildtrace.providers.batch import CONTROL_LIMIT, BatchError, Item, Piece
from wildtrace.runtime.net.client import make_client
from wildtrace.runtime.net.retry import RetryPolicy, classify, retry_hint
from wildtrace.runtime.net.secrets import redact

#: Bytes a results line may hold beyond the response body itself (ids, status, headers).
LINE_OVERHEAD = 64 << 10
#: A download is read in pieces of this size.
CHUNK = 1 << 20


class Control:
    """The batch API's HTTP: one client per endpoint, the key in headers, the run's retry rule."""

    def __init__(self, base_url: str, auth: dict[str, str], headers: dict[str, str], retry: RetryPolicy,
                 timeout_s: float, on_request: Any = None, spool: Path | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.spool = spool  #: where request bodies are written before they are sent (the run's batch spool)
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

    async def post(self, url: str, name: str, body: Iterable[Piece]) -> Any:
        """POST a JSON body, spooled to ``name`` and streamed from there with its length."""
        async with Spooled(self, name, body) as path:
            size = path.stat().st_size
            return await self.json("POST", url, content=lambda: file_chunks(path),
                                   headers={"content-type": "application/json", "content-length": str(size)})

    async def upload(self, url: str, name: str, body: Iterable[Piece], data: dict[str, str]) -> Any:
        """POST a JSONL body as the multipart file ``name`` beside the form ``data``."""
        async with Spooled(self, name, body) as path:
            return await self.json("POST", url, data=data, files=("file", str(path), "application/jsonl"))

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
                raise BatchError(redact(f"{method} {url}: {error}"), status, final)
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
                raise BatchError(redact(f"GET {url}: {failure or f'HTTP {status}: {_message(payload)}'}"), status,
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


def write_body(path: Path, body: Iterable[Piece]) -> None:
    """A batch body on disk: bytes as they are, each item as its request's exact bytes."""
    with open(path, "wb") as out:
        for piece in body:
            out.write(piece.path.read_bytes() if isinstance(piece, Item) else piece)


class Spooled:
    """A batch body written to the spool off the event loop (it may be hundreds of MB), removed on exit."""

    def __init__(self, control: Control, name: str, body: Iterable[Piece]) -> None:
        if control.spool is None:
            raise ValueError("a batch body needs the run's spool folder (Control(spool=...))")
        self.path, self.body = control.spool / name, body

    async def __aenter__(self) -> Path:
        await asyncio.to_thread(write_body, self.path, self.body)
        return self.path

    async def __aexit__(self, *exc: object) -> None:
        self.path.unlink(missing_ok=True)
