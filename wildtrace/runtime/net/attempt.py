"""One attempt: a request's bytes in, an attempt's outcome out.

The layer under the call loop (runtime/net/call.py): one POST through the endpoint's httpx client,
and its reply read within bounds — a gzip/deflate body decoded incrementally (the size bound
counts decoded bytes, so a bomb stops at it), a stream read event by event through the
provider's reader (also when a server sends events to a request that did not ask for them),
a body past ``max_response_bytes`` refused, an error body kept to ``ERROR_BODY_LIMIT``, a 2xx
that is an error in disguise counted as the status it stands for. Nothing here retries,
waits for a slot or knows of the cache.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from wildtrace.core.jsonsafe import decode_json, strict
from wildtrace.providers.base import IncompleteStream, Provider, StreamError, WireRequest

#: Told a reply's status and headers as they arrive, before its body.
OnHead = Callable[[int, dict[str, str]], None]
#: An error body is kept to this many bytes; the provider's message is in its first lines.
ERROR_BODY_LIMIT = 1 << 20
#: What every request asks for: an uncompressed body (a server may still compress; see ``decoded_body``).
ACCEPT_ENCODING = "identity"
#: The Content-Encodings decoded here, with zlib's window bits (``deflate`` is told by its first bytes).
ZLIB_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
#: One decoding step yields at most this many bytes, so the size bound stops a bomb within one step.
DECODE_STEP = 64 << 10
#: More layers than this ("gzip, gzip, …") is not a real server; refused rather than nested.
MAX_ENCODINGS = 4
#: What a bad response's failure text shows of what arrived (characters, control characters escaped).
PREVIEW_CHARS = 160
#: The bytes of a body kept for that preview.
HEAD_BYTES = 1024


class UndecodableBody(Exception):
    """A body in a Content-Encoding not decoded here, or whose bytes do not decode."""


def content_encodings(value: str) -> list[str]:
    """The Content-Encodings a body went through, in the order applied (``identity`` dropped)."""
    return [e for e in (part.strip().lower() for part in value.split(",")) if e and e != "identity"]


def _is_zlib(head: bytes) -> bool:
    """Whether a deflate body starts with a zlib header (RFC 9110) rather than raw deflate (some servers)."""
    return head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and ((head[0] << 8) | head[1]) % 31 == 0


class _Inflater:
    """One gzip or deflate layer, incremental: at most DECODE_STEP bytes out per step, so memory
    stays bounded whatever the body expands to; zlib errors become UndecodableBody."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._gzip = encoding != "deflate"
        self._z: Any = None  # made on the first two bytes (deflate: they tell zlib from raw deflate)
        self._head = b""  # bytes kept until two are there to look at
        self._fed = False
        self._over = False  # the stream ended and what followed was not another gzip member: ignored

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of the next piece of the body, in steps."""
        try:
            yield from self._feed(data)
        except zlib.error as exc:
            raise UndecodableBody(f"the {self.encoding} body does not decode: {exc}") from None

    def _feed(self, data: bytes) -> Iterator[bytes]:
        data, self._head = self._head + data, b""
        self._fed = self._fed or bool(data)
        while data and not self._over:
            if self._z is None or self._z.eof:
                if len(data) < 2:
                    self._head = data
                    return
                if self._z is None:
                    wbits = ZLIB_WBITS["gzip"] if self._gzip else zlib.MAX_WBITS if _is_zlib(data) else -zlib.MAX_WBITS
                elif self._gzip and data[:2] == b"\x1f\x8b":  # gzip bodies may hold several members
                    wbits = ZLIB_WBITS["gzip"]
                else:
                    self._over = True
                    return
                self._z = zlib.decompressobj(wbits)
            out = self._z.decompress(data, DECODE_STEP)
            data = self._z.unused_data if self._z.eof else self._z.unconsumed_tail
            if out:
                yield out

    def finish(self) -> None:
        """At the end of the body: a stream cut before its end does not decode."""
        if self._fed and (self._z is None or not self._z.eof):
            raise UndecodableBody(f"the {self.encoding} body ends before its compressed stream does")


async def _inflated(chunks: AsyncIterator[bytes], encoding: str) -> AsyncIterator[bytes]:
    layer = _Inflater(encoding)
    async for chunk in chunks:
        for piece in layer.feed(chunk):
            yield piece
    layer.finish()


def decoded_body(chunks: AsyncIterator[bytes], content_encoding: str) -> AsyncIterator[bytes]:
    """The body's bytes with its Content-Encoding undone, in steps of at most DECODE_STEP.

    Raises UndecodableBody at once for an encoding not decoded here (br, zstd, compress: no
    bounded decoder is installed, and the request asked for identity), and while reading
    for bytes that do not decode.
    """
    encodings = content_encodings(content_encoding)
    if len(encodings) > MAX_ENCODINGS:
        raise UndecodableBody(f"Content-Encoding of {len(encodings)} layers is not decoded here")
    for encoding in reversed(encodings):
        if encoding not in ZLIB_WBITS:
            raise UndecodableBody(f"Content-Encoding {encoding[:40]} is not decoded here (only gzip and deflate; "
                                  "the request asked for identity)")
    for encoding in reversed(encodings):
        chunks = _inflated(chunks, encoding)
    return chunks


def preview(data: bytes, limit: int = PREVIEW_CHARS) -> str:
    """The first characters of some bytes from outside, control characters escaped, "…" when cut."""
    text = data.decode("utf-8", "replace")
    shown = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text[:limit])
    return shown + ("…" if len(text) > limit else "")


def encode_body(body: dict) -> bytes:
    """The exact bytes sent (and hashed for the cache): compact JSON, UTF-8, not ASCII-escaped."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass
