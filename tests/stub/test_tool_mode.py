"""The stub's tool modes (``[stub] tools``, ``dialect.ToolMode``): in every
protocol each wire reads the function tools a request offers
(``StubRequest.offered``, none when ``tool_choice`` says none), and in the
``offered`` mode the stub calls the one it is offered, unasked, with
arguments its schema accepts, when the conversation ends with the user's
input; ``named`` (the default) calls only the tool ``tool_choice`` names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from flatgate.edge_translator.openai.translate import write_request
from flatgate.proxy.apis.openai_chat.request import decode_request
from flatgate.proxy.backends.anthropic.stub import AnthropicWire
from flatgate.proxy.backends.dialect import (
    OfferedTool,
    StubRequest,
    Wire,
    answer,
    arguments_for,
)
from flatgate.proxy.backends.fbs.stub import FbsWire
from flatgate.proxy.backends.openai.stub import OpenAIWire
from flatgate.proxy.backends.responses.stub import ResponsesWire
from flatgate.proxy.stub.settings import stub_problems
from flatgate.proxy.wire.schema import FinishReason, Role
from tests.stub.helpers import stub

# The Open Responses compliance suite's tool-calling request, in each API.
ASK = "What's the weather like in San Francisco?"
WEATHER = {
    "type": "object",
    "properties": {"location": {"type": "string", "description": "The city and state"}},
    "required": ["location"],
}
OTHER = {"type": "object", "properties": {}}
HEADERS = {"anthropic-version": "2023-06-01"}


def _chat(tools: list[dict[str, Any]], choice: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": ASK}],
        "tools": [
            {"type": "function", "function": {"name": t["name"], "parameters": t["schema"]}}
            for t in tools
        ],
    }
    if choice is not None:
        body["tool_choice"] = choice
    return body


def chat_body(tools: list[dict[str, Any]], none: bool = False) -> bytes:
    return msgspec.json.encode(_chat(tools, "none" if none else None))


def fbs_body(tools: list[dict[str, Any]], none: bool = False) -> bytes:
    req = decode_request(msgspec.json.encode(_chat(tools, "none" if none else None)))
    return write_request(req, provider=0, model_name="m")


def responses_body(tools: list[dict[str, Any]], none: bool = False) -> bytes:
    body: dict[str, Any] = {
        "model": "m",
        "input": [{"type": "message", "role": "user", "content": ASK}],
        "tools": [{"type": "function", "name": t["name"], "parameters": t["schema"]} for t in tools]
        + [{"type": "web_search"}],
    }
    if none:
        body["tool_choice"] = "none"
    return msgspec.json.encode(body)


def anthropic_body(tools: list[dict[str, Any]], none: bool = False) -> bytes:
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": ASK}],
        "tools": [{"name": t["name"], "input_schema": t["schema"]} for t in tools]
        + [{"type": "web_search_20250305", "name": "web_search"}],
    }
    if none:
        body["tool_choice"] = {"type": "none"}
    return msgspec.json.encode(body)


WIRES: dict[str, tuple[Wire, Any]] = {
    "fbs": (FbsWire(), fbs_body),
    "openai": (OpenAIWire(), chat_body),
    "openai-responses": (ResponsesWire(), responses_body),
    "anthropic": (AnthropicWire(), anthropic_body),
}


@pytest.mark.parametrize("protocol", WIRES)
def test_each_wire_reads_the_function_tools_offered(protocol: str) -> None:
    wire, body = WIRES[protocol]
    tools = [{"name": "get_weather", "schema": WEATHER}, {"name": "other", "schema": OTHER}]
    req = wire.parse(body(tools), HEADERS.get)
    # Hosted and server tools are the provider's to run: not offered.
    assert [t.name for t in req.offered] == ["get_weather", "other"]
    assert json.loads(req.offered[0].parameters) == WEATHER
    assert wire.parse(body(tools, none=True), HEADERS.get).offered == ()


@pytest.mark.parametrize("protocol", WIRES)
def test_offered_the_stub_calls_the_one_tool_with_arguments_its_schema_takes(
    protocol: str,
) -> None:
    wire, body = WIRES[protocol]
    req = wire.parse(body([{"name": "get_weather", "schema": WEATHER}]), HEADERS.get)
    ans = answer(req, wire.tool_id_prefix, "offered")
    assert ans.finish == FinishReason.TOOL_CALLS and ans.deltas == ()
    assert ans.tool_call is not None and ans.tool_call.name == "get_weather"
    assert json.loads(ans.tool_call.arguments) == {"location": ASK}
    # Rendered in the protocol's shape, as a named tool's call is.
    whole = wire.complete(req, ans, HEADERS.get)
    assert whole.status == 200
    # Named (the default): no tool named, so the echo.
    assert answer(req, wire.tool_id_prefix).tool_call is None
    # Told not to call one, it does not.
    refrained = wire.parse(
        body([{"name": "get_weather", "schema": WEATHER}], none=True), HEADERS.get
    )
    assert answer(refrained, wire.tool_id_prefix, "offered").tool_call is None


def _req(**kw: Any) -> StubRequest:
    fields: dict[str, Any] = {
        "request_id": "r1",
        "model": "m",
        "messages": ((Role.System, "sys"), (Role.User, "a b")),
        "max_tokens": 0,
        "forced_tool": "",
        "stream": False,
        "offered": (OfferedTool("f", json.dumps(WEATHER)),),
    }
    fields.update(kw)
    return StubRequest(**fields)


def test_offered_only_one_tool_and_only_on_new_input() -> None:
    assert answer(_req(), "call_", "offered").tool_call is not None
    two = (OfferedTool("f"), OfferedTool("g"))
    assert answer(_req(offered=two), "call_", "offered").text == "a b"
    # After the tool's result (or an assistant's turn), the stub answers:
    # an agent loop ends.
    done = ((Role.User, "a b"), (Role.Assistant, ""), (Role.Tool, "sunny"))
    assert answer(_req(messages=done), "call_", "offered").text == "a b"
    again = (*done, (Role.User, "and tomorrow?"), (Role.System, "note"))
    assert answer(_req(messages=again), "call_", "offered").tool_call is not None
    # A tool_choice that names a tool wins, with the named mode's arguments.
    named = answer(_req(offered=two, forced_tool="g"), "call_", "offered").tool_call
    assert named is not None and (named.name, named.arguments) == ("g", '{"input": "a b"}')


@pytest.mark.parametrize(
    ("schema", "arguments"),
    [
        (WEATHER, {"location": "t"}),
        (
            {
                "type": "object",
                "properties": {
                    "unit": {"enum": ["c", "f"]},
                    "days": {"type": "integer"},
                    "exact": {"type": ["boolean", "null"]},
                    "tags": {"type": "array"},
                    "where": {"type": "object"},
                    "v": {"const": 2},
                    "note": {"type": "string"},
                },
                "required": ["unit", "days", "exact", "tags", "where", "v"],
            },
            {"unit": "c", "days": 0, "exact": False, "tags": [], "where": {}, "v": 2},
        ),
        ({"type": "object", "properties": {}}, {}),
        ({"type": "object"}, {"input": "t"}),
        (None, {"input": "t"}),
    ],
)
def test_arguments_are_what_the_schema_requires(schema: Any, arguments: Any) -> None:
    assert json.loads(arguments_for(json.dumps(schema) if schema else "", "t")) == arguments


def test_the_tool_mode_is_checked() -> None:
    assert stub_problems({"stub": {"tools": "offered"}}, {}) == []
    [problem] = stub_problems({"stub": {"tools": "always"}}, {})
    assert problem.startswith("stub.tools:"), problem


@pytest.mark.integration
def test_flatgate_stub_tools_offered_calls_the_tool(tmp_path: Path) -> None:
    """The suite's tool-calling request, to ``flatgate stub --tools offered``."""
    with stub("openai-responses", tmp_path, "--tools", "offered") as s:
        body = responses_body([{"name": "get_weather", "schema": WEATHER}])
        r = httpx.post(f"{s.url}/v1/responses", content=body, timeout=10)
    assert r.status_code == 200, r.text
    [call] = [item for item in r.json()["output"] if item["type"] == "function_call"]
    assert call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"location": ASK}
