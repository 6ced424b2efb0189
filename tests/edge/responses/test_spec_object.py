"""The response object and its events to the letter of the Open Responses
specification (``spec``: its required fields and types, by hand from its
schemas), on its own documented examples (``golden/spec``, README.md says
where each comes from): whole, streamed, incomplete and failed; OpenAI's
defaults where the client sent nothing, the client's values where it sent
them; ``completed_at``; the terminal ``[DONE]``; and ``presence_penalty`` /
``frequency_penalty`` carried to every backend protocol that has them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flatgate.edge_translator.responses.echo import echo_of
from flatgate.edge_translator.responses.endpoint import RESPONSES
from flatgate.edge_translator.responses.render import Aggregator, RenderedFailure, StreamRenderer
from flatgate.edge_translator.responses.translate import write_request
from flatgate.proxy.apis.openai_responses.request import Decoded, decode_request
from flatgate.proxy.backends.anthropic.adapter import encode_request as anthropic_body
from flatgate.proxy.backends.openai.adapter import encode_request as openai_body
from flatgate.proxy.backends.responses.adapter import encode_request as responses_body
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.schema import FinishReason
from tests.edge.responses.common import decoded
from tests.edge.responses.spec import SCHEMAS, problems, stream_problems

GOLDEN = Path(__file__).parent / "golden" / "spec"
EXAMPLE: dict[str, Any] = json.loads((GOLDEN / "response_resource_example.json").read_text())
DOCUMENTED_EVENTS: dict[str, Any] = json.loads((GOLDEN / "stream_event_examples.json").read_text())
CREATED, DONE_AT = 1741476777, 1741476778


def spec_request(name: str) -> Decoded:
    """A golden request (the WebSocket example's ``type``, its envelope, left out)."""
    body = json.loads((GOLDEN / f"request_{name}.json").read_text())
    body.pop("type", None)
    return decode_request(json.dumps(body).encode())


def answer(req: Decoded) -> list[Chunk]:
    """A model's answer to ``req``: a call of its first tool, else text."""
    if req.req.tools:
        name = json.loads(bytes(req.req.tools[0]))["name"]
        return [
            Chunk(model="m-1", tool_calls=(ToolCallDelta(0, "call_1", name, '{"region":'),)),
            Chunk(tool_calls=(ToolCallDelta(0, arguments='"EMEA"}'),)),
            Chunk(finish_reason=FinishReason.TOOL_CALLS, usage=Usage(30, 9)),
        ]
    return [
        Chunk(model="m-1", content="The bug"),
        Chunk(content=" is on line 3."),
        Chunk(finish_reason=FinishReason.STOP, usage=Usage(12, 7)),
    ]


def _clock() -> float:
    return DONE_AT + 0.75


def stream(req: Decoded, chunks: list[Chunk]) -> bytes:
    """The SSE body ``chunks`` make, as ``answer.stream`` sends it (a failure:
    ``fail``'s events)."""
    r = StreamRenderer(
        response_id="resp_1", created=CREATED, model="m", echo=echo_of(req), clock=_clock
    )
    out = []
    try:
        for c in chunks:
            out.append(r.feed(c))
            if r.finished:
                out.append(r.end())
                break
    except RenderedFailure as err:
        out.append(r.fail(err))
    return b"".join(out)


def whole(req: Decoded, chunks: list[Chunk]) -> dict[str, Any]:
    a = Aggregator(
        response_id="resp_1", created=CREATED, model="m", echo=echo_of(req), clock=_clock
    )
    for c in chunks:
        a.feed(c)
    body: dict[str, Any] = json.loads(a.body())
    return body


def events(raw: bytes) -> list[dict[str, Any]]:
    blocks = raw.decode().split("\n\n")[:-2]  # the last: [DONE]
    return [json.loads(b.split("data: ", 1)[1]) for b in blocks]


REQUESTS = ("websocket_create", "allowed_tools")


def test_the_tables_read_the_specifications_example_as_it_is_written() -> None:
    """The example leaves out the required fields whose value is null (a
    slip of the docs: README.md); the tables find nothing else wrong in it."""
    missing = problems(EXAMPLE, "ResponseResource")
    assert all(p.endswith(": required") for p in missing), missing
    for p in missing:
        path = p.removesuffix(": required").split(".")
        table = SCHEMAS["ResponseResource"] if len(path) == 1 else SCHEMAS["Reasoning"]
        assert table[path[-1]].endswith("|null"), p


@pytest.mark.parametrize("name", REQUESTS)
def test_a_whole_response_has_every_field_the_specification_requires(name: str) -> None:
    req = spec_request(name)
    body = whole(req, answer(req))
    assert problems(body, "ResponseResource") == []
    assert (body["status"], body["created_at"], body["completed_at"]) == (
        "completed",
        CREATED,
        DONE_AT,
    )


def test_what_the_client_left_out_is_echoed_as_the_specifications_example_has_it() -> None:
    body = whole(spec_request("websocket_create"), answer(spec_request("websocket_create")))
    same = [
        *("object", "temperature", "top_p", "presence_penalty", "frequency_penalty"),
        *("top_logprobs", "service_tier", "tool_choice", "tools", "truncation"),
        *("parallel_tool_calls", "text", "metadata", "background"),
    ]
    assert {k: body[k] for k in same} == {k: EXAMPLE[k] for k in same}
    # The example's reasoning is {} (the schema requires both members, nullable).
    assert body["reasoning"] == {"effort": None, "summary": None}
    assert body["store"] is False  # the request's own: the example's request stored


def test_what_the_client_sent_is_echoed() -> None:
    sent = {
        "temperature": 0.25,
        "top_p": 0.5,
        "presence_penalty": 1.5,
        "frequency_penalty": -0.5,
        "top_logprobs": 3,
        "service_tier": "flex",
        "truncation": "auto",
        "parallel_tool_calls": False,
        "max_output_tokens": 64,
        "instructions": "Be brief.",
        "user": "u-1",
        "reasoning": {"summary": "auto"},
        "text": {"verbosity": "low"},
    }
    body = whole(decoded(**sent), answer(decoded()))
    assert problems(body, "ResponseResource") == []
    for key, value in sent.items():
        if key not in ("reasoning", "text"):
            assert body[key] == value, key
    # Objects get the members the schema requires, the client's kept.
    assert body["reasoning"] == {"effort": None, "summary": "auto"}
    assert body["text"] == {"format": {"type": "text"}, "verbosity": "low"}


def test_function_tools_are_echoed_with_every_member_the_schema_requires() -> None:
    req = spec_request("allowed_tools")
    body = whole(req, answer(req))
    sent = json.loads((GOLDEN / "request_allowed_tools.json").read_text())
    assert body["tools"] == [{**tool, "strict": True} for tool in sent["tools"]]
    assert body["tool_choice"] == sent["tool_choice"]
    bare = whole(decoded(tools=[{"type": "function", "name": "f", "strict": False}]), [])
    assert bare["tools"] == [
        {"type": "function", "name": "f", "description": None, "parameters": None, "strict": False}
    ]
    assert problems(bare, "ResponseResource") == []


@pytest.mark.parametrize("name", REQUESTS)
def test_a_stream_has_every_field_the_specification_requires_and_ends_with_done(
    name: str,
) -> None:
    req = spec_request(name)
    raw = stream(req, answer(req))
    assert stream_problems(raw) == []
    evs = events(raw)
    opened, going, done = evs[0], evs[1], evs[-1]
    assert [opened["type"], going["type"], done["type"]] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    # The same object: only the status, the output, the usage and
    # completed_at (null until the response completes) move.
    moving = {"status", "output", "usage", "completed_at"}
    for ev in (going, done):
        assert ev["response"].keys() == opened["response"].keys()
        assert {k: v for k, v in ev["response"].items() if k not in moving} == {
            k: v for k, v in opened["response"].items() if k not in moving
        }
    assert opened["response"]["completed_at"] is None
    assert going["response"]["completed_at"] is None
    assert done["response"]["completed_at"] == DONE_AT

    # The terminal response's items are the whole answer's (ids are fresh).
    def unnamed(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in item.items() if k != "id"} for item in items]

    assert unnamed(done["response"]["output"]) == unnamed(whole(req, answer(req))["output"])


