"""A tool's and a content block's fields with no wire slot, at the Messages
edge (issue 22): a custom tool's go into ``$tools`` by the tool's index, a
block's into ``$blocks`` by the wire message and block an Anthropic backend
builds from it; what cannot be placed is refused naming it; a body with none
keeps the one strict pass."""

from __future__ import annotations

import json
from typing import Any

import httpx
import msgspec
import pytest

from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.errors import InvalidRequest
from flatgate.proxy.apis.anthropic_messages import request as models
from flatgate.proxy.apis.anthropic_messages.request import (
    WithUnknown,
    decode_count_tokens,
    decode_messages,
)
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.schema import OMITTED_HEADER
from tests.edge.anthropic.stack import BACKENDS, KEY, MessagesStack

SCHEMA = {"type": "object", "properties": {}}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "found"}
CITES = [{"type": "char_location", "cited_text": "x", "document_index": 0}]


def raw(**fields: Any) -> bytes:
    doc = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    return msgspec.json.encode({**doc, **fields})


def extras(**fields: Any) -> dict[str, Any]:
    buf = write_messages(decode_messages(raw(**fields)), provider=1, model_name="m")
    text = read_request(buf).extras
    return json.loads(text) if text else {}


def refused(**fields: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        write_messages(decode_messages(raw(**fields)), provider=1, model_name="m")
    return info.value


def tool(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "description": "d", "input_schema": SCHEMA, **fields}


def test_a_tools_own_fields_are_carried_by_its_index_as_written() -> None:
    tools = [
        tool("a", cache_control={"type": "ephemeral"}),
        tool("b", defer_loading=True, input_examples=[{"q": "x"}], strict=True),
        tool("c", eager_input_streaming=True, allowed_callers=["direct"], x_new={"k": [1]}),
    ]
    out = extras(tools=tools)
    assert out["$tools"] == [
        {"index": 1, "fields": {"defer_loading": True, "input_examples": [{"q": "x"}]}},
        {
            "index": 2,
            "fields": {
                "eager_input_streaming": True,
                "allowed_callers": ["direct"],
                "x_new": {"k": [1]},
            },
        },
    ]
    # cache_control stays a mark, never a field
    assert out["$cache_control"] == [
        {"at": "tools", "index": 0, "cache_control": {"type": "ephemeral"}}
    ]


def test_the_values_are_the_clients_bytes() -> None:
    body = raw(tools=[tool("a")]).replace(b'"name":"a"', b'"name":"a","defer_loading" :  true')
    buf = write_messages(decode_messages(body), provider=1, model_name="m")
    assert '"fields":{"defer_loading":true}' in read_request(buf).extras


def test_citations_go_on_the_text_block_the_wire_message_makes() -> None:
    messages = [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": [CALL]},
        # wire: Tool message (2), then the user text (3)
        {"role": "user", "content": [RESULT, {"type": "text", "text": "and?", "citations": CITES}]},
        {"role": "assistant", "content": [{"type": "text", "text": "so", "citations": CITES}]},
    ]
    assert extras(messages=messages)["$blocks"] == [
        {"index": 3, "block": "text", "n": 0, "fields": {"citations": CITES}},
        {"index": 4, "block": "text", "n": 0, "fields": {"citations": CITES}},
    ]


def test_unknown_fields_of_tool_use_thinking_and_tool_result_blocks_are_placed() -> None:
    think = {"type": "thinking", "thinking": "t", "signature": "sig"}
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {**think, "x_t": 1},
                {"type": "text", "text": "calling"},
                {**CALL, "id": "toolu_0"},
                {**CALL, "caller": {"type": "direct"}},
            ],
        },
        {"role": "user", "content": [{**RESULT, "x_r": True}]},
    ]
    assert extras(messages=messages)["$blocks"] == [
        {"index": 1, "block": "thinking", "n": 0, "fields": {"x_t": 1}},
        {"index": 1, "block": "tool_use", "n": 1, "fields": {"caller": {"type": "direct"}}},
        {"index": 2, "block": "tool_result", "n": 0, "fields": {"x_r": True}},
    ]


def test_top_level_system_blocks_with_fields_are_one_message_each() -> None:
    system = [{"type": "text", "text": "a"}, {"type": "text", "text": "b", "citations": CITES}]
    buf = write_messages(decode_messages(raw(system=system)), provider=1, model_name="m")
    req = read_request(buf)
    assert [m.content for m in req.messages[:2]] == ["a", "b"]
    assert json.loads(req.extras)["$blocks"] == [
        {"index": 1, "block": "text", "n": 0, "fields": {"citations": CITES}}
    ]


