"""Issue 19, item 8: a slot's connection is h11 over asyncio (runtime/transport.py), and behaves as httpcore's.

Every case talks to a real TCP server on 127.0.0.1 whose connections are scripted byte by
byte (``RawServer``). Where httpx's own transport is the reference (the request's bytes on the
wire, the exception each fault raises), the same case runs through both and must agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import endpoint_spec
from wildtrace.providers.registry import make_provider
from wildtrace.runtime import transport as T
from wildtrace.runtime.http import KEEPALIVE, Endpoint
from wildtrace.runtime.retry import RetryPolicy
from wildtrace.runtime.transport import ConnectionTransport

TIMEOUTS = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}


def read_request(conn: socket.socket, buffered: bytearray) -> bytes:
    """One whole request (head and Content-Length body) from the connection; b"" if it closed first."""
    while b"\r\n\r\n" not in buffered:
        data = conn.recv(65536)
        if not data:
            return b""
        buffered += data
    end = buffered.index(b"\r\n\r\n") + 4
    length = 0
    for line in bytes(buffered[:end]).split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(buffered) < end + length:
        data = conn.recv(65536)
        if not data:
            return b""
        buffered += data
    whole = bytes(buffered[:end + length])
    del buffered[:end + length]
    return whole


def ok(body: bytes = b'{"ok": true}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        len(body), extra, body)


class RawServer:
    """A TCP server on 127.0.0.1: each connection runs ``script(index, conn, requests)`` on its own thread."""

    def __init__(self, script: Callable[[int, socket.socket, list[bytes]], None],
                 tls: ssl.SSLContext | None = None) -> None:
        self.script, self.tls = script, tls
        self.requests: list[bytes] = []
        self.accepted = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._stop = False

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            index, self.accepted = self.accepted, self.accepted + 1
            threading.Thread(target=self._one, args=(index, conn), daemon=True).start()

    def _one(self, index: int, conn: socket.socket) -> None:
        with contextlib.suppress(OSError, ssl.SSLError):
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            with conn:
                self.script(index, conn, self.requests)

    def __enter__(self) -> RawServer:
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop = True
        self._sock.close()


def serve(replies: Callable[[int, int], bytes | None], close_after: bool = False):
    """A script: each request read is answered with ``replies(connection, n)`` (None: close without a word)."""
    def script(index: int, conn: socket.socket, requests: list[bytes]) -> None:
        buffered = bytearray()
        n = 0
        while request := read_request(conn, buffered):
            requests.append(request)
            reply = replies(index, n)
            if reply is None:
                return
            conn.sendall(reply)
            n += 1
            if close_after:
                return
    return script


def request(url: str, body: bytes = b'{"q": 1}', timeouts: dict | None = None) -> httpx.Request:
    """A request as ``Endpoint._attempt`` builds it."""
    headers = {"content-type": "application/json", "accept-encoding": "identity",
               "Authorization": "Bearer sk-transport-test"}
    return httpx.Request("POST", url + "/v1/chat/completions", content=body, headers=headers,
                         extensions={"timeout": timeouts or TIMEOUTS})


def ours() -> ConnectionTransport:
    return ConnectionTransport(ssl.create_default_context(), KEEPALIVE)


def httpcores() -> httpx.AsyncHTTPTransport:
    return httpx.AsyncHTTPTransport(retries=0, limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))


async def exchange(transport: httpx.AsyncBaseTransport, wire: httpx.Request) -> tuple[int, dict, bytes]:
    response = await transport.handle_async_request(wire)
    try:
        body = b"".join([chunk async for chunk in response.stream])  # type: ignore[union-attr]
        return response.status_code, dict(response.headers), body
    finally:
        await response.aclose()


async def once(transport: httpx.AsyncBaseTransport, wire: httpx.Request) -> tuple[int, dict, bytes]:
    """One exchange on a transport of its own, closed after."""
    async with transport:
        return await exchange(transport, wire)


def run(coro_fn: Callable[[], Any]) -> Any:
    return asyncio.run(coro_fn())


# ---------------------------------------------------------------------------- the wire, as httpcore's

@pytest.mark.parametrize("body", [b'{"q": 1}', json.dumps({"p": "事故报告 " * 5000}, ensure_ascii=False).encode(), b""])
def test_the_request_bytes_on_the_wire_are_httpcores(body: bytes) -> None:
    with RawServer(serve(lambda c, n: ok())) as server:
        for make in (httpcores, ours):
            async def go(make: Callable[[], httpx.AsyncBaseTransport] = make) -> tuple[int, dict, bytes]:
                return await once(make(), request(server.url, body))
            status, headers, got = run(go)
            assert (status, got, headers["content-type"]) == (200, b'{"ok": true}', "application/json")
    theirs, mine = server.requests
    assert mine == theirs
    assert mine.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:") and mine.endswith(body)


#: (name, the server's reply to each request, the body read, connections opened for two requests)
FRAMINGS = [
    ("content-length", lambda c, n: ok(b'{"n": %d}' % n), b'{"n": 0}', 1),
    ("chunked", lambda c, n: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"4\r\n{\"n\"\r\n4\r\n: %d}\r\n0\r\n\r\n" % n, b'{"n": 0}', 1),
    ("100-continue first", lambda c, n: b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b'{"n": %d}' % n), b'{"n": 0}', 1),
    ("connection: close", lambda c, n: ok(b'{"n": %d}' % n, b"Connection: close\r\n"), b'{"n": 0}', 2),
    ("HTTP/1.0 keep-alive unasked", lambda c, n: b"HTTP/1.0 200 OK\r\nContent-Length: 8\r\n\r\n{\"n\": %d}" % n,
     b'{"n": 0}', 2),
]


@pytest.mark.parametrize(("name", "reply", "first", "opened"), FRAMINGS, ids=[f[0] for f in FRAMINGS])
def test_each_framing_is_read_and_the_connection_kept_only_when_it_may_be(name, reply, first, opened) -> None:
    close_after = b"close" in reply(0, 0) or reply(0, 0).startswith(b"HTTP/1.0")
    with RawServer(serve(reply, close_after=close_after)) as server:
        async def go() -> tuple[list[bytes], int]:
            async with ours() as transport:
                bodies = [(await exchange(transport, request(server.url)))[2] for _ in range(2)]
                return bodies, transport.opened
        bodies, count = run(go)
    assert bodies[0] == first and len(server.requests) == 2
    assert count == opened == server.accepted


def test_a_close_delimited_body_ends_at_the_close() -> None:
    with RawServer(lambda i, conn, reqs: (read_request(conn, bytearray()),
                                          conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n{\"whole\": true}"))) as server:
        async def go() -> bytes:
            async with ours() as transport:
                return (await exchange(transport, request(server.url)))[2]
        assert run(go) == b'{"whole": true}'


# ---------------------------------------------------------------------------- faults, as httpcore raises them

def _silent(i: int, conn: socket.socket, reqs: list[bytes]) -> None:
    read_request(conn, bytearray())
    time.sleep(1.5)


FAULTS = [
    ("closed without a reply", serve(lambda c, n: None), httpx.RemoteProtocolError,
     "Server disconnected without sending a response."),
    ("body cut short", lambda i, conn, reqs: (read_request(conn, bytearray()), conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"half\": ")), httpx.RemoteProtocolError, ""),
    ("chunked cut short", lambda i, conn, reqs: (read_request(conn, bytearray()), conn.sendall(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"a\"")), httpx.RemoteProtocolError, ""),
    ("no status line", serve(lambda c, n: b"garbage\r\n\r\n"), httpx.RemoteProtocolError, ""),
    ("a head over 100 KiB", serve(lambda c, n: b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (T.MAX_HEAD_BYTES + 10)),
     httpx.RemoteProtocolError, ""),
    ("silence", _silent, httpx.ReadTimeout, ""),
]


@pytest.mark.parametrize(("name", "script", "error", "message"), FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_raises_what_httpcore_raises(name, script, error, message) -> None:
    raised: dict[str, BaseException] = {}
    for kind, make in (("httpcore", httpcores), ("ours", ours)):
        with RawServer(script) as server:
            async def go(make: Callable[[], httpx.AsyncBaseTransport] = make) -> None:
                await once(make(), request(server.url, timeouts={**TIMEOUTS, "read": 0.5}))
            with pytest.raises(httpx.TransportError) as caught:
                run(go)
            raised[kind] = caught.value
    assert type(raised["ours"]) is type(raised["httpcore"]) is error
    if message:
        assert str(raised["ours"]) == str(raised["httpcore"]) == message


def test_nothing_listening_is_a_connect_error_as_httpcores() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for make in (httpcores, ours):
        with pytest.raises(httpx.ConnectError):
            run(lambda make=make: once(make(), request(f"http://127.0.0.1:{port}")))


def test_a_server_that_never_reads_is_a_write_timeout() -> None:
    done = threading.Event()
    with RawServer(lambda i, conn, reqs: done.wait(10)) as server:
        async def go() -> None:
            await once(ours(), request(server.url, b"x" * (64 << 20), timeouts={**TIMEOUTS, "write": 0.3}))
        with pytest.raises(httpx.WriteTimeout):
            run(go)
        done.set()


def test_a_reply_sent_before_the_body_was_taken_is_still_read() -> None:
    """A server that answers (413) and closes while the body is still being written: its reply counts, as httpcore's."""
    def script(i: int, conn: socket.socket, reqs: list[bytes]) -> None:
        conn.recv(1024)
        conn.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
        conn.shutdown(socket.SHUT_WR)
        time.sleep(0.5)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # reset

    with RawServer(script) as server:
        status, _, body = run(lambda: once(ours(), request(server.url, b"x" * (32 << 20))))
    assert (status, body) == (413, b"too large")


