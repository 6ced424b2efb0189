"""``backends.anthropic``: the Messages API request a decoded Chat Completions
request becomes, and what the adapter sends it with.

Bodies are compared as parsed JSON. Where the Anthropic docs give a request,
the test builds the same conversation the OpenAI way and compares; a
``content`` string in the docs is the one-text-block list flatgate sends.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from flatgate.proxy.backends.anthropic.adapter import AnthropicAdapter, encode_request
from flatgate.proxy.backends.anthropic.config import AnthropicConfig
from flatgate.proxy.backends.base import Inbound, Untranslatable
from flatgate.proxy.wire.request.decode import (
    Function,
    FunctionCall,
    Message,
    Request,
    Tool,
    ToolCall,
)
from flatgate.proxy.wire.schema import ToolChoiceMode
from tests.backends.helpers import fixture, request, request_raw, user

WEATHER_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}
    },
    "required": ["location"],
}
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given location",
        "parameters": WEATHER_PARAMS,
    },
}


def encode(body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    kw.setdefault("model", "claude-test")
    out: dict[str, Any] = json.loads(encode_request(request(body), **kw))
    return out


def minimal(**extra: Any) -> dict[str, Any]:
    return {"model": "client-model", "messages": [user("hi")], **extra}


def text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


def assistant_calls(*calls: tuple[str, str, str], content: str | None = None) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ],
    }


def tool_result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def normalized(doc: dict[str, Any]) -> dict[str, Any]:
    """A documented request with each string ``content`` as its one text block."""
    out: dict[str, Any] = json.loads(json.dumps(doc))
    for m in out["messages"]:
        if isinstance(m["content"], str):
            m["content"] = [text(m["content"])]
    return out


def adapter(**kw: Any) -> AnthropicAdapter:
    kw.setdefault("url", "https://api.anthropic.com/v1")
    return AnthropicAdapter(AnthropicConfig(name="an", protocol="anthropic", **kw))


# -- against the docs ----------------------------------------------------------


def test_a_basic_request_is_the_documented_shape() -> None:
    # The Messages API's first example: model, max_tokens, one user message.
    documented = {
        "model": "claude-test",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Hello, world"}],
    }
    body = encode(minimal(messages=[user("Hello, world")], max_tokens=1024))
    assert body == {**normalized(documented), "stream": True}


def test_a_tool_use_round_trip_is_the_documented_request() -> None:
    # The tool-use guide's get_weather conversation: the assistant turn is the
    # documented tool_use response (fixture), the tool result the documented
    # follow-up user message.
    response = json.loads(fixture("anthropic_response_tool_use.json"))
    said, used = response["content"]
    documented = {
        "model": "claude-test",
        "max_tokens": 1024,
        "tools": [
            {
                "name": "get_weather",
                "description": "Get the current weather in a given location",
                "input_schema": WEATHER_PARAMS,
            }
        ],
        "messages": [
            {"role": "user", "content": "What's the weather like in San Francisco?"},
            {"role": "assistant", "content": response["content"]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": used["id"], "content": "15 degrees"}
                ],
            },
        ],
    }
    client = minimal(
        max_tokens=1024,
        tools=[WEATHER_TOOL],
        messages=[
            user("What's the weather like in San Francisco?"),
            assistant_calls(
                (used["id"], used["name"], json.dumps(used["input"])), content=said["text"]
            ),
            tool_result(used["id"], "15 degrees"),
        ],
    )
    assert encode(client) == {**normalized(documented), "stream": True}


def test_stream_is_false_only_for_a_whole_answer() -> None:
    # The client's own stream flag is the adapter's to weigh (prepare), not
    # the body's: the encoder writes what it is told.
    assert encode(minimal(stream=False))["stream"] is True
    assert encode(minimal(stream=True), whole=True)["stream"] is False
    assert encode(minimal(), whole=True)["stream"] is False


# -- system and developer --------------------------------------------------------


def test_system_and_developer_messages_become_system_blocks_in_order() -> None:
    body = encode(
        minimal(
            messages=[
                {"role": "system", "content": "You are terse."},
                {"role": "developer", "content": "Answer in French."},
                user("hi"),
                {"role": "system", "content": "Late system note."},
                {"role": "assistant", "content": "Salut."},
            ]
        )
    )
    assert body["system"] == [
        text("You are terse."),
        text("Answer in French."),
        text("Late system note."),
    ]
    assert body["messages"] == [
        {"role": "user", "content": [text("hi")]},
        {"role": "assistant", "content": [text("Salut.")]},
    ]


def test_no_system_messages_sends_no_system() -> None:
    assert "system" not in encode(minimal())


def test_an_empty_system_message_sends_no_block() -> None:
    body = encode(minimal(messages=[{"role": "system", "content": ""}, user("hi")]))
    assert "system" not in body


# -- tool calls and results ----------------------------------------------------


def test_consecutive_tool_results_go_in_one_user_message_before_its_text() -> None:
    body = encode(
        minimal(
            tools=[WEATHER_TOOL],
            messages=[
                user("Paris and Rome?"),
                assistant_calls(
                    ("call_1", "get_weather", '{"location": "Paris"}'),
                    ("call_2", "get_weather", '{"location": "Rome"}'),
                ),
                tool_result("call_1", "18C"),
                tool_result("call_2", "24C"),
                user("Which is warmer?"),
            ],
        )
    )
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "24C"},
            text("Which is warmer?"),
        ],
    }
    assert len(body["messages"]) == 3


def test_tool_results_come_first_even_when_user_text_is_between_them() -> None:
    # The API wants every tool_result before any text in that user message.
    body = encode(
        minimal(
            messages=[
                user("q"),
                assistant_calls(("c1", "f", "{}"), ("c2", "f", "{}")),
                tool_result("c1", "r1"),
                user("meanwhile"),
                tool_result("c2", "r2"),
            ]
        )
    )
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "r1"},
        {"type": "tool_result", "tool_use_id": "c2", "content": "r2"},
        text("meanwhile"),
    ]


def test_assistant_tool_calls_become_tool_use_blocks_with_parsed_input() -> None:
    body = encode(
        minimal(
            tools=[WEATHER_TOOL],
            messages=[
                user("q"),
                assistant_calls(
                    ("call_1", "get_weather", '{"location": "Paris", "days": [1, 2]}'),
                    content="Checking.",
                ),
                tool_result("call_1", "ok"),
            ],
        )
    )
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            text("Checking."),
            {
                "type": "tool_use",
                "id": "call_1",
                "name": "get_weather",
                "input": {"location": "Paris", "days": [1, 2]},
            },
        ],
    }


def test_tool_use_input_is_the_arguments_text_unchanged() -> None:
    args = '{ "b" : 1,"a":"\\u00e9" }'
    req = request(minimal(messages=[user("q"), assistant_calls(("c", "f", args))]))
    assert b'"input":' + args.encode() in encode_request(req, model="m")


@pytest.mark.parametrize("args", ["", "   ", "\n"])
def test_empty_arguments_are_an_empty_object(args: str) -> None:
    body = encode(minimal(messages=[user("q"), assistant_calls(("c", "now", args))]))
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c", "name": "now", "input": {}}
    ]


@pytest.mark.parametrize("args", ["[1, 2]", "null", "3", '"text"', "{bad json", "true"])
def test_arguments_that_are_not_a_json_object_are_untranslatable(args: str) -> None:
    req = request(
        minimal(
            messages=[
                user("q"),
                {"role": "assistant", "content": "x"},
                user("r"),
                assistant_calls(("c", "f", args)),
            ]
        )
    )
    with pytest.raises(Untranslatable, match=r"messages\[3\]"):
        encode_request(req, model="m")


def test_an_empty_tool_result_sends_no_content() -> None:
    body = encode(
        minimal(messages=[user("q"), assistant_calls(("c", "f", "{}")), tool_result("c", "")])
    )
    assert body["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "c"}]


# -- blocks and turns ----------------------------------------------------------


def test_no_empty_text_blocks_are_sent() -> None:
    body = encode(
        minimal(
            messages=[
                user("q"),
                assistant_calls(("c", "f", "{}"), content=""),
                tool_result("c", "r"),
                user(""),
            ]
        )
    )
    for m in body["messages"]:
        for block in m["content"]:
            assert block.get("type") != "text" or block["text"], m
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c", "name": "f", "input": {}}
    ]


def test_a_message_left_with_no_blocks_is_dropped_and_its_neighbours_merge() -> None:
    body = encode(minimal(messages=[user("a"), {"role": "assistant", "content": ""}, user("b")]))
    assert body["messages"] == [{"role": "user", "content": [text("a"), text("b")]}]


def test_consecutive_messages_of_one_role_are_merged() -> None:
    body = encode(
        minimal(
            messages=[
                user("one"),
                user("two"),
                {"role": "assistant", "content": "three"},
                {"role": "assistant", "content": "four"},
                user("five"),
            ]
        )
    )
    assert body["messages"] == [
        {"role": "user", "content": [text("one"), text("two")]},
        {"role": "assistant", "content": [text("three"), text("four")]},
        {"role": "user", "content": [text("five")]},
    ]


def test_roles_alternate_in_every_request() -> None:
    body = encode(
        minimal(
            tools=[WEATHER_TOOL],
            messages=[
                {"role": "system", "content": "s"},
                user("a"),
                user("b"),
                assistant_calls(("c1", "get_weather", "{}")),
                tool_result("c1", "r1"),
                {"role": "developer", "content": "d"},
                user("c"),
                {"role": "assistant", "content": "x"},
                assistant_calls(("c2", "get_weather", "")),
                tool_result("c2", "r2"),
            ],
        )
    )
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]


# -- tool definitions and tool_choice --------------------------------------------


def test_tools_become_name_description_and_input_schema() -> None:
    body = encode(minimal(tools=[WEATHER_TOOL]))
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "input_schema": WEATHER_PARAMS,
        }
    ]


def test_a_tool_without_parameters_gets_an_object_schema_and_no_description() -> None:
    body = encode(minimal(tools=[{"type": "function", "function": {"name": "now"}}]))
    assert body["tools"] == [{"name": "now", "input_schema": {"type": "object"}}]


def test_tool_parameters_are_preserved_byte_for_byte_as_input_schema() -> None:
    params = b'{ "type":"object","properties":{"q":{"type":"string"}} , "required":["q"]}'
    client = (
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],'
        b'"tools":[{"type":"function","function":{"name":"s","parameters":' + params + b"}}]}"
    )
    assert b'"input_schema":' + params in encode_request(request_raw(client), model="m")


@pytest.mark.parametrize(
    ("choice", "want"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "tool", "name": "get_weather"},
        ),
    ],
    ids=["auto", "none", "any", "tool"],
)
def test_tool_choice_forms(choice: Any, want: dict[str, Any]) -> None:
    assert encode(minimal(tools=[WEATHER_TOOL], tool_choice=choice))["tool_choice"] == want


@pytest.mark.parametrize(
    ("choice", "want"),
    [
        ("auto", {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", {"type": "any", "disable_parallel_tool_use": True}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        ),
        ("none", {"type": "none"}),
    ],
    ids=["auto", "any", "tool", "none"],
)
def test_parallel_tool_calls_false_disables_parallel_tool_use(
    choice: Any, want: dict[str, Any]
) -> None:
    body = encode(minimal(tools=[WEATHER_TOOL], tool_choice=choice, parallel_tool_calls=False))
    assert body["tool_choice"] == want


def test_parallel_tool_calls_false_without_tool_choice_is_auto_without_parallel_use() -> None:
    body = encode(minimal(tools=[WEATHER_TOOL], parallel_tool_calls=False))
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


def test_parallel_tool_calls_true_or_unset_sends_no_tool_choice() -> None:
    assert "tool_choice" not in encode(minimal(tools=[WEATHER_TOOL], parallel_tool_calls=True))
    assert "tool_choice" not in encode(minimal(tools=[WEATHER_TOOL]))


def test_tool_choice_is_sent_only_with_tools() -> None:
    req = Request(
        model_name="m",
        messages=[Message(role="user", content="x")],
        tool_choice=int(ToolChoiceMode.Required),
        parallel_tool_calls=False,
    )
    body = json.loads(encode_request(req, model="m"))
    assert "tools" not in body
    assert "tool_choice" not in body


# -- the other fields ------------------------------------------------------------


def test_stop_becomes_stop_sequences() -> None:
    assert encode(minimal(stop=["\n\nHuman:", "END"]))["stop_sequences"] == ["\n\nHuman:", "END"]
    assert "stop_sequences" not in encode(minimal())


def test_max_tokens_is_the_requests() -> None:
    assert encode(minimal(max_tokens=300))["max_tokens"] == 300
    assert encode(minimal(max_completion_tokens=301))["max_tokens"] == 301


def test_max_tokens_defaults_when_the_request_has_none() -> None:
    assert encode(minimal())["max_tokens"] == 4096
    assert encode(minimal(), default_max_tokens=1000)["max_tokens"] == 1000


def test_the_adapters_default_max_tokens_is_used() -> None:
    req = request(minimal())
    out = json.loads(
        adapter(default_max_tokens=777).prepare(Inbound(b"", lambda: req, "r", "")).body
    )
    assert out["max_tokens"] == 777


def test_user_becomes_metadata_user_id() -> None:
    assert encode(minimal(user="user-123"))["metadata"] == {"user_id": "user-123"}
    assert "metadata" not in encode(minimal())


def test_temperature_and_top_p_are_sent() -> None:
    body = encode(minimal(temperature=0.5, top_p=0.25))
    assert body["temperature"] == 0.5
    assert body["top_p"] == 0.25


def test_dropped_fields_are_absent() -> None:
    body = encode(
        minimal(
            seed=1,
            presence_penalty=0.5,
            frequency_penalty=0.5,
            n=2,
            response_format={"type": "json_object"},
            metadata={"trace": "t"},
            stream_options={"include_usage": True},
            tools=[WEATHER_TOOL],
            parallel_tool_calls=True,
        )
    )
    assert set(body) == {"model", "max_tokens", "messages", "stream", "tools"}


def test_a_minimal_request() -> None:
    assert encode(minimal()) == {
        "model": "claude-test",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [text("hi")]}],
        "stream": True,
    }


def test_a_request_built_as_structs() -> None:
    req = Request(
        model_name="m",
        messages=[
            Message(role="user", content="q"),
            Message(
                role="assistant",
                tool_calls=[ToolCall("c", FunctionCall("f", '{"a": 1}'))],
            ),
            Message(role="tool", content="r", tool_call_id="c"),
        ],
        tools=[Tool(Function(name="f", parameters=msgspec.Raw(b'{"type":"object"}')))],
        tool_choice=int(ToolChoiceMode.Function),
        tool_choice_name="f",
    )
    body = json.loads(encode_request(req, model="claude"))
    assert body["tool_choice"] == {"type": "tool", "name": "f"}
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c", "name": "f", "input": {"a": 1}}
    ]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c", "content": "r"}
    ]
