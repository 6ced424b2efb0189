"""The Messages request: what it accepts and refuses (``anthropic_messages.request``), and
the ``CompletionRequest`` it becomes (``anthropic.translate``), read back with
the generated accessors."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.errors import InvalidRequest
from flatgate.proxy.apis.anthropic_messages.request import decode_count_tokens, decode_messages
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.schema import Role, ToolChoiceMode
from tests.edge.helpers import decode_request_fb

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
TOOL = {"name": "lookup", "description": "looks up", "input_schema": SCHEMA}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}}


def body(**fields: Any) -> bytes:
    base: dict[str, Any] = {
        "model": "claude",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hello"}],
    }
    base.update(fields)
    return json.dumps(base).encode()


def wire(**fields: Any) -> dict[str, Any]:
    """The request's ``CompletionRequest``, verified, every field decoded."""
    buf = write_messages(
        decode_messages(body(**fields)),
        provider=1,
        model_name="claude",
        tenant="acme",
        request_id="msg_1",
    )
    verify_request(buf)
    assert (read_route(buf)[0], bytes(read_route(buf)[1])) == (1, b"claude")
    return decode_request_fb(buf)


def messages(**fields: Any) -> list[tuple[int, str, str, bool, list[tuple[str, str, str]]]]:
    """(role, content, tool_call_id, is_error, calls) of each wire message."""
    out = []
    for m in wire(**fields)["messages"]:
        calls = [
            (c["id"].decode(), c["name"].decode(), c["arguments"].decode())
            for c in m["toolCalls"] or ()
        ]
        out.append(
            (
                m["role"],
                (m["content"] or b"").decode(),
                (m["toolCallId"] or b"").decode(),
                m["isError"],
                calls,
            )
        )
    return out


def refused(data: bytes | dict[str, Any], needle: str, code: str = "invalid_request") -> None:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    with pytest.raises(InvalidRequest) as info:
        write_messages(decode_messages(raw), provider=1, model_name="m")
    assert needle in info.value.message, info.value.message
    assert info.value.code.code == code


# -- what it becomes ------------------------------------------------------------


def test_a_minimal_request() -> None:
    w = wire()
    assert (w["modelName"], w["tenant"], w["requestId"]) == (b"claude", b"acme", b"msg_1")
    assert (w["maxTokens"], w["stream"], w["includeUsage"], w["topK"]) == (64, False, False, 0)
    assert w["temperature"] is None and w["topP"] is None and w["stop"] is None
    assert messages() == [(Role.User, "hello", "", False, [])]


def test_sampling_stop_user_and_stream() -> None:
    w = wire(
        temperature=0.25,
        top_p=0.5,
        top_k=40,
        stop_sequences=["###", "", "END"],
        metadata={"user_id": "user-7", "other": "ignored"},
        stream=True,
    )
    assert (w["temperature"], w["topP"], w["topK"]) == (0.25, 0.5, 40)
    assert w["stop"] == [b"###", b"END"]  # empty ones are no stop sequence
    assert w["user"] == b"user-7"
    assert (w["stream"], w["includeUsage"]) == (True, True)


@pytest.mark.parametrize(
    "system", ["be brief", [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]]
)
def test_the_system_prompt_is_the_first_message(system: Any) -> None:
    assert messages(system=system)[0] == (Role.System, "be brief", "", False, [])


def test_cache_control_anywhere_changes_no_message() -> None:
    """Anthropic allows ``cache_control`` on system and text blocks, tools,
    tool_use and tool_result blocks: the messages are what they would be
    without (the breakpoints travel in the extras: ``test_extras``)."""

    def request(**mark: Any) -> dict[str, Any]:
        return {
            "system": [{"type": "text", "text": "sys", **mark}],
            "tools": [{**TOOL, **mark}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "look", **mark}]},
                {"role": "assistant", "content": [{**CALL, **mark}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x", **mark},
                        {"type": "text", "text": "go on", **mark},
                    ],
                },
            ],
        }

    marked = wire(**request(cache_control={"type": "ephemeral", "ttl": "5m"}))
    plain = wire(**request())
    assert marked["messages"] == plain["messages"]
    assert marked["extras"] and not plain["extras"]
    assert [m["content"] for m in marked["messages"]] == [b"sys", b"look", None, b"x", b"go on"]