class Attempt:
    """What one HTTP attempt gave: a status with its headers and decoded body, or a transport failure."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    payload: Any = None
    failure: str | None = None  # "timeout: …", "transport_error: …"
    too_large: bool = False
    notes: tuple[str, ...] = ()  # e.g. non-finite numbers the body held, replaced by null
    bad: str | None = None  # a 2xx whose bytes could not be read (an encoding): why
    size: int = 0  # the body's (decoded) bytes; -1: not read
    head: bytes = b""  # its first HEAD_BYTES, for the failure text of a bad response
    stale: bool = False  # not sent: prepared before the endpoint learned to drop temperature or lower the budget
    unsent: bool = False  # failed before the request left (no connection): nothing can have been billed

    @property
    def success(self) -> bool:
        """A 2xx with a body to read."""
        return (self.status is not None and 200 <= self.status < 300 and self.failure is None and not self.too_large
                and self.bad is None and not self.stale)


class Sender:
    """An endpoint's attempts: its client (httpx's pool), its key's headers and its reading bounds."""

    def __init__(self, provider: Provider, auth: dict[str, str], client: httpx.AsyncClient, streaming: bool,
                 max_response_bytes: int) -> None:
        self.provider = provider
        self.streaming = streaming
        self.max_response_bytes = max_response_bytes
        self._auth = auth
        self._client = client
        self.requests_sent = 0

    def deadline_s(self) -> float:
        """The longest one attempt may take: ``max_call_s``; for a request not streamed, also ``timeout_s``,
        which bounds its whole response (httpx's read timeout alone bounds each wait for bytes, so a
        body trickled a byte at a time would run to ``max_call_s``)."""
        spec = self.provider.spec
        return spec.max_call_s if self.streaming else min(spec.max_call_s, spec.timeout_s)

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self._client.aclose()

    async def send(self, request: WireRequest, content: bytes, on_head: OnHead) -> Attempt:
        """One attempt: ``content`` POSTed to the request's URL, its reply read within the bounds.

        ``on_head``: told the status and headers as soon as they arrive (a stream's budget headers pace
        the next sends before its body ends)."""
        headers = {"content-type": "application/json", "accept-encoding": ACCEPT_ENCODING, **request.headers,
                   **self._auth}
        spec = self.provider.spec
        self.requests_sent += 1
        try:
            async with asyncio.timeout(self.deadline_s()):
                wire = self._client.build_request("POST", request.url, content=content, headers=headers)
                response = await self._client.send(wire, stream=True)
                try:
                    return self._undisguise(await self._read(response, on_head))
                finally:
                    await response.aclose()
        except TimeoutError:
            if self.streaming or spec.max_call_s <= spec.timeout_s:
                return Attempt(failure=f"timeout: the call took longer than max_call_s={spec.max_call_s}s")
            return Attempt(failure=f"timeout: the whole response took longer than timeout_s={spec.timeout_s}s")
        except httpx.TimeoutException as exc:
            return Attempt(failure=f"timeout: {type(exc).__name__}: no byte for timeout_s={spec.timeout_s}s",
                           unsent=isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)))
        except httpx.TransportError as exc:
            return Attempt(failure=f"transport_error: {type(exc).__name__}: {exc}",
                           unsent=isinstance(exc, httpx.ConnectError))
        except httpx.InvalidURL as exc:
            return Attempt(failure=f"transport_error: invalid URL: {exc}")

    async def _read(self, response: httpx.Response, on_head: OnHead) -> Attempt:
        status, headers = response.status_code, {k.lower(): v for k, v in response.headers.items()}
        on_head(status, headers)
        success = 200 <= status < 300
        try:
            chunks = decoded_body(self._chunks(response), headers.get("content-encoding", ""))
        except UndecodableBody as exc:
            if success:
                # not read: its bytes mean nothing here
                return Attempt(status=status, headers=headers, bad=str(exc), size=-1)
            chunks = self._chunks(response)  # an error body: its status says what matters; bytes kept as sent
        # Events are read as events, asked for or not (a gateway may stream a plain request's answer).
        if success and "text/event-stream" in headers.get("content-type", ""):
            return await self._read_stream(chunks, status, headers)
        bound = self.max_response_bytes if success else ERROR_BODY_LIMIT
        body = bytearray()
        try:
            async for chunk in chunks:
                body += chunk
                if len(body) > bound:
                    if success:
                        return Attempt(status=status, headers=headers, too_large=True)
                    break  # an error body: its first megabyte says what went wrong
        except UndecodableBody as exc:
            if success:
                return Attempt(status=status, headers=headers, bad=str(exc), size=len(body),
                               head=bytes(body[:HEAD_BYTES]))
        data = bytes(body[:bound])
        payload, notes = decode_json(data)
        if success and isinstance(payload, dict) and "non_json_body" in payload \
                and data.lstrip().startswith((b"data:", b"event:")):
            return await self._read_stream(_replay(data), status, headers)  # events, mislabelled
        return Attempt(status=status, headers=headers, payload=payload, notes=notes, size=len(data),
                       head=data[:HEAD_BYTES])

    @staticmethod
    async def _chunks(response: httpx.Response) -> AsyncIterator[bytes]:
        # The body's bytes as sent (the Content-Encoding is undone here, within the size bound); the
        # response's stream itself, as an in-process transport's response is read before it is returned.
        async for chunk in response.stream:  # type: ignore[union-attr]
            yield chunk

    async def _read_stream(self, chunks: AsyncIterator[bytes], status: int, headers: dict[str, str]) -> Attempt:
        reader = self.provider.stream_reader()
        size, head = 0, bytearray()
        try:
            async for chunk in chunks:
                size += len(chunk)
                if size > self.max_response_bytes:
                    return Attempt(status=status, headers=headers, too_large=True)
                if len(head) < HEAD_BYTES:
                    head += chunk[:HEAD_BYTES - len(head)]
                reader.feed(chunk)
            payload, notes = strict(reader.finish())
            return Attempt(status=status, headers=headers, payload=payload, notes=notes, size=size, head=bytes(head))
        except UndecodableBody as exc:
            return Attempt(status=status, headers=headers, bad=str(exc), size=size, head=bytes(head))
        except StreamError as exc:  # an error event mid-stream counts as the status it stands for
            payload, _ = strict(exc.payload if exc.payload is not None else {"error": {"message": exc.message}})
            return Attempt(status=exc.status, headers=headers, payload=payload)
        except IncompleteStream as exc:
            return Attempt(failure=f"transport_error: stream cut short: {exc}")
        except ValueError as exc:  # malformed events: a bad response (the parser says so; retried)
            return Attempt(status=status, headers=headers, payload={"malformed_stream": str(exc)[:2000]}, size=size,
                           head=bytes(head))

    def _undisguise(self, attempt: Attempt) -> Attempt:
        """A 2xx whose body is an error in disguise (GLM's network_error, MiniMax's base_resp code)
        counts as the status it stands for, so the retry rule and the quota latch see it."""
        if attempt.success:
            status = self.provider.failure_status(attempt.payload)
            if status is not None:
                attempt.status = status
        return attempt


async def _replay(data: bytes) -> AsyncIterator[bytes]:
    yield data


