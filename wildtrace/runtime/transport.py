"""One slot's HTTP/1.1 connection: h11's parser over an asyncio protocol, as an httpx transport.

Why: every paid call of a run goes through one slot's transport, and on this machine's 2
cores the CPU each request costs on the event loop spreads a wave's sends over 25–30 ms that
every later wave inherits. httpx's own transport (httpcore's pool, anyio's streams, their
locks, traces and shields on each read and write) measured 1.10–1.13 × the ideal in
``benchmarks/floor.py``, against 1.03–1.04 for asyncio's streams with a few lines of HTTP, and
1.04 for h11 driven directly over asyncio: the parsing is not what costs. This keeps h11 for
every byte of the protocol (framing, chunked and close-delimited bodies, the head's size
bound, keep-alive rules: the same parser as httpcore's) and drops the layers between.

What a slot needs, and only that: one connection at a time to one origin, used by one request
at a time (the endpoint's slot queue guarantees it; a second concurrent request is a bug and
raises). What it keeps of httpcore's behaviour, each with a test (tests/test_transport.py):

- the request's bytes on the wire are httpcore's, byte for byte (its head, then the body);
- the TLS handshake offers ALPN ``http/1.1``, as httpcore's does;
- a connection is reused only when the last response was read to its end, the server did not
  ask to close, sent nothing past the body it declared, nothing arrived while it was idle (a
  server's goodbye, such as a 408 before it closes, is never read as the next request's reply)
  and it has been idle at most ``KEEPALIVE_EXPIRY_S`` (httpx's default): otherwise a new one is
  opened, as httpcore does;
- the timeouts of the request's ``timeout`` extension: ``connect`` (TCP and TLS), ``write``
  (while the socket's buffer is full) and ``read`` (each wait for bytes);
- failures raise httpx's own exceptions, as httpcore maps them (``ConnectError``,
  ``ConnectTimeout``, ``WriteTimeout``, ``ReadError``, ``ReadTimeout``,
  ``RemoteProtocolError`` — "Server disconnected without sending a response." included), so
  the retry rule sees exactly what it saw before; a write that fails because the server closed
  early is followed by reading the reply it may have sent, as httpcore does;
- 1xx informational responses are skipped; a response head over ``MAX_HEAD_BYTES`` is refused;
- reading pauses while more than ``READ_HIGH_WATER`` bytes wait to be consumed, and writing
  waits while the socket's buffer is full: memory stays bounded both ways.

Proxies are not spoken here: an endpoint behind an HTTP(S)_PROXY keeps httpx's transport.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import h11
import httpx

#: The largest response head (status line and headers) read, as httpcore bounds it.
MAX_HEAD_BYTES = 100 * 1024
#: An idle connection older than this is not reused (httpx's default keep-alive expiry).
KEEPALIVE_EXPIRY_S = 5.0
#: Reading from the socket pauses while this many received bytes wait to be consumed.
READ_HIGH_WATER = 1 << 20
#: The delay before asyncio tries a host's next address in parallel (RFC 8305's value), as anyio does.
HAPPY_EYEBALLS_DELAY_S = 0.25

_DEFAULT_PORTS = {"http": 80, "https": 443}


class _Wire(asyncio.Protocol):
    """A socket's bytes as they arrive, flow-controlled both ways, and whether anything came unasked."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self.ended = False  # EOF or the connection lost
        self._error: BaseException | None = None
        self._reader: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None  # set while the socket's buffer is full

    # -- asyncio's callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > READ_HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # close our side too: a half-open HTTP/1.1 connection is of no use

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self._error = exc
        self._wake()
        self.resume_writing()  # a write waiting for room wakes and finds the connection ended

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    # -- what the connection asks of it
    @property
    def stirred(self) -> bool:
        """Bytes or an end arrived (while idle: the connection is not to be reused)."""
        return bool(self._chunks) or self.ended

    async def read(self, timeout: float | None) -> bytes:
        """The next bytes received; b"" at a clean end of the stream."""
        if not self._chunks and not self.ended:
            self._reader = self._loop.create_future()
            try:
                await _within(self._loop, self._reader, timeout, httpx.ReadTimeout)
            finally:
                self._reader = None
        if self._chunks:
            data = self._chunks.popleft()
            self._buffered -= len(data)
            if self._paused and self._buffered <= READ_HIGH_WATER // 2 and self.transport is not None:
                self._paused = False
                self.transport.resume_reading()
            return data
        if self._error is not None:
            raise httpx.ReadError(f"{type(self._error).__name__}: {self._error}") from self._error
        return b""

    async def write(self, parts: list[bytes], timeout: float | None) -> None:
        """Hand the bytes to the socket; wait (up to ``timeout``) while its buffer is full."""
        if self.transport is None or self.ended or self.transport.is_closing():
            raise httpx.WriteError("the connection is closed")
        self.transport.writelines(parts)
        if self._writable is not None:
            await _within(self._loop, asyncio.shield(self._writable), timeout, httpx.WriteTimeout)
            if self.ended:
                raise httpx.WriteError(f"the connection was lost while writing: {self._error}")

    def _wake(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)


async def _within(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None], timeout: float | None,
                  error: type[httpx.TimeoutException]) -> None:
    """Wait for ``waiter``; ``error`` if ``timeout`` passes first (one timer, not a Timeout object a read)."""
    if timeout is None:
        await waiter
        return
    timer = loop.call_later(timeout, _expire, waiter, error)
    try:
        await waiter
    finally:
        timer.cancel()


