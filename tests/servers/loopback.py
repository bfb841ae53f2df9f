"""A real, scriptable HTTP endpoint on 127.0.0.1 for end-to-end tests and the benchmark.

It speaks whatever the responder returns; every request is recorded (path, headers, raw
body) so tests can check the exact bytes sent and count attempts.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Call:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    seen: int  # how many earlier requests had the same raw body (0 for the first)
    method: str = "POST"  # GET for model lists; CONNECT when a client uses the server as its proxy

    @property
    def route(self) -> str | None:
        """The model id in an OpenAI/Anthropic body."""
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def prompt(self) -> str:
        """The single user message's text, whatever the wire format."""
        if not isinstance(self.body, dict):
            return ""
        if "messages" in self.body:
            content = self.body["messages"][-1]["content"]
            if isinstance(content, list):  # Anthropic's text blocks (a cache_control mark makes one)
                return "".join(b.get("text", "") for b in content if isinstance(b, dict))
            return content
        if "contents" in self.body:
            return "".join(p.get("text", "") for p in self.body["contents"][-1]["parts"])
        return ""


@dataclass
class Reply:
    """What to answer: status, JSON body (or raw bytes), headers, and an optional delay.

    With ``chunks`` the body is sent in HTTP chunked encoding, one chunk every
    ``chunk_delay_s`` (a stream that trickles out); ``cut`` closes the connection before the
    last chunk, as a dropped connection does.
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    chunks: list[bytes] | None = None
    chunk_delay_s: float = 0.0
    content_type: str = "application/json"
    cut: bool = False


def sse(*events: Any, names: list[str] | None = None, done: bool = False, chunk_delay_s: float = 0.0,
        cut: bool = False) -> Reply:
    """A 200 text/event-stream reply: one ``data:`` event per item (dicts as JSON), optionally named."""
    chunks = []
    for i, event in enumerate(events):
        data = event if isinstance(event, str) else json.dumps(event, ensure_ascii=False)
        head = f"event: {names[i]}\n" if names else ""
        chunks.append(f"{head}data: {data}\n\n".encode())
    if done:
        chunks.append(b"data: [DONE]\n\n")
    return Reply(200, chunks=chunks, chunk_delay_s=chunk_delay_s, content_type="text/event-stream", cut=cut)


def chat_stream(text: str, usage: dict | None = None, pieces: int = 3, **kwargs: Any) -> Reply:
    """An OpenAI chat-completions stream of ``text`` in ``pieces`` deltas, then usage and [DONE]."""
    step = max(1, -(-len(text) // pieces))
    deltas = [{"choices": [{"index": 0, "delta": {"content": text[i:i + step]}, "finish_reason": None}]}
              for i in range(0, len(text), step)]
    deltas.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    deltas.append({"choices": [], "usage": usage or {"prompt_tokens": 11, "completion_tokens": 7}})
    return sse(*deltas, done=True, **kwargs)


def chat(text: str | None, refusal: str | None = None, finish: str = "stop", usage: dict | None = None) -> Reply:
    """An OpenAI chat-completions reply."""
    message = {"role": "assistant", "content": text}
    if refusal is not None:
        message["refusal"] = refusal
    return Reply(200, {"id": "x", "object": "chat.completion",
                       "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                       "usage": usage or {"prompt_tokens": 11, "completion_tokens": 7}})


def error(status: int, message: str = "error", headers: dict | None = None) -> Reply:
    """An error reply with an OpenAI-style body."""
    return Reply(status, {"error": {"message": message, "type": "test"}}, headers or {})


class LoopbackServer:
    """Start with ``with LoopbackServer(responder) as server:``; ``server.url`` is the base."""

    def __init__(self, responder: Callable[[Call], Reply], latency_s: float = 0.0) -> None:
        self.responder = responder
        self.latency_s = latency_s
        self.calls: list[Call] = []
        self.completed: list[Call] = []
        self._seen: Counter[bytes] = Counter()
        self._lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real APIs
            disable_nagle_algorithm = True  # else +40 ms per keep-alive reply

            def do_POST(self) -> None:  # http.server's naming
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with outer._lock:
                    call = Call(self.path, {k.lower(): v for k, v in self.headers.items()}, raw, body, outer._seen[raw],
                                self.command)
                    outer._seen[raw] += 1
                    outer.calls.append(call)
                    self._call = call
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    reply = outer.responder(call)
                    if outer.latency_s or reply.delay_s:
                        time.sleep(outer.latency_s + reply.delay_s)
                    if reply.chunks is not None:
                        self._send_chunks(reply)
                        return
                    payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                    self.send_response(reply.status)
                    self.send_header("content-type", reply.content_type)
                    self.send_header("content-length", str(len(payload)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                    self.wfile.flush()
                    with outer._lock:
                        outer.completed.append(call)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1

            do_GET = do_POST  # the same scripted reply, recorded with its method
            do_CONNECT = do_POST  # a client that took this server for its proxy

            def _send_chunks(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                self.send_header("transfer-encoding", "chunked")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.flush()
                for i, chunk in enumerate(reply.chunks or []):
                    if i and reply.chunk_delay_s:
                        time.sleep(reply.chunk_delay_s)
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                if reply.cut:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                with outer._lock:
                    outer.completed.append(self._call)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # the default backlog of 5 throttles concurrent clients
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
