"""``backends.anthropic`` with what a Messages client sends beyond the schema
(issue 22): its betas (``$headers``), block-level ``cache_control``
(``$cache_control``), system messages in the middle of the conversation,
its own fields as sent, and other dialects' fields refused or dropped; and
the stream's thinking blocks as reasoning parts, with cache usage.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.backends.anthropic.adapter import AnthropicAdapter, encode_request
from flatgate.proxy.backends.anthropic.config import AnthropicConfig
from flatgate.proxy.backends.base import Inbound, Untranslatable
from flatgate.proxy.backends.extras import UnsupportedField
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.schema import Provider, Role
from tests.backends.helpers import (
    FIXTURES,
    block_start,
    content,
    final,
    fixture,
    message_start,
    named_events,
    reasoning,
    translate_anthropic,
)
from tests.backends.wire_requests import (
    ANTHROPIC,
    CHAT,
    RESPONSES,
    assistant,
    msg,
    tool_result,
    wire,
)

MID = "mid-conversation-system-2026-04-07"
CLAUDE_HEADERS = json.loads(
    (FIXTURES.parent.parent / "clients" / "fixtures" / "claude_headers.json").read_text()
)["claude_request.json"]
HI = [msg(Role.User, "hi")]
# The conversation of Anthropic's mid-conversation system message docs: a
# system prompt, a turn, then an instruction found partway through.
CONVERSATION = [
    msg(Role.System, "You are a helpful assistant."),
    msg(Role.User, "Summarize the report."),
    msg(Role.Assistant, "Here is the summary."),
    msg(Role.User, "Now the appendix."),
    msg(Role.System, "From now on, answer in French."),
]
TOOL = ("get_weather", "Get the current weather", '{"type":"object"}', False)


def body(req: Request, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(encode_request(req, model="claude", **kw))
    return out


def text(t: str, **kw: Any) -> dict[str, Any]:
    return {"type": "text", "text": t, **kw}


def adapter(**kw: Any) -> AnthropicAdapter:
    return AnthropicAdapter(
        AnthropicConfig(name="a", url="https://api.anthropic.com/v1", protocol="anthropic", **kw)
    )


def headers(a: AnthropicAdapter, req: Request) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in a.prepare(Inbound(b"", lambda: req, "rid", "")).headers:
        out.setdefault(name, []).append(value)
    return out


# -- system messages in the middle ------------------------------------------------


def test_with_the_beta_a_later_system_message_is_sent_in_place() -> None:
    req = wire(CONVERSATION, extras={"$headers": {"anthropic-beta": MID}}, dialect=ANTHROPIC)
    out = body(req)
    assert out["system"] == [text("You are a helpful assistant.")]
    assert out["messages"] == [
        {"role": "user", "content": [text("Summarize the report.")]},
        {"role": "assistant", "content": [text("Here is the summary.")]},
        {"role": "user", "content": [text("Now the appendix.")]},
        {"role": "system", "content": [text("From now on, answer in French.")]},
    ]
    assert "$headers" not in out


@pytest.mark.parametrize(
    ("extras", "dialect"),
    [
        (None, ANTHROPIC),
        ({"$headers": {"anthropic-beta": "prompt-caching-2024-07-31"}}, ANTHROPIC),
        ({"logprobs": True}, CHAT),
    ],
    ids=["no-extras", "another-beta", "chat-client"],
)
def test_without_it_every_system_message_is_top_level_in_order(
    extras: dict[str, Any] | None, dialect: int
) -> None:
    out = body(wire(CONVERSATION, extras=extras, dialect=dialect), drop_unsupported=True)
    assert out["system"] == [
        text("You are a helpful assistant."),
        text("From now on, answer in French."),
    ]
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]


def test_a_system_message_between_tool_results_and_the_next_turn_keeps_its_place() -> None:
    req = wire(
        [
            msg(Role.User, "weather?"),
            assistant(calls=[("toolu_1", "get_weather", "{}")]),
            tool_result("toolu_1", "18C"),
            msg(Role.System, "Be brief."),
        ],
        extras={"$headers": {"anthropic-beta": f"other-beta, {MID}"}},
        dialect=ANTHROPIC,
    )
    roles = [(m["role"], m["content"][0]["type"]) for m in body(req)["messages"]]
    assert roles == [
        ("user", "text"),
        ("assistant", "tool_use"),
        ("user", "tool_result"),
        ("system", "text"),
    ]


# -- the client's betas -------------------------------------------------------------


def test_the_clients_beta_is_a_header_after_the_configured_one_each_once() -> None:
    a = adapter(headers={"anthropic-beta": "context-1m-2025-08-07,shared-beta", "x-team": "a"})
    beta = {"anthropic-beta": f"shared-beta,{MID}"}
    req = wire(HI, extras={"$headers": beta}, dialect=ANTHROPIC)
    got = headers(a, req)
    assert got["anthropic-beta"] == [f"context-1m-2025-08-07,shared-beta,{MID}"]
    assert got["x-team"] == ["a"]
    assert got["anthropic-version"] == ["2023-06-01"]
    sent = json.loads(a.prepare(Inbound(b"", lambda: req, "rid", "")).body)
    assert "$headers" not in sent and "anthropic-beta" not in sent


def test_without_client_betas_the_configured_header_is_sent_as_it_was() -> None:
    a = adapter(headers={"anthropic-beta": "context-1m-2025-08-07"})
    assert headers(a, wire(HI))["anthropic-beta"] == ["context-1m-2025-08-07"]
    assert "anthropic-beta" not in headers(adapter(), wire(HI))


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ({"x-api-key": "sk-other"}, "x-api-key"),
        ({"anthropic-beta": "a\r\nx-evil: 1"}, "not a header value"),
        ("a string", r"extras\.\$headers"),
    ],
)
def test_headers_other_than_the_beta_are_refused(given: Any, match: str) -> None:
    req = wire(HI, extras={"$headers": given}, dialect=ANTHROPIC)
    with pytest.raises(Untranslatable, match=match):
        encode_request(req, model="claude")


# -- cache_control ----------------------------------------------------------------


def test_cache_control_goes_on_the_marked_system_block_message_and_tool() -> None:
    # Anthropic's prompt caching docs: a long system prompt, a tool, and the
    # last user turn marked; ttl as sent.
    marks = [
        {"at": "system", "index": 0, "cache_control": {"type": "ephemeral"}},
        {"at": "tools", "index": 0, "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        {"at": "messages", "index": 3, "cache_control": {"type": "ephemeral"}},
    ]
    req = wire(
        [
            msg(Role.System, "You are an AI assistant tasked with analyzing literary works."),
            msg(Role.User, "Analyze the major themes."),
            assistant("Themes: pride and prejudice."),
            msg(Role.User, "And the characters?"),
        ],
        tools=[TOOL],
        extras={"$cache_control": marks},
        dialect=ANTHROPIC,
    )
    out = body(req)
    eph = {"type": "ephemeral"}
    assert out["system"] == [
        text("You are an AI assistant tasked with analyzing literary works.", cache_control=eph)
    ]
    assert out["tools"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert out["messages"][2]["content"] == [text("And the characters?", cache_control=eph)]
    assert "cache_control" not in json.dumps(out["messages"][:2])
    assert "$cache_control" not in out


def test_cache_control_marks_the_last_block_of_that_wire_message_through_merges() -> None:
    # Wire message 2 (a tool result) is merged with message 3 (user text)
    # into one user turn; its mark stays on the tool_result, which goes first.
    req = wire(
        [
            msg(Role.User, "weather?"),
            assistant("Checking.", calls=[("toolu_1", "get_weather", "{}")]),
            tool_result("toolu_1", "18C"),
            msg(Role.User, "thanks"),
        ],
        extras={
            "$cache_control": [
                {"at": "messages", "index": 1, "cache_control": {"type": "ephemeral"}},
                {"at": "messages", "index": 2, "cache_control": {"type": "ephemeral"}},
            ]
        },
        dialect=ANTHROPIC,
    )
    turn, results = body(req)["messages"][1:]
    assert turn["content"][0] == text("Checking.")
    assert turn["content"][1]["cache_control"] == {"type": "ephemeral"}
    assert results["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert results["content"][1] == text("thanks")


@pytest.mark.parametrize(
    "mark",
    [
        {"at": "messages", "index": 9, "cache_control": {"type": "ephemeral"}},
        {"at": "tools", "index": 0, "cache_control": {"type": "ephemeral"}},
        {"at": "elsewhere", "index": 0, "cache_control": {"type": "ephemeral"}},
        {"at": "messages", "index": "0"},
    ],
    ids=["no-such-message", "no-tools", "unknown-place", "malformed"],
)
def test_a_mark_with_nowhere_to_go_is_untranslatable(mark: dict[str, Any]) -> None:
    req = wire(HI, extras={"$cache_control": [mark]}, dialect=ANTHROPIC)
    with pytest.raises(Untranslatable, match=r"extras\.\$cache_control"):
        encode_request(req, model="claude")


# -- the client's own fields ----------------------------------------------------------


def test_messages_fields_reach_the_backend_as_sent() -> None:
    extras = {
        "thinking": {"type": "enabled", "budget_tokens": 10000},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
        "service_tier": "auto",
        "container": "container_011",
        "mcp_servers": [{"type": "url", "url": "https://mcp.example.com/sse", "name": "ex"}],
    }
    out = body(wire(HI, extras=extras, dialect=ANTHROPIC))
    assert {k: out[k] for k in extras} == extras


def test_the_clients_server_tools_follow_the_function_tools() -> None:
    web = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    req = wire(HI, tools=[TOOL], extras={"tools": [web]}, dialect=ANTHROPIC)
    tools = body(req)["tools"]
    assert [t.get("type") for t in tools] == [None, "web_search_20250305"]
    assert tools[0]["name"] == "get_weather"
    assert tools[1] == web


def test_an_unknown_flatgate_key_is_named_not_sent() -> None:
    omitted: list[str] = []
    req = wire(HI, extras={"$future": 1}, dialect=ANTHROPIC)
    raw = encode_request(req, model="claude", omitted=omitted)
    assert b"$future" not in raw
    assert omitted == ["$future"]


@pytest.mark.parametrize(
    ("extras", "dialect", "field"),
    [
        ({"logit_bias": {"50256": -100}}, CHAT, "logit_bias"),
        ({"max_tool_calls": 3}, RESPONSES, "max_tool_calls"),
    ],
)
def test_another_dialects_field_is_refused_unless_dropped(
    extras: dict[str, Any], dialect: int, field: str
) -> None:
    req = wire(HI, extras=extras, dialect=dialect)
    with pytest.raises(UnsupportedField) as info:
        encode_request(req, model="claude")
    assert info.value.param == field
    omitted: list[str] = []
    out = body(req, omitted=omitted, drop_unsupported=True)
    assert field not in out and omitted == [field]
    a = adapter(drop_unsupported=True)
    assert a.prepare(Inbound(b"", lambda: req, "rid", "")).omitted == (field,)


# -- the stream: thinking as reasoning parts -----------------------------------------


def test_documented_thinking_stream_ends_its_block_with_the_signature() -> None:
    chunks = translate_anthropic(fixture("anthropic_thinking.sse"))
    parts = [c.reasoning_part for c in chunks if c.reasoning_part is not None]
    assert parts == [
        ReasoningPart(
            text=reasoning(chunks),
            opaque=b"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds...",
            dialect=ANTHROPIC,
        )
    ]
    at = next(i for i, c in enumerate(chunks) if c.reasoning_part is not None)
    assert not content(chunks[:at]) and content(chunks[at:])  # before the text


def test_a_redacted_thinking_block_is_a_redacted_part() -> None:
    data = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
    chunks = translate_anthropic(
        named_events(
            message_start(),
            block_start(0, {"type": "redacted_thinking", "data": data}),
            {"type": "content_block_stop", "index": 0},
            block_start(1, {"type": "text", "text": "ok"}),
            {"type": "content_block_stop", "index": 1},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
            {"type": "message_stop"},
        )
    )
    parts = [c.reasoning_part for c in chunks if c.reasoning_part is not None]
    assert parts == [ReasoningPart(opaque=data.encode(), dialect=ANTHROPIC, redacted=True)]
    assert reasoning(chunks) == "" and content(chunks) == "ok"


def test_cache_reads_and_writes_are_counted_apart_and_in_the_prompt() -> None:
    chunks = translate_anthropic(
        named_events(
            message_start(
                input_tokens=21,
                cache_creation_input_tokens=188086,
                cache_read_input_tokens=0,
                output_tokens=1,
            ),
            block_start(0, {"type": "text", "text": "x"}),
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 393},
            },
            {"type": "message_stop"},
        )
    )
    assert final(chunks).usage == Usage(21 + 188086, 393, 0, 0, 188086)


def test_a_strict_tool_is_sent_strict() -> None:
    strict = ("get_weather", "Get the current weather", '{"type":"object"}', True)
    tools = body(wire(HI, tools=[strict, TOOL]))["tools"]
    assert [t.get("strict") for t in tools] == [True, None]


# -- Claude Code's own request, through the Messages edge ------------------------------


def test_claude_codes_captured_request_reaches_the_backend_as_it_sent_it() -> None:
    # The captured request (tests/clients/fixtures) has three system blocks,
    # two with cache_control; a mid-conversation system message; thinking,
    # output_config and context_management; tools. With the beta header
    # (Claude Code sends it when it uses the feature), all of it arrives.
    raw = (FIXTURES.parent.parent / "clients" / "fixtures" / "claude_request.json").read_bytes()
    doc = json.loads(raw)
    beta = f"{CLAUDE_HEADERS['anthropic-beta']},{MID}"
    req = read_request(
        write_messages(
            decode_messages(raw),
            model_name="house-model",
            provider=int(Provider.Anthropic),
            headers={"anthropic-beta": beta},
        )
    )
    a = adapter()
    out = a.prepare(Inbound(b"", lambda: req, "rid", ""))
    sent = json.loads(out.body)
    assert dict(out.headers)["anthropic-beta"] == beta
    assert out.omitted == ()
    for key in ("system", "thinking", "output_config", "context_management", "max_tokens"):
        assert sent[key] == doc[key], key
    assert [m["role"] for m in sent["messages"]] == [m["role"] for m in doc["messages"]]

    def marks(d: dict[str, Any]) -> list[Any]:
        blocks = [b for m in d["messages"] for b in m["content"]]
        return [b["cache_control"] for b in blocks if "cache_control" in b]

    assert marks(doc) and marks(sent) == marks(doc)
    assert [t["name"] for t in sent["tools"]] == [t["name"] for t in doc["tools"]]
    # every tool as sent, its defer_loading too (``$tools``)
    assert any("defer_loading" in t for t in doc["tools"])
    assert sent["tools"] == doc["tools"]