def _expire(waiter: asyncio.Future[None], error: type[httpx.TimeoutException]) -> None:
    if not waiter.done():
        waiter.set_exception(error(f"no progress within the {error.__name__[:-7].lower()} timeout"))


class ConnectionTransport(httpx.AsyncBaseTransport):
    """One keep-alive HTTP/1.1 connection for one concurrency slot (see the module's docstring)."""

    def __init__(self, ssl_context: ssl.SSLContext, socket_options: Iterable[tuple[int, int, int]] = ()) -> None:
        ssl_context.set_alpn_protocols(["http/1.1"])  # what httpcore offers in the handshake (it sets the same)
        self._ssl = ssl_context
        self._socket_options = tuple(socket_options)
        self._wire: _Wire | None = None
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._origin: tuple[str, str, int] | None = None
        self._idle_since = 0.0
        self._busy = False
        #: Connections opened (a reused one is not counted again): for tests and benchmarks.
        self.opened = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._busy:
            raise RuntimeError("a slot's transport carries one request at a time: close the last response first")
        self._busy = True
        timeouts = request.extensions.get("timeout", {})
        try:
            await self._connect(request.url, timeouts.get("connect"))
            with contextlib.suppress(httpx.WriteError):  # a server that closed early may still have replied
                await self._send(request, timeouts.get("write"))
            head = await self._head(timeouts.get("read"))
        except BaseException:
            self._close(abort=True)
            raise
        return httpx.Response(status_code=head.status_code, headers=head.headers.raw_items(),
                              stream=_Body(self, timeouts.get("read")),
                              extensions={"http_version": b"HTTP/" + head.http_version, "reason_phrase": head.reason})

    async def aclose(self) -> None:
        had = self._wire is not None
        self._close(abort=False)
        if had:
            await asyncio.sleep(0)  # one turn of the loop: the socket is closed before the loop may end

    # -- the connection
    async def _connect(self, url: httpx.URL, timeout: float | None) -> None:
        scheme = url.scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"the URL's scheme is not http or https: {scheme!r}")
        origin = (scheme, url.host, url.port or _DEFAULT_PORTS[scheme])
        if self._wire is not None and (origin != self._origin or self._wire.stirred
                                       or time.monotonic() - self._idle_since > KEEPALIVE_EXPIRY_S):
            self._close(abort=False)
        if self._wire is not None:
            return
        tls = scheme == "https"
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, wire = await loop.create_connection(
                    _Wire, origin[1], origin[2], ssl=self._ssl if tls else None,
                    server_hostname=origin[1] if tls else None, happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY_S)
        except TimeoutError as exc:  # before OSError: TimeoutError is one
            raise httpx.ConnectTimeout(f"no connection to {origin[1]}:{origin[2]} within {timeout}s") from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from exc
        sock: Any = wire.transport.get_extra_info("socket") if wire.transport is not None else None
        for option in self._socket_options:
            with contextlib.suppress(OSError, AttributeError):  # an option this system lacks: the connection serves
                sock.setsockopt(*option)
        self._wire, self._origin = wire, origin
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.opened += 1

    def _close(self, abort: bool) -> None:
        wire, self._wire, self._origin = self._wire, None, None
        self._busy = False
        if wire is not None and wire.transport is not None:
            if abort:
                wire.transport.abort()
            else:
                wire.transport.close()

    # -- one request
    async def _send(self, request: httpx.Request, timeout: float | None) -> None:
        assert self._wire is not None
        try:
            parts = [self._h11.send(h11.Request(method=request.method, target=request.url.raw_path,
                                                headers=request.headers.raw)) or b""]
            async for chunk in request.stream:  # type: ignore[union-attr]  # a request's body: bytes here
                parts.extend(self._h11.send_with_data_passthrough(h11.Data(data=chunk)) or ())
            parts.append(self._h11.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc)) from exc
        await self._wire.write(parts, timeout)

    async def _head(self, timeout: float | None) -> h11.Response:
        while True:
            event = await self._event(timeout)
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):  # the peer closed: h11 says so this way too
                raise httpx.RemoteProtocolError(f"unexpected {type(event).__name__} before the response")

    async def _event(self, timeout: float | None) -> Any:
        assert self._wire is not None
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
            if event is not h11.NEED_DATA:
                return event
            data = await self._wire.read(timeout)
            if data == b"" and self._h11.their_state is h11.SEND_RESPONSE:
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
            self._h11.receive_data(data)

    def _response_closed(self) -> None:
        """Keep the connection for the next request if this exchange ended cleanly; else close it."""
        if (self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE and self._wire is not None
                and not self._h11.trailing_data[0]):  # bytes past the declared body: never the next reply
            self._h11.start_next_cycle()
            self._idle_since = time.monotonic()
            self._busy = False
        else:
            self._close(abort=True)


class _Body(httpx.AsyncByteStream):
    """A response's body as h11 frames it; closing it frees the slot's connection (or closes it)."""

    def __init__(self, transport: ConnectionTransport, timeout: float | None) -> None:
        self._transport, self._timeout = transport, timeout
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while True:
                event = await self._transport._event(self._timeout)
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                    return
                else:  # never looped on: a closed connection says so once and forever
                    raise httpx.RemoteProtocolError(f"unexpected {type(event).__name__} in the response's body")
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._transport._response_closed()