# ---------------------------------------------------------------------------- reuse

def test_an_idle_connection_the_server_closed_is_replaced_without_a_failure() -> None:
    with RawServer(serve(lambda c, n: ok(b'{"c": %d}' % c), close_after=True)) as server:
        async def go() -> list[bytes]:
            async with ours() as transport:
                first = (await exchange(transport, request(server.url)))[2]
                await asyncio.sleep(0.2)  # the server's FIN arrives while the connection is idle
                return [first, (await exchange(transport, request(server.url)))[2]]
        assert run(go) == [b'{"c": 0}', b'{"c": 1}']
        assert server.accepted == 2


def test_a_goodbye_sent_while_idle_is_never_read_as_the_next_reply() -> None:
    def script(i: int, conn: socket.socket, reqs: list[bytes]) -> None:
        buffered = bytearray()
        reqs.append(read_request(conn, buffered))
        conn.sendall(ok(b'{"c": %d}' % i))
        if i == 0:
            time.sleep(0.1)
            conn.sendall(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            time.sleep(1.0)  # not closed yet: only the bytes say so

    with RawServer(script) as server:
        async def go() -> list[tuple[int, bytes]]:
            async with ours() as transport:
                first = await exchange(transport, request(server.url))
                await asyncio.sleep(0.4)
                second = await exchange(transport, request(server.url))
                return [(first[0], first[2]), (second[0], second[2])]
        assert run(go) == [(200, b'{"c": 0}'), (200, b'{"c": 1}')]


def test_bytes_past_the_declared_body_are_never_read_as_the_next_reply() -> None:
    with RawServer(serve(lambda c, n: ok(b'{"c": %d}' % c) + (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
                                                             if c == 0 else b""))) as server:
        async def go() -> list[bytes]:
            async with ours() as transport:
                return [(await exchange(transport, request(server.url)))[2] for _ in range(2)]
        assert run(go) == [b'{"c": 0}', b'{"c": 1}']
        assert server.accepted == 2


def test_an_idle_connection_past_its_expiry_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    with RawServer(serve(lambda c, n: ok())) as server:
        async def go(expiry: float) -> int:
            monkeypatch.setattr(T, "KEEPALIVE_EXPIRY_S", expiry)
            async with ours() as transport:
                for _ in range(2):
                    await exchange(transport, request(server.url))
                    await asyncio.sleep(0.05)
                return transport.opened
        assert run(lambda: go(60.0)) == 1
        assert run(lambda: go(0.0)) == 2


def test_a_response_closed_before_its_end_closes_the_connection() -> None:
    big = b"[" + b"1," * 400_000 + b"1]"
    with RawServer(serve(lambda c, n: ok(big))) as server:
        async def go() -> tuple[int, bytes]:
            async with ours() as transport:
                response = await transport.handle_async_request(request(server.url))
                async for _ in response.stream:  # type: ignore[union-attr]
                    break
                await response.aclose()
                body = (await exchange(transport, request(server.url)))[2]
                return transport.opened, body
        assert run(go) == (2, big)


def test_one_request_at_a_time() -> None:
    with RawServer(serve(lambda c, n: ok())) as server:
        async def go() -> None:
            async with ours() as transport:
                response = await transport.handle_async_request(request(server.url))
                try:
                    with pytest.raises(RuntimeError, match="one request at a time"):
                        await transport.handle_async_request(request(server.url))
                finally:
                    await response.aclose()
                assert (await exchange(transport, request(server.url)))[0] == 200
        run(go)


def test_the_keepalive_options_are_on_the_socket() -> None:
    with RawServer(serve(lambda c, n: ok())) as server:
        async def go() -> int:
            async with ours() as transport:
                await exchange(transport, request(server.url))
                assert transport._wire is not None and transport._wire.transport is not None
                sock = transport._wire.transport.get_extra_info("socket")
                return sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        assert run(go) == 1


# ---------------------------------------------------------------------------- bounded both ways

def test_large_bodies_arrive_whole_with_reading_paused_while_unconsumed() -> None:
    up = json.dumps({"document": "事故 " * 3_000_000}, ensure_ascii=False).encode()  # ~21 MB
    down = b'{"text": "' + b"y" * (12 << 20) + b'"}'

    def script(i: int, conn: socket.socket, reqs: list[bytes]) -> None:
        time.sleep(0.3)  # the client's writes wait on a full socket buffer meanwhile
        whole = read_request(conn, bytearray())
        reqs.append(hashlib.sha256(whole[whole.index(b"\r\n\r\n") + 4:]).digest())
        conn.sendall(ok(down))

    with RawServer(script) as server:
        async def go() -> tuple[bytes, int]:
            async with ours() as transport:
                response = await transport.handle_async_request(request(server.url, up))
                peak, parts = 0, []
                async for chunk in response.stream:  # type: ignore[union-attr]
                    parts.append(chunk)
                    await asyncio.sleep(0.002)  # a slow reader: the socket's bytes pile up only to the mark
                    assert transport._wire is not None
                    peak = max(peak, transport._wire._buffered)
                await response.aclose()
                return b"".join(parts), peak
        body, peak = run(go)
    assert server.requests == [hashlib.sha256(up).digest()]
    assert body == down
    assert peak <= T.READ_HIGH_WATER + (256 << 10)


# ---------------------------------------------------------------------------- TLS

@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    yield cert, key


def test_tls_is_verified_against_the_context_given(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    server_side.set_alpn_protocols(["h2", "http/1.1"])
    chosen: list[str | None] = []

    def script(i: int, conn: socket.socket, reqs: list[bytes]) -> None:
        assert isinstance(conn, ssl.SSLSocket)
        chosen.append(conn.selected_alpn_protocol())
        serve(lambda c, n: ok(b'{"tls": %d}' % n))(i, conn, reqs)

    with RawServer(script, tls=server_side) as server:
        trusting = ssl.create_default_context(cafile=str(cert))

        async def go() -> list[bytes]:
            async with ConnectionTransport(trusting) as transport:
                bodies = [(await exchange(transport, request(server.url)))[2] for _ in range(2)]
                assert transport.opened == 1
                return bodies
        assert run(go) == [b'{"tls": 0}', b'{"tls": 1}']
        assert chosen == ["http/1.1"]  # offered as httpcore offers it: never h2, which this transport does not speak
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            run(lambda: once(ours(), request(server.url)))


# ---------------------------------------------------------------------------- who gets which

def test_an_endpoint_uses_it_unless_a_proxy_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    async def slots(base_url: str) -> set[type]:
        endpoint = Endpoint(make_provider(endpoint_spec(base_url=base_url, max_concurrency=2)), "sk-x",
                            RetryPolicy(max_retries=0))
        kinds = {type(t) for t in endpoint._transports}
        await endpoint.aclose()
        return kinds

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert asyncio.run(slots("https://api.example.com/v1")) == {ConnectionTransport}
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert asyncio.run(slots("https://api.example.com/v1")) == {httpx.AsyncHTTPTransport}
