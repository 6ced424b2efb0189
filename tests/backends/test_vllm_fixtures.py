"""vLLM's recorded answers replayed to flatgate's ``openai`` backend: the
client reads what the direct call to the real vLLM returned, and the adapter
still sends vLLM the fields the client set.

The captures (``fixtures/vllm/``, format in ``vllm_fixtures``; how they were
made in ``fixtures/SOURCES.md``) come from ``make test-vllm`` with
``FLATGATE_VLLM_RECORD=1``: a real vLLM 0.32 on a tiny random-weight model,
each request sent to it directly and through flatgate. Here a loopback server
answers the adapter with vLLM's recorded bytes, behind one
``flatgate gateway``: a stream where the client streamed, a whole
``chat.completion`` where it did not (the adapter asks for whole answers,
``stream: false``), and the error of the context-length case.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.backends.vllm_fixtures import captures, chat_view, messages_view, read_capture
from tests.servers import Server, spawn
from tests.stacks import QUIET, write_stack

pytestmark = pytest.mark.integration

MODEL = "tiny"
CASES = captures()
ANTHROPIC = {"anthropic-version": "2023-06-01", "x-api-key": "unused"}
# The fields the adapter must send as the capture shows it sent them.
CARRIED = (
    "messages",
    "max_tokens",
    "temperature",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "min_p",
    "repetition_penalty",
    "top_k",
    "ignore_eos",
    "min_tokens",
    "stop",
    "seed",
    "tools",
    "tool_choice",
)


class Replay:
    """Answers each POST with the current capture's bytes; keeps what came."""

    def __init__(self) -> None:
        self.answer: tuple[int, str, bytes] = (500, "text/plain", b"no capture set")
        self.received: list[Any] = []
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
            replay.received.append(json.loads(self.rfile.read(size)))
            self._send(*replay.answer)

    return Handler


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Replay, Server]]:
    d = tmp_path_factory.mktemp("vllm-replay")
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
    chat = record["api"] == "chat"
    path = "/v1/chat/completions" if chat else "/v1/messages"
    with httpx.Client(timeout=60, trust_env=False) as c:
        r = c.post(gateway.url + path, json=record["request"], headers=None if chat else ANTHROPIC)
    assert len(fake.received) == 1, fake.received
    return record, r.status_code, r.content, fake.received[0]


def _as_flatgate_says(view: Any) -> Any:
    """A direct answer with flatgate's one documented rewrite: a choice that
    made tool calls and stopped finishes with ``tool_calls``."""
    for choice in view.get("choices", {}).values():
        if choice["tool_calls"] and choice["finish_reason"] == "stop":
            choice["finish_reason"] = "tool_calls"
    return view


def _tuples(calls: list[Any]) -> list[tuple[str, Any]]:
    return [(name, args) for name, args in calls]


def test_there_are_captures() -> None:
    assert {"logprobs_stream", "tool_whole", "context_length", "messages_tool"} <= set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_client_reads_what_vllm_answered(replay: tuple[Replay, Server], case: str) -> None:
    record, status, body, sent = _through(replay, case)
    stream = bool(record["request"].get("stream"))
    if record["api"] == "chat":
        got = chat_view(status, body, stream)
        direct = record["direct"]
        want = chat_view(direct["status"], direct["body"].encode(), stream)
        if want["status"] != 200:
            assert got["status"] == want["status"]
            assert got["error"]["type"] == "invalid_request_error", got
            assert want["error"]["message"] in got["error"]["message"]
        else:
            assert got == _as_flatgate_says(want)
    else:
        got = messages_view(status, body, stream)
        assert got["status"] == 200, got
        assert got["text"] == record["chat_text"]
        assert got["tool_calls"] == _tuples(record["chat_tool_calls"])
    adapter = record["adapter_request"]
    for field in CARRIED:
        if field in adapter:
            assert sent.get(field) == adapter[field], field
    # A stream when the client streamed, a whole answer when it did not.
    assert sent["stream"] is stream and adapter["stream"] is stream
    assert ("stream_options" in sent) is stream and ("stream_options" in adapter) is stream
    if record["api"] == "chat":
        for field, value in record["request"].items():
            if field not in {"model", "stream", "stream_options"}:
                assert sent[field] == value, field


def test_the_captures_are_whole() -> None:
    for case in CASES:
        record, body = read_capture(case)
        assert body, case
        assert (Path(__file__).parent / "fixtures" / "vllm" / record["backend_file"]).is_file()


def test_a_request_not_streamed_was_answered_whole() -> None:
    seen = set()
    for case in CASES:
        record, body = read_capture(case)
        if record["request"].get("stream") or record["backend"]["status"] != 200:
            continue
        seen.add(case)
        assert record["backend_file"] == f"{case}.answer.json", case
        assert record["backend"]["content_type"].startswith("application/json"), case
        assert json.loads(body)["object"] == "chat.completion", case
    assert {"logprobs_whole", "tool_whole", "messages_text"} <= seen
