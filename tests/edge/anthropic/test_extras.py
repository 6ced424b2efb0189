"""What a Messages request carries besides its slotted fields: system messages
mid-conversation, thinking blocks as reasoning parts, the fields with no
slot and the block-level ``cache_control`` breakpoints in the extras, the
``anthropic-beta`` header, and what is refused (``thread``, unknown roles,
flatgate's own ``$`` keys). Examples are Anthropic's documented ones."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from flatgate.edge_translator.anthropic.errors import error_body
from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.errors import InvalidRequest
from flatgate.proxy.apis.anthropic_messages.request import MessagesRequest, decode_messages
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.schema import ApiDialect

ANTHROPIC = int(ApiDialect.ANTHROPIC_MESSAGES)
SCHEMA = {"type": "object", "properties": {"location": {"type": "string"}}}
TOOL = {"name": "get_weather", "description": "Get the weather", "input_schema": SCHEMA}
# From Anthropic's extended-thinking docs (signature and data shortened).
SIGNATURE = "WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve/op91XWHOEBLLqIOMfFG/UvLEczmEsUjavL=="
REDACTED = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNR"
    "j2YfWXGmKDxH4mPnZ5sQ7vB5URj2pabt"
)
EPHEMERAL_1H = {"type": "ephemeral", "ttl": "1h"}


def body(**fields: Any) -> bytes:
    base: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Hello"}],
    }
    base.update(fields)
    return json.dumps(base).encode()


def written(data: bytes, headers: dict[str, str] | None = None) -> Request:
    buf = write_messages(decode_messages(data), provider=1, model_name="m", headers=headers)
    verify_request(buf)
    return read_request(buf)


def extras(req: Request) -> dict[str, Any]:
    assert req.extras_dialect == (ANTHROPIC if req.extras else 0)
    out: dict[str, Any] = json.loads(req.extras) if req.extras else {}
    return out


def refusal(data: bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        write_messages(decode_messages(data), provider=1, model_name="m")
    return info.value


# -- system messages mid-conversation --------------------------------------------


def test_a_system_message_stays_at_its_position() -> None:
    """Claude Code's ``mid-conversation-system-2026-04-07`` beta."""
    req = written(
        body(
            system="You are a coding agent.",
            messages=[
                {"role": "user", "content": "Fix the bug"},
                {"role": "system", "content": "The user switched to plan mode."},
                {"role": "assistant", "content": "Planning."},
                {
                    "role": "system",
                    "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief"}],
                },
                {"role": "user", "content": "Go"},
            ],
        )
    )
    assert [(m.role, m.content) for m in req.messages] == [
        ("system", "You are a coding agent."),
        ("user", "Fix the bug"),
        ("system", "The user switched to plan mode."),
        ("assistant", "Planning."),
        ("system", "Be brief"),
        ("user", "Go"),
    ]


@pytest.mark.parametrize("role", ["tool", "developer", "function"])
def test_another_role_is_refused_in_anthropic_s_words(role: str) -> None:
    err = refusal(body(messages=[{"role": "user", "content": "a"}, {"role": role, "content": "b"}]))
    assert err.message.startswith(f'messages: Unexpected role "{role}".'), err.message
    assert err.param == "messages.1.role"


def test_a_system_message_takes_text_blocks_only() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    err = refusal(body(messages=[{"role": "system", "content": [image]}]))
    assert err.param == "messages.0.content.0"


# -- thinking blocks in the history ------------------------------------------------


def test_thinking_blocks_are_reasoning_parts_in_order() -> None:
    """Extended thinking with tool use: the thinking block, with its
    signature, goes back on the assistant turn that called the tool."""
    req = written(
        body(
            tools=[TOOL],
            messages=[
                {"role": "user", "content": "What's the weather in Paris?"},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "thinking",
                            "thinking": "I need the weather.",
                            "signature": SIGNATURE,
                        },
                        {"type": "redacted_thinking", "data": REDACTED},
                        {"type": "text", "text": "Let me check."},
                        {
                            "type": "tool_use",
                            "id": "toolu_01",
                            "name": "get_weather",
                            "input": {"location": "Paris"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "15C"}
                    ],
                },
            ],
        )
    )
    turn = req.messages[1]
    assert (turn.role, turn.content) == ("assistant", "Let me check.")
    assert [c.function.name for c in turn.tool_calls or ()] == ["get_weather"]
    assert turn.reasoning == [
        ReasoningPart("I need the weather.", SIGNATURE.encode(), ANTHROPIC),
        ReasoningPart(opaque=REDACTED.encode(), dialect=ANTHROPIC, redacted=True),
    ]
    assert req.messages[0].reasoning is None and req.messages[2].reasoning is None


def test_a_turn_of_thinking_alone_is_kept() -> None:
    req = written(
        body(
            messages=[
                {"role": "user", "content": "Think"},
                {
                    "role": "assistant",
                    "content": [{"type": "thinking", "thinking": "hm", "signature": "c2ln"}],
                },
            ]
        )
    )
    assert req.messages[1].role == "assistant"
    assert req.messages[1].reasoning == [ReasoningPart("hm", b"c2ln", ANTHROPIC)]


def test_thinking_from_the_user_is_refused() -> None:
    block = {"type": "thinking", "thinking": "x", "signature": "y"}
    err = refusal(body(messages=[{"role": "user", "content": [block]}]))
    assert err.param == "messages.0.content.0"
    assert "only allowed in assistant messages" in err.message


