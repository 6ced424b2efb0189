"""A loopback pass-through between flatgate's ``openai`` backend and vLLM
that keeps each exchange: the request body the adapter sent, and vLLM's
status, content type and raw body. The live check (``test_vllm``) saves them
as fixtures (``tests.backends.vllm_fixtures``) when asked to.

Each answer is read whole from vLLM and then sent on: the bytes flatgate
parses are exactly the bytes kept.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Exchange", "Recorder", "recording"]

_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host"})


@dataclass(frozen=True)
class Exchange:
    path: str
    request: bytes
    status: int
    content_type: str
    body: bytes


class Recorder:
    """What passed through, in order (``take`` empties it)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._lock = threading.Lock()
        self._seen: list[Exchange] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def keep(self, exchange: Exchange) -> None:
        with self._lock:
            self._seen.append(exchange)

    def take(self) -> list[Exchange]:
        with self._lock:
            seen, self._seen = self._seen, []
        return seen


def _handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _forward(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(size) if size else b""
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            conn = http.client.HTTPConnection("127.0.0.1", recorder.upstream_port, timeout=600)
            try:
                conn.request(self.command, self.path, body=body or None, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                kind = answer.getheader("content-type") or ""
                status = answer.status
            finally:
                conn.close()
            if self.command == "POST":
                recorder.keep(Exchange(self.path, body, status, kind, data))
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = _forward
        do_POST = _forward

    return Forward


@contextmanager
def recording(upstream_port: int) -> Iterator[Recorder]:
    """A recorder in front of ``127.0.0.1:<upstream_port>``, served in a thread
    for the block."""
    recorder = Recorder(upstream_port)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(recorder))
    recorder.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