@pytest.mark.parametrize(
    ("finish", "status"),
    [(FinishReason.LENGTH, "incomplete"), (FinishReason.CONTENT_FILTER, "incomplete")],
)
def test_an_incomplete_stream_is_whole_too(finish: FinishReason, status: str) -> None:
    raw = stream(decoded(), [Chunk(content="Once"), Chunk(finish_reason=finish)])
    assert stream_problems(raw) == []
    last = events(raw)[-1]["response"]
    assert (last["status"], last["completed_at"]) == (status, None)


def test_a_failed_stream_is_whole_and_ends_with_done_once() -> None:
    raw = stream(
        decoded(), [Chunk(content="Once"), Chunk(error=ChunkError("backend_error", "it broke"))]
    )
    assert stream_problems(raw) == []
    assert raw.count(b"[DONE]") == 1
    last = events(raw)[-1]
    assert last["type"] == "response.failed"
    assert (last["response"]["completed_at"], last["response"]["error"]["code"]) == (
        None,
        "server_error",
    )


def test_an_error_before_any_response_is_the_specifications_error_event() -> None:
    raw = RESPONSES.error_event(FlatgateError("The proxy is gone.", param="model"))
    assert stream_problems(raw) == []
    (ev,) = events(raw)
    # OpenAI's fields at the top level (the SDKs read them), and the spec's object.
    assert ev["error"] == {
        "message": ev["message"],
        "type": ev["error"]["type"],
        "param": "model",
        "code": ev["code"],
    }


