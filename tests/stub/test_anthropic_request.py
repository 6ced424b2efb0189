"""The Anthropic stub's request validation: what the Messages API would refuse."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.proxy.backends.anthropic.stub import AnthropicWire
from flatgate.proxy.backends.dialect import Rejected, StubRequest
from flatgate.proxy.wire.schema import Role

WIRE = AnthropicWire()
VERSION = {"anthropic-version": "2023-06-01"}
USER = [{"role": "user", "content": "hi there"}]
TOOLS = [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]


def parse(body: dict[str, Any] | bytes, headers: dict[str, str] = VERSION) -> StubRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return WIRE.parse(raw, headers.get)


def refused(body: dict[str, Any] | bytes, headers: dict[str, str] = VERSION) -> str:
    with pytest.raises(Rejected) as info:
        parse(body, headers)
    reply = info.value.reply
    assert reply.status == 400
    doc = json.loads(reply.body)
    assert doc["type"] == "error"
    assert doc["error"]["type"] == "invalid_request_error"
    message: str = doc["error"]["message"]
    return message


def base(**kw: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 16, "messages": USER, **kw}


def test_a_full_request_reads_out_what_the_echo_needs() -> None:
    req = parse(
        base(
            model="claude-x@error:1",
            system=[{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}],
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "first question"}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "calling"},
                        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"q": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [{"type": "text", "text": "42"}],
                            "is_error": False,
                        }
                    ],
                },
            ],
            tools=TOOLS,
            tool_choice={"type": "tool", "name": "f", "disable_parallel_tool_use": True},
            stop_sequences=["END"],
            stream=True,
            temperature=0.5,
            metadata={"user_id": "u"},
        ),
        {**VERSION, "x-request-id": "rid-3"},
    )
    assert (req.model, req.fault, req.fault_after) == ("claude-x", "error", 1)
    assert req.request_id == "rid-3"
    assert req.forced_tool == "f"
    assert req.max_tokens == 16 and req.stream
    assert req.messages == (
        (Role.System, "be brief"),
        (Role.User, "first question"),
        (Role.Assistant, "calling"),
        (Role.Tool, "42"),
    )
    # the last user message that has text
    assert req.last_user == "first question"


def test_string_system_and_content() -> None:
    req = parse(base(system="sys prompt", messages=[{"role": "user", "content": "a b"}]))
    assert req.messages == ((Role.System, "sys prompt"), (Role.User, "a b"))
    assert (req.forced_tool, req.stream) == ("", False)
    assert parse(base(tools=TOOLS, tool_choice={"type": "any"})).forced_tool == ""


def test_a_final_assistant_prefill_may_be_empty() -> None:
    parse(base(messages=[*USER, {"role": "assistant", "content": ""}]))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"max_tokens": 5, "messages": USER}, "model: Field required"),
        (base(model=""), "model: String should have at least 1 character"),
        ({"model": "m", "messages": USER}, "max_tokens: Field required"),
        (base(max_tokens=0), "max_tokens: Input should be greater than or equal to 1"),
        ({"model": "m", "max_tokens": 5}, "messages: Field required"),
        (base(messages=[]), "messages: at least one message is required"),
        (
            base(messages=[{"role": "system", "content": "sys"}, *USER]),
            'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
            'parameter, not "system" as an input message role.',
        ),
        (base(messages=[{"role": "tool", "content": "x"}]), "messages.0.role"),
        (base(messages=[{"role": "user"}]), "messages.0.content: Field required"),
        (
            base(messages=[{"role": "user", "content": ""}]),
            "messages.0: all messages must have non-empty content",
        ),
        (
            base(messages=[{"role": "user", "content": []}]),
            "messages.0: all messages must have non-empty content",
        ),
        (
            base(messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}]),
            "messages: text content blocks must be non-empty",
        ),
        (
            base(messages=[{"role": "user", "content": [{"type": "text", "text": "  "}]}]),
            "messages: text content blocks must contain non-whitespace text",
        ),
        (
            base(system=[{"type": "text", "text": ""}]),
            "system: text content blocks must be non-empty",
        ),
        (
            base(messages=[{"role": "user", "content": [{"type": "search_result"}]}]),
            "messages.0.content.0.type",
        ),
        (
            base(messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}]),
            "messages.0.content.0.source.type: Field required",
        ),
        (
            base(
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                    }
                ]
            ),
            "tool_use blocks are only allowed in assistant messages",
        ),
        (
            base(
                messages=[
                    *USER,
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "input": {}}],
                    },
                ]
            ),
            "messages.1.content.0.name: Field required",
        ),
        (
            base(messages=[{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]),
            "messages.0.content.0.tool_use_id: Field required",
        ),
        (
            base(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "image"}],
                            }
                        ],
                    }
                ]
            ),
            "messages.0.content.0.content.0.source: Field required",
        ),
        (
            base(tool_choice={"type": "tool", "name": "f"}),
            "tool_choice: may only be specified while providing tools",
        ),
        (base(tools=TOOLS, tool_choice={"type": "tool"}), "tool_choice.name: Field required"),
        (
            base(tools=TOOLS, tool_choice={"type": "tool", "name": "g"}),
            "tool_choice.name: tool 'g' not found",
        ),
        (
            base(tools=TOOLS, tool_choice={"type": "sometimes"}),
            "tool_choice.type: Input tag 'sometimes'",
        ),
        (base(tools=[{"name": "f"}]), "tools.0.custom.input_schema: Field required"),
        (base(tools=[{"description": "d", "input_schema": {}}]), "tools.0.name: Field required"),
        (base(max_tokens="many"), "max_tokens: Expected `int"),
        (base(temperature=1.5), "temperature: Input should be less than or equal to 1"),
        (base(frequency_penalty=0.5), "frequency_penalty: Extra inputs are not permitted"),
        (b"{nope", "not valid JSON"),
        (b"[1]", "Invalid request body: Expected `object`"),
    ],
)
def test_refused_like_anthropic(body: dict[str, Any] | bytes, message: str) -> None:
    assert message in refused(body)


def test_the_version_header_is_required() -> None:
    assert refused(base(), {}) == "anthropic-version: header is required"