def test_a_tool_round_trip() -> None:
    history = [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": [{"type": "text", "text": "Looking. "}, CALL]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "found"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "no "}, {"type": "text", "text": "such"}],
                    "is_error": True,
                },
                {"type": "text", "text": "go on"},
            ],
        },
    ]
    assert messages(messages=history, tools=[TOOL]) == [
        (Role.User, "look it up", "", False, []),
        (Role.Assistant, "Looking. ", "", False, [("toolu_1", "lookup", '{"q": "x"}')]),
        (Role.Tool, "found", "toolu_1", False, []),
        (Role.Tool, "no such", "toolu_2", True, []),
        (Role.User, "go on", "", False, []),
    ]


def test_tools_and_tool_choice() -> None:
    w = wire(tools=[TOOL, {"name": "bare", "input_schema": {}, "strict": True}])
    tools = [
        (t["name"], t["description"], json.loads(t["parameters"]), t["strict"]) for t in w["tools"]
    ]
    assert tools == [(b"lookup", b"looks up", SCHEMA, False), (b"bare", None, {}, True)]
    assert w["toolChoice"] == ToolChoiceMode.Unset
    for choice, mode, name, parallel in [
        ({"type": "auto"}, ToolChoiceMode.Auto, None, None),
        ({"type": "any"}, ToolChoiceMode.Required, None, None),
        ({"type": "none"}, ToolChoiceMode.None_, None, None),
        ({"type": "tool", "name": "lookup"}, ToolChoiceMode.Function, b"lookup", None),
        ({"type": "auto", "disable_parallel_tool_use": True}, ToolChoiceMode.Auto, None, False),
        ({"type": "any", "disable_parallel_tool_use": True}, ToolChoiceMode.Required, None, False),
        ({"type": "any", "disable_parallel_tool_use": False}, ToolChoiceMode.Required, None, None),
        (
            {"type": "tool", "name": "lookup", "disable_parallel_tool_use": True},
            ToolChoiceMode.Function,
            b"lookup",
            False,
        ),
    ]:
        w = wire(tools=[TOOL], tool_choice=choice)
        assert (w["toolChoice"], w["toolChoiceName"]) == (mode, name), choice
        req = read_request(
            write_messages(
                decode_messages(body(tools=[TOOL], tool_choice=choice)), provider=1, model_name="m"
            )
        )
        assert req.parallel_tool_calls is parallel


def test_a_choice_among_no_tools_is_no_choice() -> None:
    for choice in ({"type": "auto"}, {"type": "none"}):
        assert wire(tool_choice=choice)["toolChoice"] == ToolChoiceMode.Unset


def test_unknown_fields_and_headers_of_the_api_are_ignored() -> None:
    w = wire(thinking={"type": "enabled", "budget_tokens": 1024}, service_tier="auto", future=[1])
    assert w["maxTokens"] == 64


def test_count_tokens_needs_no_max_tokens_and_writes_the_prompt_only() -> None:
    req = decode_count_tokens(
        json.dumps(
            {"model": "m", "system": "s", "messages": [{"role": "user", "content": "x"}]}
        ).encode()
    )
    w = decode_request_fb(write_messages(req, provider=1, model_name="m"))
    assert [m["content"] for m in w["messages"]] == [b"s", b"x"]
    assert (w["maxTokens"], w["stream"]) == (0, False)


