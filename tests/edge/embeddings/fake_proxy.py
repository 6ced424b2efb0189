"""A fake proxy for the edge's embeddings tests: a loopback HTTP server in a
thread that answers ``POST /v1/embeddings`` as the contract says the proxy
does, and records what the edge sent it.

The model name the edge wrote chooses the answer:

- ``embed`` (any other): one vector per input, ``dimensions`` floats (4 when
  not given), vector ``i``'s float ``j`` being ``i + j / 8`` (exact in
  float32), ``prompt_tokens`` the inputs' token ids, or their words;
- ``embed-cheap``: the same, ``prompt_tokens`` 1 whatever the inputs;
- ``embed-nousage``: the same, no usage (0);
- ``embed-429`` / ``embed-502`` / ``embed-unsupported``: the proxy's JSON
  error (``backend_rate_limited`` with ``Retry-After: 7``, ``backend_error``,
  ``embeddings_unsupported``);
- ``embed-huge``: an answer of 256 KiB; ``embed-garbage``: bytes that are no
  buffer; ``embed-short``: one vector fewer than the inputs.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from flatgate.proxy.wire.embeddings import (
    EmbeddingInput,
    read_embedding_request,
    write_embedding_response,
)

__all__ = ["FakeProxy", "Seen", "expected_vector", "fake_proxy"]


def expected_vector(i: int, dimensions: int) -> list[float]:
    """What the fake answers for input ``i``."""
    return [i + j / 8 for j in range(dimensions)]


class Seen:
    """One request the fake was sent: its path, headers and decoded buffer."""

    def __init__(self, path: str, headers: dict[str, str], request: EmbeddingInput | None) -> None:
        self.path, self.headers, self.request = path, headers, request


def _error(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


_ERRORS = {
    "embed-429": (429, "backend_rate_limited", {"retry-after": "7"}),
    "embed-502": (502, "backend_error", {}),
    "embed-unsupported": (400, "embeddings_unsupported", {}),
}


def answer(req: EmbeddingInput) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body the fake answers ``req`` with."""
    model = req.model_name
    if model in _ERRORS:
        status, code, headers = _ERRORS[model]
        return status, {"content-type": "application/json", **headers}, _error(code, model)
    fb = {"content-type": "application/x-flatbuffers", "x-flatgate-backend": "fake"}
    if model == "embed-garbage":
        return 200, fb, b"\x00" * 64
    dims = req.dimensions or 4
    count = req.count - (model == "embed-short")
    if model == "embed-huge":
        dims = 16384
        count = 4
    values = b"".join(struct.pack(f"<{dims}f", *expected_vector(i, dims)) for i in range(count))
    if req.tokens:
        tokens = sum(len(t) for t in req.tokens)
    else:
        tokens = sum(len(t.split()) for t in req.texts)
    if model == "embed-cheap":
        tokens = 1
    elif model == "embed-nousage":
        tokens = 0
    body = write_embedding_response(
        model="backend-" + model,
        count=count,
        dimensions=dims,
        values=values,
        prompt_tokens=tokens,
        total_tokens=tokens,
        request_id=req.request_id,
    )
    return 200, fb, body


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeProxy

    def log_message(self, format: str, *args: object) -> None:
        return None

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        if self.path != "/v1/embeddings":
            self.server.seen.append(Seen(self.path, headers, None))
            self._send(404, {"content-type": "application/json"}, _error("not_found", "no"))
            return
        req = read_embedding_request(body)
        self.server.seen.append(Seen(self.path, headers, req))
        self._send(*answer(req))

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class FakeProxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[Seen] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def last(self) -> EmbeddingInput:
        request = self.seen[-1].request
        assert request is not None
        return request


@contextmanager
def fake_proxy() -> Iterator[FakeProxy]:
    """A ``FakeProxy`` serving in a thread until the block ends."""
    server = FakeProxy()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
