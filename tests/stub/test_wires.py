"""The three wire formats over the same answers, without a server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.proxy.backends.anthropic.stub import AnthropicWire
from flatgate.proxy.backends.dialect import Answer, StubRequest, Wire, answer
from flatgate.proxy.backends.fbs.stub import FbsWire
from flatgate.proxy.backends.openai.stub import OpenAIWire
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import Chunk, FrameSplitter, SSESplitter, unprefix
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.schema import FRAMES, SSE, FinishReason, Role
from tests.stub.helpers import sse_events

NO_HEADERS: dict[str, str] = {}


def request(text: str = "one two three", **kw: Any) -> StubRequest:
    fields: dict[str, Any] = {
        "request_id": "r1",
        "model": "m",
        "messages": ((Role.System, "sys"), (Role.User, text)),
        "max_tokens": 0,
        "forced_tool": "",
        "stream": True,
    }
    fields.update(kw)
    return StubRequest(**fields)


def rendered(wire: Wire, req: StubRequest, headers: dict[str, str] = NO_HEADERS) -> bytes:
    r = wire.stream(req, answer(req, wire.tool_id_prefix), headers.get)
    return r.opening() + b"".join(r.steps()) + r.closing()


def fbs_chunks(data: bytes, binary: bool) -> list[Chunk]:
    if binary:
        return [decode_chunk(unprefix(f)) for f in FrameSplitter().feed(data)]
    return [decode_chunk(f) for f in SSESplitter().feed(data)]


# openai ---------------------------------------------------------------------


def test_openai_stream_role_deltas_finish_done() -> None:
    events = sse_events(rendered(OpenAIWire(), request("a b", max_tokens=1)).decode())
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "a "},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "length"]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {(c["id"], c["model"]) for c in chunks} == {("chatcmpl-r1", "m")}
    assert all("usage" not in c for c in chunks)


def test_openai_stream_usage_when_asked() -> None:
    events = sse_events(rendered(OpenAIWire(), request("a b", include_usage=True)).decode())
    chunks = [data for _, data in events[:-1]]
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_openai_stream_tool_call() -> None:
    events = sse_events(rendered(OpenAIWire(), request('x "y"', forced_tool="f")).decode())
    chunks = [data for _, data in events[:-1]]
    first = chunks[0]["choices"][0]["delta"]
    assert first["role"] == "assistant" and first["content"] is None
    assert first["tool_calls"] == [
        {
            "index": 0,
            "id": "call_r1",
            "type": "function",
            "function": {"name": "f", "arguments": ""},
        }
    ]
    fragments = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks[1:-1]]
    assert len(fragments) >= 2
    assert all(set(f) == {"index", "function"} for f in fragments)
    assert json.loads("".join(f["function"]["arguments"] for f in fragments)) == {"input": 'x "y"'}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_openai_whole_answers() -> None:
    wire = OpenAIWire()
    req = request("a b c", stream=False)
    doc = json.loads(wire.complete(req, answer(req), NO_HEADERS.get).body)
    assert doc["object"] == "chat.completion"
    choice = doc["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "a b c", "refusal": None}
    assert choice["finish_reason"] == "stop"
    assert doc["usage"]["completion_tokens"] == 3
    req = request("a b c", stream=False, forced_tool="f")
    doc = json.loads(wire.complete(req, answer(req), NO_HEADERS.get).body)
    message = doc["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"input": "a b c"}'}
    assert doc["choices"][0]["finish_reason"] == "tool_calls"


def test_openai_mid_stream_error_event() -> None:
    r = OpenAIWire().stream(request(), answer(request()), NO_HEADERS.get)
    [(_, data)] = sse_events(r.error().decode())
    assert data["error"]["type"] == "server_error"
    assert set(data["error"]) == {"message", "type", "param", "code"}


# anthropic --------------------------------------------------------------------


def test_anthropic_stream_events_in_the_documented_order() -> None:
    events = sse_events(rendered(AnthropicWire(), request("a b", max_tokens=1)).decode())
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(name == data["type"] for name, data in events)
    start = events[0][1]["message"]
    assert start["usage"] == {"input_tokens": 3, "output_tokens": 1}
    assert (start["id"], start["content"], start["stop_reason"]) == ("msg_r1", [], None)
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    assert events[3][1]["delta"] == {"type": "text_delta", "text": "a "}
    assert events[5][1]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert events[5][1]["usage"] == {"output_tokens": 1}


def test_anthropic_stream_tool_use() -> None:
    events = sse_events(rendered(AnthropicWire(), request("q", forced_tool="f")).decode())
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    block = events[1][1]["content_block"]
    assert block == {"type": "tool_use", "id": "toolu_r1", "name": "f", "input": {}}
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]
    assert len(deltas) >= 2 and {d["type"] for d in deltas} == {"input_json_delta"}
    assert json.loads("".join(d["partial_json"] for d in deltas)) == {"input": "q"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_anthropic_whole_answers() -> None:
    wire = AnthropicWire()
    req = request("a b", stream=False)
    doc = json.loads(wire.complete(req, answer(req, "toolu_"), NO_HEADERS.get).body)
    assert doc["type"] == "message" and doc["role"] == "assistant"
    assert doc["content"] == [{"type": "text", "text": "a b"}]
    assert (doc["stop_reason"], doc["stop_sequence"]) == ("end_turn", None)
    assert doc["usage"] == {"input_tokens": 3, "output_tokens": 2}
    req = request("a b", stream=False, forced_tool="f")
    doc = json.loads(wire.complete(req, answer(req, "toolu_"), NO_HEADERS.get).body)
    assert doc["content"] == [
        {"type": "tool_use", "id": "toolu_r1", "name": "f", "input": {"input": "a b"}}
    ]
    assert doc["stop_reason"] == "tool_use"


def test_anthropic_mid_stream_error_event() -> None:
    r = AnthropicWire().stream(request(), answer(request()), NO_HEADERS.get)
    assert sse_events(r.error().decode()) == [
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    ]


# fbs ------------------------------------------------------------------------


@pytest.mark.parametrize("accept", [FRAMES, SSE])
def test_fbs_stream_frames(accept: str) -> None:
    data = rendered(FbsWire(), request("  a b", max_tokens=5), {"accept": accept})
    chunks = fbs_chunks(data, accept == FRAMES)
    assert [c.content for c in chunks] == ["  a ", "b", ""]
    assert {(c.request_id, c.model) for c in chunks} == {("r1", "m")}
    assert chunks[-1].finish_reason == FinishReason.STOP
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2


def test_fbs_tool_call_is_one_final_chunk() -> None:
    data = rendered(FbsWire(), request("q", forced_tool="f"), {"accept": FRAMES})
    [chunk] = fbs_chunks(data, True)
    [call] = chunk.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_r1", "f", '{"input": "q"}')
    assert chunk.finish_reason == FinishReason.TOOL_CALLS


def test_fbs_error_chunk_carries_backend_stream_error() -> None:
    wire = FbsWire()
    r = wire.stream(request(), answer(request()), {"accept": FRAMES}.get)
    [chunk] = fbs_chunks(r.error(), True)
    assert chunk.finish_reason == FinishReason.ERROR
    assert chunk.error is not None and chunk.error.code == codes.BACKEND_STREAM_ERROR.code
    reply = wire.failed(request(stream=False), {"accept": FRAMES}.get)
    assert reply.status == 200
    assert fbs_chunks(reply.body, True)[0].error == chunk.error


# every wire -------------------------------------------------------------------

WIRES: dict[str, Wire] = {"fbs": FbsWire(), "openai": OpenAIWire(), "anthropic": AnthropicWire()}
STATUS = {
    "fbs": {"fail": 503, "rate_limit": 429, "overloaded": 503, "auth": 401, "reject": 400},
    "openai": {"fail": 503, "rate_limit": 429, "overloaded": 503, "auth": 401, "reject": 400},
    "anthropic": {"fail": 503, "rate_limit": 429, "overloaded": 529, "auth": 401, "reject": 400},
}


def _error_type(protocol: str, body: bytes) -> str:
    doc = json.loads(body)
    if protocol == "fbs":
        code: str = doc["error"]["code"]
        assert codes.by_code(code) is not None
        return code
    if protocol == "anthropic":
        assert doc["type"] == "error"
    kind: str = doc["error"]["type"]
    return kind


@pytest.mark.parametrize("protocol", WIRES)
@pytest.mark.parametrize("fault", ["fail", "rate_limit", "overloaded", "auth", "reject"])
def test_faults_before_the_first_byte(protocol: str, fault: str) -> None:
    reply = WIRES[protocol].fault(fault, request())
    assert reply.status == STATUS[protocol][fault]
    assert _error_type(protocol, reply.body)
    headers = dict(reply.headers)
    if fault == "rate_limit":
        assert (headers["retry-after"], headers["retry-after-ms"]) == ("1", "1000")
    else:
        assert "retry-after" not in headers


def test_provider_error_details() -> None:
    doc = json.loads(WIRES["openai"].fault("rate_limit", request()).body)["error"]
    assert (doc["type"], doc["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    doc = json.loads(WIRES["openai"].fault("reject", request()).body)["error"]
    assert (doc["param"], doc["code"]) == ("messages", "context_length_exceeded")
    doc = json.loads(WIRES["anthropic"].fault("reject", request()).body)["error"]
    assert doc["type"] == "invalid_request_error" and doc["message"].startswith(
        "prompt is too long"
    )
    doc = json.loads(WIRES["anthropic"].fault("overloaded", request()).body)["error"]
    assert doc == {"type": "overloaded_error", "message": "Overloaded"}


@pytest.mark.parametrize("protocol", WIRES)
def test_canned_answers_are_built_once(protocol: str) -> None:
    pick = WIRES[protocol].canned(3)
    headers = {"accept": FRAMES} if protocol == "fbs" else {}
    first = pick(b'{"stream": true}', headers.get)
    assert pick(b'{"stream": true}', headers.get) is first
    if protocol == "fbs":
        chunks = fbs_chunks(first.body, True)
        assert [c.content for c in chunks] == ["tok "] * 3 + [""]
        return
    whole = pick(b"{}", headers.get)
    assert whole is not first
    text = "".join(
        d["choices"][0]["delta"].get("content") or ""
        if protocol == "openai"
        else (d.get("delta", {}).get("text") or "")
        for _, d in sse_events(first.body.decode())
        if isinstance(d, dict) and (protocol != "openai" or d["choices"])
    )
    assert text == "tok tok tok "


@pytest.mark.parametrize("protocol", WIRES)
def test_other_paths(protocol: str) -> None:
    wire = WIRES[protocol]
    assert wire.route("POST", "/nowhere").status == 404
    assert wire.route("GET", wire.path).status == 405
    models = wire.route("GET", "/v1/models")
    assert models.status == (404 if protocol == "fbs" else 200)


def test_api_keys() -> None:
    openai, anthropic = WIRES["openai"], WIRES["anthropic"]
    assert openai.authorize({"authorization": "Bearer k1"}.get, "k1") is None
    for headers in ({}, {"authorization": "Bearer k2"}, {"authorization": "k1"}):
        reply = openai.authorize(headers.get, "k1")
        assert reply is not None and reply.status == 401
        assert json.loads(reply.body)["error"]["code"] == "invalid_api_key"
    assert anthropic.authorize({"x-api-key": "k1"}.get, "k1") is None
    assert anthropic.authorize({"authorization": "Bearer k1"}.get, "k1") is None
    for headers in ({}, {"x-api-key": "k2"}, {"authorization": "Bearer k2"}, {"x-api-key": ""}):
        reply = anthropic.authorize(headers.get, "k1")
        assert reply is not None and reply.status == 401
        assert json.loads(reply.body)["error"]["type"] == "authentication_error"
    assert WIRES["fbs"].authorize(NO_HEADERS.get, "k1") is None


def test_answers_are_the_same_in_every_wire() -> None:
    req = request("the same words here", max_tokens=3)
    ans: Answer = answer(req)
    openai = sse_events(rendered(WIRES["openai"], req).decode())
    anthropic = sse_events(rendered(WIRES["anthropic"], req).decode())
    fbs = fbs_chunks(rendered(WIRES["fbs"], req, {"accept": FRAMES}), True)
    assert "".join(c.content for c in fbs) == ans.text
    assert (
        "".join(
            d["choices"][0]["delta"].get("content") or "" for _, d in openai[:-1] if d["choices"]
        )
        == ans.text
    )
    assert (
        "".join(d["delta"]["text"] for n, d in anthropic if n == "content_block_delta") == ans.text
    )