def test_a_field_on_one_of_several_joined_text_blocks_is_refused_naming_it() -> None:
    content = [{"type": "text", "text": "a"}, {"type": "text", "text": "b", "citations": CITES}]
    err = refused(messages=[{"role": "user", "content": content}])
    assert err.param == "messages.0.content.1.citations"
    assert "one text" in str(err)
    empty = [{"type": "text", "text": "", "x_new": 1}]
    assert refused(messages=[{"role": "user", "content": empty}]).param == (
        "messages.0.content.0.x_new"
    )


def test_a_messages_own_unknown_field_and_a_results_inner_blocks_are_refused() -> None:
    err = refused(messages=[{"role": "user", "content": "hi", "name": "bob"}])
    assert err.param == "messages.0.name"
    inner = {**RESULT, "content": [{"type": "text", "text": "r", "x_new": 1}]}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [CALL]},
        {"role": "user", "content": [inner]},
    ]
    assert refused(messages=messages).param == "messages.2.content.0.content.0.x_new"


def test_null_citations_and_no_fields_cost_nothing() -> None:
    content = [{"type": "text", "text": "a", "citations": None}]
    body = raw(messages=[{"role": "user", "content": content}], tools=[tool("a")])
    req = decode_messages(body)
    # the one strict pass: no second decode, no extras
    assert type(req) is models._Known
    assert read_request(write_messages(req, provider=1, model_name="m")).extras == ""


def test_a_body_with_nested_fields_takes_the_second_pass_with_the_rest_intact() -> None:
    req = decode_messages(raw(tools=[tool("a", defer_loading=True)], zz=1))
    assert type(req) is WithUnknown
    assert req.tools is not None and req.tools[0].name == "a"
    assert bytes(req.tools[0].input_schema) == msgspec.json.encode(SCHEMA)
    assert {k: bytes(v) for k, v in req.unknown.items()} == {"zz": b"1"}
    # a wrong type elsewhere is still named, as the one pass names it
    with pytest.raises(InvalidRequest) as info:
        decode_messages(raw(tools=[tool("a", defer_loading=True)], max_tokens="x"))
    assert info.value.param == "max_tokens"


def test_count_tokens_reads_past_a_tools_fields() -> None:
    req = decode_count_tokens(
        msgspec.json.encode(
            {
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [tool("a", defer_loading=True)],
            }
        )
    )
    assert req.tools is not None and [t.name for t in req.tools] == ["a"]


# -- through the gateway, to an OpenAI-compatible backend --------------------------


def post(stack: MessagesStack, **fields: Any) -> httpx.Response:
    doc = {
        "model": BACKENDS["openai"],
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "x y"}],
    }
    return httpx.post(
        f"{stack.gateway.url}/v1/messages",
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
        json={**doc, **fields},
        timeout=20,
    )


@pytest.mark.integration
def test_at_an_openai_backend_defer_loading_is_named_another_refused(
    messages: MessagesStack,
) -> None:
    ok = post(messages, tools=[tool("a", defer_loading=True)])
    assert ok.status_code == 200, ok.text
    assert ok.headers[OMITTED_HEADER] == "tools.defer_loading"
    bad = post(messages, tools=[tool("a", input_examples=[{}])])
    assert bad.status_code == 400
    doc = bad.json()
    assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    assert "'tools.input_examples'" in doc["error"]["message"]
    assert bad.headers["request-id"]


def test_null_citations_on_system_blocks_keep_them_one_message() -> None:
    system = [{"type": "text", "text": "a", "citations": None}, {"type": "text", "text": "b"}]
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi", "x_new": 1}]}]
    req = read_request(
        write_messages(
            decode_messages(raw(system=system, messages=messages)), provider=1, model_name="m"
        )
    )
    assert [m.content for m in req.messages] == ["ab", "hi"]


@pytest.mark.parametrize(
    "extra",
    [
        {"$blocks": []},
        {"$blocks": [], "zz": 1},
        {"thread": {"id": "t_1"}},
        {"thread": {"id": "t_1"}, "tools": [{"name": "f", "input_schema": {}, "x": 1}]},
    ],
)
def test_count_tokens_refuses_what_messages_refuses(extra: dict[str, Any]) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    for decode in (decode_count_tokens, models.decode_messages):
        with pytest.raises(InvalidRequest) as caught:
            decode(json.dumps({**body, "max_tokens": 5}).encode())
        assert caught.value.param == next(iter(extra)), decode
    if "thread" in extra:  # a null thread asks for nothing, in both
        nulled = json.dumps({**body, "thread": None}).encode()
        assert decode_count_tokens(nulled).messages
