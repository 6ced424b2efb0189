"""vLLM's recorded embeddings answers replayed to flatgate's ``openai``
backend: the client reads, bit for bit, what the direct call to the real vLLM
returned, and the adapter sends vLLM what it sent it then.

The captures (``fixtures/vllm/embeddings/``, format in
``tests.vllm.embedding_captures``) come from ``make test-vllm`` with
``FLATGATE_VLLM_RECORD=1``: a real vLLM 0.32 serving the tiny random-weight
Llama as a pooling model, each request sent with the ``openai`` SDK to it
directly and through flatgate. Here a loopback server answers the adapter
with vLLM's recorded bytes (base64 vectors, or vLLM's 400), behind one
``flatgate gateway``, and the client's request is the SDK's recorded body.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.servers import Server, spawn
from tests.stacks import QUIET, write_stack
from tests.vllm.embedding_captures import EMBEDDINGS, embeddings_view, read_capture, recorded

pytestmark = pytest.mark.integration

MODEL = "tiny-embed"
CASES = recorded()


class Replay:
    """Answers each POST with the current capture's bytes; keeps what came."""

    def __init__(self) -> None:
        self.answer: tuple[int, str, bytes] = (500, "text/plain", b"no capture set")
        self.received: list[tuple[str, Any]] = []
        self.port = 0


def _handler(replay: Replay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(200, "application/json", b"{}")

        def do_POST(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            replay.received.append((self.path, json.loads(self.rfile.read(size))))
            self._send(*replay.answer)

    return Handler


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Replay, Server]]:
    d = tmp_path_factory.mktemp("vllm-embeddings-replay")
    replay = Replay()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(replay))
    replay.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = write_stack(
        d / "flatgate.toml",
        proxy=QUIET,
        backends={
            "vllm": {
                "url": f"http://127.0.0.1:{replay.port}/v1",
                "protocol": "openai",
                "health_path": "/health",
            }
        },
        routes={MODEL: "vllm"},
        edge=QUIET,
        models={MODEL: "OpenAI"},
    )
    gateway = spawn("gateway", ["--config", config, "--workers", "1"], d)
    try:
        gateway.wait_healthy()
        yield replay, gateway
    finally:
        gateway.stop()
        server.shutdown()
        server.server_close()


def _through(replay: tuple[Replay, Server], case: str) -> tuple[Any, int, bytes, Any]:
    """The capture's request to the gateway, vLLM's recorded answer behind it:
    the record, flatgate's status and body, and what the adapter sent."""
    fake, gateway = replay
    record, body = read_capture(case)
    fake.answer = (record["backend"]["status"], record["backend"]["content_type"], body)
    fake.received.clear()
    with httpx.Client(timeout=60, trust_env=False) as c:
        r = c.post(gateway.url + "/v1/embeddings", json=record["request"])
    assert len(fake.received) == 1, fake.received
    path, sent = fake.received[0]
    assert path == "/v1/embeddings"
    return record, r.status_code, r.content, sent


def _inputs(value: Any) -> list[Any]:
    """A client's ``input`` as the list of inputs the adapter sends: a text
    or one list of token ids is one input."""
    if isinstance(value, str) or (value and isinstance(value[0], int)):
        return [value]
    return list(value)


def test_there_are_captures() -> None:
    assert {
        "base64",
        "sdk_default",
        "float",
        "inputs",
        "token_ids",
        "dimensions",
        "dimensions_refused",
        "vendor_fields",
    } <= set(CASES), EMBEDDINGS


@pytest.mark.parametrize("case", CASES)
def test_client_reads_what_vllm_answered(replay: tuple[Replay, Server], case: str) -> None:
    record, status, body, sent = _through(replay, case)
    assert record["api"] == "embeddings"
    direct = record["direct"]
    want = embeddings_view(direct["status"], direct["body"])
    got = embeddings_view(status, body)
    if want["status"] != 200:
        assert got["status"] == want["status"], got
        assert got["error"]["type"] == "invalid_request_error", got
        assert want["error"]["message"] in got["error"]["message"], got
    else:
        # The same float32 bytes per vector (and the same numbers when the
        # client asked for numbers), model and usage.
        assert got == want
        if record["request"].get("encoding_format") == "base64":
            assert json.loads(body)["data"] == json.loads(direct["body"])["data"]
    # What flatgate answered live is what it answers the replay.
    live = record["flatgate"]
    assert embeddings_view(live["status"], live["body"]) == got
    # The adapter sends vLLM what it sent it live: the client's inputs and
    # fields, base64 asked for.
    assert sent == record["adapter_request"]
    assert sent["encoding_format"] == "base64"
    for field, value in record["request"].items():
        if field not in {"model", "encoding_format"}:
            assert sent[field] == (_inputs(value) if field == "input" else value), field


def test_the_backend_answered_base64() -> None:
    """vLLM's recorded 200s are base64 vectors, as flatgate asked: the
    bytes the adapter decodes are vLLM's own."""
    seen = set()
    for case in CASES:
        record, body = read_capture(case)
        if record["backend"]["status"] != 200:
            assert record["backend_file"] == f"{case}.error.json", case
            continue
        seen.add(case)
        assert record["backend_file"] == f"{case}.answer.json", case
        assert record["backend"]["content_type"].startswith("application/json"), case
        answer = json.loads(body)
        assert answer["object"] == "list", case
        assert all(isinstance(item["embedding"], str) for item in answer["data"]), case
        assert (
            embeddings_view(200, body)["vectors"]
            == (embeddings_view(record["direct"]["status"], record["direct"]["body"])["vectors"])
        ), case
    assert {"base64", "float", "inputs", "token_ids"} <= seen
