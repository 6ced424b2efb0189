"""Decoding a Responses request (``openai_responses.request``, ``openai_responses.tools``):
what is refused, with which ``param``; what travels in the extras, as the
client wrote it; how tools and the tool choice map."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.proxy.apis.openai_responses.request import decode_request
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.schema import ToolChoiceMode
from tests.edge.responses.common import decoded

FN = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def refused(body: dict[str, Any] | bytes) -> InvalidRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(InvalidRequest) as caught:
        decode_request(raw)
    return caught.value


def extras(**body: Any) -> dict[str, Any]:
    raw = decoded(**body).extras
    return json.loads(raw) if raw else {}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": "hi", "temperature": 3}, "temperature"),
        ({"model": "m", "input": "hi", "top_p": -1}, "top_p"),
        ({"model": "m", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "m", "input": "hi", "top_logprobs": 21}, "top_logprobs"),
        ({"model": "m", "input": "hi", "truncation": "sometimes"}, "truncation"),
        ({"model": "m", "input": "hi", "metadata": {"a": 1}}, "metadata"),
        ({"model": "m", "input": "hi", "include": "x"}, "include"),
        ({"model": "m", "input": [{"content": "x"}]}, "input.[0].type"),
        ({"model": "m", "input": [{"type": "message", "content": "x"}]}, "input.[0].role"),
        ({"model": "m", "input": [{"role": "tool", "content": "x"}]}, "input.[0].role"),
        ({"model": "m", "input": [{"role": "user"}]}, "input.[0].content"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "nope"}]}]},
            "input.[0].content.[0].type",
        ),
        (
            {"model": "m", "input": ["x", {"type": "function_call", "name": "f"}]},
            "input.[0]",
        ),
        (
            {"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input.[0].call_id",
        ),
        (
            {"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]},
            "input.[0].output",
        ),
        (
            {
                "model": "m",
                "input": [{"type": "reasoning", "summary": [{"type": "x", "text": ""}]}],
            },
            "input.[0].summary.[0].type",
        ),
        (
            {"model": "m", "input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}},
            "text.format.schema",
        ),
        (
            {
                "model": "m",
                "input": "hi",
                "text": {"format": {"type": "json_schema", "name": "x", "schema": 1}},
            },
            "text.format.schema",
        ),
        ({"model": "m", "input": "hi", "text": {"verbosity": "loud"}}, "text.verbosity"),
    ],
)
def test_a_bad_field_is_named(body: dict[str, Any], param: str) -> None:
    err = refused(body)
    assert err.status == 400
    assert err.param == param, err.message


def test_audio_is_refused_by_name() -> None:
    # The Responses API has no audio input part; images and files are
    # carried (tests/edge/responses/test_responses_media.py).
    part = {"type": "input_audio"}
    body = {
        "model": "m",
        "input": [{"role": "user", "content": "a"}, {"role": "user", "content": [part]}],
    }
    err = refused(body)
    assert err.param == "input.[1].content.[0].type"
    assert err.code is codes.UNSUPPORTED_CONTENT_TYPE
    assert "input_audio" in err.message
    item = {"type": "function_call_output", "call_id": "c", "output": [part]}
    err = refused({"model": "m", "input": [item]})
    assert err.param == "input.[0].output.[0].type"
    assert err.code is codes.UNSUPPORTED_CONTENT_TYPE


@pytest.mark.parametrize(
    ("item", "word"),
    [
        ({"type": "item_reference", "id": "msg_1"}, "item_reference"),
        ({"type": "web_search_call", "id": "ws_1", "status": "completed"}, "web_search_call"),
        (
            {"type": "custom_tool_call", "call_id": "c", "name": "x", "input": ""},
            "custom_tool_call",
        ),
    ],
)
def test_items_the_wire_cannot_carry_are_refused_by_name(item: dict[str, Any], word: str) -> None:
    err = refused({"model": "m", "input": [{"role": "user", "content": "a"}, item]})
    assert err.param == "input.[1].type"
    assert word in err.message


@pytest.mark.parametrize(
    ("field", "value"),
    [("background", True), ("conversation", "conv_1"), ("prompt", {"id": "pmpt_1"})],
)
def test_what_flatgate_does_not_keep_is_refused_by_name(field: str, value: Any) -> None:
    err = refused({"model": "m", "input": "hi", field: value})
    assert err.param == field
    assert "not supported" in err.message


def test_null_or_false_for_those_is_accepted() -> None:
    decoded(background=False, conversation=None, prompt=None)


def test_not_json_and_not_utf8_are_invalid_json() -> None:
    assert refused(b"{").code is codes.INVALID_JSON
    raw = b'{"model":"m","input":"hi","client_thing":"\xff"}'
    err = refused(raw)
    assert err.code is codes.INVALID_JSON
    assert err.param == "client_thing"
    tool = b'{"model":"m","input":"hi","tools":[{"type":"web_search","x":"\xc3\x28"}]}'
    assert refused(tool).param == "tools.[0]"


def test_a_string_input_is_one_user_message() -> None:
    d = decoded(input="hello")
    assert [(i.role, i.content) for i in d.items] == [("user", "hello")]


def test_input_may_be_left_out_with_previous_response_id() -> None:
    assert decoded(input=None, previous_response_id="resp_1").items == []


def test_a_message_may_leave_out_its_type() -> None:
    d = decoded(input=[{"role": "developer", "content": [{"type": "input_text", "text": "x"}]}])
    assert d.items[0].type is None and d.items[0].role == "developer"


def test_fields_with_no_slot_travel_in_the_extras_as_sent() -> None:
    got = extras(
        include=["reasoning.encrypted_content"],
        prompt_cache_key="thread-1",
        reasoning={"effort": "high", "summary": "auto", "context": "all_turns"},
        safety_identifier="u-1",
        store=False,
        truncation="auto",
        service_tier="flex",
        top_logprobs=3,
        max_tool_calls=4,
        text={"verbosity": "low"},
        client_metadata={"x": "y"},
        prompt_cache_retention="24h",
    )
    assert got == {
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1",
        "reasoning": {"effort": "high", "summary": "auto", "context": "all_turns"},
        "safety_identifier": "u-1",
        "store": False,
        "truncation": "auto",
        "service_tier": "flex",
        "top_logprobs": 3,
        "max_tool_calls": 4,
        "text": {"verbosity": "low"},
        "client_metadata": {"x": "y"},
        "prompt_cache_retention": "24h",
    }


def test_the_extras_are_the_clients_own_bytes() -> None:
    body = b'{"model":"m","input":"hi","reasoning": {"effort" :  "low"},"zz":[1, 2]}'
    assert decode_request(body).extras == b'{"reasoning":{"effort" :  "low"},"zz":[1, 2]}'


def test_fields_with_a_slot_are_not_extras() -> None:
    assert (
        extras(
            instructions="x",
            max_output_tokens=5,
            temperature=0.5,
            top_p=0.5,
            parallel_tool_calls=False,
            metadata={"a": "b"},
            user="u",
            stream=True,
            stream_options={"include_obfuscation": False},
            previous_response_id="resp_1",
            text={"format": {"type": "json_object"}},
            tools=[FN],
            tool_choice="auto",
        )
        == {}
    )


def test_nulls_are_not_carried() -> None:
    assert extras(include=None, reasoning=None, store=None) == {}


def test_hosted_tools_travel_in_the_extras_and_functions_on_the_wire() -> None:
    web = {"type": "web_search", "search_context_size": "low"}
    mcp = {"type": "mcp", "server_label": "s", "server_url": "https://x"}
    custom = {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}}
    d = decoded(tools=[web, FN, mcp, custom, {"type": "image_generation"}])
    assert [spec[0] for spec in d.tools] == [b"get_weather"]
    assert d.tools[0][2] == b'{"type": "object"}'
    assert json.loads(d.extras)["tools"] == [web, mcp, custom, {"type": "image_generation"}]


def test_namespaces_are_flattened_and_their_other_members_kept() -> None:
    group = {
        "type": "namespace",
        "name": "crm",
        "description": "The CRM.",
        "tools": [
            {"type": "function", "name": "find", "description": "Find one.", "strict": False},
            {"type": "custom", "name": "note"},
        ],
    }
    d = decoded(tools=[FN, group])
    # strict is the Responses API's: true unless the client says false.
    assert [(s[0], s[1], s[3]) for s in d.tools] == [
        (b"get_weather", b"", True),
        # The group's description opens its members'.
        (b"crm__find", b"The CRM.\n\nFind one.", False),
    ]
    assert d.names == {"crm__find": ("crm", "find")}
    assert json.loads(d.extras)["tools"] == [
        {
            "type": "namespace",
            "name": "crm",
            "description": "The CRM.",
            "tools": [{"type": "custom", "name": "note"}],
        }
    ]


def test_tool_names_must_be_unique_after_flattening() -> None:
    group = {"type": "namespace", "name": "a", "tools": [{"type": "function", "name": "b"}]}
    err = refused(
        {"model": "m", "input": "x", "tools": [{"type": "function", "name": "a__b"}, group]}
    )
    assert err.param == "tools.[1].tools.[0].name"


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "function"}, "tools.[0].name"),
        ({"type": "function", "name": "f", "parameters": [1]}, "tools.[0].parameters"),
        ({"name": "f"}, "tools.[0].type"),
        ({"type": "namespace", "tools": []}, "tools.[0].name"),
        (
            {"type": "namespace", "name": "n", "tools": [{"type": "function"}]},
            "tools.[0].tools.[0].name",
        ),
        ({"type": "function", "name": 3}, "tools.[0].name"),
    ],
)
def test_a_bad_tool_is_named(tool: dict[str, Any], param: str) -> None:
    assert refused({"model": "m", "input": "x", "tools": [tool]}).param == param


@pytest.mark.parametrize(
    ("choice", "mode", "name"),
    [
        ("auto", ToolChoiceMode.Auto, ""),
        ("none", ToolChoiceMode.None_, ""),
        ("required", ToolChoiceMode.Required, ""),
        ({"type": "function", "name": "get_weather"}, ToolChoiceMode.Function, "get_weather"),
        ({"type": "function", "name": "find"}, ToolChoiceMode.Function, "crm__find"),
    ],
)
def test_the_tool_choice_maps_to_the_wire(choice: Any, mode: int, name: str) -> None:
    group = {"type": "namespace", "name": "crm", "tools": [{"type": "function", "name": "find"}]}
    d = decoded(tools=[FN, group], tool_choice=choice)
    assert d.choice == (mode, name)
    assert "tool_choice" not in (json.loads(d.extras) if d.extras else {})


def test_a_hosted_tool_choice_travels_in_the_extras() -> None:
    d = decoded(tools=[{"type": "web_search_preview"}], tool_choice={"type": "web_search_preview"})
    assert d.choice == (ToolChoiceMode.Unset, "")
    assert json.loads(d.extras)["tool_choice"] == {"type": "web_search_preview"}


def test_allowed_tools_maps_its_mode_and_travels_too() -> None:
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "get_weather"}],
    }
    d = decoded(tools=[FN], tool_choice=choice)
    assert d.choice == (ToolChoiceMode.Required, "")
    assert json.loads(d.extras)["tool_choice"] == choice


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": "sometimes", "tools": [FN]}, "tool_choice"),
        ({"tool_choice": {"type": "function", "name": "nope"}, "tools": [FN]}, "tool_choice"),
        ({"tool_choice": {"type": "function"}, "tools": [FN]}, "tool_choice.name"),
        ({"tool_choice": {"name": "x"}, "tools": [FN]}, "tool_choice.type"),
    ],
)
def test_a_bad_tool_choice_is_named(body: dict[str, Any], param: str) -> None:
    assert refused({"model": "m", "input": "x", **body}).param == param