# -- what it refuses ----------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"max_tokens": None}, "max_tokens: Field required"),
        ({"max_tokens": 0}, "max_tokens: Expected `int` >= 1"),
        ({"messages": []}, "messages: Expected `array` of length >= 1"),
        ({"messages": [{"role": "tool", "content": "x"}]}, 'messages: Unexpected role "tool"'),
        ({"temperature": 1.5}, "temperature: Expected `float` <= 1.0"),
        ({"top_k": -1}, "top_k: Expected `int` >= 0"),
        (
            {"messages": [{"role": "user", "content": [{"type": "audio"}]}]},
            "messages.0.content.0.type: Invalid value 'audio'",
        ),
        (
            {"tools": [{"name": "web", "type": "web_search_20250305"}]},
            "tools.0.type: tools of type 'web_search_20250305'",
        ),
        ({"tools": [{"name": "x"}]}, "tools.0.input_schema: Field required"),
        (
            {"tools": [{"name": "x", "input_schema": []}]},
            "tools.0.input_schema: Input should be an object",
        ),
        (
            {"tool_choice": {"type": "any"}},
            "tool_choice: may only be specified while providing tools",
        ),
        (
            {"tools": [TOOL], "tool_choice": {"type": "tool", "name": "other"}},
            "tool 'other' not found",
        ),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type: Invalid value 'sometimes'"),
    ],
)
def test_refusals_name_the_field(fields: dict[str, Any], needle: str) -> None:
    """A ``None`` value removes the field."""
    raw = json.loads(body())
    for k, v in fields.items():
        if v is None:
            raw.pop(k)
        else:
            raw[k] = v
    refused(raw, needle)


def test_not_json() -> None:
    refused(b"{not json", "not valid JSON", "invalid_json")


@pytest.mark.parametrize(
    ("block", "where", "code"),
    [
        (
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "AA"},
            },
            "messages.0.content.1.source.data: Invalid base64",
            "invalid_media",
        ),
        (
            {"type": "document", "source": {"type": "pdf", "data": "x"}},
            "messages.0.content.1.source.type: Invalid value 'pdf'",
            "invalid_request",
        ),
        (
            {
                "type": "tool_result",
                "tool_use_id": "t",
                "content": [{"type": "image", "source": {}}],
            },
            "messages.0.content.1.content.0.source",
            "invalid_request",
        ),
    ],
)
def test_a_malformed_image_or_document_is_a_400_naming_it(
    block: dict[str, Any], where: str, code: str
) -> None:
    """Images and documents are carried (tests/edge/anthropic/test_messages_media.py);
    one that does not read is a 400 naming where, never a 500."""
    msgs = [{"role": "user", "content": [{"type": "text", "text": "see"}, block]}]
    refused({"model": "m", "max_tokens": 5, "messages": msgs}, where, code)


def test_tool_blocks_from_the_wrong_side() -> None:
    result = {"type": "tool_result", "tool_use_id": "t", "content": "x"}
    refused(
        {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [CALL]}]},
        "tool_use blocks are only allowed in assistant messages",
    )
    refused(
        {"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": [result]}]},
        "tool_result blocks are only allowed in user messages",
    )
    bad = {**CALL, "input": [1]}
    refused(
        {"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": [bad]}]},
        "messages.0.content.0.input: Input should be an object",
    )


# -- any conversation ---------------------------------------------------------

_text = st.text(max_size=30)
_block = st.builds(lambda t: {"type": "text", "text": t}, _text)
_assistant_block = st.one_of(
    _block,
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "s"}, _text),
)


@settings(max_examples=60)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just(True), st.one_of(_text, st.lists(_block, max_size=3))),
            st.tuples(st.just(False), st.one_of(_text, st.lists(_assistant_block, max_size=3))),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_any_text_conversation_reads_back_exactly(turns: list[tuple[bool, Any]]) -> None:
    """Text as sent; an assistant turn with thinking is kept, its text empty."""
    msgs = [{"role": "user" if u else "assistant", "content": c} for u, c in turns]
    expected = []
    for user, content in turns:
        text = (
            content
            if isinstance(content, str)
            else "".join(b["text"] for b in content if b["type"] == "text")
        )
        thought = not isinstance(content, str) and any(b["type"] == "thinking" for b in content)
        if text or user or thought:
            expected.append((Role.User if user else Role.Assistant, text))
    buf = write_messages(
        decode_messages(msgspec.json.encode({"model": "m", "max_tokens": 1, "messages": msgs})),
        provider=0,
        model_name="m",
    )
    verify_request(buf)
    got = [(m.role, m.content or "") for m in read_request(buf).messages]
    assert got == [(Role(r).name.lower(), t) for r, t in expected]
