"""Whole answers from ``openai-responses`` backends, end to end: the official
``openai`` SDK's ``client.responses.create(..., stream=False)`` through one
real ``flatgate gateway``, whose backends speak the Responses API:

- the built-in stub (``flatgate stub --protocol openai-responses``), which
  answers a request with ``stream: false`` with the ``response`` object (one
  write: its ``/stats`` frames go up by one, where a stream's go up by each
  event);
- a loopback backend written here that keeps what it was sent and answers
  with OpenAI's documented "Reasoning" answer (``fixtures/responses/
  openai_reasoning.sse``, and its terminal event's ``response`` object when
  asked for it whole), behind two backends: one as configured by default,
  one with ``whole_answers = false``, which still streams, and whose answer
  the client reads the same.

llmock, a third-party Responses API, is ``test_llmock_responses``'s.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseIncludable,
    ResponseReasoningItem,
)

from tests.backends.helpers import fixture
from tests.servers import Server, spawn
from tests.stacks import QUIET, start_all, stop_all, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-upstream-responses"
REASONING = "responses/openai_reasoning.sse"
ENCRYPTED: list[ResponseIncludable] = ["reasoning.encrypted_content"]


def documented_whole() -> bytes:
    """The documented stream's answer as a whole ``response`` object (its
    terminal event's), under the model its ``response.created`` names."""
    events = [json.loads(x[6:]) for x in fixture(REASONING).split(b"\n") if x[:6] == b"data: "]
    doc = events[-1]["response"]
    return json.dumps({**doc, "model": events[0]["response"]["model"]}).encode()


