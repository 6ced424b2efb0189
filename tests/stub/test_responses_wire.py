"""The stub's Responses wire (``backends.responses.stub``) without a server: the
request's checks, the documented event sequence, the response object, the
reasoning item and its fake encrypted content, and the frames cadence mode
builds once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.proxy.backends.dialect import Rejected, StubRequest, answer
from flatgate.proxy.backends.responses.stub import ResponsesWire
from flatgate.proxy.backends.responses.stub_request import encrypted
from flatgate.proxy.stub.cadence import prebuilt
from tests.stub.helpers import sse_events

WIRE = ResponsesWire()
NO_HEADERS: dict[str, str] = {}


def parse(doc: dict[str, Any]) -> StubRequest:
    return WIRE.parse(json.dumps(doc).encode(), {"x-request-id": "r1"}.get)


def refusal(doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    with pytest.raises(Rejected) as info:
        parse(doc)
    reply = info.value.reply
    error: dict[str, Any] = json.loads(reply.body)["error"]
    return reply.status, error


def streamed(doc: dict[str, Any]) -> list[tuple[str | None, Any]]:
    req = parse({"stream": True, **doc})
    r = WIRE.stream(req, answer(req, WIRE.tool_id_prefix), NO_HEADERS.get)
    return sse_events((r.opening() + b"".join(r.steps()) + r.closing()).decode())


def whole(doc: dict[str, Any]) -> dict[str, Any]:
    req = parse(doc)
    reply = WIRE.complete(req, answer(req, WIRE.tool_id_prefix), NO_HEADERS.get)
    out: dict[str, Any] = json.loads(reply.body)
    return out


# -- the request -------------------------------------------------------------------


def test_input_items_become_the_echos_messages() -> None:
    req = parse(
        {
            "model": "echo",
            "instructions": "be brief",
            "input": [
                {"role": "user", "content": "first"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "ok"}],
                },
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "done"},
                {"type": "web_search_call", "id": "ws_1", "status": "completed"},
                {"role": "user", "content": [{"type": "input_text", "text": "last words"}]},
            ],
            "max_output_tokens": 5,
        }
    )
    assert req.last_user == "last words"
    assert req.max_tokens == 5
    assert req.prompt_tokens == 2 + 1 + 1 + 1 + 2


@pytest.mark.parametrize(
    ("doc", "status", "param", "code"),
    [
        ({"input": "x"}, 400, "model", "missing_required_parameter"),
        ({"model": "m"}, 400, "input", "missing_required_parameter"),
        (
            {"model": "m", "input": [{"role": "robot", "content": "x"}]},
            400,
            "input[0].role",
            "invalid_value",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            400,
            "input[0].content[0].type",
            "invalid_value",
        ),
        (  # an image with no source
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            400,
            "input[0].content[0].image_url",
            "invalid_value",
        ),
        (
            {"model": "m", "input": [{"type": "function_call", "name": "f"}]},
            400,
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "input": "x", "max_output_tokens": 0},
            400,
            "max_output_tokens",
            "integer_below_min_value",
        ),
        (
            {"model": "m", "input": "x", "include": ["everything"]},
            400,
            "include[0]",
            "invalid_value",
        ),
        ({"model": "m", "input": "x", "stream_options": {}}, 400, "stream_options", None),
        ({"model": "m", "input": "x", "temperature": 3}, 400, "temperature", "invalid_value"),
        (
            {"model": "m", "input": "x", "text": {"format": {"type": "json_schema"}}},
            400,
            "text.format.name",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "input": "x", "tool_choice": {"type": "function", "name": "f"}},
            400,
            "tool_choice",
            None,
        ),
        (
            {
                "model": "m",
                "input": [
                    {
                        "type": "reasoning",
                        "id": "rs_9",
                        "summary": [],
                        "encrypted_content": "forged",
                    }
                ],
            },
            400,
            "input[0].encrypted_content",
            "invalid_encrypted_content",
        ),
        # the stub stores nothing: what names a stored thing is not found
        (
            {"model": "m", "input": "x", "previous_response_id": "resp_1"},
            404,
            "previous_response_id",
            "previous_response_not_found",
        ),
        (
            {"model": "m", "input": [{"type": "reasoning", "id": "rs_9", "summary": []}]},
            404,
            "input",
            None,
        ),
        ({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}, 404, "input", None),
        # what the request's one model bounds or lists, in OpenAI's words
        ({"model": "m", "input": "x", "top_p": -0.5}, 400, "top_p", "invalid_value"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "picture"}]}]},
            400,
            "input[0].content[0].type",
            "invalid_value",
        ),
        (
            {"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}},
            400,
            "text.format.type",
            "invalid_value",
        ),
        ({"model": None, "input": "x"}, 400, "model", "missing_required_parameter"),
        (
            {"model": "m", "input": "x", "tool_choice": 5},
            400,
            "tool_choice",
            "invalid_type",
        ),
    ],
)
def test_what_openai_refuses_is_refused_in_its_words(
    doc: dict[str, Any], status: int, param: str, code: str | None
) -> None:
    got, error = refusal(doc)
    assert (got, error["param"], error["code"], error["type"]) == (
        status,
        param,
        code,
        "invalid_request_error",
    )


def test_a_refused_role_is_named_with_the_roles_in_openais_order() -> None:
    _, error = refusal({"model": "m", "input": [{"role": "robot", "content": "x"}]})
    assert error["message"] == (
        "Invalid value: 'robot'. Supported values are: 'user', 'assistant', 'system', 'developer'."
    )


def test_members_of_no_name_are_ignored_as_openai_does() -> None:
    """The stub reads with the edge's Structs, which refuse such members at
    the edge; the stub drops them first (``lenient.without_unknown``)."""
    req = parse(
        {
            "model": "m",
            "input": [
                {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}},
                {
                    "role": "user",
                    "content": [{"type": "input_text", "text": "last words", "cache_control": {}}],
                    "metadata": {"a": 1},
                },
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
            "reasoning": {"effort": "low", "generate_summary": "auto"},
            "no_such_field": 1,
        }
    )
    assert req.last_user == "last words"
    assert req.params["reasoning"].effort == "low"


def test_the_stubs_own_encrypted_content_comes_back_accepted() -> None:
    item = {
        "type": "reasoning",
        "id": "rs_r1",
        "summary": [],
        "encrypted_content": encrypted("rs_r1"),
    }
    assert parse({"model": "m", "input": [item, {"role": "user", "content": "x"}]}).last_user == "x"


def test_hosted_tools_and_store_are_taken() -> None:
    req = parse({"model": "m", "input": "x", "tools": [{"type": "web_search"}], "store": True})
    assert req.params["tools"] == [{"type": "web_search"}]


# -- the stream ----------------------------------------------------------------------


def test_the_documented_event_sequence_with_increasing_sequence_numbers() -> None:
    events = streamed({"model": "echo", "input": "one two"})
    assert [name for name, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [data["type"] for _, data in events] == [name for name, _ in events]
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert [d["delta"] for n, d in events if n == "response.output_text.delta"] == ["one ", "two"]
    final = events[-1][1]["response"]
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "one two"
    assert final["usage"] == {
        "input_tokens": 2,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 4,
    }


def test_reasoning_with_a_summary_and_encrypted_content_when_asked() -> None:
    events = streamed(
        {
            "model": "echo",
            "input": "one two three",
            "reasoning": {"effort": "low", "summary": "auto"},
            "include": ["reasoning.encrypted_content"],
        }
    )
    names = [n for n, _ in events]
    assert names[2:5] == [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
    ]
    summary = "".join(d["delta"] for n, d in events if n == "response.reasoning_summary_text.delta")
    assert summary == "The user wrote 3 words; I repeat them back."
    done = next(d for n, d in events if n == "response.output_item.done")["item"]
    assert done == {
        "id": "rs_r1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": summary}],
        "encrypted_content": encrypted("rs_r1"),
    }
    # the message is the second output item
    assert {d["output_index"] for n, d in events if n == "response.output_text.delta"} == {1}
    usage = events[-1][1]["response"]["usage"]
    assert usage["output_tokens_details"]["reasoning_tokens"] == 9
    assert usage["output_tokens"] == 3 + 9


def test_reasoning_without_a_summary_or_include_is_a_bare_item() -> None:
    out = whole({"model": "echo", "input": "a", "reasoning": {"effort": "high"}})
    assert out["output"][0] == {"id": "rs_r1", "type": "reasoning", "summary": []}


def test_no_reasoning_setting_no_reasoning_item() -> None:
    assert [i["type"] for i in whole({"model": "echo", "input": "a"})["output"]] == ["message"]


def test_a_forced_function_is_a_function_call_item() -> None:
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    events = streamed(
        {
            "model": "echo",
            "input": "find it",
            "tools": tools,
            "tool_choice": {"type": "function", "name": "lookup"},
        }
    )
    names = [n for n, _ in events]
    assert "response.output_text.delta" not in names
    args = "".join(d["delta"] for n, d in events if n == "response.function_call_arguments.delta")
    assert json.loads(args) == {"input": "find it"}
    item = events[-1][1]["response"]["output"][0]
    assert item == {
        "id": "fc_r1",
        "type": "function_call",
        "status": "completed",
        "arguments": args,
        "call_id": "call_r1",
        "name": "lookup",
    }


def test_max_output_tokens_cut_is_an_incomplete_response() -> None:
    events = streamed({"model": "echo", "input": "one two three", "max_output_tokens": 2})
    name, data = events[-1]
    assert name == "response.incomplete"
    assert data["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert data["response"]["output"][0]["status"] == "incomplete"


def test_the_error_fault_is_a_failed_response_event() -> None:
    req = parse({"model": "echo@error:1", "input": "a b", "stream": True})
    r = WIRE.stream(req, answer(req), NO_HEADERS.get)
    ((name, data),) = sse_events(r.error().decode())
    assert name == "response.failed"
    assert data["response"]["status"] == "failed"
    assert data["response"]["error"]["code"] == "server_error"


def test_the_whole_answer_echoes_the_requests_settings() -> None:
    out = whole(
        {
            "model": "echo",
            "input": "hi",
            "instructions": "be brief",
            "temperature": 0.5,
            "store": False,
            "metadata": {"a": "b"},
            "tools": [{"type": "web_search"}],
        }
    )
    assert out["object"] == "response" and out["id"] == "resp_r1"
    assert (out["instructions"], out["temperature"], out["store"]) == ("be brief", 0.5, False)
    assert (out["metadata"], out["tools"]) == ({"a": "b"}, [{"type": "web_search"}])


# -- cadence mode ---------------------------------------------------------------------


def test_cadence_frames_are_the_echos_events() -> None:
    built = prebuilt(WIRE, 3, NO_HEADERS.get)
    data = built.first + built.delta * 2 + built.final
    events = sse_events(data.decode())
    assert [d["delta"] for n, d in events if n == "response.output_text.delta"] == ["tok "] * 3
    assert events[-1][0] == "response.completed"