def test_the_specifications_documented_events_are_covered() -> None:
    """Every key of each documented event is in ours of its type, and of its
    item and part (``obfuscation`` aside: flatgate pads nothing)."""
    raw = stream(decoded(), answer(decoded()))
    ours = {ev["type"]: ev for ev in reversed(events(raw))}  # the first of each type
    documented = [DOCUMENTED_EVENTS["http_streaming_example"]]
    documented += DOCUMENTED_EVENTS["item_lifecycle_examples"]
    for theirs in documented:
        mine = ours[theirs["type"]]
        assert set(theirs) - {"obfuscation"} <= set(mine), theirs["type"]
        for key in ("item", "part"):
            if key in theirs:
                assert set(theirs[key]) <= set(mine[key]), (theirs["type"], key)
                for j, part in enumerate(theirs[key].get("content", ())):
                    assert set(part) <= set(mine[key]["content"][j])
    assert stream_problems(raw.removesuffix(b"data: [DONE]\n\n")) != []  # the check bites


def _wire(**body: Any) -> Any:
    return read_request(write_request(decoded(**body), provider=0, model_name="m"))


def test_penalties_travel_in_their_wire_slots_to_every_backend_that_has_them() -> None:
    """Chat Completions and the Open Responses request have both (the openai
    and openai-responses backends carry them); Anthropic's API has neither
    (left out, named); an fbs backend reads the slots."""
    wire = _wire(presence_penalty=0.5, frequency_penalty=-0.25)
    assert (wire.presence_penalty, wire.frequency_penalty) == (0.5, -0.25)
    assert not wire.extras  # in the slots: nothing for an adapter to refuse
    for encode in (openai_body, responses_body):
        omitted: list[str] = []
        body = json.loads(encode(wire, model="up", omitted=omitted))
        assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, -0.25)
        assert omitted == []
    omitted = []
    body = json.loads(anthropic_body(wire, model="up", omitted=omitted))
    assert "presence_penalty" not in body and "frequency_penalty" not in body
    assert omitted == ["presence_penalty", "frequency_penalty"]


@pytest.mark.parametrize("value", [-2.5, 2.01])
def test_a_penalty_out_of_range_is_refused_naming_it(value: float) -> None:
    with pytest.raises(FlatgateError) as caught:
        decoded(presence_penalty=value)
    assert caught.value.param == "presence_penalty"
