"""The Messages edge against Anthropic's own documented examples.

- Requests: the documented request bodies (``golden/``, sources in its
  ``SOURCES.md``) become the ``CompletionRequest`` bytes checked in beside
  them, and the same bytes as their OpenAI Chat Completions twins through the
  OpenAI edge: one conversation, one wire request, whichever API it came in.
- Streams: each documented stream, sent by an Anthropic backend, goes through
  the proxy's anthropic adapter (chunk frames) and the Messages edge's
  renderer, and comes out as documented, event for event, when its events
  come one a read (as a server sends them over time); in one read, its text
  deltas are one (the adapter coalesces the text of a read), and nothing
  else changes. What differs is
  listed, and asserted: the edge's own message id; no ``ping`` (the adapter
  drops the backend's, the edge sends its own while it waits); no empty
  ``input_json_delta`` (a thinking block's ``signature_delta`` is there: the
  chunk's ``reasoning_part`` carries it); and the input token count, which
  the adapter reports with the final chunk, so it is 0 in ``message_start``
  and in ``message_delta.usage`` (where the issue allows it) instead.
- Whole messages and errors: a documented ``message`` and the documented error
  body, error event and status/type table.

The documented responses, streams and errors are the adapter tests' fixtures
(``tests/backends/fixtures``, sources in its ``SOURCES.md``). Regenerate the
``.fgrq`` files after an intended change with ``FLATGATE_REGEN_GOLDEN=1
.venv/bin/pytest tests/edge/anthropic/test_documented.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anthropic.types
import msgspec
import pydantic
import pytest

from flatgate.edge_translator.anthropic.errors import TYPES, error_body, error_event
from flatgate.edge_translator.anthropic.render import EventRenderer, MessageAggregator
from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.openai.translate import write_request
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.apis.openai_chat.request import decode_request
from flatgate.proxy.backends.anthropic.adapter import AnthropicStream
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, ToolCallDelta, Usage
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.schema import ApiDialect, FinishReason, Provider
from tests.backends.helpers import fixture, per_event, run

GOLDEN = Path(__file__).parent / "golden"
REQUESTS = sorted(p.stem for p in GOLDEN.glob("*.json"))
STREAMS = [
    "anthropic_text.sse",
    "anthropic_tool_use.sse",
    "anthropic_tool_use_v2025.sse",
    "anthropic_thinking.sse",
]
EVENT = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)
Events = list[tuple[str, dict[str, Any]]]


def write(doc: bytes, name: str) -> bytes:
    return write_messages(
        decode_messages(doc),
        provider=Provider.Anthropic,
        model_name=json.loads(doc)["model"],
        tenant="acme",
        request_id=f"msg_golden_{name}",
    )


# -- requests -----------------------------------------------------------------


@pytest.mark.parametrize("name", REQUESTS)
def test_documented_requests_golden_bytes(name: str) -> None:
    out = write((GOLDEN / f"{name}.json").read_bytes(), name)
    path = GOLDEN / f"{name}.fgrq"
    if os.environ.get("FLATGATE_REGEN_GOLDEN"):
        path.write_bytes(out)
    assert out == path.read_bytes(), f"{name}: writer output changed; see module docstring"
    verify_request(out)


def _text(content: Any) -> str:
    return content if isinstance(content, str) else "".join(b["text"] for b in content)


def openai_twin(doc: dict[str, Any]) -> dict[str, Any]:
    """The documented Messages request as an OpenAI Chat Completions request."""
    msgs: list[dict[str, Any]] = []
    system = doc.get("system")
    if isinstance(system, list) and any("cache_control" in b for b in system):
        # Blocks with a breakpoint among them: a System message each.
        msgs += [{"role": "system", "content": b["text"]} for b in system]
    elif system:
        msgs.append({"role": "system", "content": _text(system)})
    for m in doc["messages"]:
        blocks = m["content"]
        if isinstance(blocks, str):
            msgs.append({"role": m["role"], "content": blocks})
            continue
        texts = _text([b for b in blocks if b["type"] == "text"])
        if m["role"] == "user":
            msgs += [
                {"role": "tool", "tool_call_id": b["tool_use_id"], "content": b["content"]}
                for b in blocks
                if b["type"] == "tool_result"
            ]
            if texts:
                msgs.append({"role": "user", "content": texts})
            continue
        calls = [
            {
                "id": b["id"],
                "type": "function",
                "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
            }
            for b in blocks
            if b["type"] == "tool_use"
        ]
        msgs.append({"role": "assistant", "content": texts, "tool_calls": calls})
    twin: dict[str, Any] = {
        "model": doc["model"],
        "max_tokens": doc["max_tokens"],
        "messages": msgs,
    }
    if doc.get("tools"):
        twin["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["input_schema"],
                },
            }
            for t in doc["tools"]
        ]
    choice = doc.get("tool_choice", {}).get("type")
    if choice is not None:
        twin["tool_choice"] = {"any": "required", "auto": "auto", "none": "none"}[choice]
    if doc.get("stream"):
        twin["stream"] = True
        twin["stream_options"] = {"include_usage": True}
    return twin


@pytest.mark.parametrize("name", REQUESTS)
def test_a_documented_request_and_its_openai_twin_are_one_wire_request(name: str) -> None:
    doc = json.loads((GOLDEN / f"{name}.json").read_bytes())
    args = {"provider": 1, "model_name": doc["model"], "tenant": "acme", "request_id": "r1"}
    messages = write_messages(decode_messages(json.dumps(doc).encode()), **args)
    chat = write_request(decode_request(json.dumps(openai_twin(doc)).encode()), **args)
    if b"cache_control" not in json.dumps(doc).encode():
        assert messages == chat
        return
    # What the twin cannot say, the breakpoints, is the extras' alone.
    ours = read_request(messages)
    assert ours.extras and ours.extras_dialect == ApiDialect.ANTHROPIC_MESSAGES
    assert msgspec.structs.replace(ours, extras="", extras_dialect=0) == read_request(chat)


# -- streams ------------------------------------------------------------------


def parse(raw: bytes) -> Events:
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        name_line, data_line = block.strip().split("\n")
        out.append(
            (name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: ")))
        )
    return out


def documented(name: str) -> Events:
    """The documented events the edge sends as they are (see the module docstring)."""
    out = []
    for name_, data in parse(fixture(name)):
        delta = data.get("delta", {})
        if name_ == "ping":
            continue
        if delta.get("type") == "input_json_delta" and not delta["partial_json"]:
            continue
        out.append((name_, data))
    return out


def rendered(name: str, pieces: list[bytes] | None = None) -> Events:
    """The documented stream from an Anthropic backend, through the anthropic
    adapter and the Messages edge's renderer; every event valid for the SDK.
    Read as a server sends it over time, an event at a time, unless
    ``pieces`` says how."""
    body = fixture(name)
    chunks = run(
        AnthropicStream("req-1", "routed-name"), per_event(body) if pieces is None else pieces
    )
    r = EventRenderer(message_id="msg_flatgate", model="routed-name")
    raw = b"".join(r.feed(c) for c in chunks)
    assert r.finished
    events = parse(raw)
    for name_, data in events:
        assert data["type"] == name_
        EVENT.validate_python(data)
    return events


@pytest.mark.parametrize("name", STREAMS)
def test_a_documented_stream_comes_out_as_documented(name: str) -> None:
    doc, ours = documented(name), rendered(name)
    assert [n for n, _ in ours] == [n for n, _ in doc]
    # message_start: the same message but for the id and the input count.
    start, doc_start = ours[0][1]["message"], doc[0][1]["message"]
    assert start.pop("id") == "msg_flatgate"
    assert start.pop("usage") == {"input_tokens": 0, "output_tokens": 0}
    doc_usage = doc_start.pop("usage", {})
    doc_start.pop("id")
    assert start == doc_start
    # Every block, start, delta and stop, exactly.
    assert ours[1:-2] == doc[1:-2]
    # message_delta: the documented delta and usage; the input count moved here.
    (_, delta), (_, doc_delta) = ours[-2], doc[-2]
    assert delta["delta"] == doc_delta["delta"]
    usage = delta.pop("usage")
    documented_usage = doc_delta.pop("usage", {})
    assert usage == {"output_tokens": 0, **documented_usage, **_input(doc_usage)}
    assert ours[-1] == doc[-1] == ("message_stop", {"type": "message_stop"})


def text_deltas(events: Events) -> list[str]:
    return [
        d["delta"]["text"]
        for n, d in events
        if n == "content_block_delta" and d["delta"]["type"] == "text_delta"
    ]


def coalesced(events: Events) -> Events:
    """``events`` with each run of text deltas of one block joined into one."""
    out: Events = []
    for n, d in events:
        prev = out[-1][1] if out else {}
        if text_deltas([(n, d)]) and text_deltas(out[-1:]) and prev["index"] == d["index"]:
            joined = prev["delta"]["text"] + d["delta"]["text"]
            out[-1] = (n, {**prev, "delta": {**prev["delta"], "text": joined}})
        else:
            out.append((n, d))
    return out


@pytest.mark.parametrize("name", STREAMS)
def test_a_documented_stream_in_one_read_is_its_text_in_fewer_deltas(name: str) -> None:
    """The text deltas that arrive in one read are one (``EventStream``): the
    stream in one piece is the same stream with each run of deltas joined."""
    doc = documented(name)
    ours = rendered(name, [fixture(name)])
    assert "".join(text_deltas(ours)) == "".join(text_deltas(doc))
    assert ours == coalesced(rendered(name))
    runs = len(text_deltas(coalesced(doc)))
    assert len(text_deltas(ours)) == runs
    if len(text_deltas(doc)) > runs:
        assert len(text_deltas(ours)) < len(text_deltas(doc))


def _input(usage: dict[str, Any]) -> dict[str, int]:
    return {"input_tokens": usage["input_tokens"]} if "input_tokens" in usage else {}


def test_the_documented_tool_stream_as_one_message() -> None:
    chunks = run(AnthropicStream("req-1", "claude"), [fixture("anthropic_tool_use.sse")])
    agg = MessageAggregator(message_id="msg_014p7gG3wDgGV9EUtLvnow3U", model="claude")
    for c in chunks:
        agg.feed(c)
    body = json.loads(agg.body())
    anthropic.types.Message.model_validate(body)
    [text, call] = body["content"]
    assert text == {"type": "text", "text": "Okay, let's check the weather for San Francisco, CA:"}
    assert (call["id"], call["name"], call["input"]) == (
        "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        "get_weather",
        {"location": "San Francisco, CA"},
    )
    assert (body["stop_reason"], body["usage"]) == (
        "tool_use",
        {"input_tokens": 472, "output_tokens": 89},
    )


# -- whole messages and errors -------------------------------------------------


@pytest.mark.parametrize(
    "name", ["anthropic_response_text.json", "anthropic_response_tool_use.json"]
)
def test_a_documented_message(name: str) -> None:
    """The documented ``message``, from the chunks that carry its content: every
    field it shows is the same; the fields the example leaves out are the
    ``Message`` object's own (``type``, ``model``, ``stop_sequence``, ``usage``)."""
    doc = json.loads(fixture(name))
    chunks = []
    for i, block in enumerate(doc["content"]):
        if block["type"] == "text":
            chunks.append(Chunk(content=block["text"]))
        else:
            args = json.dumps(block["input"])
            chunks.append(Chunk(tool_calls=(ToolCallDelta(i, block["id"], block["name"], args),)))
    stop = FinishReason.TOOL_CALLS if doc["stop_reason"] == "tool_use" else FinishReason.STOP
    usage = doc.get("usage", {"input_tokens": 0, "output_tokens": 0})
    chunks.append(
        Chunk(finish_reason=stop, usage=Usage(usage["input_tokens"], usage["output_tokens"]))
    )
    agg = MessageAggregator(message_id=doc["id"], model=doc.get("model", "claude"))
    for c in chunks:
        agg.feed(c)
    body = json.loads(agg.body())
    anthropic.types.Message.model_validate(body)
    assert {k: body[k] for k in doc} == doc
    assert set(body) - set(doc) <= {"type", "model", "stop_sequence", "usage"}


def test_the_documented_error_body() -> None:
    doc = json.loads(fixture("anthropic_error_not_found.json"))
    err = FlatgateError(doc["error"]["message"], code=codes.NOT_FOUND)
    status, body = error_body(err, doc["request_id"])
    assert (status, json.loads(body)) == (404, doc)


def test_the_documented_error_event() -> None:
    [(name, doc)] = parse(fixture("anthropic_error.sse"))
    err = FlatgateError(doc["error"]["message"], code=codes.BACKENDS_BUSY)
    assert parse(error_event(err)) == [(name, doc)]


def test_the_status_and_type_pairs_are_the_documented_ones() -> None:
    table = json.loads(fixture("anthropic_error_types.json"))
    documented_pairs = {e["status"]: e["type"] for e in table["errors"]}
    assert {s: TYPES[s] for s in TYPES} == {s: documented_pairs[s] for s in TYPES}