class Recorder:
    """A Responses API backend on loopback that keeps each request's body and
    headers and answers it whole or streamed, as it asked."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, Any], dict[str, str]]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _send(self, kind: str, body: bytes) -> None:
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # the readiness probe: GET {url}/models
                self._send("application/json", b'{"object":"list","data":[]}')

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(size))
                headers = {k.lower(): v for k, v in self.headers.items()}
                recorder.received.append((body, headers))
                if body.get("stream"):
                    self._send("text/event-stream", fixture(REASONING))
                else:
                    self._send("application/json", documented_whole())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def last(self) -> tuple[dict[str, Any], dict[str, str]]:
        assert self.received, "the backend received nothing"
        return self.received[-1]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Stack:
    def __init__(self, gateway: Server, stub: Server, recorder: Recorder) -> None:
        self.gateway = gateway
        self.stub = stub
        self.recorder = recorder
        self.client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)

    def frames(self) -> int:
        count: int = httpx.get(f"{self.stub.url}/stats").json()["frames"]
        return count


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d: Path = tmp_path_factory.mktemp("responses-whole-e2e")
    stub = spawn("stub", ["--protocol", "openai-responses", "--api-key", KEY], d)
    recorder = Recorder()
    config = write_stack(
        d / "gateway.toml",
        proxy={**QUIET, "cooldown_seconds": 0},
        backends={
            "stub": {"url": f"{stub.url}/v1", "protocol": "openai-responses", "api_key": KEY},
            "recorder": {"url": recorder.url, "protocol": "openai-responses"},
            "recorder-streaming": {
                "url": recorder.url,
                "protocol": "openai-responses",
                "whole_answers": False,
            },
        },
        routes={"echo*": "stub", "o4-whole": "recorder", "o4-streamed": "recorder-streaming"},
        edge=QUIET,
        models=dict.fromkeys(("echo", "o4-whole", "o4-streamed"), "OpenAI"),
    )
    gateway = spawn("gateway", ["--config", config, "--workers", "1"], d)
    servers = [stub, gateway]
    try:
        start_all(servers)
        s = Stack(gateway, stub, recorder)
        yield s
        s.client.close()
    finally:
        stop_all(servers)
        recorder.close()


# -- the stub ------------------------------------------------------------------------


def test_a_text_answer_comes_whole_from_the_stub(stack: Stack) -> None:
    before = stack.frames()
    reply = stack.client.responses.create(model="echo", input="the quick brown fox", stream=False)
    assert stack.frames() == before + 1  # one write: the response object, not events
    assert reply.status == "completed"
    assert reply.output_text == "the quick brown fox"
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (4, 4)


def test_a_forced_function_comes_whole_as_a_call(stack: Stack) -> None:
    reply = stack.client.responses.create(
        model="echo",
        input="weather in Paris",
        tools=[
            {
                "type": "function",
                "name": "lookup",
                "parameters": {"type": "object"},
                "strict": False,
            }
        ],
        tool_choice={"type": "function", "name": "lookup"},
        stream=False,
    )
    (call,) = reply.output
    assert isinstance(call, ResponseFunctionToolCall)
    assert call.name == "lookup" and call.call_id.startswith("call_")
    assert json.loads(call.arguments) == {"input": "weather in Paris"}


def test_encrypted_reasoning_comes_whole_and_goes_back(stack: Stack) -> None:
    first = stack.client.responses.create(
        model="echo",
        input="think first",
        include=ENCRYPTED,
        reasoning={"effort": "low", "summary": "auto"},
        store=False,
        stream=False,
    )
    reasoning, _ = first.output
    assert isinstance(reasoning, ResponseReasoningItem) and reasoning.id.startswith("rs_")
    assert reasoning.encrypted_content
    assert [s.text for s in reasoning.summary] == ["The user wrote 2 words; I repeat them back."]
    assert first.output_text == "think first"
    assert first.usage is not None and first.usage.output_tokens_details.reasoning_tokens == 9
    # The stub checks the encrypted content it is sent back against the item's id.
    history: list[Any] = [
        {"role": "user", "content": "think first"},
        *(item.model_dump(exclude_none=True) for item in first.output),
        {"role": "user", "content": "and again"},
    ]
    again = stack.client.responses.create(
        model="echo",
        input=history,
        include=ENCRYPTED,
        store=False,
        stream=False,
    )
    assert again.output_text == "and again"
    history[1] = {**history[1], "encrypted_content": "forged"}
    with pytest.raises(openai.BadRequestError, match="could not be verified"):
        stack.client.responses.create(model="echo", input=history, store=False, stream=False)


def test_the_output_limit_is_an_incomplete_whole_answer(stack: Stack) -> None:
    reply = stack.client.responses.create(
        model="echo", input="one two three", max_output_tokens=2, stream=False
    )
    assert reply.status == "incomplete"
    assert reply.incomplete_details is not None
    assert reply.incomplete_details.reason == "max_output_tokens"
    assert reply.output_text == "one two "


# -- what the backend is sent, and whole_answers = false --------------------------------


def _ids_aside(reply: Any) -> dict[str, Any]:
    out: dict[str, Any] = reply.model_dump(exclude={"id", "created_at", "completed_at"})
    for item in out["output"]:
        if item["type"] == "message":
            item["id"] = "*"
    return out


def test_the_backend_is_asked_for_a_whole_answer_and_the_client_reads_it(stack: Stack) -> None:
    reply = stack.client.responses.create(
        model="o4-whole",
        input="Hello!",
        include=ENCRYPTED,
        stream=False,
    )
    sent, headers = stack.recorder.last()
    assert (sent["stream"], sent["store"], headers["accept"]) == (False, False, "application/json")
    assert sent["include"] == ENCRYPTED
    reasoning, _ = reply.output
    assert isinstance(reasoning, ResponseReasoningItem)
    assert reasoning.id == "rs_6806bfca0b2481918a5748308061a2600d3ce51bdffd5476"
    assert reasoning.encrypted_content == (
        "gAAAAABoBr_KsynthetictestvalueNotRealEncryptedContent0123456789abcdefghij=="
    )
    assert reply.output_text == "Hello! How can I assist you today?"
    assert reply.model == "o4-mini-2025-04-16"
    assert reply.usage is not None and reply.usage.input_tokens_details.cached_tokens == 64


def test_whole_answers_off_streams_from_the_backend_and_the_client_reads_the_same(
    stack: Stack,
) -> None:
    whole = stack.client.responses.create(
        model="o4-whole",
        input="Hello!",
        include=ENCRYPTED,
        stream=False,
    )
    streamed = stack.client.responses.create(
        model="o4-streamed",
        input="Hello!",
        include=ENCRYPTED,
        stream=False,
    )
    sent, headers = stack.recorder.last()
    assert (sent["stream"], headers["accept"]) == (True, "text/event-stream")
    assert _ids_aside(streamed) == _ids_aside(whole)


def test_a_client_that_streams_is_streamed_to_whatever_the_setting(stack: Stack) -> None:
    with stack.client.responses.stream(model="o4-whole", input="Hello!") as events:
        final = events.get_final_response()
    sent, headers = stack.recorder.last()
    assert (sent["stream"], headers["accept"]) == (True, "text/event-stream")
    assert final.output_text == "Hello! How can I assist you today?"
