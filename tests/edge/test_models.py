from __future__ import annotations

import json

import msgspec
import pytest

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.proxy.apis.openai_chat.request import (
    AssistantMessage,
    DeveloperMessage,
    SystemMessage,
    TextPart,
    ToolChoiceFunction,
    ToolMessage,
    UserMessage,
    decode_request,
    param_from_error,
)

USER = {"role": "user", "content": "hi"}


def body(**fields: object) -> bytes:
    return json.dumps({"model": "m", "messages": [USER], **fields}).encode()


def error_of(raw: bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        decode_request(raw)
    err = info.value
    assert err.status == 400
    assert err.type == "invalid_request_error"
    return err


def test_every_role_and_field_decodes():
    raw = json.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "s", "name": "sys"},
                {"role": "developer", "content": [{"type": "text", "text": "d"}]},
                {"role": "user", "content": "u"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
            ],
            "temperature": 1.5,
            "top_p": 0.5,
            "max_tokens": 7,
            "max_completion_tokens": 9,
            "stop": ["a", "b"],
            "seed": 42,
            "presence_penalty": -2,
            "frequency_penalty": 2,
            "n": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
            "user": "end-user",
            "metadata": {"k": "v"},
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "f", "description": "d", "parameters": {"a": [1]}},
                }
            ],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "parallel_tool_calls": False,
            "response_format": {"type": "json_object"},
        }
    ).encode()
    req = decode_request(raw)
    kinds = [type(m) for m in req.messages]
    assert kinds == [SystemMessage, DeveloperMessage, UserMessage, AssistantMessage, ToolMessage]
    assert req.messages[1].content == [TextPart("d")]
    assistant = req.messages[3]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content is None
    assert assistant.tool_calls is not None
    assert assistant.tool_calls[0].function.name == "f"
    assert isinstance(req.tool_choice, ToolChoiceFunction)
    assert req.tools is not None
    assert bytes(req.tools[0].function.parameters) == b'{"a": [1]}'
    assert bytes(req.response_format) == b'{"type": "json_object"}'
    assert (req.temperature, req.top_p, req.seed, req.n) == (1.5, 0.5, 42, 2)
    assert req.stream_options is not None and req.stream_options.include_usage
    assert req.metadata == {"k": "v"}


def test_unknown_top_level_fields_are_kept_and_nested_ones_judged():
    req = decode_request(body(logprobs=True, store=False, some_new_field={"x": [1, 2]}))
    assert req.model == "m"
    # A nested key of no name: null asks for nothing, anything else is refused.
    msg = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x", "audio": None}]})
    assert decode_request(msg.encode()).messages[0] == UserMessage("x")
    msg = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x", "zz": 1}]})
    with pytest.raises(InvalidRequest) as info:
        decode_request(msg.encode())
    assert info.value.param == "messages.[0].zz"


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b'{"messages": [{"role": "user", "content": "x"}]}', "model"),
        (b'{"model": "m"}', "messages"),
        (b'{"model": "m", "messages": []}', "messages"),
        (b'{"model": 3, "messages": []}', "model"),
        (body(temperature="hot"), "temperature"),
        (body(temperature=2.5), "temperature"),
        (body(temperature=-0.1), "temperature"),
        (body(top_p=1.01), "top_p"),
        (body(n=0), "n"),
        (body(max_tokens=0), "max_tokens"),
        (body(max_completion_tokens=-1), "max_completion_tokens"),
        (body(presence_penalty=3), "presence_penalty"),
        (body(frequency_penalty=-2.5), "frequency_penalty"),
        (body(seed=2**63), "seed"),
        (body(stop=["a", "b", "c", "d", "e"]), "stop"),
        (body(stream="yes"), "stream"),
        (body(metadata={"k": 1}), "metadata"),
        (body(tool_choice="sometimes"), "tool_choice"),
        (b'{"model": "m", "messages": [{"role": "robot", "content": "x"}]}', "messages.[0].role"),
        (b'{"model": "m", "messages": [{"content": "x"}]}', "messages.[0].role"),
        (b'{"model": "m", "messages": [{"role": "user"}]}', "messages.[0].content"),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"},'
            b' {"role": "tool", "content": "x"}]}',
            "messages.[1].tool_call_id",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]}',
            "messages.[0].content.[0].text",
        ),
    ],
)
def test_validation_errors_name_the_param(raw, param):
    assert error_of(raw).param == param


def test_bad_json_is_a_400_without_param():
    err = error_of(b'{"model": "m", ')
    assert err.param is None
    assert err.code.code == "invalid_json"
    assert error_of(b"[1, 2]").param is None


def test_image_parts_outside_user_and_tool_messages_are_refused_naming_them():
    raw = json.dumps(
        {
            "model": "m",
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
                    ],
                },
            ],
        }
    ).encode()
    err = error_of(raw)
    assert err.param == "messages.[1].content.[1].type"
    assert err.code.code == "unsupported_content_type"
    assert "image_url" in err.message and "assistant" in err.message


def test_tool_choice_needs_tools_and_a_known_function():
    assert error_of(body(tool_choice="required")).param == "tool_choice"
    tools = [{"type": "function", "function": {"name": "f"}}]
    named = {"type": "function", "function": {"name": "g"}}
    assert error_of(body(tools=tools, tool_choice=named)).param == "tool_choice"
    assert decode_request(body(tool_choice="none")).tool_choice == "none"
    assert decode_request(body(tools=tools, tool_choice="auto")).tool_choice == "auto"


def test_tool_parameters_must_be_an_object():
    tools = [{"type": "function", "function": {"name": "f", "parameters": [1]}}]
    assert error_of(body(tools=tools)).param == "tools.[0].function.parameters"


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ("Expected `float`, got `str` - at `$.temperature`", "temperature"),
        ("Invalid value 'x' - at `$.messages[0].role`", "messages.[0].role"),
        ("Object missing required field `model`", "model"),
        (
            "Object missing required field `text` - at `$.messages[2].content[1]`",
            "messages.[2].content.[1].text",
        ),
        ("Expected `object`, got `array`", None),
    ],
)
def test_param_from_error(message, param):
    assert param_from_error(message) == param


def test_decoder_accepts_memoryview():
    raw = body()
    assert decode_request(memoryview(raw)).model == "m"
    with pytest.raises(InvalidRequest):
        decode_request(msgspec.json.encode({"model": "m", "messages": "nope"}))
