"""Faults mid-stream and on the wire, the same in every protocol (real stubs, raw HTTP)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from flatgate.proxy.backends.dialect import STUB_MAX_BODY
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import FrameSplitter, unprefix
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FRAMES, FinishReason
from tests.servers import Server, running
from tests.stacks import write_stub
from tests.stub.helpers import sse_events, stream_raw, stub

pytestmark = pytest.mark.integration

TEXT = "one two three four"


@dataclass(frozen=True)
class Protocol:
    """How to ask one protocol for ``TEXT`` and read what came back."""

    path: str
    headers: dict[str, str]
    body: Callable[[str, bool], bytes]
    # (content deltas, ended properly, mid-stream error seen)
    read: Callable[[bytes], tuple[list[str], bool, bool]]


def _openai_body(model: str, stream: bool) -> bytes:
    doc = {"model": model, "stream": stream, "messages": [{"role": "user", "content": TEXT}]}
    return json.dumps(doc).encode()


def _openai_read(data: bytes) -> tuple[list[str], bool, bool]:
    events = [d for _, d in sse_events(data.decode())]
    deltas = [
        d["choices"][0]["delta"]["content"]
        for d in events
        if isinstance(d, dict) and d.get("choices") and d["choices"][0]["delta"].get("content")
    ]
    return deltas, "[DONE]" in events, any(isinstance(d, dict) and "error" in d for d in events)


def _anthropic_body(model: str, stream: bool) -> bytes:
    doc = {
        "model": model,
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": TEXT}],
    }
    return json.dumps(doc).encode()


def _anthropic_read(data: bytes) -> tuple[list[str], bool, bool]:
    events = sse_events(data.decode())
    deltas = [d["delta"]["text"] for n, d in events if n == "content_block_delta"]
    names = [n for n, _ in events]
    return deltas, "message_stop" in names, "error" in names


def _responses_body(model: str, stream: bool) -> bytes:
    return json.dumps({"model": model, "stream": stream, "input": TEXT}).encode()


def _responses_read(data: bytes) -> tuple[list[str], bool, bool]:
    events = sse_events(data.decode())
    deltas = [d["delta"] for n, d in events if n == "response.output_text.delta"]
    names = [n for n, _ in events]
    return deltas, "response.completed" in names, "response.failed" in names


def _fbs_body(model: str, stream: bool) -> bytes:
    return build_request(model, [("user", TEXT)], stream=stream, request_id="rid")


def _fbs_read(data: bytes) -> tuple[list[str], bool, bool]:
    chunks = [decode_chunk(unprefix(f)) for f in FrameSplitter().feed(data)]
    deltas = [c.content for c in chunks if c.content]
    finished = any(c.finish_reason not in (FinishReason.NONE, FinishReason.ERROR) for c in chunks)
    return deltas, finished, any(c.error is not None for c in chunks)


PROTOCOLS = {
    "fbs": Protocol(
        "/v1/completions",
        {"content-type": "application/x-flatbuffers", "accept": FRAMES},
        _fbs_body,
        _fbs_read,
    ),
    "openai": Protocol(
        "/v1/chat/completions", {"content-type": "application/json"}, _openai_body, _openai_read
    ),
    "anthropic": Protocol(
        "/v1/messages",
        {"content-type": "application/json", "anthropic-version": "2023-06-01"},
        _anthropic_body,
        _anthropic_read,
    ),
    "openai-responses": Protocol(
        "/v1/responses", {"content-type": "application/json"}, _responses_body, _responses_read
    ),
}


@pytest.fixture(scope="module", params=list(PROTOCOLS))
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Protocol]]:
    name: str = request.param
    with stub(name, tmp_path_factory.mktemp(f"{name}-faults")) as s:
        yield s, PROTOCOLS[name]


def ask(
    served: tuple[Server, Protocol], model: str, stream: bool = True, timeout: float = 5
) -> tuple[int, bytes, str]:
    server, p = served
    return stream_raw(server.url + p.path, p.body(model, stream), p.headers, timeout)


def test_no_fault_ends_properly(served: tuple[Server, Protocol]) -> None:
    status, data, ended = ask(served, "echo")
    deltas, finished, errored = served[1].read(data)
    assert (status, ended, finished, errored) == (200, "end", True, False)
    assert "".join(deltas) == TEXT


@pytest.mark.parametrize("after", [0, 2, 9])
def test_die_cuts_after_n_deltas(served: tuple[Server, Protocol], after: int) -> None:
    status, data, ended = ask(served, f"echo@die:{after}")
    deltas, finished, errored = served[1].read(data)
    assert status == 200 and ended == "RemoteProtocolError"
    assert len(deltas) == min(after, 4)
    assert not finished and not errored


def test_hang_goes_silent_after_n_deltas(served: tuple[Server, Protocol]) -> None:
    status, data, ended = ask(served, "echo@hang:1", timeout=1)
    deltas, finished, _ = served[1].read(data)
    assert (status, ended, deltas, finished) == (200, "ReadTimeout", ["one "], False)


def test_error_ends_the_stream_with_the_protocols_error(served: tuple[Server, Protocol]) -> None:
    status, data, ended = ask(served, "echo@error:3")
    deltas, finished, errored = served[1].read(data)
    assert (status, ended, len(deltas), finished, errored) == (200, "end", 3, False, True)


def test_stall_sends_no_head(served: tuple[Server, Protocol]) -> None:
    assert ask(served, "echo@stall", timeout=1) == (0, b"", "ReadTimeout")


def test_whole_answers_die_and_hang_after_the_head(served: tuple[Server, Protocol]) -> None:
    status, data, ended = ask(served, "echo@die", stream=False)
    assert (status, ended) == (200, "RemoteProtocolError")
    status, data, ended = ask(served, "echo@hang", stream=False, timeout=1)
    assert (status, data, ended) == (200, b"", "ReadTimeout")


def test_a_caller_that_leaves_is_counted_as_cancelled(served: tuple[Server, Protocol]) -> None:
    server = served[0]
    before = httpx.get(f"{server.url}/stats").json()
    ask(served, "echo@hang:1", timeout=0.5)
    deadline = time.monotonic() + 5
    stats = before
    while time.monotonic() < deadline:
        stats = httpx.get(f"{server.url}/stats").json()
        if stats["cancelled"] > before["cancelled"]:
            break
        time.sleep(0.05)
    assert stats["cancelled"] == before["cancelled"] + 1
    assert stats["started"] == before["started"] + 1
    assert stats["active"] == 0


def test_fbs_metadata_names_a_fault_too(tmp_path: Path) -> None:
    with stub("fbs", tmp_path) as s:
        body = build_request(
            "echo", [("user", TEXT)], metadata={"stub.fault": "error", "stub.fault_after": "1"}
        )
        p = PROTOCOLS["fbs"]
        status, data, ended = stream_raw(s.url + p.path, body, p.headers)
        assert ended == "end"
        deltas, _, errored = p.read(data)
        chunks = [decode_chunk(unprefix(f)) for f in FrameSplitter().feed(data)]
        assert (status, deltas, errored) == (200, ["one "], True)
        assert (
            chunks[-1].error is not None
            and chunks[-1].error.code == codes.BACKEND_STREAM_ERROR.code
        )
        assert {c.model for c in chunks} == {"echo"}
        # A suffixed model is echoed without its suffix.
        status, data, _ = stream_raw(s.url + p.path, _fbs_body("echo@error:9", True), p.headers)
        assert {decode_chunk(unprefix(f)).model for f in FrameSplitter().feed(data)} == {"echo"}


def test_a_fault_for_every_request_and_settings_from_the_config(tmp_path: Path) -> None:
    cfg = write_stub(tmp_path / "stub.toml", protocol="anthropic", api_key="k")
    p = PROTOCOLS["anthropic"]
    with running("stub", ["--config", cfg, "--fault", "overloaded"], tmp_path) as s:
        assert httpx.get(f"{s.url}/stats").json()["protocol"] == "anthropic"
        url = s.url + p.path
        assert stream_raw(url, p.body("echo", True), p.headers)[0] == 401
        status, data, _ = stream_raw(url, p.body("echo", True), {**p.headers, "x-api-key": "k"})
        assert status == 529
        assert json.loads(data)["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "openai-responses"])
def test_canned_answers(protocol: str, tmp_path: Path) -> None:
    p = PROTOCOLS[protocol]
    with stub(protocol, tmp_path, "--canned", "3", "--interface", "rsgi") as s:
        status, data, ended = stream_raw(s.url + p.path, b'{"stream": true}', p.headers)
        deltas, finished, _ = p.read(data)
        assert (status, ended, deltas, finished) == (200, "end", ["tok "] * 3, True)
        status, data, ended = stream_raw(s.url + p.path, b"{}", p.headers)
        doc = json.loads(data)
        if protocol == "openai":
            text = doc["choices"][0]["message"]["content"]
        elif protocol == "anthropic":
            text = doc["content"][0]["text"]
        else:
            text = doc["output"][0]["content"][0]["text"]
        assert (status, text) == (200, "tok tok tok ")


def test_a_body_over_the_stubs_bound_is_a_413_in_every_protocol(
    served: tuple[Server, Protocol],
) -> None:
    """Announced past ``STUB_MAX_BODY``: refused from its ``Content-Length``,
    none of it read (it was a 500)."""
    server, p = served
    with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1]))) as sock:
        head = (
            f"POST {p.path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {STUB_MAX_BODY + 1}\r\n\r\n"
        )
        sock.sendall(head.encode() + b"{")
        reply = sock.recv(65536).decode()
    assert reply.startswith("HTTP/1.1 413"), reply[:200]
    assert '"body_too_large"' in reply
