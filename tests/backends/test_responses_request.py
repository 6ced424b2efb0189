"""``backends.responses.adapter``: the Responses API body a decoded request
becomes (input items, reasoning items, tools, the client's extras, what is
left out and named), and what the adapter sends it with (the ``openai``
adapter's conventions).

Requests are written by the Chat Completions edge and read back
(``helpers.request``), or written with the wire's ``RequestWriter`` where they
hold what that edge does not write: reasoning parts, extras of any dialect
(``wire_requests``).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from flatgate.proxy.apis.openai_responses.request import ResponsesRequest
from flatgate.proxy.backends.base import Inbound, RefusalKind, Untranslatable
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.backends.registry import backend_config, backend_problems
from flatgate.proxy.backends.responses.adapter import ResponsesAdapter, encode_request
from flatgate.proxy.backends.responses.config import ResponsesConfig
from flatgate.proxy.plumbing.config import Problems
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import JSON, SSE, Role, ToolChoiceMode
from tests.backends import responses_events as rev
from tests.backends.helpers import request, run, user
from tests.backends.wire_requests import (
    ANTHROPIC,
    CHAT,
    RESPONSES,
    assistant,
    msg,
    tool_result,
    wire,
)

WEATHER = ("get_weather", "Current weather", '{"type":"object","properties":{}}', False)
ENC = "gAAAAABoEncryptedPayload=="


def body(req: Request, **kw: Any) -> dict[str, Any]:
    kw.setdefault("model", "upstream-model")
    out: dict[str, Any] = json.loads(encode_request(req, **kw))
    return out


def omitted_by(req: Request, **kw: Any) -> list[str]:
    omitted: list[str] = []
    kw.setdefault("model", "m")
    encode_request(req, omitted=omitted, **kw)
    return omitted


def adapter(**kw: Any) -> ResponsesAdapter:
    kw.setdefault("url", "https://api.example.com/v1")
    return ResponsesAdapter(ResponsesConfig(name="r", protocol="openai-responses", **kw))


def chat(**extra: Any) -> Request:
    return request({"model": "client-model", "messages": [user("hi")], **extra})


# -- the conversation ------------------------------------------------------------


def test_a_minimal_request_streams_and_stores_nothing() -> None:
    assert body(chat()) == {
        "model": "upstream-model",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
        ],
        "stream": True,
        "store": False,
    }


def test_a_leading_system_message_is_the_instructions_and_the_rest_are_items() -> None:
    req = wire(
        [
            msg(Role.System, "Be brief."),
            msg(Role.User, "hi"),
            msg(Role.Developer, "Use French."),
            msg(Role.System, "Later system text."),
        ]
    )
    out = body(req)
    assert out["instructions"] == "Be brief."
    assert out["input"] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "Use French."}],
        },
        {
            "type": "message",
            "role": "system",
            "content": [{"type": "input_text", "text": "Later system text."}],
        },
    ]


def test_a_tool_round_trip_is_output_text_function_call_and_its_output() -> None:
    req = wire(
        [
            msg(Role.User, "weather?"),
            assistant("Looking.", calls=[("call_1", "get_weather", '{"city":"Paris"}')]),
            tool_result("call_1", "18C"),
            tool_result("call_2", "no such city", failed=True),
        ]
    )
    assert body(req)["input"][1:] == [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Looking."}],
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
        # the openai adapter's marking of a failed call
        {"type": "function_call_output", "call_id": "call_2", "output": "Error: no such city"},
    ]


def test_a_call_with_empty_arguments_sends_an_empty_object() -> None:
    req = wire([msg(Role.User, "now?"), assistant(calls=[("c", "now", "")])])
    assert body(req)["input"][1]["arguments"] == "{}"


def test_a_message_name_is_left_out_and_named() -> None:
    req = wire([msg(Role.User, "hi", name="alice")])
    assert "name" not in json.dumps(body(req)["input"])
    assert omitted_by(req) == ["name"]


# -- reasoning -----------------------------------------------------------------------


def test_reasoning_parts_of_the_responses_dialect_are_items_before_the_turn() -> None:
    part = ReasoningPart("Thinking it over.", ENC.encode(), RESPONSES, "rs_1")
    req = wire(
        [
            msg(Role.User, "hi"),
            assistant("Hello.", calls=[("c1", "f", "{}")], reasoning=[part]),
            msg(Role.User, "again"),
        ]
    )
    items = body(req)["input"]
    assert [i["type"] for i in items] == [
        "message",
        "reasoning",
        "message",
        "function_call",
        "message",
    ]
    assert items[1] == {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Thinking it over."}],
        "encrypted_content": ENC,
        "id": "rs_1",
    }
    assert omitted_by(req) == []


def test_a_reasoning_part_without_text_has_an_empty_summary() -> None:
    req = wire(
        [
            msg(Role.User, "hi"),
            assistant("ok", reasoning=[ReasoningPart("", b"E", RESPONSES, "rs_2")]),
        ]
    )
    assert body(req)["input"][1] == {
        "type": "reasoning",
        "summary": [],
        "encrypted_content": "E",
        "id": "rs_2",
    }


@pytest.mark.parametrize(
    "part",
    [
        # with store: false an id alone names nothing the server kept
        ReasoningPart("summary only", b"", RESPONSES, "rs_3"),
        ReasoningPart("Claude's thinking", b"sig", ANTHROPIC),
        ReasoningPart("", b"data", ANTHROPIC, redacted=True),
    ],
    ids=["responses-without-encrypted-content", "anthropic", "anthropic-redacted"],
)
def test_reasoning_the_server_cannot_use_is_left_out_and_named(part: ReasoningPart) -> None:
    req = wire([msg(Role.User, "hi"), assistant("ok", reasoning=[part])])
    assert [i["type"] for i in body(req)["input"]] == ["message", "message"]
    assert omitted_by(req) == ["reasoning"]


def test_encrypted_content_that_is_not_utf8_is_untranslatable() -> None:
    req = wire(
        [
            msg(Role.User, "hi"),
            assistant("ok", reasoning=[ReasoningPart("", b"\xff", RESPONSES, "r")]),
        ]
    )
    with pytest.raises(Untranslatable, match=r"messages\[1\]\.reasoning\[0\]"):
        encode_request(req, model="m")


def test_the_body_is_written_with_the_requests_one_model() -> None:
    """Every top-level key is a field of the Responses request, and the
    edge's strict Structs (items, parts) read the body whole."""
    part = ReasoningPart("Thinking it over.", ENC.encode(), RESPONSES, "rs_1")
    req = wire(
        [
            msg(Role.System, "Be brief."),
            msg(Role.User, "weather?"),
            assistant("Looking.", calls=[("c1", "get_weather", "{}")], reasoning=[part]),
            tool_result("c1", "18C"),
            msg(Role.Developer, "In French."),
        ],
        tools=[WEATHER],
        tool_choice_name="get_weather",
        response_format='{"type":"json_object"}',
        metadata={"team": "a"},
        user="u",
        extras={"include": ["reasoning.encrypted_content"], "text": {"verbosity": "low"}},
        dialect=RESPONSES,
        tool_choice=int(ToolChoiceMode.Function),
        max_tokens=64,
        temperature=0.5,
    )
    raw = encode_request(req, model="m")
    assert set(json.loads(raw)) <= set(ResponsesRequest.__struct_fields__)
    got = msgspec.json.decode(raw, type=ResponsesRequest)
    assert isinstance(got.input, list)
    assert [i.type for i in got.input] == [
        "message",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]


