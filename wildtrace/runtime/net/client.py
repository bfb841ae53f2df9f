"""The one way an HTTP client is made: every call (model, judges, batch control, model lists) goes
through an ``httpx.AsyncClient`` built here, with httpx's own connection pool.

- proxies are httpx's: ``trust_env`` makes it read ``HTTP(S)_PROXY``, ``ALL_PROXY`` and
  ``NO_PROXY`` exactly as any httpx program does (a test's own transport bypasses them);
- one verified TLS context a process (loading the CA bundle costs ~20 ms each time), which
  honours ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` as httpx does;
- redirects are never followed (a POST with a key is not re-sent elsewhere);
- the pool holds at most ``max_connections`` connections (an endpoint: its concurrency);
- each connection a response came over probes itself when idle (TCP keep-alive), so a proxy
  or NAT that drops silent connections during a long generation is noticed.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import ssl

import httpx

#: TCP keep-alive: probe an idle connection after 30 s, every 15 s, give up after 4 unanswered probes.
KEEPALIVE = (
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
    *((socket.IPPROTO_TCP, getattr(socket, name), value)
      for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 15), ("TCP_KEEPCNT", 4)) if hasattr(socket, name)),
)
#: The longest wait for a connection to be made (TCP and TLS), whatever ``timeout_s`` is.
CONNECT_MAX_S = 30.0


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One verified TLS context per process (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured, as httpx does)."""
    return httpx.create_ssl_context()


def timeouts(timeout_s: float) -> httpx.Timeout:
    """``timeout_s`` for each read, write and pool wait; the connection within at most CONNECT_MAX_S."""
    return httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_MAX_S))


def make_client(timeout_s: float, max_connections: int = 10,
                transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    """A client as every call of a run uses one; ``transport``: an in-process or test transport."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.AsyncClient(transport=transport, verify=ssl_context(), trust_env=True, limits=limits,
                             timeout=timeouts(timeout_s), follow_redirects=False,
                             event_hooks={"response": [_keep_alive]})


async def _keep_alive(response: httpx.Response) -> None:
    """Set TCP keep-alive on the connection a response came over (httpx's documented ``network_stream``)."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        for option in KEEPALIVE:
            with contextlib.suppress(OSError):  # an option this system lacks: the connection serves
                sock.setsockopt(*option)
