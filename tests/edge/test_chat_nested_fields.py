"""The Chat Completions edge's nested fields (issue 22): a key inside a
message, a part, a tool call, a tool, the tool choice or ``stream_options``
is carried, mapped to nothing (a previous answer's metadata, echoed back;
null or empty), or refused with a 400 naming its path. None is dropped in
silence, and a body with none takes the one-pass decode."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from openai.types.chat import ChatCompletion

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.openai.translate import write_request
from flatgate.proxy.apis.openai_chat import request as models
from flatgate.proxy.apis.openai_chat.request import decode
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.schema import ApiDialect

USER = {"role": "user", "content": "hi"}


def body(*messages: dict[str, Any], **fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [USER, *messages], **fields}).encode()


def wire_of(raw: bytes) -> Request:
    d = decode(raw)
    return read_request(write_request(d.req, provider=0, model_name="m", fields=d.fields))


def refused(raw: bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        decode(raw)
    assert info.value.status == 400
    return info.value


def test_an_sdk_answer_sent_back_as_a_message_is_accepted() -> None:
    # The openai SDK's own message, serialized back (what `messages.append(
    # completion.choices[0].message)` sends): every key it has is accepted.
    answer = ChatCompletion.model_validate(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": "Looking.",
                        "refusal": None,
                        "annotations": [
                            {
                                "type": "url_citation",
                                "url_citation": {
                                    "url": "https://example.com",
                                    "title": "t",
                                    "start_index": 0,
                                    "end_index": 1,
                                },
                            }
                        ],
                        "audio": None,
                        "function_call": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "f", "arguments": "{}"},
                            }
                        ],
                    },
                }
            ],
        }
    )
    sent = answer.choices[0].message.model_dump()
    assert {"annotations", "audio", "function_call", "refusal"} <= sent.keys()
    req = wire_of(body(sent, {"role": "tool", "tool_call_id": "call_1", "content": "ok"}))
    said = req.messages[1]
    assert (said.content, said.tool_calls[0].id if said.tool_calls else None) == (
        "Looking.",
        "call_1",
    )


def test_a_refusal_string_is_carried_as_the_message_text() -> None:
    req = wire_of(body({"role": "assistant", "content": None, "refusal": "I can't."}))
    assert req.messages[1].content == "I can't."
    req = wire_of(body({"role": "assistant", "content": "No. ", "refusal": "I can't."}))
    assert req.messages[1].content == "No. I can't."


def test_replayed_reasoning_content_is_the_message_reasoning_part() -> None:
    # The Agents SDK replays a DeepSeek turn's reasoning this way.
    msg = {"role": "assistant", "content": "4", "reasoning_content": "2+2"}
    parts = wire_of(body(msg)).messages[1].reasoning or []
    assert [(p.text, p.dialect) for p in parts] == [("2+2", int(ApiDialect.OPENAI_CHAT))]
    msg = {"role": "assistant", "content": "4", "reasoning": "2+2"}
    assert [p.text for p in wire_of(body(msg)).messages[1].reasoning or []] == ["2+2"]


def test_a_tool_message_name_is_carried() -> None:
    msg = {"role": "tool", "tool_call_id": "c", "name": "lookup", "content": "x"}
    assert wire_of(body(msg)).messages[1].name == "lookup"


def test_a_streamed_call_index_is_accepted() -> None:
    call = {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}
    req = wire_of(body({"role": "assistant", "tool_calls": [call]}))
    assert req.messages[1].tool_calls is not None


@pytest.mark.parametrize("value", [None, [], {}, ""])
def test_null_or_empty_unknown_keys_ask_for_nothing(value: object) -> None:
    part = {"type": "text", "text": "x", "cache_control": value}
    tool = {"type": "function", "function": {"name": "f", "x_hint": value}, "x": value}
    raw = body(
        {"role": "user", "content": [part], "x_meta": value},
        {"role": "assistant", "content": "y", "x_meta": value},
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "f", "y": value}},
        stream=True,
        stream_options={"include_usage": True, "x_pad": value},
    )
    req = wire_of(raw)
    assert [m.content for m in req.messages] == ["hi", "x", "y"]
    assert (req.extras, req.include_usage, req.tool_choice_name) == ("", True, "f")


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({"role": "system", "content": "s", "x": 1}, "messages.[1].x"),
        ({"role": "developer", "content": "s", "x": 1}, "messages.[1].x"),
        ({"role": "user", "content": "s", "x": 1}, "messages.[1].x"),
        ({"role": "tool", "tool_call_id": "c", "content": "s", "x": 1}, "messages.[1].x"),
        ({"role": "assistant", "content": "s", "audio": {"id": "a"}}, "messages.[1].audio"),
        (
            {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}},
            "messages.[1].function_call",
        ),
        (
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "t", "cache_control": {}},
                    {"type": "text", "text": "t", "cache_control": {"type": "ephemeral"}},
                ],
            },
            "messages.[1].content.[1].cache_control",
        ),
        (
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "r", "x": 1}]},
            "messages.[1].content.[0].x",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "x": 1, "function": {"name": "f", "arguments": "{}"}}],
            },
            "messages.[1].tool_calls.[0].x",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}", "x": 1}}],
            },
            "messages.[1].tool_calls.[0].function.x",
        ),
    ],
)
def test_other_message_keys_are_refused_by_path(message: dict[str, Any], param: str) -> None:
    assert refused(body(message)).param == param


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": "f"}, "x": 1}]}, "tools.[0].x"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "defer_loading": True}}]},
            "tools.[0].function.defer_loading",
        ),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "f"}, "x": 1},
            },
            "tool_choice.x",
        ),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "f", "x": 1}},
            },
            "tool_choice.function.x",
        ),
        ({"stream_options": {"include_usage": True, "x": True}}, "stream_options.x"),
    ],
)
def test_other_tool_and_option_keys_are_refused_by_path(fields: dict[str, Any], param: str) -> None:
    assert refused(body(**fields)).param == param


def test_stream_options_include_obfuscation_is_accepted() -> None:
    # OpenAI's default is true; flatgate's chunks carry no padding either way.
    for value in (True, False):
        req = wire_of(body(stream=True, stream_options={"include_obfuscation": value}))
        assert (req.stream, req.extras) == (True, "")


def test_top_level_unknowns_still_travel_with_a_nested_null() -> None:
    raw = body({"role": "assistant", "content": "y", "audio": None, "x": None}, x_vendor=[1])
    req = wire_of(raw)
    assert json.loads(req.extras) == {"x_vendor": [1]}


def test_a_nested_unknown_key_keeps_the_bytes_of_its_neighbours() -> None:
    # The lenient pass rewrites only the objects it takes a key out of.
    params = '{"type":"object","properties":{"n":{"type":"number","default":1.50}}}'
    raw = (
        '{"model":"m","messages":[{"role":"user","content":"hi","x":null}],'
        '"tools":[{"type":"function","function":{"name":"f","parameters":' + params + "}}]}"
    ).encode()
    assert wire_of(raw).tools[0].function.parameters == msgspec.Raw(params.encode())


def test_a_body_with_no_unknown_key_takes_the_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_: object) -> None:
        raise AssertionError("the lenient pass ran")

    monkeypatch.setattr(models, "_decode_lenient", fail)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    decode(body({"role": "assistant", "content": "y", "refusal": None}, tools=[tool]))