# -- the fields with no slot -----------------------------------------------------


def test_a_request_of_slotted_fields_has_no_extras() -> None:
    req = written(body(temperature=0.5, metadata={"user_id": "u1"}))
    assert (req.extras, req.extras_dialect) == ("", 0)


def test_unslotted_fields_are_the_client_s_own_bytes() -> None:
    fields = {
        "thinking": {"type": "enabled", "budget_tokens": 10000},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
        "service_tier": "auto",
        "container": "container_011CQ",
        "mcp_servers": [{"type": "url", "url": "https://example.com/sse", "name": "example"}],
        "cache_control": {"type": "ephemeral"},
    }
    raw = body(**fields)
    req = written(raw)
    assert extras(req) == fields
    # As written: the bytes of each value, not a re-encoding of them.
    spaced = raw.replace(b'"budget_tokens": 10000', b'"budget_tokens" :   10000')
    assert b'"budget_tokens" :   10000' in written(spaced).extras.encode()


def test_a_known_body_is_decoded_in_one_pass() -> None:
    assert type(decode_messages(body(thinking={"type": "adaptive"}))) is not MessagesRequest
    assert isinstance(decode_messages(body()), MessagesRequest)


def test_unknown_fields_travel_in_the_client_s_order() -> None:
    raw = body(thinking={"type": "disabled"}, inference_geo="us", zeta=[1, {"a": None}], alpha=True)
    got = extras(written(raw))
    assert got == {
        "thinking": {"type": "disabled"},
        "inference_geo": "us",
        "zeta": [1, {"a": None}],
        "alpha": True,
    }
    assert list(got)[1:] == ["inference_geo", "zeta", "alpha"]


def test_a_field_of_the_wrong_shape_is_still_refused_with_unknown_ones() -> None:
    err = refusal(body(unknown_field=1, temperature="hot"))
    assert err.param == "temperature"


@pytest.mark.parametrize("key", ["$headers", "$cache_control", "$x"])
def test_flatgate_s_own_keys_are_refused(key: str) -> None:
    err = refusal(body(**{key: {"anthropic-beta": "x"}}))
    assert err.param == key


def test_the_beta_header_is_carried() -> None:
    beta = "mid-conversation-system-2026-04-07,interleaved-thinking-2025-05-14"
    req = written(body(), headers={"anthropic-beta": beta, "anthropic-version": "2023-06-01"})
    assert extras(req) == {"$headers": {"anthropic-beta": beta}}
    assert written(body(), headers={"anthropic-version": "2023-06-01"}).extras == ""


# -- block-level cache_control -----------------------------------------------------


def test_breakpoints_name_the_wire_message_they_went_into() -> None:
    """Anthropic's prompt-caching example shapes: the system prompt, tools,
    a tool result and the last user turn, with a ttl."""
    req = written(
        body(
            system=[
                {"type": "text", "text": "You are an AI assistant."},
                {"type": "text", "text": "<the entire book>", "cache_control": EPHEMERAL_1H},
            ],
            tools=[TOOL, {**TOOL, "name": "get_time", "cache_control": {"type": "ephemeral"}}],
            messages=[
                {"role": "user", "content": "Look it up"},
                {
                    "role": "system",
                    "content": [
                        {"type": "text", "text": "note", "cache_control": {"type": "ephemeral"}}
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "t1",
                            "name": "get_time",
                            "input": {},
                            "cache_control": {"type": "ephemeral"},
                        }
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": "noon",
                            "cache_control": {"type": "ephemeral"},
                        },
                        {"type": "text", "text": "Summarize", "cache_control": EPHEMERAL_1H},
                    ],
                },
            ],
        )
    )
    roles = [(m.role, m.content) for m in req.messages]
    assert roles == [
        ("system", "You are an AI assistant."),  # one System message per block
        ("system", "<the entire book>"),
        ("user", "Look it up"),
        ("system", "note"),
        ("assistant", None),
        ("tool", "noon"),
        ("user", "Summarize"),
    ]
    eph = {"type": "ephemeral"}
    assert extras(req)["$cache_control"] == [
        {"at": "system", "index": 1, "cache_control": EPHEMERAL_1H},
        {"at": "messages", "index": 3, "cache_control": eph},
        {"at": "messages", "index": 4, "cache_control": eph},
        {"at": "messages", "index": 5, "cache_control": eph},
        {"at": "messages", "index": 6, "cache_control": EPHEMERAL_1H},
        {"at": "tools", "index": 1, "cache_control": eph},
    ]


def test_system_blocks_without_breakpoints_are_one_message() -> None:
    req = written(body(system=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]))
    assert (req.messages[0].role, req.messages[0].content) == ("system", "ab")


# -- thread ------------------------------------------------------------------------


def test_thread_is_refused_with_anthropic_s_documented_error() -> None:
    err = refusal(body(thread={"type": "create"}))
    status, data = error_body(err, "req_1")
    doc = msgspec.json.decode(data)
    assert status == 400
    assert doc["type"] == "error" and doc["request_id"] == "req_1"
    assert doc["error"]["type"] == "invalid_request_error"
    assert doc["error"]["details"] == {"error_code": "thread_unsupported_request"}


def test_a_null_thread_is_no_thread() -> None:
    assert written(body(thread=None)).extras == ""
