"""A Messages client's tool and content-block fields with no wire slot
(``$tools``, ``$blocks``: issue 22) at each JSON adapter: the ``anthropic``
one splices each into its own tool or block, as the client wrote it; the
OpenAI-compatible ones name a tool's ``defer_loading`` and
``eager_input_streaming`` and a text's ``citations`` (mapped to nothing)
and refuse any other unless dropped."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.backends.anthropic.adapter import AnthropicAdapter
from flatgate.proxy.backends.anthropic.adapter import encode_request as anthropic_request
from flatgate.proxy.backends.anthropic.config import AnthropicConfig
from flatgate.proxy.backends.base import Inbound, Untranslatable
from flatgate.proxy.backends.extras import UnsupportedField
from flatgate.proxy.backends.openai.adapter import encode_request as openai_request
from flatgate.proxy.backends.responses.adapter import encode_request as responses_request
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.schema import Role
from tests.backends.wire_requests import ANTHROPIC, msg, wire

SCHEMA = {"type": "object", "properties": {}}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "found"}
CITES = [{"type": "char_location", "cited_text": "x", "document_index": 0, "start_char_index": 0}]
ASK = [{"role": "user", "content": "hi"}]


def edge(**fields: Any) -> Request:
    """A Messages request, through the Messages edge, as the proxy reads it."""
    body = {"model": "m", "max_tokens": 16, "messages": ASK, **fields}
    buf = write_messages(decode_messages(msgspec.json.encode(body)), provider=1, model_name="m")
    return read_request(buf)


def tool(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "description": "d", "input_schema": SCHEMA, **fields}


def sent(req: Request) -> dict[str, Any]:
    """What the anthropic adapter sends (``prepare``: the body it posts)."""
    config = AnthropicConfig(name="a", url="https://api.anthropic.com/v1", protocol="anthropic")
    out = AnthropicAdapter(config).prepare(Inbound(b"", lambda: req, "rid", ""))
    assert out.omitted == ()
    body: dict[str, Any] = json.loads(out.body)
    return body


# -- anthropic: carried, on the right tool and block ------------------------------


def test_defer_loading_goes_on_its_own_tool_only() -> None:
    tools = [
        tool("a", cache_control={"type": "ephemeral"}),
        tool("b", defer_loading=True),
        tool("c", input_examples=[{"q": "x"}], eager_input_streaming=True),
    ]
    assert sent(edge(tools=tools))["tools"] == tools


def test_citations_go_on_the_right_block_through_a_merged_turn() -> None:
    messages = [
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "so", "citations": CITES}, CALL],
        },
        # one user message on the wire's two (the tool result, the text)
        {
            "role": "user",
            "content": [
                {**RESULT, "x_r": 1},
                {
                    "type": "text",
                    "text": "and?",
                    "citations": CITES,
                    "cache_control": {"type": "ephemeral"},
                },
            ],
        },
    ]
    out = sent(edge(messages=messages))["messages"]
    assert out[1]["content"] == [
        {"type": "text", "text": "so", "citations": CITES},
        {**CALL},
    ]
    assert out[2]["content"] == [
        {**RESULT, "x_r": 1},
        {
            "type": "text",
            "text": "and?",
            "cache_control": {"type": "ephemeral"},
            "citations": CITES,
        },
    ]


def test_a_tool_use_and_a_thinking_blocks_fields_reach_them() -> None:
    think = {"type": "thinking", "thinking": "t", "signature": "sig", "x_t": [1]}
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [think, {**CALL, "id": "toolu_0"}, {**CALL, "caller": {"type": "direct"}}],
        },
        {"role": "user", "content": [{**RESULT, "tool_use_id": "toolu_0"}, RESULT]},
    ]
    content = sent(edge(messages=messages))["messages"][1]["content"]
    assert content == [think, {**CALL, "id": "toolu_0"}, {**CALL, "caller": {"type": "direct"}}]


def test_a_field_the_adapter_writes_itself_is_never_spliced_over() -> None:
    extras = {"$tools": [{"index": 0, "fields": {"name": "x"}}]}
    req = wire(
        [msg(Role.User, "hi")], extras=extras, dialect=ANTHROPIC, tools=[("t", "", "{}", False)]
    )
    with pytest.raises(Untranslatable, match="writes"):
        anthropic_request(req, model="claude")
    nowhere = {"$blocks": [{"index": 0, "block": "tool_use", "n": 0, "fields": {"k": 1}}]}
    with pytest.raises(Untranslatable, match="no tool_use block"):
        anthropic_request(
            wire([msg(Role.User, "hi")], extras=nowhere, dialect=ANTHROPIC), model="c"
        )


# -- OpenAI-compatible backends: mapped to nothing, refused, or dropped ------------


@pytest.mark.parametrize("field", ["defer_loading", "eager_input_streaming"])
@pytest.mark.parametrize("encode", [openai_request, responses_request])
def test_a_loading_or_streaming_hint_is_named_and_the_tool_sent_in_full(
    encode: Any, field: str
) -> None:
    # eager_input_streaming: the AI SDK's anthropic() provider puts it on
    # every tool when it streams.
    omitted: list[str] = []
    body = json.loads(encode(edge(tools=[tool("a", **{field: True})]), model="m", omitted=omitted))
    assert omitted == [f"tools.{field}"]
    assert len(body["tools"]) == 1 and field not in json.dumps(body)
    off: list[str] = []
    encode(edge(tools=[tool("a", **{field: False})]), model="m", omitted=off)
    assert off == []


@pytest.mark.parametrize("encode", [openai_request, responses_request])
def test_citations_are_named_and_the_text_sent(encode: Any) -> None:
    messages = [
        *ASK,
        {"role": "assistant", "content": [{"type": "text", "text": "so", "citations": CITES}]},
    ]
    omitted: list[str] = []
    body = encode(edge(messages=messages), model="m", omitted=omitted)
    assert omitted == ["messages.content.citations"]
    assert b'"so"' in body and b"char_location" not in body


@pytest.mark.parametrize("field", ["input_examples", "allowed_callers", "x_new"])
def test_another_tool_field_is_refused_naming_it_unless_dropped(field: str) -> None:
    req = edge(tools=[tool("a", **{field: ["direct"]})])
    with pytest.raises(UnsupportedField) as info:
        openai_request(req, model="m")
    assert info.value.param == f"tools.{field}"
    omitted: list[str] = []
    openai_request(req, model="m", omitted=omitted, drop_unsupported=True)
    assert omitted == [f"tools.{field}"]


def test_an_unknown_block_field_is_refused_naming_it_unless_dropped() -> None:
    messages = [*ASK, {"role": "assistant", "content": [{**CALL, "caller": {"type": "direct"}}]}]
    req = edge(messages=messages)
    with pytest.raises(UnsupportedField) as info:
        responses_request(req, model="m")
    assert info.value.param == "messages.content.caller"
    omitted: list[str] = []
    responses_request(req, model="m", omitted=omitted, drop_unsupported=True)
    assert omitted == ["messages.content.caller"]


def test_a_thinking_blocks_fields_go_with_the_block_at_another_dialect() -> None:
    think = {"type": "thinking", "thinking": "t", "signature": "sig", "x_t": 1}
    messages = [*ASK, {"role": "assistant", "content": [think, {"type": "text", "text": "so"}]}]
    omitted: list[str] = []
    openai_request(edge(messages=messages), model="m", omitted=omitted)
    assert "messages.content.x_t" in omitted


def test_a_participant_name_is_named_as_left_out_at_anthropic() -> None:
    omitted: list[str] = []
    req = wire([msg(Role.User, "hi", name="alice"), msg(Role.User, "and me")])
    body = json.loads(anthropic_request(req, model="m", omitted=omitted))
    assert body["messages"][0]["content"][0]["text"] == "hi"
    assert omitted == ["name"]
    omitted = []
    anthropic_request(wire([msg(Role.User, "hi")]), model="m", omitted=omitted)
    assert omitted == []
