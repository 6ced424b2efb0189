"""Chunk frames as Responses events and ``response`` objects
(``responses.render``): against OpenAI's documented examples (``golden/``,
sources in ``golden/SOURCES.md``), and every event and body checked against
the openai SDK's own types (``common``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai.types.responses as sdk
import pytest

from flatgate.edge_translator.openai.endpoint import KEEPALIVE
from flatgate.edge_translator.responses.echo import echo_of
from flatgate.edge_translator.responses.endpoint import RESPONSES
from flatgate.edge_translator.responses.render import Aggregator, RenderedFailure
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason
from tests.edge.responses.common import Event, aggregate, decoded, parse_sse, render, renderer

GOLDEN = Path(__file__).parent / "golden"
STOP, LENGTH = FinishReason.STOP, FinishReason.LENGTH
RESPONSES_DIALECT = int(ApiDialect.OPENAI_RESPONSES)
# Keys of OpenAI's older examples that the current Response has no more.
LEGACY = {"input", "reasoning_effort"}
# Values that differ by design: ids and times are each response's own;
# OpenAI echoes its own defaults of sampling fields, flatgate what was sent.
OWN = {"id", "item_id", "created_at", "completed_at", "sequence_number", "temperature", "top_p"}


def names(events: list[Event]) -> list[str]:
    return [n for n, _ in events]


def of(events: list[Event], name: str) -> list[dict[str, Any]]:
    return [d for n, d in events if n == name]


def covers(theirs: Any, ours: Any, at: str = "") -> None:
    """Every key of the documented ``theirs`` is in ``ours`` (recursively),
    with the same value unless it is one of ``OWN``."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), at
        for key, value in theirs.items():
            if key in LEGACY:
                continue
            assert key in ours, f"{at}.{key} missing"
            if key not in OWN:
                covers(value, ours[key], f"{at}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), at
        for i, (t, o) in enumerate(zip(theirs, ours, strict=True)):
            covers(t, o, f"{at}[{i}]")
    else:
        assert theirs == ours, f"{at}: {theirs!r} != {ours!r}"


def documented_stream() -> list[Event]:
    """The reference's "Streaming" example (its ``...`` elision left out)."""
    text = (GOLDEN / "openai_stream_text.sse").read_text()
    out = []
    for block in text.split("\n\n"):
        if block.strip() in ("", "..."):
            continue
        name_line, data_line = block.strip().split("\n")
        out.append(
            (name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: ")))
        )
    return out


def test_the_documented_text_stream() -> None:
    req = decoded(model="gpt-5.4", instructions="You are a helpful assistant.", input="Hello!")
    ours = render(
        Chunk(model="gpt-5.4", content="Hi"),
        Chunk(content=" there! How can I assist you today?"),
        Chunk(finish_reason=STOP, usage=Usage(37, 11)),
        req=req,
    )
    theirs = documented_stream()
    # The docs show one delta and elide the rest: ours has two.
    kept, seen = [], False
    for name, data in ours:
        if name == "response.output_text.delta":
            if seen:
                continue
            seen = True
        kept.append((name, data))
    assert names(kept) == names(theirs)
    for (name, t), (_, o) in zip(theirs, kept, strict=True):
        covers(t, o, name)


def test_every_documented_event_example_is_covered() -> None:
    examples = json.loads((GOLDEN / "openai_event_examples.json").read_text())
    req = decoded(
        tools=[{"type": "function", "name": "get_weather"}], include=["reasoning.encrypted_content"]
    )
    events = render(
        Chunk(reasoning="**Responding** "),
        Chunk(reasoning="to a greeting"),
        Chunk(reasoning_part=ReasoningPart(opaque=b"gAAA", dialect=RESPONSES_DIALECT)),
        Chunk(content="In"),
        Chunk(content=" a shimmering forest"),
        Chunk(tool_calls=(ToolCallDelta(0, "call_1", "get_weather"),)),
        Chunk(tool_calls=(ToolCallDelta(0, arguments='{ "arg": 123 }'),)),
        Chunk(finish_reason=STOP, usage=Usage(5, 7)),
        req=req,
    )
    r = renderer()
    r.feed(Chunk(content="x"))
    cut = r.feed(Chunk(finish_reason=LENGTH))
    events += parse_sse(cut)
    r = renderer()
    r.feed(Chunk(content="x"))
    with pytest.raises(RenderedFailure) as failed:
        r.feed(Chunk(error=ChunkError("backend_error", "The model failed to generate a response.")))
    events += parse_sse(failed.value.event)
    events += parse_sse(RESPONSES.error_event(FlatgateError("Something went wrong")))
    for name, entry in examples.items():
        # One example misses a comma (SOURCES.md): put back.
        theirs = json.loads(entry["example"].replace('":"\n  "sequence', '":",\n  "sequence'))
        kind = theirs.get("item", {}).get("type")
        ours = [d for d in of(events, name) if kind is None or d["item"]["type"] == kind]
        assert ours, name
        keys = set(theirs) - LEGACY
        assert keys <= set(ours[0]), (name, keys - set(ours[0]))
        for key in ("response", "item", "part"):
            if isinstance(theirs.get(key), dict):
                inner = set(theirs[key]) - LEGACY
                assert inner <= set(ours[0][key]), (name, key, inner - set(ours[0][key]))


def test_reasoning_then_text_then_calls() -> None:
    req = decoded(include=["reasoning.encrypted_content"])
    events = render(
        Chunk(reasoning="a"),
        Chunk(
            reasoning="b",
            reasoning_part=ReasoningPart(opaque=b"E", dialect=RESPONSES_DIALECT, id="rs_backend"),
        ),
        Chunk(content="Hi"),
        Chunk(
            tool_calls=(ToolCallDelta(0, "call_a", "f", '{"x"'), ToolCallDelta(1, "call_b", "g"))
        ),
        Chunk(tool_calls=(ToolCallDelta(1, arguments="{}"), ToolCallDelta(0, arguments=":1}"))),
        Chunk(
            finish_reason=FinishReason.TOOL_CALLS,
            usage=Usage(9, 4, cached_tokens=2, reasoning_tokens=1),
        ),
        req=req,
    )
    added = [d["item"] for d in of(events, "response.output_item.added")]
    done = [d["item"] for d in of(events, "response.output_item.done")]
    assert [i["type"] for i in added] == ["reasoning", "message", "function_call", "function_call"]
    assert [a["id"] for a in added] == [d["id"] for d in done]  # the SDK checks this
    rs, msg, fa, fb = done
    assert rs["summary"] == [{"type": "summary_text", "text": "ab"}]
    assert rs["encrypted_content"] == "E"
    assert rs["id"].startswith("rs_") and rs["id"] != "rs_backend"  # added before the part came
    assert msg["content"] == [{"type": "output_text", "text": "Hi", "annotations": []}]
    assert (fa["call_id"], fa["name"], fa["arguments"], fa["status"]) == (
        "call_a",
        "f",
        '{"x":1}',
        "completed",
    )
    assert (fb["call_id"], fb["arguments"]) == ("call_b", "{}")
    assert [d["output_index"] for d in of(events, "response.output_item.done")] == [0, 1, 2, 3]
    final = of(events, "response.completed")[0]["response"]
    assert final["status"] == "completed"
    assert final["output"] == done
    assert final["usage"] == {
        "input_tokens": 9,
        "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
        "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 13,
    }


def test_encrypted_content_only_when_asked_for() -> None:
    part = ReasoningPart(opaque=b"E", dialect=RESPONSES_DIALECT, id="rs_x")
    events = render(Chunk(reasoning_part=part), Chunk(finish_reason=STOP))
    (item,) = [d["item"] for d in of(events, "response.output_item.done")]
    assert item == {
        "id": "rs_x",
        "type": "reasoning",
        "summary": [],
    }  # a part that opens its item keeps its id


def test_a_reasoning_part_alone_is_a_whole_item() -> None:
    part = ReasoningPart(text="short", opaque=b"E", dialect=RESPONSES_DIALECT, id="rs_x")
    events = render(
        Chunk(reasoning_part=part),
        Chunk(content="ok", finish_reason=STOP),
        req=decoded(include=["reasoning.encrypted_content"]),
    )
    assert names(events)[2:8] == [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
    ]
    assert of(events, "response.output_item.done")[0]["item"]["encrypted_content"] == "E"


def test_a_namespaced_call_is_named_as_declared() -> None:
    group = {
        "type": "namespace",
        "name": "crm",
        "description": "CRM",
        "tools": [{"type": "function", "name": "find"}],
    }
    events = render(
        Chunk(tool_calls=(ToolCallDelta(0, "call_1", "crm__find", "{}"),)),
        Chunk(finish_reason=FinishReason.TOOL_CALLS),
        req=decoded(tools=[group]),
    )
    item = of(events, "response.output_item.done")[0]["item"]
    assert (item["name"], item["namespace"]) == ("find", "crm")
    assert of(events, "response.function_call_arguments.done")[0]["name"] == "find"


def test_a_hosted_tools_output_item_is_passed_on() -> None:
    call = {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "q"},
    }
    extras = json.dumps({"output_item": call})
    events = render(
        Chunk(extras=extras, extras_dialect=RESPONSES_DIALECT),
        Chunk(extras='{"other":1}', extras_dialect=RESPONSES_DIALECT),
        Chunk(extras=extras, extras_dialect=int(ApiDialect.OPENAI_CHAT)),
        Chunk(content="Found it.", finish_reason=STOP),
    )
    assert of(events, "response.output_item.added")[0] == {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": call,
        "sequence_number": 2,
    }
    final = of(events, "response.completed")[0]["response"]
    assert [i["type"] for i in final["output"]] == ["web_search_call", "message"]
    assert final["output"][0] == call


@pytest.mark.parametrize(
    ("finish", "reason"),
    [(FinishReason.LENGTH, "max_output_tokens"), (FinishReason.CONTENT_FILTER, "content_filter")],
)
def test_an_incomplete_response(finish: FinishReason, reason: str) -> None:
    events = render(Chunk(content="Once upon"), Chunk(finish_reason=finish))
    assert names(events)[-1] == "response.incomplete"
    final = events[-1][1]["response"]
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": reason}
    assert final["output"][0]["status"] == "incomplete"
    assert final["usage"] is None  # none reported: none made up


def test_a_failure_after_the_first_byte_is_response_failed_in_sequence() -> None:
    r = renderer()
    begun = parse_sse(r.feed(Chunk(content="Hel")))
    with pytest.raises(RenderedFailure) as caught:
        r.feed(Chunk(error=ChunkError("backend_stream_error", "boom")))
    err = caught.value
    assert err.status == 502 and err.code.code == "backend_stream_error"
    assert RESPONSES.error_event(err) == err.event
    (failed,) = parse_sse(err.event)
    assert failed[1]["sequence_number"] == begun[-1][1]["sequence_number"] + 1
    response = failed[1]["response"]
    assert response["status"] == "failed"
    assert response["error"] == {
        "code": "server_error",
        "message": "boom (code: backend_stream_error)",
    }
    assert response["output"][0]["content"][0]["text"] == "Hel"
    assert r.finished
    assert json.loads(r.response_json())["status"] == "failed"


def test_a_failure_at_once_still_opens_the_response() -> None:
    r = renderer()
    with pytest.raises(RenderedFailure) as caught:
        r.feed(Chunk(error=ChunkError("backend_rate_limited", "slow down")))
    events = parse_sse(caught.value.event)
    assert names(events) == ["response.created", "response.in_progress", "response.failed"]
    error = events[-1][1]["response"]["error"]
    assert error == {
        "code": "rate_limit_exceeded",
        "message": "slow down (code: backend_rate_limited)",
    }


def test_a_rate_limit_says_when_to_try_again_as_openai_words_it() -> None:
    r = renderer()
    r.feed(Chunk(content="x"))
    err = FlatgateError("Tenant over its limit.", code=codes.TENANT_RATE_LIMITED, retry_after=2.5)
    events = parse_sse(r.fail(err))
    message = events[-1][1]["response"]["error"]["message"]
    assert message.endswith("Please try again in 2.5s.")


def test_an_error_no_renderer_saw_is_an_error_event() -> None:
    err = FlatgateError("The gateway is shutting down.", code=codes.DRAINING)
    ((name, data),) = parse_sse(RESPONSES.error_event(err))
    assert name == "error"
    assert (data["code"], data["message"]) == ("draining", "The gateway is shutting down.")


def test_the_keepalive_is_an_sse_comment() -> None:
    assert RESPONSES.beat == KEEPALIVE and KEEPALIVE.startswith(b":")


def test_an_unfinished_stream_reads_as_failed() -> None:
    r = renderer()
    r.feed(Chunk(content="x"))
    body = json.loads(r.response_json())
    sdk.Response.model_validate(body)
    assert body["status"] == "failed" and body["error"]["code"] == "server_error"


def test_the_request_is_echoed() -> None:
    tools = [
        {"type": "function", "name": "f", "parameters": {"type": "object"}},
        {"type": "web_search"},
    ]
    req = decoded(
        instructions="I",
        max_output_tokens=9,
        temperature=0.5,
        tools=tools,
        tool_choice="required",
        parallel_tool_calls=False,
        text={"format": {"type": "json_object"}, "verbosity": "low"},
        reasoning={"effort": "low"},
        metadata={"k": "v"},
        store=False,
        previous_response_id="resp_0",
        user="u",
        truncation="auto",
        prompt_cache_key="p",
        safety_identifier="s",
    )
    body = aggregate(Chunk(content="x", finish_reason=STOP), req=req)
    assert {
        k: body[k]
        for k in (
            "instructions",
            "max_output_tokens",
            "temperature",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "text",
            "reasoning",
            "metadata",
            "store",
            "previous_response_id",
            "user",
            "truncation",
            "prompt_cache_key",
            "safety_identifier",
        )
    } == {
        "instructions": "I",
        "max_output_tokens": 9,
        "temperature": 0.5,
        # A function tool with every member the schema requires (strict:
        # true, the default the wire carries); another tool as sent.
        "tools": [
            {
                "type": "function",
                "name": "f",
                "description": None,
                "parameters": {"type": "object"},
                "strict": True,
            },
            {"type": "web_search"},
        ],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "text": {"format": {"type": "json_object"}, "verbosity": "low"},
        "reasoning": {"effort": "low", "summary": None},
        "metadata": {"k": "v"},
        "store": False,
        "previous_response_id": "resp_0",
        "user": "u",
        "truncation": "auto",
        "prompt_cache_key": "p",
        "safety_identifier": "s",
    }


def test_the_documented_text_response() -> None:
    theirs = json.loads((GOLDEN / "openai_response_text.json").read_text())
    text = theirs["output"][0]["content"][0]["text"]
    ours = aggregate(
        Chunk(model="gpt-5.4", content=text),
        Chunk(finish_reason=STOP, usage=Usage(36, 87)),
        req=decoded(
            model="gpt-5.4", input="Tell me a three sentence bedtime story about a unicorn."
        ),
    )
    covers(theirs, ours)
    assert "output_text" not in ours  # the SDKs compute it


def test_the_documented_function_call_response() -> None:
    theirs = json.loads((GOLDEN / "openai_response_function_call.json").read_text())
    call = theirs["output"][0]
    ours = aggregate(
        Chunk(
            model="gpt-5.4",
            tool_calls=(ToolCallDelta(0, call["call_id"], call["name"], call["arguments"]),),
        ),
        Chunk(finish_reason=FinishReason.TOOL_CALLS, usage=Usage(291, 23)),
        req=decoded(
            model="gpt-5.4",
            input="What is the weather like in Boston today?",
            tools=theirs["tools"],
            tool_choice="auto",
        ),
    )
    covers(theirs, ours)


def test_an_aggregated_error_chunk_raises_its_error() -> None:
    a = Aggregator(response_id="resp_1", created=1, model="m", echo=echo_of(decoded()))
    with pytest.raises(FlatgateError) as caught:
        a.feed(Chunk(error=ChunkError("backend_timeout", "late")))
    assert caught.value.status == 504 and not isinstance(caught.value, RenderedFailure)


def test_a_part_with_only_an_id_opens_the_item_with_the_backends_id() -> None:
    """A Responses-native backend's reasoning item keeps its own id from
    added to done (its encrypted_content is bound to it), summary between."""
    opening = ReasoningPart(dialect=RESPONSES_DIALECT, id="rs_backend")
    closing = ReasoningPart(text="why", opaque=b"E", dialect=RESPONSES_DIALECT, id="rs_backend")
    chunks = (
        Chunk(reasoning_part=opening),
        Chunk(reasoning="why"),
        Chunk(reasoning_part=closing),
        Chunk(content="ok", finish_reason=STOP),
    )
    events = render(*chunks, req=decoded(include=["reasoning.encrypted_content"]))
    (added,) = [d["item"] for d in of(events, "response.output_item.added")][:1]
    (done,) = [d["item"] for d in of(events, "response.output_item.done")][:1]
    assert added["id"] == done["id"] == "rs_backend"
    assert done["encrypted_content"] == "E"
    assert done["summary"] == [{"type": "summary_text", "text": "why"}]
    body = aggregate(*chunks, req=decoded(include=["reasoning.encrypted_content"]))
    assert body["output"][0]["id"] == "rs_backend"
