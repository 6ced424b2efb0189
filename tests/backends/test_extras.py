"""The client's extras and reasoning parts at the ``openai`` (Chat
Completions) and ``anthropic`` backends, and how what a backend is not sent
is named (``backends.extras``): merged for the backend's own dialect, mapped
or named for another's, never a hosted tool to a backend that does not run
it. The Responses backend's side is ``test_responses_request``.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from flatgate.proxy.backends.anthropic import adapter as anthropic
from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.extras import (
    MAX_OMITTED_NAMES,
    NOTHING,
    UnsupportedField,
    omitted_header,
    omitted_label,
    report_all,
)
from flatgate.proxy.backends.openai import adapter as openai
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import ApiDialect, Role
from tests.backends.wire_requests import (
    ANTHROPIC,
    CHAT,
    RESPONSES,
    assistant,
    msg,
    wire,
)

HI = [msg(Role.User, "hi")]
RESPONSES_EXTRAS: dict[str, Any] = {
    "include": ["reasoning.encrypted_content"],
    "reasoning": {"effort": "high", "summary": "auto"},
    "text": {"verbosity": "low"},
    "prompt_cache_key": "session-1",
    "safety_identifier": "hash-1",
    "service_tier": "priority",
    "top_logprobs": 2,
    "tools": [{"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}}],
    "store": True,
    "previous_response_id": "resp_1",
    "truncation": "auto",
}


def chat_body(req: Request, drop: bool = False) -> tuple[dict[str, Any], list[str], bytes]:
    omitted: list[str] = []
    raw = openai.encode_request(req, model="m", omitted=omitted, drop_unsupported=drop)
    return json.loads(raw), omitted, raw


def messages_body(req: Request, drop: bool = False) -> tuple[dict[str, Any], list[str], bytes]:
    omitted: list[str] = []
    raw = anthropic.encode_request(req, model="claude", omitted=omitted, drop_unsupported=drop)
    return json.loads(raw), omitted, raw


# -- Chat Completions -------------------------------------------------------------


def test_chat_extras_are_merged_at_the_top_level() -> None:
    extras = {"logprobs": True, "top_logprobs": 3, "chat_template_kwargs": {"thinking": True}}
    out, omitted, _ = chat_body(wire(HI, extras=extras, dialect=CHAT))
    assert {k: out[k] for k in extras} == extras
    assert omitted == []


def test_chat_extras_never_replace_model_messages_stream_or_stream_options() -> None:
    extras = {
        "model": "x",
        "messages": [],
        "stream": False,
        "stream_options": {"include_usage": False},
        "temperature": 1.5,
    }
    out, _, raw = chat_body(wire(HI, extras=extras, dialect=CHAT, temperature=0.25))
    assert out["model"] == "m"
    assert out["messages"] == [{"role": "user", "content": "hi"}]
    assert out["stream"] is True
    assert out["stream_options"] == {"include_usage": True}
    # the client's own value wins over the mapped one, and is there once
    assert out["temperature"] == 1.5
    assert raw.count(b'"temperature"') == 1


def test_responses_extras_are_mapped_to_chat_and_the_rest_named() -> None:
    # truncation "auto" cannot be honoured: dropped only by drop_unsupported
    req = wire(HI, extras=RESPONSES_EXTRAS, dialect=RESPONSES)
    with pytest.raises(Untranslatable, match="'truncation'"):
        chat_body(req)
    out, omitted, _ = chat_body(req, drop=True)
    assert out["reasoning_effort"] == "high"
    assert out["verbosity"] == "low"
    assert out["prompt_cache_key"] == "session-1"
    assert out["safety_identifier"] == "hash-1"
    assert out["service_tier"] == "priority"
    assert (out["logprobs"], out["top_logprobs"]) == (True, 2)
    for name in ("include", "reasoning", "text", "tools", "store", "previous_response_id"):
        assert name not in out
    # store and previous_response_id are flatgate's: acted on, not left out
    assert omitted == [
        "include",
        "reasoning.summary",
        "tools[web_search]",
        "tools[code_interpreter]",
        "truncation",
    ]


def test_anthropic_extras_are_mapped_or_named_at_a_chat_backend() -> None:
    extras = {"thinking": {"type": "enabled", "budget_tokens": 1024}, "cache_control": {}}
    out, omitted, _ = chat_body(wire(HI, extras=extras, dialect=ANTHROPIC))
    assert out["reasoning_effort"] == "low"
    assert "thinking" not in out and "cache_control" not in out
    assert omitted == ["cache_control"]


def test_reasoning_parts_never_reach_chat_json() -> None:
    parts = [ReasoningPart("thought", b"ENC", RESPONSES, "rs_1")]
    req = wire([*HI, assistant("Hello.", reasoning=parts), msg(Role.User, "more")])
    out, omitted, raw = chat_body(req)
    assert out["messages"][1] == {"role": "assistant", "content": "Hello."}
    assert b"ENC" not in raw and b"thought" not in raw
    assert omitted == ["reasoning"]


def test_metadata_is_named_when_it_is_left_out() -> None:
    _, omitted, _ = chat_body(wire(HI, metadata={"team": "a"}))
    assert omitted == ["metadata"]


def test_a_plain_request_leaves_nothing_out() -> None:
    assert chat_body(wire(HI))[1] == []


# -- Anthropic Messages ------------------------------------------------------------


def test_thinking_blocks_with_their_signatures_open_the_assistant_turn() -> None:
    parts = [
        ReasoningPart("Let me think.", b"EqQBCgIYAhIM", ANTHROPIC),
        ReasoningPart("", b"EmwKAhgBEgy3", ANTHROPIC, redacted=True),
    ]
    req = wire(
        [*HI, assistant("Hello.", calls=[("toolu_1", "f", "{}")], reasoning=parts)],
    )
    out, omitted, _ = messages_body(req)
    assert out["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Let me think.", "signature": "EqQBCgIYAhIM"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3"},
            {"type": "text", "text": "Hello."},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
        ],
    }
    assert omitted == []


@pytest.mark.parametrize(
    "part",
    [
        ReasoningPart("an OpenAI summary", b"gAAAA", RESPONSES, "rs_1"),
        ReasoningPart("thinking without its signature", b"", ANTHROPIC),
    ],
    ids=["another-dialect", "no-signature"],
)
def test_reasoning_anthropic_cannot_verify_is_left_out_and_named(part: ReasoningPart) -> None:
    out, omitted, _ = messages_body(wire([*HI, assistant("Hello.", reasoning=[part])]))
    assert out["messages"][1]["content"] == [{"type": "text", "text": "Hello."}]
    assert omitted == ["reasoning"]


def test_a_signature_that_is_not_utf8_is_untranslatable() -> None:
    req = wire([*HI, assistant("x", reasoning=[ReasoningPart("t", b"\xff", ANTHROPIC)])])
    with pytest.raises(Untranslatable, match=r"messages\[1\]\.reasoning\[0\]"):
        anthropic.encode_request(req, model="claude")


def test_messages_extras_are_merged_but_never_model_messages_stream_or_max_tokens() -> None:
    extras = {
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "top_k": 5,
        "model": "x",
        "max_tokens": 1,
        "stream": False,
    }
    out, omitted, raw = messages_body(wire(HI, extras=extras, dialect=ANTHROPIC, top_k=40))
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert out["top_k"] == 5
    assert raw.count(b'"top_k"') == 1
    assert (out["model"], out["max_tokens"], out["stream"]) == ("claude", 4096, True)
    assert omitted == []


def test_responses_extras_are_all_named_at_an_anthropic_backend() -> None:
    out, omitted, _ = messages_body(wire(HI, extras=RESPONSES_EXTRAS, dialect=RESPONSES), True)
    for name in ("reasoning", "include", "tools", "store", "prompt_cache_key"):
        assert name not in out
    assert omitted == [
        "include",
        "reasoning.effort",
        "reasoning.summary",
        "text.verbosity",
        "prompt_cache_key",
        "safety_identifier",
        "service_tier",
        "top_logprobs",
        "tools[web_search]",
        "tools[code_interpreter]",
        "truncation",
    ]


def test_what_anthropic_has_no_place_for_is_named() -> None:
    req = wire(
        HI,
        seed=1,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        n=2,
        response_format='{"type":"json_object"}',
        metadata={"a": "b"},
    )
    assert messages_body(req)[1] == [
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "n",
        "response_format",
        "metadata",
    ]


# -- naming what was left out ---------------------------------------------------------


def test_the_header_names_each_field_once_in_order() -> None:
    assert omitted_header(["tools[web_search]", "include", "tools[web_search]"]) == (
        "tools[web_search],include"
    )


def test_a_name_a_header_cannot_carry_is_other() -> None:
    assert omitted_header(["ok_name", "bad\r\nname", "with space", "é"]) == "ok_name,other"


def test_the_header_is_bounded() -> None:
    names = [f"field_{i}" for i in range(MAX_OMITTED_NAMES + 10)]
    value = omitted_header(names)
    assert value.split(",") == [*names[:MAX_OMITTED_NAMES], "..."]


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("tools[web_search]", "tools[web_search]"),
        ("include", "include"),
        ("reasoning", "reasoning"),
        ("tools[my_made_up_tool]", "other"),
        ("x_vendor_field_from_a_caller", "other"),
    ],
)
def test_counter_labels_come_from_a_closed_set(name: str, label: str) -> None:
    assert omitted_label(name) == label


def test_geminis_thinking_is_named_and_its_other_generation_config_judged() -> None:
    """Gemini CLI asks for thoughts on every turn: at a backend of another API
    its ``thinkingConfig`` is named, mapped to nothing (the backend decides
    how much to think); another member of ``generationConfig`` with no
    mapping is refused, named as the member it is."""
    gemini = int(ApiDialect.GEMINI)
    assert "generationConfig.thinkingConfig" in NOTHING[gemini]
    config = json.dumps({"thinkingConfig": {"includeThoughts": True, "thinkingBudget": -1}})
    omitted: list[str] = []
    report_all({"generationConfig": msgspec.Raw(config.encode())}, gemini, omitted, False)
    assert omitted == ["generationConfig.thinkingConfig"]
    modalities = json.dumps({"responseModalities": ["IMAGE"]})
    with pytest.raises(UnsupportedField) as refused:
        report_all({"generationConfig": msgspec.Raw(modalities.encode())}, gemini, [], False)
    assert refused.value.param == "generationConfig.responseModalities"
