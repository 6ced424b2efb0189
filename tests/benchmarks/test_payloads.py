"""The shared payload generator: seeded, sized, OpenAI-shaped, and its FlatBuffer."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from benchmarks.codecs.common import MODELS
from benchmarks.codecs.flatgate import translate_json, translate_messages_json
from benchmarks.payloads import (
    PROMPT_SIZES,
    make_request,
    prompt_bytes,
    to_flatbuffer,
    to_messages,
)
from flatgate.generated.LLMGateway.CompletionRequest import CompletionRequestT
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.request.verify import verify_request
from tests.edge.helpers import decode_request_fb


def test_seeded_and_deterministic() -> None:
    a = make_request(4096, seed=3, messages=20, tools=4)
    assert a == make_request(4096, seed=3, messages=20, tools=4)
    assert a != make_request(4096, seed=4, messages=20, tools=4)
    assert to_flatbuffer(a) == to_flatbuffer(make_request(4096, seed=3, messages=20, tools=4))


@pytest.mark.parametrize("name", ["1KB", "16KB", "128KB"])
def test_prompt_size_close_to_target(name: str) -> None:
    target = PROMPT_SIZES[name]
    got = prompt_bytes(make_request(target, seed=1, messages=20, tools=4))
    assert target <= got <= target * 1.1


@pytest.mark.parametrize("messages", [4, 5, 8, 9, 20])
@pytest.mark.parametrize("tools", [0, 1, 4])
def test_conversation_shape(messages: int, tools: int) -> None:
    d = make_request(2048, seed=messages * 10 + tools, messages=messages, tools=tools)
    msgs = d["messages"]
    assert len(msgs) == messages
    assert msgs[0]["role"] == "system"
    assert msgs[-1]["role"] in ({"user", "tool"} if tools else {"user"})
    assert len(d.get("tools", [])) == tools
    calls = [m for m in msgs if m.get("tool_calls")]
    results = [m for m in msgs if m["role"] == "tool"]
    assert len(calls) == len(results) == (1 if tools else 0)
    if tools:
        assert results[0]["tool_call_id"] == calls[0]["tool_calls"][0]["id"]
        json.loads(calls[0]["tool_calls"][0]["function"]["arguments"])
    # Codec-neutral: plain JSON types only.
    assert json.loads(json.dumps(d)) == d
    assert msgspec.json.decode(msgspec.json.encode(d)) == d


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="messages >= 4"):
        make_request(100, messages=3)


def test_to_flatbuffer_carries_the_request() -> None:
    d = make_request(2048, seed=5, messages=9, tools=2)
    d["tool_choice"] = {"type": "function", "function": {"name": "get_weather"}}
    d["stop"] = "END"
    d["response_format"] = {"type": "json_object"}
    buf = to_flatbuffer(d, provider=2, request_id="r-1")
    verify_request(buf)
    provider, model = read_route(buf)
    assert (provider, model.tobytes()) == (2, b"gpt-4o-mini")
    t = CompletionRequestT.InitFromPackedBuf(buf, 0)
    assert t.requestId == b"r-1"
    assert [m.content for m in t.messages] == [
        None if m["content"] is None else m["content"].encode() for m in d["messages"]
    ]
    assert [m.role for m in t.messages][:4] == [1, 2, 0, 3]  # system developer user assistant
    call = t.messages[3].toolCalls[0]
    assert call.id.decode() == d["messages"][3]["tool_calls"][0]["id"]
    assert t.messages[4].toolCallId == call.id
    assert [tool.name for tool in t.tools] == [b"get_weather", b"search_orders"]
    assert json.loads(t.tools[0].parameters) == d["tools"][0]["function"]["parameters"]
    assert (t.toolChoice, t.toolChoiceName) == (4, b"get_weather")
    assert t.stop == [b"END"]
    assert [(kv.key, kv.value) for kv in t.metadata] == sorted(
        (k.encode(), v.encode()) for k, v in d["metadata"].items()
    )
    assert (t.stream, t.includeUsage, t.parallelToolCalls) == (True, True, True)
    assert t.maxTokens == 512
    assert json.loads(t.responseFormat) == {"type": "json_object"}


@pytest.mark.parametrize(("messages", "tools"), [(4, 0), (8, 1), (20, 4)])
def test_the_messages_twin_is_the_same_conversation(messages: int, tools: int) -> None:
    """Through each edge, the OpenAI request and its Messages twin write the
    same ``CompletionRequest`` but for what only OpenAI's API has (an even
    count: no developer note, which the Messages API would fold into the
    system prompt)."""
    chat = make_request(2048, seed=5, messages=messages, tools=tools)
    args: dict[str, Any] = {"models": MODELS, "tenant": "acme", "request_id": "r"}
    a = decode_request_fb(translate_messages_json(msgspec.json.encode(to_messages(chat)), **args))
    o = decode_request_fb(translate_json(msgspec.json.encode(chat), **args))
    only_openai = {"seed", "metadata", "parallelToolCalls"}
    assert {k: v for k, v in a.items() if k not in only_openai} == {
        k: v for k, v in o.items() if k not in only_openai
    }
    assert a["seed"] is a["metadata"] is a["parallelToolCalls"] is None
