"""The Responses edge's nested fields (issue 22): a key inside an item, a
part, a tool, the tool choice or ``stream_options`` is carried, mapped to
nothing (a previous answer's metadata, echoed back; null or empty), or
refused with a 400 naming its path; and ``$`` keys are flatgate's own."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.responses.translate import write_request
from flatgate.proxy.apis.openai_responses import request as models
from flatgate.proxy.wire.request.decode import Request, read_request
from tests.edge.responses.common import decoded

FN = {"type": "function", "name": "f", "parameters": {"type": "object"}}


def wire(**body: Any) -> Request:
    return read_request(write_request(decoded(**body), provider=2, model_name="m"))


def refused(**body: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        decoded(**body)
    assert info.value.status == 400
    return info.value


# A previous answer's output items, as the openai SDK serializes them back
# (what the Agents SDK and Codex send as the next request's input).
ECHOED = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    {
        "type": "reasoning",
        "id": "rs_1",
        "status": "completed",
        "summary": [{"type": "summary_text", "text": "short"}],
        "content": [{"type": "reasoning_text", "text": "the long thought"}],
        "encrypted_content": None,
    },
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "phase": "commentary",
        "content": [
            {
                "type": "output_text",
                "text": "Looking.",
                "annotations": [{"type": "url_citation", "url": "https://example.com"}],
                "logprobs": [],
            }
        ],
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "status": "completed",
        "call_id": "call_1",
        "name": "f",
        "arguments": "{}",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "ok", "status": None},
]


def test_echoed_output_metadata_is_accepted() -> None:
    req = wire(input=ECHOED, tools=[FN])
    assistant = req.messages[1]
    assert (assistant.content, assistant.tool_calls[0].id if assistant.tool_calls else "") == (
        "Looking.",
        "call_1",
    )
    assert req.extras == ""


def test_a_reasoning_item_carries_its_content_over_its_summary() -> None:
    # The summary is made from the reasoning: the reasoning itself is carried.
    parts = wire(input=ECHOED, tools=[FN]).messages[1].reasoning or []
    assert [(p.text, p.id) for p in parts] == [("the long thought", "rs_1")]
    item = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "short"}]}
    parts = wire(input=[ECHOED[0], item]).messages[1].reasoning or []
    assert [p.text for p in parts] == ["short"]


@pytest.mark.parametrize("value", [None, [], {}, ""])
def test_null_or_empty_unknown_keys_ask_for_nothing(value: object) -> None:
    part = {"type": "input_text", "text": "x", "cache_control": value}
    item = {"role": "user", "content": [part], "x_meta": value}
    tool = {**FN, "x_hint": value}
    group = {"type": "namespace", "name": "ns", "x": value, "tools": [{**FN, "y": value}]}
    req = wire(
        input=[item],
        tools=[tool, group],
        tool_choice={"type": "function", "name": "f", "z": value},
        stream=True,
        stream_options={"include_obfuscation": True, "x_pad": value},
    )
    assert [m.content for m in req.messages] == ["x"]
    assert (req.tool_choice_name, [t.function.name for t in req.tools]) == ("f", ["f", "ns__f"])


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"role": "user", "content": "x", "x": 1}, "input.[0].x"),
        ({"type": "message", "role": "user", "content": "x", "x": 1}, "input.[0].x"),
        (
            {"role": "user", "content": [{"type": "input_text", "text": "x", "x": {"a": 1}}]},
            "input.[0].content.[0].x",
        ),
        (
            {"role": "assistant", "content": [{"type": "output_text", "text": "x", "x": 1}]},
            "input.[0].content.[0].x",
        ),
        ({"type": "function_call_output", "call_id": "c", "output": "x", "x": 1}, "input.[0].x"),
        (
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "x", "x": 1}]},
            "input.[0].summary.[0].x",
        ),
    ],
)
def test_other_item_keys_are_refused_by_path(item: dict[str, Any], param: str) -> None:
    assert refused(input=[item]).param == param


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{**FN, "x": 1}]}, "tools.[0].x"),
        ({"tools": [{**FN, "defer_loading": True}]}, "tools.[0].defer_loading"),
        (
            {"tools": [{"type": "namespace", "name": "ns", "tools": [{**FN, "x": True}]}]},
            "tools.[0].tools.[0].x",
        ),
        ({"tools": [{"type": "namespace", "name": "ns", "x": 1, "tools": [FN]}]}, "tools.[0].x"),
        (
            {"tools": [FN], "tool_choice": {"type": "function", "name": "f", "x": 1}},
            "tool_choice.x",
        ),
        ({"stream_options": {"include_obfuscation": False, "x": 1}}, "stream_options.x"),
    ],
)
def test_other_tool_and_option_keys_are_refused_by_path(fields: dict[str, Any], param: str) -> None:
    assert refused(**fields).param == param


def test_hosted_tools_and_choices_still_travel_as_written() -> None:
    search = {"type": "web_search", "external_web_access": True, "x_new": 1}
    choice = {"type": "web_search", "x_new": 2}
    req = wire(tools=[FN, search], tool_choice=choice)
    assert json.loads(req.extras) == {"tools": [search], "tool_choice": choice}


def test_defer_loading_false_asks_for_nothing() -> None:
    assert [t.function.name for t in wire(tools=[{**FN, "defer_loading": False}]).tools] == ["f"]


def test_a_namespace_description_opens_its_functions() -> None:
    group = {"type": "namespace", "name": "crm", "description": "The CRM.", "tools": [FN]}
    assert [t.function.description for t in wire(tools=[group]).tools] == ["The CRM."]


def test_dollar_keys_are_flatgates_own_and_refused() -> None:
    assert refused(**{"$headers": {"x-api-key": "k"}}).param == "$headers"
    assert refused(**{"$cache_control": None}).param == "$cache_control"


def test_stream_options_are_accepted_and_ask_for_nothing() -> None:
    for value in (True, False, None):
        req = wire(stream=True, stream_options={"include_obfuscation": value})
        assert (req.stream, req.extras) == (True, "")


def test_a_body_with_no_unknown_key_takes_the_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_: object) -> None:
        raise AssertionError("the lenient pass ran")

    monkeypatch.setattr(models, "decode_scrubbed", fail)
    decoded(input=ECHOED, tools=[FN], stream_options={"include_obfuscation": False})