# -- settings ------------------------------------------------------------------------


def test_every_mapped_setting() -> None:
    out = body(
        chat(
            max_tokens=64,
            temperature=0.5,
            top_p=0.25,
            user="user-7",
            metadata={"team": "a"},
        )
    )
    assert out["max_output_tokens"] == 64
    assert out["temperature"] == 0.5
    assert out["top_p"] == 0.25
    assert out["user"] == "user-7"
    assert out["metadata"] == {"team": "a"}
    assert "max_tokens" not in out


def test_fields_the_responses_api_has_no_place_for_are_left_out_and_named() -> None:
    req = chat(stop=["END"], seed=3, presence_penalty=0.5, frequency_penalty=0.25, n=2)
    out = body(req)
    for name in ("stop", "seed", "n"):
        assert name not in out
    assert omitted_by(req) == ["stop", "seed", "n"]
    # The Open Responses specification's request has both penalties: carried.
    assert (out["presence_penalty"], out["frequency_penalty"]) == (0.5, 0.25)


def test_function_tools_send_strict_always() -> None:
    req = wire(
        [msg(Role.User, "hi")],
        tools=[WEATHER, ("exact", "", '{"type":"object"}', True)],
        tool_choice=int(ToolChoiceMode.Auto),
        parallel_tool_calls=False,
    )
    out = body(req)
    assert out["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,  # the Responses API's own default would be true
            "description": "Current weather",
        },
        {"type": "function", "name": "exact", "parameters": {"type": "object"}, "strict": True},
    ]
    assert out["tool_choice"] == "auto"
    assert out["parallel_tool_calls"] is False


