"""The OpenAI stub's request validation: what OpenAI would refuse, refused alike."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.proxy.backends.dialect import Rejected
from flatgate.proxy.backends.openai.stub import OpenAIWire
from flatgate.proxy.wire.schema import Role

WIRE = OpenAIWire()
USER = [{"role": "user", "content": "hi there"}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def parse(body: dict[str, Any] | bytes, **headers: str) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return WIRE.parse(raw, headers.get)


def refused(body: dict[str, Any] | bytes) -> dict[str, Any]:
    with pytest.raises(Rejected) as info:
        parse(body)
    reply = info.value.reply
    assert reply.status == 400
    doc: dict[str, Any] = json.loads(reply.body)
    assert set(doc) == {"error"}
    assert set(doc["error"]) == {"message", "type", "param", "code"}
    assert doc["error"]["type"] == "invalid_request_error"
    error: dict[str, Any] = doc["error"]
    return error


def test_a_full_request_reads_out_what_the_echo_needs() -> None:
    req = parse(
        {
            "model": "gpt-x@die:3",
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "developer", "content": [{"type": "text", "text": "dev"}]},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "b"}],
                },
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
                {"role": "tool", "tool_call_id": "c1", "content": "result"},
            ],
            "max_tokens": 9,
            "max_completion_tokens": 4,
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "some_future_field": {"x": 1},
        },
        **{"x-request-id": "rid-9"},
    )
    assert req.model == "gpt-x" and (req.fault, req.fault_after) == ("die", 3)
    assert req.request_id == "rid-9"
    assert req.max_tokens == 4  # max_completion_tokens wins
    assert req.forced_tool == "f"
    assert req.stream and req.include_usage
    assert req.last_user == "a b"
    assert [r for r, _ in req.messages] == [
        Role.System, Role.Developer, Role.User, Role.Assistant, Role.Tool,
    ]  # fmt: skip


def test_defaults() -> None:
    req = parse({"model": "m", "messages": USER, "max_tokens": 5})
    assert (req.max_tokens, req.stream, req.include_usage, req.forced_tool) == (5, False, False, "")
    assert (
        parse(
            {"model": "m", "messages": USER, "tools": TOOLS, "tool_choice": "required"}
        ).forced_tool
        == ""
    )


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"messages": USER}, None, None),
        ({"model": "", "messages": USER}, None, None),
        ({"model": "m"}, "messages", "missing_required_parameter"),
        ({"model": "m", "messages": []}, "messages", "empty_array"),
        (
            {"model": "m", "messages": [{"role": "robot", "content": "x"}]},
            "messages[0].role",
            "invalid_value",
        ),
        (
            {"model": "m", "messages": [{"content": "x"}]},
            "messages[0].role",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "messages": [*USER, {"role": "tool", "content": "x"}]},
            "messages[1].tool_call_id",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "messages": [{"role": "user"}]},
            "messages[0].content",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "messages": [{"role": "assistant"}]},
            "messages[0].content",
            "invalid_value",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": 7}]},
            "messages[0].content",
            "invalid_type",
        ),
        (
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ],
            },
            "messages[0].content[0].image_url.url",
            "invalid_value",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "sticker"}]}]},
            "messages[0].content[0].type",
            "invalid_value",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages[0].content[0].text",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "messages": USER, "max_tokens": 0},
            "max_tokens",
            "integer_below_min_value",
        ),
        (
            {"model": "m", "messages": USER, "max_completion_tokens": -1},
            "max_completion_tokens",
            "integer_below_min_value",
        ),
        ({"model": "m", "messages": USER, "max_tokens": "ten"}, "max_tokens", "invalid_type"),
        ({"model": "m", "messages": USER, "n": 2}, "n", "unsupported_value"),
        ({"model": "m", "messages": USER, "temperature": 3}, "temperature", "invalid_value"),
        (
            {"model": "m", "messages": USER, "stream_options": {"include_usage": True}},
            "stream_options",
            None,
        ),
        ({"model": "m", "messages": USER, "tool_choice": "auto"}, "tool_choice", None),
        (
            {"model": "m", "messages": USER, "tools": TOOLS, "tool_choice": "always"},
            "tool_choice",
            "invalid_value",
        ),
        (
            {
                "model": "m",
                "messages": USER,
                "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
            "tool_choice.function.name",
            "invalid_value",
        ),
        (
            {"model": "m", "messages": USER, "tools": [{"type": "function", "function": {}}]},
            "tools[0].function.name",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "messages": USER, "tools": [{"type": "web", "function": {"name": "f"}}]},
            "tools[0].type",
            "invalid_value",
        ),
    ],
)
def test_refused_like_openai(body: dict[str, Any], param: str | None, code: str | None) -> None:
    error = refused(body)
    assert (error["param"], error["code"]) == (param, code), error["message"]
    assert error["message"]


def test_a_body_that_is_not_json_or_not_an_object() -> None:
    assert "parse the JSON body" in refused(b"{not json")["message"]
    assert refused(b"[1, 2]")["param"] is None


def test_keys_of_no_name_are_ignored_at_any_depth_as_openai_does() -> None:
    req = parse(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {}}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}", "x": 1},
                            "y": [2],
                        }
                    ],
                    "provider_fields": {"a": "b"},
                },
                {"role": "tool", "tool_call_id": "c1", "content": "ok", "z": None},
            ],
            "tools": [{**TOOLS[0], "defer_loading": True}],
            "tool_choice": {"type": "function", "function": {"name": "f", "w": 0}},
            "stream": True,
            "stream_options": {"include_usage": True, "future": "x"},
            "vendor_field": 1,
        }
    )
    assert req.forced_tool == "f" and req.include_usage
    assert [r for r, _ in req.messages] == [Role.User, Role.Assistant, Role.Tool]


def test_more_stop_sequences_than_openais_four_are_taken_as_vllm_takes_them() -> None:
    stops = ["a", "b", "c", "d", "e"]
    assert parse({"model": "m", "messages": USER, "stop": stops}).stop == tuple(stops)
    error = refused({"model": "m", "messages": USER, "stop": ["a", "b", "c", "d", 5]})
    assert (error["param"], error["code"]) == ("stop[4]", "invalid_type")


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"presence_penalty": 3}, "presence_penalty", "invalid_value"),
        ({"seed": 2**63}, "seed", "invalid_value"),
        ({"max_tokens": 2**31}, "max_tokens", "integer_above_max_value"),
        ({"n": 200}, "n", "unsupported_value"),
        ({"messages": [{"role": "function", "name": "f", "content": "r"}]}, "messages[0].role",
         "invalid_value"),
        ({"messages": [{"role": "user", "content": None}]}, "messages[0].content",
         "missing_required_parameter"),
    ],
)  # fmt: skip
def test_the_models_bounds_are_said_in_openais_words(
    body: dict[str, Any], param: str, code: str
) -> None:
    error = refused({"model": "m", "messages": USER, **body})
    assert (error["param"], error["code"]) == (param, code), error["message"]