def test_a_tool_without_parameters_gets_an_empty_object_schema() -> None:
    out = body(chat(tools=[{"type": "function", "function": {"name": "now"}}]))
    assert out["tools"] == [
        {
            "type": "function",
            "name": "now",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        }
    ]


@pytest.mark.parametrize(
    ("mode", "want"),
    [
        (ToolChoiceMode.Auto, "auto"),
        (ToolChoiceMode.None_, "none"),
        (ToolChoiceMode.Required, "required"),
        (ToolChoiceMode.Function, {"type": "function", "name": "get_weather"}),
    ],
)
def test_tool_choice_forms(mode: ToolChoiceMode, want: Any) -> None:
    req = wire(
        [msg(Role.User, "hi")],
        tools=[WEATHER],
        tool_choice=int(mode),
        tool_choice_name="get_weather" if mode == ToolChoiceMode.Function else "",
    )
    assert body(req)["tool_choice"] == want


@pytest.mark.parametrize(
    ("response_format", "text_format"),
    [
        ({"type": "text"}, {"type": "text"}),
        ({"type": "json_object"}, {"type": "json_object"}),
        (
            {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
            },
            {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": True},
        ),
    ],
    ids=["text", "json_object", "json_schema"],
)
def test_response_format_becomes_text_format(
    response_format: dict[str, Any], text_format: dict[str, Any]
) -> None:
    assert body(chat(response_format=response_format))["text"] == {"format": text_format}


# -- the client's extras ---------------------------------------------------------------

CODEX_EXTRAS: dict[str, Any] = {
    "include": ["reasoning.encrypted_content"],
    "reasoning": {"effort": "medium", "summary": "auto"},
    "prompt_cache_key": "session-1",
    "safety_identifier": "user-hash",
    "text": {"verbosity": "low"},
    "tools": [{"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["vs_1"]}],
    "store": False,
    "previous_response_id": "resp_flatgate_1",
}


def test_responses_extras_are_merged_at_the_top_level() -> None:
    req = wire([msg(Role.User, "hi")], extras=CODEX_EXTRAS, dialect=RESPONSES)
    out = body(req)
    assert out["include"] == ["reasoning.encrypted_content"]
    assert out["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert out["prompt_cache_key"] == "session-1"
    assert out["safety_identifier"] == "user-hash"
    assert out["text"] == {"verbosity": "low"}
    # flatgate stores and chains responses itself: never the backend's business
    assert out["store"] is False
    assert "previous_response_id" not in out


def test_hosted_tools_reach_only_a_backend_that_runs_them() -> None:
    req = wire([msg(Role.User, "hi")], extras=CODEX_EXTRAS, dialect=RESPONSES, tools=[WEATHER])
    plain = body(req)
    assert [t["type"] for t in plain["tools"]] == ["function"]
    assert omitted_by(req) == ["tools[web_search]", "tools[file_search]"]
    runs = body(req, hosted_tools=("web_search", "file_search"))
    assert runs["tools"][1:] == CODEX_EXTRAS["tools"]
    assert omitted_by(req, hosted_tools=("web_search", "file_search")) == []


def test_a_dated_hosted_tool_is_its_familys() -> None:
    req = wire(
        [msg(Role.User, "hi")],
        extras={"tools": [{"type": "web_search_2025_08_26"}]},
        dialect=RESPONSES,
    )
    assert body(req, hosted_tools=("web_search",))["tools"] == [{"type": "web_search_2025_08_26"}]
    assert omitted_by(req) == ["tools[web_search]"]


def test_extras_text_merges_with_the_mapped_format() -> None:
    req = wire(
        [msg(Role.User, "hi")],
        response_format='{"type":"json_object"}',
        extras={"text": {"verbosity": "high"}},
        dialect=RESPONSES,
    )
    assert body(req)["text"] == {"format": {"type": "json_object"}, "verbosity": "high"}


def test_the_clients_value_wins_once_except_for_model_input_and_stream() -> None:
    req = wire(
        [msg(Role.User, "hi")],
        extras={"temperature": 0.9, "model": "other", "input": "x", "stream": False},
        dialect=RESPONSES,
        temperature=0.1,
    )
    raw = encode_request(req, model="m")
    out = json.loads(raw)
    assert out["temperature"] == 0.9
    assert raw.count(b'"temperature"') == 1
    assert (out["model"], out["stream"]) == ("m", True)
    assert out["input"][0]["role"] == "user"


def test_chat_extras_are_mapped_and_the_rest_named() -> None:
    req = wire(
        [msg(Role.User, "hi")],
        response_format='{"type":"json_object"}',
        extras={
            "reasoning_effort": "low",
            "verbosity": "low",
            "prompt_cache_key": "k",
            "service_tier": "flex",
            "logit_bias": {"50256": -100},
        },
        dialect=CHAT,
    )
    # logit_bias has no Responses equivalent: refused, naming it, by default...
    with pytest.raises(Untranslatable, match="'logit_bias'"):
        body(req)
    # ...dropped and named where the backend says so (drop_unsupported).
    out = body(req, drop_unsupported=True)
    assert out["reasoning"] == {"effort": "low"}
    assert out["text"] == {"format": {"type": "json_object"}, "verbosity": "low"}
    assert (out["prompt_cache_key"], out["service_tier"]) == ("k", "flex")
    assert "logit_bias" not in out
    assert omitted_by(req, drop_unsupported=True) == ["logit_bias"]


def test_a_messages_clients_thinking_is_an_effort_and_the_rest_refused_or_named() -> None:
    req = wire(
        [msg(Role.User, "hi")],
        extras={
            "thinking": {"type": "enabled", "budget_tokens": 20000},
            "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
            "top_k": 3,
        },
        dialect=ANTHROPIC,
    )
    # top_k has no Responses field: refused, naming it, unless dropped.
    with pytest.raises(Untranslatable, match="'top_k'"):
        body(req)
    out = body(req, drop_unsupported=True)
    assert out["reasoning"] == {"effort": "high"}
    assert "thinking" not in out and "context_management" not in out
    # Clearing thinking is mapped to nothing (this backend is sent none): named.
    assert omitted_by(req, drop_unsupported=True) == ["context_management", "top_k"]


@pytest.mark.parametrize("extras", ["[1, 2]", "not json", '{"tools": {"type": "x"}}'])
def test_extras_that_are_not_what_they_say_are_untranslatable(extras: str) -> None:
    req = wire([msg(Role.User, "hi")], extras=extras, dialect=RESPONSES)
    with pytest.raises(Untranslatable, match="extras"):
        encode_request(req, model="m")


# -- the adapter --------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_prepare_posts_to_responses_under_the_base_url_with_openais_headers(stream: bool) -> None:
    req = wire(
        [msg(Role.User, "hi", name="n")],
        extras={"tools": [{"type": "web_search"}]},
        dialect=RESPONSES,
        stream=stream,
    )
    out = adapter(api_key="sk-up", headers={"x-team": "a"}, model="gpt-5").prepare(
        Inbound(b"ignored", lambda: req, "rid-1", "Bearer caller")
    )
    assert out.url == "https://api.example.com/v1/responses"
    # A request the client did not stream asks for the answer whole.
    assert out.headers == [
        ("content-type", JSON),
        ("accept", SSE if stream else JSON),
        ("x-request-id", "rid-1"),
        ("authorization", "Bearer sk-up"),
        ("x-team", "a"),
    ]
    sent = json.loads(out.body)
    assert (sent["model"], sent["stream"], sent["store"], out.whole) == (
        "gpt-5",
        stream,
        False,
        not stream,
    )
    assert out.omitted == ("name", "tools[web_search]")


def test_prepare_names_each_omitted_field_once() -> None:
    req = wire([msg(Role.User, "a", name="x"), msg(Role.User, "b", name="y")])
    assert adapter().prepare(Inbound(b"", lambda: req, "r", "")).omitted == ("name",)


def test_the_probe_and_refusals_are_the_openai_adapters() -> None:
    mine = adapter(api_key="k")
    theirs = OpenAIAdapter(
        OpenAIConfig(name="o", url="https://api.example.com/v1", protocol="openai", api_key="k")
    )
    assert mine.probe() == theirs.probe()
    assert mine.probe().url == "https://api.example.com/v1/models"
    for status in (400, 401, 403, 404, 408, 429, 500, 503, 529):
        headers = {"retry-after": "3"}
        err = b'{"error": {"message": "nope", "type": "x"}}'
        assert mine.refusal(status, headers, err) == theirs.refusal(status, headers, err)
    assert mine.refusal(429, {"retry-after": "3"}, b"{}").kind is RefusalKind.RATE_LIMITED


def test_the_translator_names_the_configured_model() -> None:
    stream = adapter(model="gpt-5").translator("r", "routed")
    chunks = run(stream, [rev.events(rev.message(0, "hi"), rev.completed())])
    assert {c.model for c in chunks} == {"gpt-5"}


# -- configuration --------------------------------------------------------------------


def problems_of(**kw: Any) -> list[str]:
    """The problems of a [[backends]] entry, as the config finds them."""
    entry = {"name": "b", "url": "https://api.openai.com/v1", "protocol": "openai-responses", **kw}
    problems = Problems()
    config = backend_config(entry, "backends[0]", problems)
    if config is not None:
        problems += backend_problems(config, "backends[0]", {})
    return problems


def test_hosted_tools_are_checked_by_name() -> None:
    assert problems_of(hosted_tools=("web_search", "mcp")) == []
    assert problems_of(hosted_tools=("web_serach",)) == [
        "backends[0].hosted_tools[0]: unknown hosted tool 'web_serach': expected one of "
        "web_search, web_search_preview, file_search, code_interpreter, computer, "
        "computer_use_preview, image_generation, mcp, local_shell, shell, apply_patch, "
        "tool_search, programmatic_tool_calling"
    ]


def test_hosted_tools_apply_to_responses_backends_only() -> None:
    problems = problems_of(protocol="openai", hosted_tools=("web_search",))
    assert problems == ["backends[0].hosted_tools: applies to openai-responses backends only"]


def test_max_tokens_field_does_not_apply_to_responses_backends() -> None:
    problems = problems_of(max_tokens_field="max_completion_tokens")
    assert problems == ["backends[0].max_tokens_field: applies to openai backends only"]
